"""The job's collectives: per-op rows, bandwidths by the nccl-tests conventions and the alpha-beta fit.

Pure functions over plain numbers and rank windows, so they are tested without a job.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md): *algorithm bandwidth* is
bytes / time; *bus bandwidth* scales it by how much data each rank really
moves for that operation, so that it compares with the link's peak whatever
the op and the group size n: all-reduce 2(n-1)/n; all-gather, reduce-scatter
and all-to-all (n-1)/n; broadcast, reduce and point-to-point 1.

The alpha-beta model T(n) = alpha + n / beta (latency plus size over
bandwidth) is fitted by least squares once calls of at least
:data:`MIN_DISTINCT_SIZES` different sizes have been seen; a single size
cannot separate latency from bandwidth.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from ranktop.watch.snapshot import CollectiveStat
from ranktop.watch.window import RankWindow

MIN_DISTINCT_SIZES = 3

_ALL_REDUCE = {"all_reduce", "ddp_allreduce"}
_GATHER_LIKE = {
    "all_gather", "all_gather_into_tensor", "all_gather_single",
    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
    "all_to_all", "all_to_all_single",
}  # fmt: skip


def bus_factor(op: str, group_size: int) -> float:
    n = max(group_size, 1)
    if op in _ALL_REDUCE:
        return 2 * (n - 1) / n
    if op in _GATHER_LIKE:
        return (n - 1) / n
    return 1.0


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation, as numpy's default does."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass(frozen=True)
class AlphaBeta:
    alpha_s: float  # fixed cost per call
    beta_bps: float | None  # bytes per second; None when time does not grow with size

    def predict(self, nbytes: float) -> float:
        return self.alpha_s + (nbytes / self.beta_bps if self.beta_bps else 0.0)


def fit_alpha_beta(sizes: list[float], times: list[float]) -> AlphaBeta | None:
    """Least-squares fit of T = alpha + n/beta; None with fewer than MIN_DISTINCT_SIZES sizes."""
    if len(set(sizes)) < MIN_DISTINCT_SIZES or len(sizes) != len(times):
        return None
    mean_n = statistics.fmean(sizes)
    mean_t = statistics.fmean(times)
    var = sum((n - mean_n) ** 2 for n in sizes)
    cov = sum((n - mean_n) * (t - mean_t) for n, t in zip(sizes, times))
    slope = cov / var
    alpha = mean_t - slope * mean_n
    return AlphaBeta(alpha_s=alpha, beta_bps=1.0 / slope if slope > 0 else None)


# -- the job's collectives, from the ranks' windows ------------------------------------


def add_call(w: RankWindow, call: dict[str, Any], now: float, window: int) -> None:
    """One collective call of a rank: kept for the statistics, counted exactly, and its wait noted by step and phase."""
    w.calls.append((now, call))
    totals = w.call_totals.setdefault(call["op"], [0, 0])
    totals[0] += 1
    totals[1] += call["b"]
    step_waits = w.waits.get(call["n"])
    if step_waits is None:
        step_waits = w.waits[call["n"]] = {}
        while len(w.waits) > 2 * window:
            w.waits.popitem(last=False)
    step_waits.setdefault(call["ph"], []).append((call["t0"], call["t0"] + call["d"]))


def collective_rows(windows: Iterable[RankWindow], now: float) -> list[CollectiveStat]:
    """Per op for the whole job (rank -1), then per rank and op."""
    by_key: dict[tuple[int, str], list] = {}
    totals: dict[tuple[int, str], list[int]] = {}
    for w in windows:
        for arrived, call in w.calls:
            for key in ((-1, call["op"]), (w.rank, call["op"])):
                by_key.setdefault(key, []).append((arrived, call))
        for op, (calls, nbytes) in w.call_totals.items():
            for key in ((-1, op), (w.rank, op)):
                t = totals.setdefault(key, [0, 0])
                t[0] += calls
                t[1] += nbytes
    rows = []
    for (rank, op), calls in sorted(by_key.items()):
        durations = [c["d"] for _, c in calls]
        sizes = [c["b"] for _, c in calls]
        busy = sum(durations)
        span = now - min(a for a, _ in calls)
        group = calls[-1][1]["g"]
        algbw = sum(sizes) / busy if busy > 0 and sum(sizes) else None
        fit = fit_alpha_beta([float(b) for b in sizes], durations)
        dev = None
        if fit is not None:
            recent = calls[-5:]
            predicted = statistics.fmean(fit.predict(c["b"]) for _, c in recent)
            if predicted > 0:
                dev = statistics.fmean(c["d"] for _, c in recent) / predicted - 1
        rows.append(
            CollectiveStat(
                rank=rank,
                op=op,
                group_size=group,
                dtype=calls[-1][1]["dt"],
                calls=totals[(rank, op)][0],
                bytes=totals[(rank, op)][1],
                calls_per_s=len(calls) / span if span >= 1.0 else None,
                bytes_per_s=sum(sizes) / span if span >= 1.0 else None,
                mean_s=statistics.fmean(durations),
                p95_s=percentile(durations, 95),
                algbw_bps=algbw,
                busbw_bps=algbw * bus_factor(op, group) if algbw else None,
                alpha_s=fit.alpha_s if fit else None,
                beta_bps=fit.beta_bps if fit else None,
                fit_dev=dev,
            )
        )
    return rows
