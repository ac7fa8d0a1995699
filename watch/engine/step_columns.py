"""Every rank's last steps in job-wide columns: a row per rank, a slot per step, numpy arrays.

The straggler scoring needs, for every rank, the median over its window of
each phase's *own* time (its waits in collectives taken out), of its step time
and its step rate. Kept per rank as Python objects, that is thousands of small
sorts and dictionaries per refresh at 4,096 ranks. Kept here as one array per
figure (``own[row, phase, slot]``), a refresh works the medians of every rank
with new steps out in a few vectorised sorts, and 4,096 ranks x 64 steps x 8
phases is 17 MB of machine floats rather than a heap of float objects.

Ingest writes a step's figures into its rank's row through memoryviews (tens of
nanoseconds a figure, as cheap as an ``array('d')`` ring's store); node
digests' steps come as columns and go in with one call for all the ranks of
every digest the receiver took in one go (watch/engine/rank_store.py); the
receiver thread calls the writers and a snapshot :meth:`StepColumns.refresh`,
both under the aggregator's lock. Each row is a ring: slot ``i`` of every
column is the same step; a median needs no order, so it sorts a ring as it lies.
Phases are columns shared by the job (a rank that never names one spent
nothing in it), in the order first seen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from typing import Any

import numpy as np

from ranktop.wire.names import COMM_PHASE, OTHER_PHASE, STANDARD_PHASES


#: Steps a rank's window needs before its medians count (a straggler is scored on them: watch/analysis/stragglers.py).
MIN_STEPS_TO_SCORE = 3
#: From this many rows on a refresh the receiver did not work ahead of (:data:`AHEAD_FROM`: a viewer's first go, or
#: a caller that never works ahead) works out the medians of half the rows with new steps, in turn (the first half of
#: the rows, then the second: runs of rows, which a sort reads as slices): each rank's are at most two refreshes old
#: (a second at the screen's 2 Hz), for half the sorting; from twice as many, a quarter in turn (at most four
#: refreshes old: 4 s where the digests come once a second, wire/pacing.py digest_hz, and with them the
#: refreshes, watch/refresher.py period_s; a window then spans 64 s). A row never worked out yet is always worked
#: out (a new rank is scored at once).
SHARED_FROM = 8192
#: From this many rows on the receiver works the medians out as the steps come (:meth:`StepColumns.work_ahead`), a
#: run of rows at a time, :data:`AHEAD_ROWS_PER_S` a second, and a snapshot works out only the rows never worked out
#: (:meth:`StepColumns.refresh` ``fresh_only``): at 16,384 ranks the sort of a quarter of the rows was 10 ms of a
#: snapshot's hold of the lock, where the receiver now sorts a few hundred rows at each of its goes; at 4,096 every
#: snapshot (two a second) sorted every rank's window, half of its CPU, where each rank's medians are now worked
#: out once a second.
AHEAD_FROM = 4096
#: Rows the receiver works out a second: every row again within a second at 4,096 rows (two snapshots), 2 s at
#: 8,192 and 4 s at 16,384 (as old as a refresh's halves and quarters in turn had them, :data:`SHARED_FROM`; at
#: 16,384 the digests come once a second and a window spans 64 s): the sorting a second stays the same however
#: big the job.
AHEAD_ROWS_PER_S = 4096
#: ... in runs of at least this many rows (a numpy pass has its fixed cost), and fewer than SHARED_FROM.
AHEAD_MIN_ROWS = 256
#: Figures a refresh sorts in one go, at most: its scratch buffer's size (4 MB), and a block that stays in the
#: processor's caches while it is sorted and read.
SORT_FIGURES = 1 << 19
#: Each rank's last steps whose waits a view carries (who arrives last at the collectives is worked out over them:
#: watch/analysis/arrivals.py): 2 s at 16 steps a second.
RECENT_STEPS = 32


class StepColumns:
    """The last ``window`` steps of every rank: number, start, wall time and own time per phase."""

    # The arrays, a row per rank (:meth:`_allocate` says each one's shape and meaning), and the memoryviews their
    # writers store items through.
    num: np.ndarray
    start: np.ndarray
    wall: np.ndarray
    own: np.ndarray
    head: np.ndarray
    count: np.ndarray
    waited: np.ndarray
    changed: np.ndarray
    stats_at: np.ndarray
    median_wall: np.ndarray
    median_own: np.ndarray
    own_sd: np.ndarray
    phase_sd: np.ndarray
    rate: np.ndarray
    last_end: np.ndarray
    _num: memoryview[Any]
    _start: memoryview[Any]
    _wall: memoryview[Any]
    _own: memoryview[Any]
    _head: memoryview[Any]
    _count: memoryview[Any]
    _changed: memoryview[Any]
    _waited: memoryview[Any]
    views_end: memoryview[Any]

    def __init__(self, window: int, rows: int = 8, phases: int = 4):
        self.window = window
        self.phases: list[str] = []  # the column order of ``own``
        self._index: dict[str, int] = {}
        self.names: set[str] = set()  # phases the ranks' records named (not "other" and "comm": worked out)
        self.rows = 0  # rows handed out
        self.raw_rows: set[int] = set()  # rows that keep some step's raw figures to redo (watch/engine/step_window.py)
        self._scratch = np.empty(0)  # where refresh sorts (see _middle)
        self._turn = 0  # which part of the rows a refresh of a big job works out (SHARED_FROM)
        self._ahead_at: float | None = None  # when work_ahead last worked a run of rows out (None: not yet)
        self._ahead_row = 0  # where its next run begins
        # recent_waits' last answer: ((steps, comm column), the rows asked, their ``changed`` then, numbers, waits)
        self._recent: tuple[tuple[int, int], np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._allocate(max(1, rows), max(1, phases))

    # -- storage ---------------------------------------------------------------------------

    def _allocate(self, rows: int, phases: int) -> None:
        """(Re)allocate for ``rows`` x ``phases``, keeping what is there (rare: the job grows, a phase is new)."""
        w = self.window
        old = getattr(self, "num", None)
        fresh = {
            "num": np.zeros((rows, w), np.int64),  # step numbers
            "start": np.zeros((rows, w)),  # unix s, the rank's clock
            "wall": np.zeros((rows, w)),  # s
            "own": np.zeros((rows, phases, w)),  # own time per phase, s
            "head": np.zeros(rows, np.int64),  # the slot the next step goes in
            "count": np.zeros(rows, np.int64),  # slots in use
            "waited": np.zeros(rows, np.bool_),  # some step had collective waits: its "comm" is known
            "changed": np.zeros(rows, np.int64),  # bumped on every write: the medians are stale when it moved
            "stats_at": np.full(rows, -1, np.int64),  # ``changed`` when the medians were worked out (-1: never)
            "median_wall": np.full(rows, np.nan),
            "median_own": np.zeros((rows, phases)),
            "own_sd": np.full(rows, np.nan),  # the spread of its own time per step (waits out), as a robust SD, s
            "phase_sd": np.zeros((rows, phases)),  # the same per phase
            "rate": np.full(rows, np.nan),  # steps per second over the window
            "last_end": np.full(rows, np.nan),  # when the newest step ended, unix s (NaN: no step yet)
        }
        if old is not None:
            n, p = self.num.shape[0], self.own.shape[1]
            for name, array in fresh.items():
                current = getattr(self, name)
                if array.ndim == 3:
                    array[:n, :p] = current
                elif name in ("median_own", "phase_sd"):
                    array[:n, :p] = current
                else:
                    array[:n] = current
        for name, array in fresh.items():
            setattr(self, name, array)
        # Writers go through memoryviews: an item store is about half a numpy scalar store's cost.
        self._num, self._start, self._wall, self._own = (a.data for a in (self.num, self.start, self.wall, self.own))
        self._head, self._count, self._changed, self._waited = (a.data for a in (self.head, self.count, self.changed, self.waited))
        self.views_end = self.last_end.data

    def new_row(self) -> int:
        if self.rows == self.num.shape[0]:
            self._allocate(self.rows * 2, self.own.shape[1])
        self.rows += 1
        return self.rows - 1

    def clear(self, row: int) -> None:
        """A row starts afresh (its rank restarted as a new process)."""
        self.head[row] = self.count[row] = 0
        self.waited[row] = False
        self.own[row] = 0.0
        self.changed[row] += 1
        self.stats_at[row] = -1
        self.last_end[row] = np.nan

    def column(self, name: str) -> int:
        """The index of a phase's column, made on first sight (earlier steps spent nothing in it)."""
        index = self._index.get(name)
        if index is None:
            if len(self.phases) == self.own.shape[1]:
                self._allocate(self.num.shape[0], len(self.phases) * 2)
            index = self._index[name] = len(self.phases)
            self.phases.append(name)
            if name != OTHER_PHASE and name != COMM_PHASE:
                self.names.add(name)
        return index

    # -- writes (the receiver thread, under the aggregator's lock) ---------------------------

    def add(self, row: int, n: int, t: float, wall: float, own: dict[str, float]) -> int:
        """One step (or a node digest's interval) with its own times worked out; its slot."""
        i = self._head[row]
        self._num[row, i] = n
        self._start[row, i] = t
        self._wall[row, i] = wall
        self._head[row] = (i + 1) % self.window
        if self._count[row] < self.window:
            self._count[row] += 1
        self.put(row, i, own)
        return i

    def put(self, row: int, i: int, own: dict[str, float]) -> None:
        """Slot ``i``'s own times (again, when its waits came after it). The usual record names every column
        already known: a store per phase; otherwise the slot is cleared first (an old step's figures are
        not this one's)."""
        index, mv = self._index, self._own
        if len(own) != len(index) or not own.keys() <= index.keys():
            for name in own:
                if name not in index:
                    self.column(name)
                    index, mv = self._index, self._own
            self.own[row, :, i] = 0.0
        if not self._waited[row] and COMM_PHASE in own:
            self._waited[row] = True
        for name, value in own.items():
            mv[row, index[name], i] = value
        self._changed[row] += 1

    def add_block(self, rows: Sequence[int], n: Sequence[int], t: Sequence[float], wall: Sequence[float],
                  own: Mapping[str, Sequence[float]], waited: Sequence[bool] | None = None) -> None:  # fmt: skip
        """One step each for distinct ``rows``, given as columns (node digests' intervals, relay/digest_fold.py,
        several nodes' at once: watch/engine/rank_store.py) with own times worked out and a phase a row lacks at 0.0:
        :meth:`add` for every row, in a dozen numpy stores whatever the rows. ``waited``: which rows' steps
        had collective waits (default: all of them when ``own`` has "comm")."""
        at = np.asarray(rows, np.int64)
        used = [(self.column(name), values) for name, values in own.items()]  # first: a new phase reallocates
        known = len(self.phases)  # a phase the block lacks: an old step's figure is not this one's
        unused = () if len(used) == known else sorted(set(range(known)) - {c for c, _ in used})
        w = self.window
        i = self.head[at]
        self.num[at, i] = n
        self.start[at, i] = t
        self.wall[at, i] = wall
        for c, values in used:
            self.own[at, c, i] = values
        for c in unused:
            self.own[at, c, i] = 0.0
        self.head[at] = np.where(i + 1 < w, i + 1, 0)
        self.count[at] = np.minimum(self.count[at] + 1, w)
        self.changed[at] += 1
        self.last_end[at] = np.asarray(t, np.float64) + np.asarray(wall, np.float64)
        if waited is None:
            if COMM_PHASE in own:
                self.waited[at] = True
        else:
            self.waited[at[np.asarray(waited, np.bool_)]] = True

    def slot_of(self, row: int, n: int) -> int | None:
        """The slot holding step ``n`` in a row, newest first; None when it is not in the window."""
        w, head = self.window, self._head[row]
        for k in range(1, self._count[row] + 1):
            i = (head - k) % w
            if self._num[row, i] == n:
                return i
        return None

    # -- reads -------------------------------------------------------------------------------

    def oldest(self, row: int) -> int:
        return (self._head[row] - self._count[row]) % self.window

    def newest(self, row: int) -> int:
        return (self._head[row] - 1) % self.window

    def steps(self, row: int) -> list[tuple[int, float, float]]:
        """(number, start, wall) of a row's steps, oldest first."""
        first, w = self.oldest(row), self.window
        return [(self._num[row, (first + k) % w], self._start[row, (first + k) % w], self._wall[row, (first + k) % w])
                for k in range(self._count[row])]  # fmt: skip

    @property
    def working_ahead(self) -> bool:
        """Whether the receiver works the medians out as the steps come (:meth:`work_ahead`): a job this big."""
        return self._ahead_at is not None and self.rows >= AHEAD_FROM

    def work_ahead(self, now: float, min_steps: int = 1) -> np.ndarray | None:
        """The receiver's share of :meth:`refresh` in a job of :data:`AHEAD_FROM` rows or more (called under the
        lock after each go of messages, ``now`` on the viewer's clock): the next run of rows in turn,
        :data:`AHEAD_ROWS_PER_S` a second, worked out where stale; the rows refreshed, or None when it was not yet
        time."""
        n = self.rows
        if n < AHEAD_FROM:
            self._ahead_at = None
            return None
        if self._ahead_at is None:
            self._ahead_at = now
            return None
        share = min(int(AHEAD_ROWS_PER_S * (now - self._ahead_at)), n, SHARED_FROM - 1)
        if share < AHEAD_MIN_ROWS:
            return None
        self._ahead_at = now
        first = self._ahead_row % n
        self._ahead_row = first + share
        run = np.arange(first, first + share) % n  # (a run of rows, wrapping round once at most)
        return self.refresh(run, min_steps)

    def refresh(self, rows: np.ndarray | None = None, min_steps: int = 1, fresh_only: bool = False) -> np.ndarray:
        """Work out again the medians and rate of every row (of ``rows``) with new steps since and at least
        ``min_steps`` steps (of a big job, a half or a quarter of them in turn: :data:`SHARED_FROM`); the rows refreshed.
        A full window's rows go in one sort per column; a filling window's (the job's first seconds) by how many steps
        they have. ``fresh_only``: only the rows never worked out (the receiver works out the rest: :meth:`work_ahead`)."""
        n = self.rows
        candidates = np.arange(n) if rows is None else np.asarray(rows, np.int64)
        stale = candidates[(self.changed[candidates] != self.stats_at[candidates]) & (self.count[candidates] >= min_steps)]
        if fresh_only:  # the rest are the receiver's (work_ahead)
            stale = stale[self.stats_at[stale] < 0]
        elif len(candidates) >= SHARED_FROM:  # a part of the rows in turn: halves from 8,192 rows, quarters from 16,384
            parts = 2 * (len(candidates) // SHARED_FROM)
            self._turn = (self._turn + 1) % parts
            lo, hi = self.rows * self._turn // parts, self.rows * (self._turn + 1) // parts
            stale = stale[((stale >= lo) & (stale < hi)) | (self.stats_at[stale] < 0)]
        if not len(stale):
            return stale
        stale.sort()  # in row order: a run of rows is then a slice
        counts = self.count[stale]
        p = len(self.phases)
        for used in np.unique(counts):
            which = stale[counts == used]
            step = max(1, SORT_FIGURES // ((p + 1) * int(used)))  # rows a go: the scratch stays within SORT_FIGURES
            for at in range(0, len(which), step):
                part = which[at : at + step]
                # (every row, or a run of them, as most refreshes of a running job: a slice copies far faster)
                these: slice | np.ndarray = slice(part[0], part[-1] + 1) if part[-1] - part[0] + 1 == len(part) else part
                self.median_wall[part] = self._middle(self.wall[these, :used])
                own = self.own[these, :p, :used]
                self.median_own[part, :p], self.phase_sd[part, :p] = self._middle_and_spread(own)
                self.own_sd[part] = self._spread(own)
        first = (self.head[stale] - counts) % self.window
        last = (self.head[stale] - 1) % self.window
        span = self.start[stale, last] - self.start[stale, first]
        steps = (self.num[stale, last] - self.num[stale, first]).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.rate[stale] = np.where(span > 0, steps / np.where(span > 0, span, 1.0), np.nan)
        self.stats_at[stale] = self.changed[stale]
        return stale

    def _middle(self, block: np.ndarray) -> np.ndarray:
        """The medians along ``block``'s last axis."""
        return self._middle_and_spread(block)[0]

    def _middle_and_spread(self, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The medians along ``block``'s last axis and, from the same sort, the robust SDs (the quartiles' distance
        / 1.349): how much each phase varies from step to step (the judge weighs a slowdown in one phase against
        that phase's own noise: watch/analysis/stragglers.py)."""
        work = self._sorted(block)
        used = block.shape[-1]
        mid = used // 2
        middle = work[..., mid].copy() if used % 2 else (work[..., mid - 1] + work[..., mid]) / 2
        return middle, (work[..., (3 * (used - 1)) // 4] - work[..., (used - 1) // 4]) / 1.349

    def _spread(self, own: np.ndarray) -> np.ndarray:
        """Per row of ``own`` (rows, phases, steps): how much its own time per step (its waits in collectives
        left out) varies from step to step, as a robust standard deviation (the quartiles' distance / 1.349:
        a checkpoint or a pause now and then moves it no more than the medians). The judge tells noise from a
        slowdown by it: a window's median is about 1.25 x this / sqrt(steps) off (watch/analysis/stragglers.py)."""
        total = own.sum(axis=1)
        comm = self._index.get(COMM_PHASE)
        if comm is not None and comm < own.shape[1]:
            total -= own[:, comm]
        work = self._sorted(total)
        used = total.shape[-1]
        return (work[:, (3 * (used - 1)) // 4] - work[:, (used - 1) // 4]) / 1.349

    def _sorted(self, block: np.ndarray) -> np.ndarray:
        """``block`` sorted along its last axis, in a scratch buffer kept from one refresh to the next: a fresh
        array of megabytes faults its pages in again whenever the heap handed them back (watch/heap.py), and those
        faults cost the viewer more than the sort itself (at 4,096 ranks, 4.5 of a snapshot's 16 ms of CPU)."""
        size = block.size
        if self._scratch.size < size:
            self._scratch = np.empty(size)
        work = self._scratch[:size].reshape(block.shape)
        np.copyto(work, block)
        work.sort(axis=-1)
        return work

    def recent_waits(self, rows: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """The step numbers and collective waits ("comm") of each row's last ``steps`` slots, as (rows, steps)
        arrays, read-only; a slot with no step, or a row whose waits were never seen, is numbered -1. What who
        arrived last at each step's collectives is worked out from (watch/analysis/arrivals.py). The gather of 32
        slots of every rank's ring is the dearest part of a snapshot's gathering (14 ms at 16,384 ranks), so the
        last answer is kept: asked for the same rows again, only the rows written since are gathered again, into a
        copy of it (a refresh faster than a big job's digests finds half the rows unchanged, relay/digest_fold.py:
        digest_hz); when most rows were written (a refresh paced by the digests, watch/refresher.py: each node sent
        one since), all are gathered afresh, with no pass to copy the rest. An answer handed out is never written
        again (a snapshot on another thread may be reading it), and the next is a new one."""
        rows = np.asarray(rows, np.int64)
        k = min(steps, self.window)
        comm = self._index.get(COMM_PHASE)
        if comm is None or not len(rows):
            return np.full((len(rows), k), -1, np.int64), np.zeros((len(rows), k))
        changed = self.changed[rows]
        kept = self._recent
        if kept is not None and kept[0] == (k, comm) and np.array_equal(kept[1], rows):
            stale = np.flatnonzero(kept[2] != changed)
            if not len(stale):
                return kept[3], kept[4]
            if 2 * len(stale) <= len(rows):
                nums, waits = kept[3].copy(), kept[4].copy()
                nums[stale], waits[stale] = self._gather_recent(rows[stale], k, comm)
                return self._keep_recent((k, comm), rows, changed, nums, waits)
        return self._keep_recent((k, comm), rows, changed, *self._gather_recent(rows, k, comm))

    def _keep_recent(self, key: tuple[int, int], rows: np.ndarray, changed: np.ndarray, nums: np.ndarray,
                     waits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """An answer of :meth:`recent_waits`, kept for the next and handed out read-only."""
        nums.flags.writeable = waits.flags.writeable = False
        self._recent = (key, rows.copy(), changed, nums, waits)
        return nums, waits

    def _gather_recent(self, rows: np.ndarray, k: int, comm: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`recent_waits` of ``rows``, from the rings."""
        back = np.arange(1, k + 1)
        w = self.window
        at = self.head[rows][:, None] - back  # the slots, newest first, then where they lie in the arrays:
        if w & (w - 1) == 0:
            at &= w - 1  # (a window of a power of two, as the default 64: a mask, ten times as fast as a modulo)
        else:
            at %= w
        at += (rows * w)[:, None]  # one flat index for both (``take``, a third cheaper than a 2-D fancy index)
        nums = self.num.take(at)
        held = back[None, :] <= self.count[rows][:, None]
        held &= self.waited[rows][:, None]
        nums[~held] = -1
        at += (rows * ((self.own.shape[1] - 1) * w) + comm * w)[:, None]
        return nums, self.own.take(at)

    def phase_names(self) -> list[str]:
        """Column order for the screens: standard phases seen, user phases, then "comm" (when some rank
        waited in collectives) and "other"."""
        seen = self.names
        standard = [p for p in STANDARD_PHASES if p in seen]
        custom = sorted(seen - set(STANDARD_PHASES) - {OTHER_PHASE, COMM_PHASE})
        return standard + custom + ([COMM_PHASE] if COMM_PHASE in self._index else []) + [OTHER_PHASE]

    def window_sums(self, rows: np.ndarray, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row's seconds in each of ``names`` summed over its window, how many of its window's steps had
        some, and its window's wall seconds: what a phase a few steps have (a checkpoint, an evaluation) costs,
        which its median hides (watch/analysis/pauses.py). Zeros, with no pass over the windows, where no rank
        ever named one of them."""
        n = len(rows)
        seconds, steps, wall = np.zeros((n, len(names))), np.zeros((n, len(names)), np.int64), np.zeros(n)
        index = self.columns_of(list(names))
        if all(c is None for c in index) or not n:
            return seconds, steps, wall
        w = self.window
        count = self.count[rows]
        # a row's slots in use are its newest ``count`` (a restarted rank's old walls stay until written over)
        used = ((np.arange(w)[None, :] - self.head[rows][:, None]) % w) >= (w - count)[:, None]
        wall = np.where(used, self.wall[rows], 0.0).sum(axis=1)
        for j, c in enumerate(index):
            if c is not None:
                block = self.own[rows, c, :]  # (zero in a slot not in use: clear and put zero what is not this step's)
                seconds[:, j] = block.sum(axis=1)
                steps[:, j] = (block > 0).sum(axis=1)
        return seconds, steps, wall

    def columns_of(self, names: list[str]) -> list[int | None]:
        """Each name's column index (None: never seen, its figure is 0)."""
        return [self._index.get(name) for name in names]
