"""The job's collectives: per-op rows, bandwidths by the nccl-tests conventions and the alpha-beta fit.

Pure functions over plain numbers, so they are tested without a job; the sums they read are kept as messages
arrive, and gathered under the lock as copies, by watch/engine/collective_sums.py.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md), over two different times.
The *wait* bandwidth is bytes / the rank's wait: on a GPU the wait is the
compute stream's stall, which an overlapped collective shortens and a late
peer lengthens, so it is no link rate. The *bus bandwidth* is bytes / the
collectives' kernel time (``kernel``/``kbytes`` of a summary: the calls whose
kernel time the probe knows, docs/gpu.md), scaled by how much data each rank
really moves for that operation, so that it compares with the link's peak
whatever the op and the group size n: all-reduce 2(n-1)/n; all-gather,
reduce-scatter and all-to-all (n-1)/n; broadcast, reduce and point-to-point 1.
No kernel time known (DDP's finalize wait, an older probe): no bus bandwidth.

The alpha-beta model T(n) = alpha + n / beta (latency plus size over
bandwidth) is fitted by least squares once calls of at least
:data:`MIN_DISTINCT_SIZES` different sizes have been seen; a single size
cannot separate latency from bandwidth.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import numpy as np

from ranktop.watch.engine.collective_sums import GatheredCollectives
from ranktop.watch.model.rank_table import STATUS_CODE, RankTable
from ranktop.watch.model.snapshot import ALL_RANKS_UP_TO, LEAST_WAIT, MOST_WAIT, WAITED_FOR, WHY_ORDER, CollectiveStat
from ranktop.watch.statuses import OK, STATUSES

MIN_DISTINCT_SIZES = 3

#: What ``ddp_allreduce``'s wait holds (``wait_is`` of its rows): DDP's finalize, which waits for each bucket and
#: copies it into the gradients in one C++ call with no Python between (docs/gpu.md, "DDP").
DDP_WAIT_IS = (
    "DDP's finalize: the wait for every bucket's all-reduce, and DDP's copy of each bucket into the gradients "
    "after its wait, unless gradient_as_bucket_view=True (no copy) or a comm hook (the wait ends at its last "
    "future, leaving out the copies after it)"
)

_ALL_REDUCE = {"all_reduce", "ddp_allreduce"}
_GATHER_LIKE = {
    "all_gather", "all_gather_into_tensor", "all_gather_single",
    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
    "all_to_all", "all_to_all_single",
}  # fmt: skip


def bus_factor(op: str, group_size: int) -> float:
    n = max(group_size, 1)
    op = op.partition("@")[0]  # "all_reduce@tp": the op on a named group (wire/parallel_groups.py)
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


def collective_rows(gathered: GatheredCollectives) -> list[CollectiveStat]:
    """Per op for the whole job (rank -1), then per rank and op (for the ranks gathered), from the copies the
    job state gathered under the lock (watch/engine/collective_sums.py :func:`gather`): no window is read here.

    Counts, bytes, rates and mean waits come from the per-step summaries (exact: the job's sums and each
    window's); the p95 and the alpha-beta fit from the samples of raw calls (for the job, those of at most
    :data:`~ranktop.watch.engine.collective_sums.JOB_SAMPLE` calls). O(ops) for the job, O(ops) per rank shown.
    """
    now, sums, samples, totals, last = gathered.now, gathered.sums, gathered.samples, gathered.totals, gathered.last
    rows = []
    for (rank, op), (count, size, busy, kernel, kbytes, first) in sorted(sums.items()):
        span = now - first
        group, dtype = last[(rank, op)]
        sampled = samples.get((rank, op), [])
        durations = [c.d for c in sampled]
        algbw = size / busy if busy > 0 and size else None
        link = kbytes / kernel if kernel > 0 and kbytes else None  # the kernels' rate: the link's, not the wait's
        fit = fit_alpha_beta([float(c.b) for c in sampled], durations) if sampled else None
        dev = None
        if fit is not None:
            latest = sampled[-5:]
            predicted = statistics.fmean(fit.predict(c.b) for c in latest)
            if predicted > 0:
                dev = statistics.fmean(c.d for c in latest) / predicted - 1
        rows.append(
            CollectiveStat(
                rank=rank,
                op=op,
                group_size=group,
                dtype=dtype,
                calls=totals[(rank, op)][0],
                bytes=totals[(rank, op)][1],
                calls_per_s=count / span if span >= 1.0 else None,
                bytes_per_s=size / span if span >= 1.0 else None,
                mean_s=busy / count if count else 0.0,
                p95_s=percentile(durations, 95) if durations else None,
                algbw_bps=algbw,
                busbw_bps=link * bus_factor(op, group) if link else None,
                alpha_s=fit.alpha_s if fit else None,
                beta_bps=fit.beta_bps if fit else None,
                fit_dev=dev,
                wait_is=DDP_WAIT_IS if op.partition("@")[0] == "ddp_allreduce" else None,
            )
        )
    return rows


# -- which ranks get rows of their own under the job's --------------------------------


#: Ranks of a big job whose own rows a snapshot carries, at most: the pane shows them all.
RANKS_THAT_MATTER = 8


def ranks_that_matter(table: RankTable, waited_for: list[int], limit: int) -> list[tuple[int, str]]:
    """The ranks whose own collective rows say something, with why, most telling first: those the others wait
    for, the flagged ones (slow, stalled, silent: by score), then the ranks that wait the most and the least.

    The healthy ranks of a big job differ only by noise: listing "the top stragglers" among them names ranks
    that are not slow at all. The extremes of wait are always worth a row (the least-waiting rank of a
    data-parallel group is the one the others wait for). At most ``limit`` ranks, the two extremes kept;
    empty when no rank has a collective yet. O(ranks) in numpy.
    """
    out: dict[int, str] = {}
    known = set(table.rank.tolist()) if waited_for else set()
    for n in waited_for:
        if n in known:
            out.setdefault(int(n), WAITED_FOR)
    flagged = np.flatnonzero(table.status != STATUS_CODE[OK])
    for i in flagged[np.argsort(-np.nan_to_num(table.score[flagged], nan=-np.inf), kind="stable")][:limit].tolist():
        out.setdefault(int(table.rank[i]), STATUSES[int(table.status[i])])
    waits = table.collective_s
    seen = np.flatnonzero(~np.isnan(waits) & (table.status == STATUS_CODE[OK]))
    extremes: dict[int, str] = {}
    if len(seen):
        for i, why in ((seen[np.argmax(waits[seen])], MOST_WAIT), (seen[np.argmin(waits[seen])], LEAST_WAIT)):
            n = int(table.rank[i])
            if n not in out:
                extremes.setdefault(n, why)
    first = list(out.items())[: max(0, limit - len(extremes))]
    return (first + list(extremes.items()))[:limit]


def why_shown(table: RankTable, waited_for: list[int], rank: int) -> str:
    """Why a rank chosen by :func:`ranks_that_matter` a moment ago has rows (the rows of a big job are worked out
    every few seconds, and which healthy rank waits the most changes with the noise): its status when flagged,
    waited for, else whether it waits more or less than the median rank."""
    if rank in waited_for:
        return WAITED_FOR
    i = table.index(rank)
    if i is None:
        return ""
    if table.status[i] != STATUS_CODE[OK]:
        return STATUSES[int(table.status[i])]
    wait = table.collective_s[i]
    if np.isnan(wait):
        return ""
    return MOST_WAIT if wait >= np.nanmedian(table.collective_s) else LEAST_WAIT


def rows_shown(stats: list[CollectiveStat], table: RankTable, waited_for: list[int]) -> list[CollectiveStat]:
    """The job's rows (rank -1) first, then the per-rank rows a screen shows, each with why it is shown: every
    rank's in a small job (up to :data:`~ranktop.watch.model.snapshot.ALL_RANKS_UP_TO` ranks; those that stand out
    say so), in a big one those of the ranks that matter, most telling first; then the other rows gathered (a job
    of up to 64 ranks gathers every rank's: watch/aggregator.py), their why None: not shown. The rows of a bigger
    job are gathered for the ranks that mattered when last worked out (every few seconds), so a rank no longer
    among them keeps its rows and says why it is still worth them (:func:`why_shown`).

    What the judge hands the screen in ``Snapshot.collectives``: the screen renders it as it is. Running it again
    on its own output changes nothing. O(ranks) in numpy for the choice, O(rows) for the rest.
    """
    matter = dict(ranks_that_matter(table, waited_for, RANKS_THAT_MATTER))
    job = [_why(s, "") for s in stats if s.rank < 0]
    if len(table) <= ALL_RANKS_UP_TO:
        return job + [_why(s, matter.get(s.rank, "")) for s in stats if s.rank >= 0]
    present = {s.rank for s in stats if s.rank >= 0}
    keep = present if len(present) <= RANKS_THAT_MATTER else set(matter)
    why = {n: matter.get(n) or why_shown(table, waited_for, n) for n in keep}
    order = {n: i for i, n in enumerate(matter)}
    mine = [_why(s, why[s.rank]) for s in stats if s.rank in keep]
    mine.sort(key=lambda s: (order.get(s.rank, len(order)), WHY_ORDER.get(s.why or "", 0), s.rank))
    return job + mine + [_why(s, None) for s in stats if s.rank >= 0 and s.rank not in keep]


def _why(stat: CollectiveStat, why: str | None) -> CollectiveStat:
    return stat if stat.why == why else replace(stat, why=why)
