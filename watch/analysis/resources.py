"""Memory, GPU gauges and throughput of every rank, as the aggregator's snapshot carries them.

A snapshot holds each rank's :class:`~ranktop.watch.engine.resource_samples.ResourceView` (immutable: the
latest samples, gathered by the job state), and a rank's row reads its ``memory``, ``gpu`` and ``throughput``
from it only when the row is built (:func:`row_fields`), its memory creep verdict worked out of its samples then
(watch/analysis/memory_creep.py). Pure Python: no sockets, no terminal.
"""

from __future__ import annotations

from typing import Any

from ranktop.watch.analysis.memory_creep import assessed
from ranktop.watch.engine.resource_samples import ResourceView
from ranktop.watch.model.rank_row import GpuStat, MemoryStat, Throughput
from ranktop.wire.messages import CudaMemory, RankInfo

#: A rank's CUDA figures where it sends none (every one unset: read as None).
_NO_CUDA = CudaMemory()

_GPU_FIELDS = (
    "name", "bus", "util", "mem_util", "mem_used", "mem_total", "power_w", "power_limit_w", "temp_c",
    "sm_mhz", "sm_max_mhz", "pcie_tx", "pcie_rx", "sm_avg", "held_power", "held_thermal",
)  # fmt: skip


def row_fields(view: ResourceView | None, meta: RankInfo | None, steps_per_s: float | None, wall_now: float) -> dict[str, Any]:
    """``memory``, ``throughput`` and ``gpu`` of one RankRow."""
    return {
        "memory": memory_stat(view),
        "throughput": rank_throughput(meta.work if meta is not None else None, steps_per_s),
        "gpu": gpu_stat(view, wall_now),
    }


def memory_stat(view: ResourceView | None) -> MemoryStat | None:
    if view is None or view.memory is None or view.samples is None:
        return None
    mem = view.memory
    cuda = mem.cuda if mem.cuda is not None else _NO_CUDA
    tracked, verdict, spark = assessed(view.samples)
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
    if view is None or view.gpu is None:
        return None
    gpu = view.gpu
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
