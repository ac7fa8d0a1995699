"""Memory, GPU gauges and throughput of every rank, as the aggregator's snapshot carries them.

The job state hands each rank's state here as it arrives (:meth:`ResourceTracker.note`,
under the aggregator's lock). A snapshot takes each rank's :class:`ResourceView`
(immutable: the latest samples and the memory verdict) and a rank's row reads
its ``memory``, ``gpu`` and ``throughput`` from it only when the row is built
(:func:`row_fields`). The memory creep verdict, a regression over a rank's
samples, is worked out again at most every :data:`ASSESS_EVERY_S` per rank:
at 4,096 ranks sending four states a second it would otherwise be most of a
snapshot. Pure Python: no sockets, no terminal.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

from ranktop.watch.memory import MemoryHistory
from ranktop.watch.snapshot import GpuStat, MemoryStat, Throughput
from ranktop.wire.messages import Memory, RankInfo, State

#: GPU busy (kernel-active) samples kept per rank for the GPU sparkline.
GPU_HISTORY = 60
#: Seconds between two assessments of a rank's memory creep (its window is 40 s).
ASSESS_EVERY_S = 2.0


class ResourceView(NamedTuple):
    """One rank's resources as a snapshot holds them: nothing in it changes after."""

    memory: Memory | None  # the latest ``mem`` of its state
    assessed: tuple | None  # (tracked series, creep verdict, sparkline MB) of MemoryHistory.assess
    gpu: dict | None  # the latest ``gpu`` of its state
    gpu_history: tuple[float, ...]  # recent SM utilisation, oldest first

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
        self._views: dict[int, tuple[float, ResourceView]] = {}  # rank -> (when its memory was assessed, view)
        self._changed: set[int] = set()  # ranks with samples newer than their view

    def note(self, rank: int, state: State, now: float) -> None:
        mem = state.mem
        if mem is not None:
            self._memory.setdefault(rank, MemoryHistory()).note(mem, now)
            self._changed.add(rank)
        gpu = state.gpu
        if gpu is not None:
            self._gpu[rank] = gpu
            self._changed.add(rank)
            seq = gpu.get("seq")
            if isinstance(seq, int) and seq != self._gpu_seq.get(rank):  # a new NVML sample, not a repeat
                self._gpu_seq[rank] = seq
                util = gpu.get("util")
                if isinstance(util, (int, float)):
                    self._gpu_history.setdefault(rank, collections.deque(maxlen=GPU_HISTORY)).append(float(util))

    def forget(self, rank: int) -> None:
        """A rank restarted as a new process (watch/lifecycle.py): its memory history and GPU samples were the
        old process's (a slope across the restart is no creep; the new process counts its samples from 0)."""
        for table in (self._memory, self._gpu, self._gpu_seq, self._gpu_history, self._views):
            table.pop(rank, None)
        self._changed.discard(rank)

    def views(self, ranks: list[int], now: float) -> list[ResourceView | None]:
        """Each rank's view (None: it sent no memory or GPU sample), made again for the ranks with new samples."""
        if not self._memory and not self._gpu:
            return [None] * len(ranks)
        for rank in self._changed:
            kept = self._views.get(rank)
            history = self._memory.get(rank)
            assessed_at, assessed = (kept[0], kept[1].assessed) if kept is not None else (float("-inf"), None)
            if history is not None and (assessed is None or now - assessed_at >= ASSESS_EVERY_S):
                assessed_at, assessed = now, history.assess()
            view = ResourceView(
                history.latest if history is not None else None, assessed, self._gpu.get(rank),
                tuple(self._gpu_history.get(rank, ())),
            )
            self._views[rank] = (assessed_at, view)
        self._changed.clear()
        views = self._views
        return [views[r][1] if r in views else None for r in ranks]


def row_fields(view: ResourceView | None, meta: RankInfo | None, steps_per_s: float | None, wall_now: float) -> dict[str, Any]:
    """``memory``, ``throughput`` and ``gpu`` of one RankRow."""
    return {
        "memory": memory_stat(view),
        "throughput": rank_throughput(meta.work if meta is not None else None, steps_per_s),
        "gpu": gpu_stat(view, wall_now),
    }


def memory_stat(view: ResourceView | None) -> MemoryStat | None:
    if view is None or view.memory is None or view.assessed is None:
        return None
    mem = view.memory
    cuda = mem.cuda or {}
    tracked, verdict, spark = view.assessed
    allocated, reserved = cuda.get("alloc"), cuda.get("resv")
    return MemoryStat(
        rss_bytes=_int(mem.rss),
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


def gpu_stat(view: ResourceView | None, wall_now: float) -> GpuStat | None:
    gpu = view.gpu if view is not None else None
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
        util_history=list(view.gpu_history),
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
