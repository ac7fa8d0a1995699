"""The misbehaviour the demo can inject on one rank: what ranktop exists to reveal.

* **slow** – sleep a fixed time inside one phase, every step. The sleep sits
  inside the phase being blamed, so ranktop should name that rank and that
  phase, while every other rank shows the same time as waiting in ``backward``
  (the gradient all-reduce, where DDP makes fast ranks wait for the slow one).
  For ``data`` the sleep happens in the training process as if fetching were
  slow: inside the DataLoader's fetch with ``--workers 0`` (in ``collate``),
  else right after the batch arrives (in a worker, prefetching would hide it
  until the workers fall behind). For forward and optimizer it runs in a hook
  of the model / optimizer (:meth:`Faults.attach`), and for backward in a hook
  on the loss's gradient, so it lies inside the real call: inside the phase
  both for the script's ``probe.phase()`` blocks and for automatic mode
  (``ranktop launch``), which times those calls themselves.
* **hang** – from a given step on, sleep forever inside ``forward``. The other
  ranks then block in ``backward``'s all-reduce: the classic "whole job frozen,
  one rank to blame" picture.
* **leak** – keep a few MB of freshly allocated tensors per step alive, on the
  training device, the way a forgotten reference to activations does.

A rank with no fault gets the same object with nothing to do, so the training
loop calls these unconditionally.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from torch.utils.data import default_collate

PHASES = ("data", "forward", "backward", "optimizer")


class Stopped(BaseException):
    """Raised out of an injected sleep once a stop was requested (a BaseException so no
    ``except Exception`` in between, the probe's included, mistakes it for a fault)."""


class Faults:
    def __init__(
        self,
        rank: int,
        *,
        device: torch.device,
        stop_requested: Callable[[], bool] = lambda: False,
        slow_rank: int | None = None,
        slow_ms: float = 0.0,
        slow_phase: str = "data",
        slow_every: int = 1,
        hang_rank: int | None = None,
        hang_at_step: int = 0,
        leak_rank: int = 0,
        leak_mb_per_step: float = 0.0,
    ):
        if slow_phase not in PHASES:
            raise ValueError(f"slow_phase must be one of {PHASES}, got {slow_phase!r}")
        self._delay_s = slow_ms / 1000.0 if rank == slow_rank else 0.0
        self._slow_phase = slow_phase
        if slow_every < 1:
            raise ValueError(f"slow_every must be 1 or more, got {slow_every}")
        self._slow_every = slow_every
        self._slow_calls = 0
        self._hang_at = hang_at_step if rank == hang_rank else None
        self._leak_elements = int(leak_mb_per_step * 2**20) // 4 if rank == leak_rank else 0  # float32
        self._device = device
        self._stop_requested = stop_requested
        self.leaked: list[torch.Tensor] = []

    def delay(self, phase: str) -> None:
        """Sleeps only in the slow rank's slow phase, on one step in ``slow_every`` (an intermittent straggler: its
        median step is its usual one; what the job pays for it is the sleep over ``slow_every``)."""
        if self._delay_s and phase == self._slow_phase:
            self._slow_calls += 1
            if self._slow_calls % self._slow_every == 0:
                time.sleep(self._delay_s)

    def attach(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Put the forward and optimizer sleeps inside the model's and the optimizer's own calls."""
        if self._delay_s and self._slow_phase == "forward":
            model.register_forward_pre_hook(lambda module, args: self.delay("forward"))
        if self._delay_s and self._slow_phase == "optimizer":
            optimizer.register_step_pre_hook(lambda opt, args, kwargs: self.delay("optimizer"))

    def collate(self, batch: list[Any]) -> Any:
        """The DataLoader's collate with the data sleep in it (used with ``--workers 0``)."""
        self.delay("data")
        return default_collate(batch)

    def in_backward(self, loss: torch.Tensor) -> None:
        """Put the backward sleep inside autograd: a hook on the loss's gradient, the first thing backward runs."""
        if self._delay_s and self._slow_phase == "backward" and loss.requires_grad:
            loss.register_hook(lambda grad: self.delay("backward"))  # type: ignore[no-untyped-call]  # torch's Tensor.register_hook is unannotated

    def hang(self, step: int) -> None:
        """Called in ``forward``: never returns on the hanging rank once ``step`` is reached.

        It sleeps in short naps rather than forever so a SIGTERM or Ctrl+C still
        ends the process cleanly (see :class:`Stopped`).
        """
        if self._hang_at is None or step < self._hang_at:
            return
        while not self._stop_requested():
            time.sleep(0.1)
        raise Stopped

    def leak(self) -> None:
        """Called once per step: allocate and keep this rank's share of leaked memory."""
        if self._leak_elements:
            # ones, not empty: the pages must be touched to count in the process's RSS.
            self.leaked.append(torch.ones(self._leak_elements, device=self._device))

    @property
    def leaked_mb(self) -> float:
        return sum(t.numel() * t.element_size() for t in self.leaked) / 2**20
