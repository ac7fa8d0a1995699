"""The job's collectives as they arrive: each rank's per-op sums and the job's, kept as summaries come and go.

The job state (watch/engine/job_state.py) hands every steps message's collective summaries, and every node
digest's per-rank ops, to these writers under the aggregator's lock; the rows a snapshot shows (bandwidths, the
alpha-beta fit) are worked out from what they keep by watch/analysis/collectives.py.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Iterable

from ranktop.watch.engine.rank_window import CALL_WINDOW, WAITS_KEPT, RankWindow
from ranktop.wire.messages import Call, CallSummary, OpSummary, Steps


#: Per-step summaries kept per rank and op for the rates (their sums are kept as they come and go).
OP_WINDOW = 32


class JobCollectives:
    """The whole job's collectives, kept as the ranks' summaries come and go (the job state owns one): a
    snapshot reads a few numbers per op, not O(ranks x ops). Exact: the same sums as adding every
    rank's up."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}  # op -> [calls, bytes, summed wait] over the ranks' recent windows
        self.totals: dict[str, list[int]] = {}  # op -> [calls, bytes] since the viewer started
        self.last: dict[str, tuple[int, str]] = {}  # op -> (group size, dtype) last seen

    def forget(self, w: RankWindow) -> None:
        """A rank's window is replaced (a restart): its recent summaries leave the job's sums."""
        for op, (calls, nbytes, busy) in w.op_sums.items():
            sums = self.sums[op]
            sums[0] -= calls
            sums[1] -= nbytes
            sums[2] -= busy


def add_collectives(w: RankWindow, msg: Steps, now: float, job: JobCollectives) -> None:
    """A steps message's collectives: the probe's summaries (wire/collective_summary.py) and its sample of raw
    calls. Call before adding the message's steps."""
    for entry in msg.cs or ():
        add_summary(w, entry, now, job)
    for call in msg.cx or ():
        w.calls.append((now, call))


def add_digest_collectives(w: RankWindow, ops: dict[str, OpSummary], sample: Iterable[Call], now: float,
                           job: JobCollectives) -> None:
    """A rank's collectives of one interval of its node's digest (wire/node_digest.py): its ops, summed over the
    interval, and its latest sample of raw calls. The waits came in the digest's step record."""
    _add_ops(w, ops, now, job)
    for call in sample:
        w.calls.append((now, call))


def add_summary(w: RankWindow, entry: CallSummary, now: float, job: JobCollectives) -> None:
    """One step-and-phase summary of a rank's collectives: counted exactly, its wait noted by step and phase."""
    _add_ops(w, entry.ops, now, job)
    step = entry.n
    step_waits = w.waits.get(step)
    if step_waits is None:
        step_waits = w.waits[step] = {}
        while len(w.waits) > WAITS_KEPT:
            w.waits.popitem(last=False)
    # A step whose calls came in two messages (a late completion) adds up: they no longer overlap.
    step_waits[entry.ph] = step_waits.get(entry.ph, 0.0) + entry.w
    own = w.own
    assert own is not None  # (set in every window's __post_init__)
    first = own.first_number
    if first is not None and first <= step <= w.last_step:  # its step came first: its own times change
        own.rewait(step, step_waits)


def _add_ops(w: RankWindow, ops: dict[str, OpSummary], now: float, job: JobCollectives) -> None:
    for op, summary in ops.items():
        calls, nbytes, busy = summary.calls, summary.bytes, summary.total
        totals = w.call_totals.setdefault(op, [0, 0])
        totals[0] += calls
        totals[1] += nbytes
        job_totals = job.totals.get(op)
        if job_totals is None:
            job_totals = job.totals[op] = [0, 0]
            job.sums[op] = [0, 0, 0.0]
        job_totals[0] += calls
        job_totals[1] += nbytes
        recent = w.op_window.get(op)
        if recent is None:
            recent = w.op_window[op] = collections.deque(maxlen=OP_WINDOW)
            w.op_sums[op] = [0, 0, 0.0]
        sums = w.op_sums[op]  # the window's sums, kept as entries come and go: a snapshot reads three numbers
        job_sums = job.sums[op]  # ... and the job's, the sum of them all
        if len(recent) == recent.maxlen:
            _, old_calls, old_bytes, old_busy = recent[0]
            sums[0] -= old_calls
            sums[1] -= old_bytes
            sums[2] -= old_busy
            job_sums[0] -= old_calls
            job_sums[1] -= old_bytes
            job_sums[2] -= old_busy
        recent.append((now, calls, nbytes, busy))
        sums[0] += calls
        sums[1] += nbytes
        sums[2] += busy
        job_sums[0] += calls
        job_sums[1] += nbytes
        job_sums[2] += busy
        w.op_last[op] = job.last[op] = (summary.group, summary.dtype)


#: Raw calls the job-wide rows' p95 and fit read at most: every rank's up to 128 ranks, then those of ranks
#: spread evenly over the job (a rank keeps its last CALL_WINDOW calls).
JOB_SAMPLE = 2048
#: Windows whose oldest summary gives the job's rates their span, at most (spread evenly over the job).
SPAN_SAMPLE = 64


@dataclass(frozen=True)
class GatheredCollectives:
    """What the collective rows read, copied under the lock: keys are (rank, op), rank -1 the whole job."""

    now: float
    sums: dict[tuple[int, str], list[float]]  # [calls, bytes, summed wait, first arrival]
    samples: dict[tuple[int, str], list[Call]]  # raw calls (frozen), oldest first
    totals: dict[tuple[int, str], list[int]]  # [calls, bytes] since the viewer started
    last: dict[tuple[int, str], tuple[int, str]]  # (group size, dtype) last seen


def gather(job: JobCollectives, windows: list[RankWindow], now: float, ranks: Iterable[int] | None = None) -> GatheredCollectives:
    """The job's sums, and those of ``ranks`` (every rank's when None), as copies a snapshot may read with the
    lock released (watch/analysis/collectives.py makes the rows of them)."""
    wanted = set(w.rank for w in windows) if ranks is None else set(ranks)
    shown = [w for w in windows if w.rank in wanted] if ranks is not None else windows
    sums: dict[tuple[int, str], list[float]] = {}  # key -> [calls, bytes, busy, first arrival]
    samples: dict[tuple[int, str], list[Call]] = {}
    totals: dict[tuple[int, str], list[int]] = {}
    last: dict[tuple[int, str], tuple[int, str]] = {}
    for op, (calls, nbytes, busy) in list(job.sums.items()):
        sums[(-1, op)] = [calls, nbytes, busy, now]
        totals[(-1, op)] = list(job.totals[op])
        last[(-1, op)] = job.last[op]
    stride = max(1, -(-len(windows) * CALL_WINDOW // JOB_SAMPLE))
    for w in windows[::stride]:
        for _, call in list(w.calls):
            samples.setdefault((-1, call.op), []).append(call)
    for w in windows[:: max(1, len(windows) // SPAN_SAMPLE)] + shown:  # the job's rates: over the span of its windows
        for op, recent in list(w.op_window.items()):
            if recent and (-1, op) in sums:
                sums[(-1, op)][3] = min(sums[(-1, op)][3], recent[0][0])
    for w in shown:
        for op, (calls, nbytes, busy) in list(w.op_sums.items()):
            recent = w.op_window[op]
            sums[(w.rank, op)] = [calls, nbytes, busy, recent[0][0] if recent else now]
            last[(w.rank, op)] = w.op_last[op]
        for op, (calls, nbytes) in list(w.call_totals.items()):
            totals[(w.rank, op)] = [calls, nbytes]
        for _, call in list(w.calls):
            samples.setdefault((w.rank, call.op), []).append(call)
    return GatheredCollectives(now, sums, samples, totals, last)
