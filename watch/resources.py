"""Memory, GPU gauges and throughput of every rank, as the aggregator's snapshot carries them.

The aggregator hands each rank's state here as it arrives (:meth:`ResourceTracker.note`,
under the aggregator's lock) and asks for the snapshot fields of a rank
(:meth:`ResourceTracker.row_fields`) and of the job (:func:`job_throughput`).
Pure Python: no sockets, no terminal.
"""

from __future__ import annotations

import collections
from typing import Any

from ranktop.watch.memory import MemoryHistory
from ranktop.watch.snapshot import GpuStat, MemoryStat, Throughput

#: GPU busy (kernel-active) samples kept per rank for the GPU sparkline.
GPU_HISTORY = 60

_GPU_FIELDS = (
    "name", "bus", "util", "mem_util", "mem_used", "mem_total", "power_w", "power_limit_w", "temp_c",
    "sm_mhz", "sm_max_mhz", "pcie_tx", "pcie_rx",
)  # fmt: skip


class ResourceTracker:
    def __init__(self) -> None:
        self._memory: dict[int, MemoryHistory] = {}
        self._gpu: dict[int, dict[str, Any]] = {}
        self._gpu_seq: dict[int, int] = {}
        self._gpu_history: dict[int, collections.deque] = {}

    def note(self, rank: int, state: dict[str, Any], now: float) -> None:
        mem = state.get("mem")
        if isinstance(mem, dict):
            self._memory.setdefault(rank, MemoryHistory()).note(mem, now)
        gpu = state.get("gpu")
        if isinstance(gpu, dict):
            self._gpu[rank] = gpu
            seq = gpu.get("seq")
            if isinstance(seq, int) and seq != self._gpu_seq.get(rank):  # a new NVML sample, not a repeat
                self._gpu_seq[rank] = seq
                util = gpu.get("util")
                if isinstance(util, (int, float)):
                    self._gpu_history.setdefault(rank, collections.deque(maxlen=GPU_HISTORY)).append(float(util))

    def forget(self, rank: int) -> None:
        """A rank restarted as a new process (watch/lifecycle.py): its memory history and GPU samples were the
        old process's (a slope across the restart is no creep; the new process counts its samples from 0)."""
        for table in (self._memory, self._gpu, self._gpu_seq, self._gpu_history):
            table.pop(rank, None)

    def row_fields(self, rank: int, meta: dict[str, Any], steps_per_s: float | None, wall_now: float) -> dict[str, Any]:
        """``memory``, ``throughput`` and ``gpu`` of one RankRow."""
        return {
            "memory": self._memory_stat(rank),
            "throughput": rank_throughput(meta.get("work"), steps_per_s),
            "gpu": self._gpu_stat(rank, wall_now),
        }

    def _memory_stat(self, rank: int) -> MemoryStat | None:
        history = self._memory.get(rank)
        if history is None or history.latest is None:
            return None
        mem = history.latest
        cuda = mem.get("cuda") if isinstance(mem.get("cuda"), dict) else {}
        tracked, verdict, spark = history.assess()
        allocated, reserved = cuda.get("alloc"), cuda.get("resv")
        return MemoryStat(
            rss_bytes=_int(mem.get("rss")),
            cuda_device=_int(cuda.get("dev")),
            allocated=_int(allocated),
            reserved=_int(reserved),
            peak=_int(cuda.get("peak")),
            capacity=_int(cuda.get("cap")),
            fragmentation=1.0 - allocated / reserved if allocated is not None and reserved else None,
            alloc_retries=_int(cuda.get("retries")),
            ooms=_int(cuda.get("ooms")),
            tracked=tracked,
            history_mb=spark,
            creep=verdict.flagged,
            creep_mb_per_min=verdict.mb_per_min,
        )

    def _gpu_stat(self, rank: int, wall_now: float) -> GpuStat | None:
        gpu = self._gpu.get(rank)
        if gpu is None:
            return None
        if "na" in gpu:
            return GpuStat(na=str(gpu["na"]))
        values = {key: gpu.get(key) for key in _GPU_FIELDS}
        throttle = gpu.get("throttle")
        t = gpu.get("t")
        return GpuStat(
            **values,
            throttle=[str(x) for x in throttle] if isinstance(throttle, list) else None,
            util_history=list(self._gpu_history.get(rank, ())),
            age_s=max(0.0, wall_now - t) if isinstance(t, (int, float)) else None,
        )


def rank_throughput(work: Any, steps_per_s: float | None) -> Throughput | None:
    """A rank's work per second, from its hello's ``work`` and its step rate."""
    if not isinstance(work, dict) or not steps_per_s:
        return None
    batch, tokens, flops, peak = (work.get(k) for k in ("batch", "tokens", "flops", "peak_tflops"))
    tflops = steps_per_s * flops / 1e12 if isinstance(flops, (int, float)) else None
    return Throughput(
        samples_per_s=steps_per_s * batch if isinstance(batch, (int, float)) else None,
        tokens_per_s=steps_per_s * tokens if isinstance(tokens, (int, float)) else None,
        tflops=tflops,
        mfu=tflops / peak if tflops is not None and isinstance(peak, (int, float)) and peak > 0 else None,
        peak_tflops=float(peak) if isinstance(peak, (int, float)) else None,
        device=work.get("device") if isinstance(work.get("device"), str) else None,
    )


def job_throughput(per_rank: list[Throughput | None]) -> Throughput | None:
    """Sums over ranks; the job's MFU only when every rank counted has a known peak."""
    known = [t for t in per_rank if t is not None]
    if not known:
        return None

    def total(name: str) -> float | None:
        values = [getattr(t, name) for t in known]
        return sum(values) if all(v is not None for v in values) else None

    tflops, peak = total("tflops"), total("peak_tflops")
    devices = {t.device for t in known if t.device}
    return Throughput(
        samples_per_s=total("samples_per_s"),
        tokens_per_s=total("tokens_per_s"),
        tflops=tflops,
        mfu=tflops / peak if tflops is not None and peak else None,
        peak_tflops=peak,
        device=devices.pop() if len(devices) == 1 else None,
    )


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None
