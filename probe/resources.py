"""What a rank's hardware is doing next to its steps: memory, GPU gauges, and the work per step.

Registers :mod:`.memory`, :mod:`.gpu_sampler` and :mod:`.flops` with the sender: the
memory sampler runs on the sender thread with every state, the GPU sampler on
a thread of its own, and the work per step (batch, tokens, FLOPs, the device's
peak) rides in the hello. Nothing here runs on the training thread but
:meth:`set_work`, which only swaps a dictionary.
"""

from __future__ import annotations

import sys
from typing import Any

from ranktop.wire.dtypes import normalise_dtype

from . import flops
from .gpu_sampler import GpuSampler, locate_rank_gpu
from ranktop.transport.identity import Identity
from .memory import MemorySampler
from .sender import Sender


class RankResources:
    def __init__(self, identity: Identity, sender: Sender, work: dict[str, Any]):
        self._device_name: str | None = None
        self._sender = sender
        self._base = dict(work)
        self.memory = MemorySampler(identity.local_rank, on_device=self._on_device)
        self.gpu = GpuSampler(lambda: locate_rank_gpu(identity.local_rank, lambda: self.memory.device))
        self._work: dict[str, Any] = {}
        sender.add_state("mem", self.memory.sample)
        sender.add_state("gpu", lambda: self.gpu.latest)
        sender.add_hello("work", lambda: dict(self._work))
        self._publish()

    def start(self) -> None:
        self.gpu.start()

    def stop(self) -> None:
        self.gpu.stop()

    def set_work(self, **changes: Any) -> None:
        """Update the work per step (``batch``, ``tokens``, ``flops``, and ``dtype``: the peak's, as stated by the
        user); None leaves an entry as it is."""
        base = dict(self._base)
        names = {"batch": "batch_size", "tokens": "tokens_per_step", "flops": "flops_per_step"}
        for key, value in changes.items():
            if value is None:
                continue
            if key == "dtype":
                base["dtype"], base["dtype_from"] = normalise_dtype(value), flops.STATED
            else:
                base[key] = flops.positive(names.get(key, key), value, float if key == "flops" else int)
        self._base = base
        self._publish()

    def learn_compute(self, module: Any) -> None:
        """Inside the first training forward (the training thread, once): the dtype the job computes in, for the
        peak, unless the user stated one (probe/flops.py :func:`~.flops.compute_dtype`)."""
        if self._base.get("dtype_from") == flops.STATED:
            return
        torch = sys.modules.get("torch")
        found = flops.compute_dtype(torch, module) if torch is not None else None
        if found is not None:
            self._base = dict(self._base, dtype=found[0], dtype_from=found[1])
            self._publish()

    def learn_autocast(self) -> None:
        """``probe.init()`` mode, the first time the script enters its forward phase (the training thread): autocast's
        dtype if autocast is on there, unless the user stated one or automatic mode learnt the job's own."""
        if self._base.get("dtype_from") != flops.DEFAULT:
            return
        torch = sys.modules.get("torch")
        found = flops.autocast_dtype(torch) if torch is not None else None
        if found is not None:
            self._base = dict(self._base, dtype=found, dtype_from=flops.AUTOCAST)
            self._publish()

    @property
    def work(self) -> dict[str, Any]:
        return dict(self._work)

    def _on_device(self, index: int) -> None:  # the sender thread, once the rank's CUDA device is known
        self._device_name = flops.cuda_device_name(index)
        if self._sender.device == "cpu":  # the training thread's word, when device timing attached, stands
            self._sender.device = f"cuda:{index} {self._device_name or ''}".rstrip()
        self._publish()

    def _publish(self) -> None:
        self._work = flops.with_device(self._base, self._device_name)  # one rebinding: atomic for the sender's read
