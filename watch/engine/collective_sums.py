"""The job's collectives as they arrive: every rank's per-op summaries and its sample of raw calls, in job-wide arrays.

The rank store (watch/engine/rank_store.py) hands every steps message's collective summaries, and every node
digest's per-rank ops and call samples, to :class:`JobCollectives` under the aggregator's lock, and gathers what
it keeps with the rest of a view (:func:`gather`: :class:`CollectiveSums`); the rows a snapshot shows (bandwidths,
the alpha-beta fit) are worked out from those copies by watch/analysis/collectives.py, with the lock released.

One store, one write path: a rank's collectives live in its row (the row of the job's step columns,
watch/engine/step_columns.py) of a few numpy arrays. Kept per rank as deques of tuples and
of decoded ``Call`` Structs, 16,384 ranks' last 32 summaries per op and 16 calls were 300 MB of small Python
objects (each number a boxed int or float) and a Python pass over every op of every summary as it came. Here a
summary or a call is noted as it comes (a few list appends), and every note of a batch is written in one go
(:meth:`JobCollectives.flush`: a dozen numpy operations for all of them), as the node digests' steps are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

import numpy as np

from ranktop.wire.messages import Call, OpSummary


#: Raw collective calls per rank kept (the probes' samples) for the latency percentiles and the alpha-beta fit.
CALL_WINDOW = 16
#: Per-step summaries kept per rank and op for the rates (the window's sums are read off the ring).
OP_WINDOW = 32
#: What a ring's sums hold: calls, bytes, summed wait, kernel seconds and the bytes of the calls they time.
SUMS = 5
#: Notes written at the end of a batch once there are this many (:meth:`JobCollectives.settle`; a read writes them
#: all first): a flush costs a few dozen numpy calls whatever its size, and a batch of a 4,096-rank job's digests
#: carries a handful of summaries (a rank's ops ride every 2 s).
FLUSH_FROM = 1024


class CallSample(NamedTuple):
    """One raw call as the collective rows read it (its size and its wait): what is kept of a ``Call``."""

    b: float
    d: float


class JobCollectives:
    """Every rank's collectives by its row, and the job's: the last :data:`OP_WINDOW` summaries of each op (arrival,
    calls, bytes, summed wait) as rings, the totals since the viewer started, the group size and dtype last seen,
    and the last :data:`CALL_WINDOW` raw calls. Writes are noted (:meth:`add_ops`, :meth:`add_calls`) and made
    by :meth:`flush` (:meth:`settle`: once there are enough of them); :func:`gather` and :meth:`forget` flush first."""

    # The arrays, a row per rank (:meth:`_allocate` says each one's shape and meaning).
    at: np.ndarray
    calls: np.ndarray
    nbytes: np.ndarray
    busy: np.ndarray
    kernel: np.ndarray
    kbytes: np.ndarray
    sums: np.ndarray
    head: np.ndarray
    count: np.ndarray
    totals: np.ndarray
    seen: np.ndarray
    first_at: np.ndarray
    group: np.ndarray
    dtype: np.ndarray
    call_op: np.ndarray
    call_b: np.ndarray
    call_d: np.ndarray
    call_head: np.ndarray
    call_count: np.ndarray

    def __init__(self, rows: int = 8, ops: int = 2) -> None:
        self.ops: list[str] = []  # op names, in the order first seen: the arrays' second axis
        self._op_index: dict[str, int] = {}
        self.dtypes: list[str] = []  # dtype names, indexed by ``dtype``
        self._dtype_index: dict[str, int] = {}
        self.job_sums: dict[str, list[float]] = {}  # op -> the sum of every row's ``sums`` (rows forgotten leave it)
        self.job_totals: dict[str, list[int]] = {}  # op -> [calls, bytes] since the viewer started (restarts kept)
        self.job_last: dict[str, tuple[int, str]] = {}  # op -> (group size, dtype) last seen
        # notes not yet written: (row, op, calls, bytes, summed wait, group, dtype, arrival, kernel s, kernel bytes)
        # and (row, op, bytes, wait, arrival)
        self._ops: list[tuple[int, int, int, int, float, int, int, float, float, int]] = []
        self._calls: list[tuple[int, int, float, float, float]] = []
        self._allocate(max(1, rows), max(1, ops))

    def _allocate(self, rows: int, ops: int) -> None:
        """(Re)allocate for ``rows`` x ``ops``, keeping what is there (rare: the job grows, an op is new)."""
        w = OP_WINDOW
        fresh = {
            "at": np.zeros((rows, ops, w)),  # a summary's arrival, viewer clock
            "calls": np.zeros((rows, ops, w)),  # (float64: exact for whole numbers up to 2**53)
            "nbytes": np.zeros((rows, ops, w)),
            "busy": np.zeros((rows, ops, w)),  # its summed wait, s
            "kernel": np.zeros((rows, ops, w)),  # the summed kernel seconds of its calls whose kernel time is known
            "kbytes": np.zeros((rows, ops, w)),  # ... and those calls' bytes
            "head": np.zeros((rows, ops), np.int64),  # the slot the next summary goes in
            "count": np.zeros((rows, ops), np.int64),  # slots in use
            "sums": np.zeros((rows, ops, SUMS)),  # [calls, bytes, summed wait, kernel s, kernel bytes] over each ring
            "totals": np.zeros((rows, ops, 2), np.int64),  # [calls, bytes] since the rank's process started
            "seen": np.zeros((rows, ops), np.bool_),  # some summary of the op came from the rank's process
            "first_at": np.zeros((rows, ops)),  # the arrival of the ring's oldest summary (kept as the ring turns)
            "group": np.zeros((rows, ops), np.int64),  # last seen
            "dtype": np.zeros((rows, ops), np.int64),  # ... as an index of ``dtypes``
            "call_op": np.zeros((rows, CALL_WINDOW), np.int64),  # raw calls, a ring per row
            "call_b": np.zeros((rows, CALL_WINDOW)),
            "call_d": np.zeros((rows, CALL_WINDOW)),
            "call_head": np.zeros(rows, np.int64),
            "call_count": np.zeros(rows, np.int64),
        }
        old = getattr(self, "at", None)
        if old is not None:
            n, p = old.shape[0], old.shape[1]
            for name, array in fresh.items():
                current = getattr(self, name)
                if name.startswith("call_"):
                    array[:n] = current
                else:
                    array[:n, :p] = current
        self.__dict__.update(fresh)

    def _op(self, name: str) -> int:
        return _number(self.ops, self._op_index, name)

    def _dtype(self, name: str) -> int:
        return _number(self.dtypes, self._dtype_index, name)

    # -- writes (the receiver thread, under the aggregator's lock) ---------------------------

    def add_ops(self, row: int, ops: dict[str, OpSummary], now: float) -> None:
        """One summary per op of a rank (a step and phase's, or a digest interval's), written at the next flush."""
        note, job_last, op_index, dtype_index = self._ops.append, self.job_last, self._op_index, self._dtype_index
        for op, s in ops.items():
            j, d = op_index.get(op), dtype_index.get(s.dtype)  # (known but the first time: no call per summary)
            if j is None:
                j = self._op(op)
            if d is None:
                d = self._dtype(s.dtype)
            note((row, j, s.calls, s.bytes, s.total, s.group, d, now, s.kernel or 0.0, s.kbytes or 0))
            job_last[op] = (s.group, s.dtype)

    def add_calls(self, row: int, calls: Iterable[Call], now: float) -> None:
        """A rank's sample of raw calls, written at the next flush."""
        note = self._calls.append
        for c in calls:
            note((row, self._op(c.op), float(c.b), c.d, now))

    def settle(self) -> None:
        """The end of a batch: the notes written if there are :data:`FLUSH_FROM` of them (else they wait for more)."""
        if len(self._ops) + len(self._calls) >= FLUSH_FROM:
            self.flush()

    def flush(self) -> None:
        """Write every note taken since the last flush, in a few numpy operations for all of them."""
        if self._ops:
            self._flush_ops()
        if self._calls:
            self._flush_calls()

    def _fit(self, rows: int) -> None:
        """Room for ``rows`` rows and every op named so far."""
        have_rows, have_ops = self.head.shape
        if rows > have_rows or len(self.ops) > have_ops:
            self._allocate(max(have_rows, 1 << (rows - 1).bit_length()), max(have_ops, 1 << (len(self.ops) - 1).bit_length()))

    def _flush_ops(self) -> None:
        notes, self._ops = self._ops, []
        row, op, calls, nbytes, busy, group, dtype, at, kernel, kbytes = (np.array(column) for column in zip(*notes))
        row, op = row.astype(np.int64), op.astype(np.int64)
        self._fit(int(row.max()) + 1)
        # each (row, op) may come several times in a batch: the k-th goes k slots after the ring's head
        totals = np.stack([calls, nbytes], axis=1).astype(np.int64)  # every summary counts, kept in a ring or not
        np.add.at(self.totals, (row, op), totals)
        for j, (c, b) in zip(np.unique(op).tolist(), _sum_by(op, totals).tolist()):
            job = self.job_totals.setdefault(self.ops[j], [0, 0])
            job[0] += c
            job[1] += b
        k, times = _occurrences(row * len(self.ops) + op)
        w = OP_WINDOW
        keep = k >= times - w  # more than a ring's worth of one (row, op): the oldest are overwritten anyway
        if not keep.all():
            row, op, calls, nbytes, busy, group, dtype, at, kernel, kbytes, k, times = (
                a[keep] for a in (row, op, calls, nbytes, busy, group, dtype, at, kernel, kbytes, k, times)
            )  # fmt: skip
            k, times = k - (times - np.minimum(times, w)), np.minimum(times, w)
        head = self.head[row, op]
        slot = (head + k) % w
        # a ring fills from slot 0: a slot under its count holds an older summary, which leaves the sums
        rings = (self.calls, self.nbytes, self.busy, self.kernel, self.kbytes)
        old = np.where((slot < self.count[row, op])[:, None], np.stack([a[row, op, slot] for a in rings], axis=1), 0.0)
        change = np.stack([calls, nbytes, busy, kernel, kbytes], axis=1).astype(np.float64) - old
        np.add.at(self.sums, (row, op), change)
        for j, delta in zip(np.unique(op).tolist(), _sum_by(op, change).tolist()):
            job_sums = self.job_sums.setdefault(self.ops[j], [0.0] * SUMS)
            for i in range(SUMS):
                job_sums[i] += delta[i]
        self.at[row, op, slot] = at
        self.calls[row, op, slot] = calls
        self.nbytes[row, op, slot] = nbytes
        self.busy[row, op, slot] = busy
        self.kernel[row, op, slot] = kernel
        self.kbytes[row, op, slot] = kbytes
        last = k == times - 1  # one per (row, op): its newest
        lr, lo = row[last], op[last]
        self.head[lr, lo] = (head[last] + times[last]) % w
        self.count[lr, lo] = np.minimum(self.count[lr, lo] + times[last], w)
        self.first_at[lr, lo] = self.at[lr, lo, (self.head[lr, lo] - self.count[lr, lo]) % w]
        self.seen[lr, lo] = True
        self.group[lr, lo] = group[last]
        self.dtype[lr, lo] = dtype[last]

    def _flush_calls(self) -> None:
        notes, self._calls = self._calls, []
        row, op, b, d, _ = (np.array(column) for column in zip(*notes))
        row = row.astype(np.int64)
        self._fit(int(row.max()) + 1)
        k, times = _occurrences(row)
        w = CALL_WINDOW
        keep = k >= times - w
        if not keep.all():
            row, op, b, d, k, times = (a[keep] for a in (row, op, b, d, k, times))
            k, times = k - (times - np.minimum(times, w)), np.minimum(times, w)
        head = self.call_head[row]
        slot = (head + k) % w
        self.call_op[row, slot] = op
        self.call_b[row, slot] = b
        self.call_d[row, slot] = d
        last = k == times - 1
        lr = row[last]
        self.call_head[lr] = (head[last] + times[last]) % w
        self.call_count[lr] = np.minimum(self.call_count[lr] + times[last], w)

    def forget(self, row: int) -> None:
        """A rank's row starts afresh (its new process): its summaries, totals and calls go; the job's totals stay."""
        self.flush()
        if row >= self.head.shape[0]:
            return
        for j, op in enumerate(self.ops[: self.sums.shape[1]]):
            if self.seen[row, j]:
                job_sums = self.job_sums[op]
                for i, value in enumerate(self.sums[row, j].tolist()):
                    job_sums[i] -= value
        self.head[row] = self.count[row] = 0
        self.sums[row] = 0.0
        self.totals[row] = 0
        self.seen[row] = False
        self.call_head[row] = self.call_count[row] = 0

    # -- reads (under the lock) -------------------------------------------------------------

    def oldest_at(self, rows: np.ndarray) -> np.ndarray:
        """(rows, ops): the arrival of each ring's oldest summary (inf: none)."""
        return np.where(self.count[rows] > 0, self.first_at[rows], np.inf)

    def samples(self, row: int) -> list[tuple[int, CallSample]]:
        """A row's raw calls, oldest first, as (op index, sample)."""
        count, w = int(self.call_count[row]), CALL_WINDOW
        first = (int(self.call_head[row]) - count) % w
        slots = [(first + i) % w for i in range(count)]
        ops, b, d = self.call_op[row, slots].tolist(), self.call_b[row, slots].tolist(), self.call_d[row, slots].tolist()
        return [(o, CallSample(x, y)) for o, x, y in zip(ops, b, d)]


def _number(names: list[str], index: dict[str, int], name: str) -> int:
    """``name``'s place in ``names`` (appended when new): an op or a dtype as an array's whole number."""
    found = index.get(name)
    if found is None:
        found = index[name] = len(names)
        names.append(name)
    return found


def _occurrences(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each key, which occurrence of its value it is (0, 1, ... in order) and how many there are."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[starts, len(keys)])
    k_sorted = np.arange(len(keys)) - np.repeat(starts, sizes)
    k, times = np.empty_like(order), np.empty_like(order)
    k[order] = k_sorted
    times[order] = np.repeat(sizes, sizes)
    return k, times


def _sum_by(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The rows of ``values`` summed by key, in the order of the keys' unique values."""
    _, inverse = np.unique(keys, return_inverse=True)
    out = np.zeros((int(inverse.max()) + 1, values.shape[1]), values.dtype)
    np.add.at(out, inverse, values)
    return out


#: Raw calls the job-wide rows' p95 and fit read at most: every rank's up to 128 ranks, then those of ranks
#: spread evenly over the job (a rank keeps its last CALL_WINDOW calls).
JOB_SAMPLE = 2048
#: Windows whose oldest summary gives the job's rates their span, at most (spread evenly over the job).
SPAN_SAMPLE = 64


@dataclass(frozen=True)
class GatheredCollectives:
    """What the collective rows read, copied under the lock: keys are (rank, op), rank -1 the whole job."""

    now: float
    sums: dict[tuple[int, str], list[float]]  # [calls, bytes, summed wait, kernel s, kernel bytes, first arrival]
    samples: dict[tuple[int, str], list[CallSample]]  # raw calls, oldest first
    totals: dict[tuple[int, str], list[int]]  # [calls, bytes] since the viewer started
    last: dict[tuple[int, str], tuple[int, str]]  # (group size, dtype) last seen


def gather(job: JobCollectives, rank: np.ndarray, rows: np.ndarray, now: float, every_rank: bool) -> CollectiveSums:
    """What the collective rows read, copied (under the lock, with the rest of a view: watch/engine/rank_store.py):
    the job's sums, and every rank's as columns (``rank``: the ranks in rank order, ``rows`` theirs). Which ranks get
    rows of their own is known only once the view is judged: :meth:`CollectiveSums.of` picks them, lock free.
    ``every_rank``: each rank gets rows of its own, whichever are asked for (a small job)."""
    job.flush()
    if len(rows):
        job._fit(int(rows.max()) + 1)  # (a rank with no collectives yet may be past the arrays)
    ops = tuple(job.ops)
    k = len(ops)
    sums: dict[tuple[int, str], list[float]] = {}
    samples: dict[tuple[int, str], list[CallSample]] = {}
    totals: dict[tuple[int, str], list[int]] = {}
    last: dict[tuple[int, str], tuple[int, str]] = {}
    for op in ops:
        if op in job.job_totals:
            sums[(-1, op)] = [*job.job_sums[op], now]
            totals[(-1, op)] = list(job.job_totals[op])
            last[(-1, op)] = job.job_last[op]
    n = len(rows)
    stride = max(1, -(-n * CALL_WINDOW // JOB_SAMPLE))
    for row in rows[::stride].tolist():
        for j, sample in job.samples(row):
            samples.setdefault((-1, ops[j]), []).append(sample)
    spanned = rows[:: max(1, n // SPAN_SAMPLE)]  # the job's rates: over the span of its windows (and the ranks shown)
    oldest = job.oldest_at(spanned)[:, :k].min(axis=0) if len(spanned) else np.full(k, np.inf)
    # Every rank's columns, copied: by a slice where the rows are in rank order already (the usual case: a copy of
    # the block, a third of what a fancy index of 16,384 rows costs), else by the rows.
    if n and rows[-1] == n - 1 and np.array_equal(rows, np.arange(n)):

        def take(a: np.ndarray) -> np.ndarray:
            return a[:n].copy()
    else:

        def take(a: np.ndarray) -> np.ndarray:
            return a[rows]

    return CollectiveSums(
        now=now,
        ops=ops,
        dtypes=tuple(job.dtypes),
        job=GatheredCollectives(now, sums, samples, totals, last),
        oldest=oldest,
        every_rank=every_rank,
        rank=rank,
        seen=take(job.seen)[:, :k],
        count=take(job.count)[:, :k],
        sums=take(job.sums)[:, :k],
        first=take(job.first_at)[:, :k],
        totals=take(job.totals)[:, :k],
        group=take(job.group)[:, :k],
        dtype=take(job.dtype)[:, :k],
        call_op=take(job.call_op),
        call_b=take(job.call_b),
        call_d=take(job.call_d),
        call_head=take(job.call_head),
        call_count=take(job.call_count),
    )


@dataclass(frozen=True, eq=False)
class CollectiveSums:
    """The job's collectives as a view holds them: the job's own sums, and every rank's as columns in rank order
    (copies: nothing here changes after), from which :meth:`of` makes the rows' input for the ranks asked for."""

    now: float
    ops: tuple[str, ...]  # the columns' second axis
    dtypes: tuple[str, ...]  # what ``dtype`` indexes
    job: GatheredCollectives  # the job's keys (rank -1) only
    oldest: np.ndarray  # (ops,): the oldest summary's arrival over a sample of the ranks (inf: none)
    every_rank: bool  # every rank gets rows of its own
    rank: np.ndarray  # int64, sorted
    seen: np.ndarray  # (ranks, ops) bool: some summary of the op came from the rank's process
    count: np.ndarray  # (ranks, ops): summaries in its ring
    sums: np.ndarray  # (ranks, ops, SUMS): over its ring
    first: np.ndarray  # (ranks, ops): its ring's oldest arrival (where ``count`` says it has one)
    totals: np.ndarray  # (ranks, ops, 2): [calls, bytes] since its process started
    group: np.ndarray  # (ranks, ops): last seen
    dtype: np.ndarray  # (ranks, ops): ... an index of ``dtypes``
    call_op: np.ndarray  # (ranks, CALL_WINDOW): its raw calls, a ring
    call_b: np.ndarray
    call_d: np.ndarray
    call_head: np.ndarray  # (ranks,)
    call_count: np.ndarray

    def of(self, ranks: Iterable[int] | None = None) -> GatheredCollectives:
        """The job's sums, and those of ``ranks`` (every rank's when None, or when :attr:`every_rank`): what
        watch/analysis/collectives.py makes the rows of. O(ops) for the job, O(ops) per rank asked for."""
        n = len(self.rank)
        if ranks is None or self.every_rank:
            at = np.arange(n)
        else:
            wanted = np.array(sorted(set(ranks)), np.int64)
            pos = np.searchsorted(self.rank, wanted)
            inside = pos < n
            pos = pos[inside]
            at = pos[self.rank[pos] == wanted[inside]]
        job, now, ops = self.job, self.now, self.ops
        sums = {key: list(value) for key, value in job.sums.items()}
        samples = {key: list(value) for key, value in job.samples.items()}
        totals, last = dict(job.totals), dict(job.last)
        if len(ops):
            first = np.where(self.count[at] > 0, self.first[at], np.inf)
            oldest = np.minimum(self.oldest, first.min(axis=0)) if len(at) else self.oldest
            for j, op in enumerate(ops):
                if (-1, op) in sums and oldest[j] < sums[(-1, op)][SUMS]:
                    sums[(-1, op)][SUMS] = float(oldest[j])
        if not len(at):
            return GatheredCollectives(now, sums, samples, totals, last)
        seen, count = self.seen[at], self.count[at]
        window, first_at = self.sums[at].tolist(), self.first[at].tolist()
        rank_totals, group, dtype = self.totals[at].tolist(), self.group[at].tolist(), self.dtype[at].tolist()
        shown = self.rank[at].tolist()
        for i, jj in zip(*np.nonzero(seen)):
            i, j = int(i), int(jj)
            key = (shown[i], ops[j])
            sums[key] = [*window[i][j], first_at[i][j] if count[i, j] else now]
            totals[key] = rank_totals[i][j]
            last[key] = (group[i][j], self.dtypes[dtype[i][j]])
        w = CALL_WINDOW
        for i, a in enumerate(at.tolist()):
            c = int(self.call_count[a])
            slots = [(int(self.call_head[a]) - c + s) % w for s in range(c)]
            for o, b, d in zip(self.call_op[a, slots].tolist(), self.call_b[a, slots].tolist(), self.call_d[a, slots].tolist()):
                samples.setdefault((shown[i], ops[o]), []).append(CallSample(b, d))
        return GatheredCollectives(now, sums, samples, totals, last)
