"""Statistics of collective calls: bandwidths by the nccl-tests conventions and the alpha-beta fit.

Pure functions over plain numbers, so they are tested without a job.

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
