"""What the job pays each rank at its collectives, step by step: intermittent stragglers (issue 46, item 1), and a
rank slow at every step named sooner at slow step rates (item 5).

A rank 134 ms slower on one step in ten holds every rank back 134 ms on that step: the job pays 13 ms a step on
average, yet the rank's median (what stragglers.py compares) is its usual time. A median is deaf to it on purpose
(a GC pause, a long document now and then move nothing), so this reads another figure: **what the job actually
paid**. At each step's collectives every rank of a peer class waits for the last to arrive; the last arrived
after the second-last by a *margin* (the second-least wait less the least: watch/analysis/arrivals.py reads the
same waits), and the margin is what the step would have been shorter without it. Summed per rank over the steps
it was last and averaged over every step counted, it is the rank's cost to the job, what a user would get back by
fixing it.

:class:`MarginBook` counts each step once, as it settles, over about :data:`MEMORY_STEPS` steps (each weighing
``1 - 1/MEMORY_STEPS`` less than the next): per rank, the margins it cost (their sum, its largest one), and, over
:data:`COUNT_MEMORY_STEPS`, how many of its steps were *far* (last by :data:`FAR_SHARE` of the job's step or more)
and *long* (by :data:`LONG_SHARE`). Every rank of a healthy job is
last now and then, a few times by far (an input twice as long, a pause, the OS); what tells an intermittent
straggler from that noise, each required:

- **It costs the job** :data:`COST_SHARE` of its step or more beyond its class's typical rank (the median of
  their costs; of two, the cheaper), counted without its single costliest step (one 2 s pause is no straggler);
- **its far or its long steps are more than its peers' rate allows**: of its counted steps, as many come from
  the rest of the class's pooled rate (with a prior, :data:`PRIOR_FAR` in :data:`PRIOR_STEPS`; long ones
  :data:`PRIOR_LONG` in :data:`PRIOR_LONG_STEPS`) with a chance, twice the lesser of the two, under
  :data:`ALPHA` over the class's size (any of its ranks, at any look: the straggler bar's odds); a heavy-tailed
  job makes every rank's far steps many, at the same rate, and none stands out;
- :data:`MIN_FAR` far steps at least, and one slow step in :data:`EVERY_FROM` or fewer (a rank last by far at
  every step is a straggler its median tells: stragglers.py).

How often, ``every``: its counted steps over its far ones beyond what its peers' rate gives. The size told is its
cost beyond the typical rank's, per step, on average.

**A rotating imbalance** (a different rank slow each step) was told here as a job-level verdict for a while: on
the accuracy benchmark's held-out quick subset, run once to report, heavy-tailed input lengths made it the verdict of
healthy jobs (a healthy dp8 job: 227 wrong looks), so it was taken out rather than tuned on held-out data
(docs/detection.md).

The phase an intermittent straggler spends its excess in is where its window's mean passes
its median most (what a few long steps move, their median does not): the book names the ranks whose window sums
the next view gathers (:attr:`MarginBook.watch`; watch/engine/step_columns.py ``window_sums``), a few, not every
rank. All of it is numpy over the ranks' last steps (the grid arrivals.py lays): O(1) per rank per refresh. A job
read in node digests (steps in intervals, from 16 nodes: watch/engine/receiver.py) has no step's margin, so none of
this is told there.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from ranktop.watch.analysis.arrivals import SETTLING, _classes, _grouped, grid_of
from ranktop.watch.analysis.stragglers import HARDWARE_SPREAD

#: How many steps the book remembers what a rank cost (each step weighs 1 - 1/this less than the next): the cost
#: told follows a change within a few seconds at 16 steps a second, ...
MEMORY_STEPS = 96
#: ... and how many it remembers its far steps: a rank slow on one step in 30 has 8 of them in 256, which chance
#: seldom gives; 3 in 96 it often does.
COUNT_MEMORY_STEPS = 256
#: A step the rank was last at by this share of the job's median step or more is *far*; by :data:`LONG_SHARE`,
#: *long* too (a busy machine's or a noisy input's margins are many far, few long): each bar tested, its chance
#: counted twice.
FAR_SHARE = 0.10
LONG_SHARE = 0.5
#: An intermittent straggler costs the job this share of its median step beyond its class's typical rank; of two,
#: plus twice what healthy hardware may differ by (stragglers.HARDWARE_SPREAD, as the medians allow against a
#: single peer: the faster of two may be that much faster, and a pair whose inputs vary has one of them last by far
#: at many steps, the slower one more often: it costs the job what it is slower by, with no pattern of slow steps) ...
COST_SHARE = 0.04
#: ... its margins counted up to this many median steps each for that test (a pause of 0.4 s every 100 steps, a
#: rank's own checkpoint, costs the job 6% and is told as a pause, not as a rank slow on 1 step in 6; one slow by
#: 1.3 steps on 1 step in 10 is counted whole); the size told counts them whole.
PATTERN_CAP_STEPS = 2.0
#: ... and this many seconds: a rank whose CPUs the host shares waits a scheduler's slice for them now and then
#: (Linux's CFS: about 3 ms with 8 runnable tasks), which on a job of steps of a few milliseconds is a far step
#: at the collectives by chance of the host's load, not a straggler (a healthy 4-rank gloo job of 5 ms steps, under
#: the test suite's load, had a rank named 'slow on 1 step in 4: +1.0 ms'); a job of 75 ms steps or more is judged
#: by its share alone.
COST_FLOOR_S = 0.003
#: Its far steps are more than its peers' rate allows with a chance of at most this over its class's size.
ALPHA = 1e-3
#: The peers' rate is counted with this prior: as many far steps in as many steps (long ones: half as many in
#: twice as many).
PRIOR_FAR = 1.0
PRIOR_STEPS = 32.0
PRIOR_LONG = 0.5
PRIOR_LONG_STEPS = 64.0
#: Far steps an intermittent straggler has at least (decayed counts).
MIN_FAR = 3.0
#: Steps counted before any rank is judged (its class's): this many, or :data:`MIN_SECONDS` of them where that is
#: fewer (a slow job: 1 step a second), and :data:`MIN_STEPS_AT_LEAST` at least.
MIN_STEPS = 48.0
MIN_SECONDS = 6.0
MIN_STEPS_AT_LEAST = 8.0
#: Slow on one step in fewer than this, or last at more than 0.4 + 0.6 / (the class's size) of its steps (dp2: 70%,
#: 8 ranks: 48%; one slow on 1 step in 3 is last at 67% and 42%): a straggler, slow at every step, which its median tells once its window
#: holds enough steps (at 1 step a second a minute: stragglers.py); the book names it sooner where it costs
#: :data:`STEADY_COST_SHARE` of the step (a rank a few percent slower for good, its hardware, costs a few percent).
EVERY_FROM = 1.5
STEADY_COST_SHARE = 0.07
#: A rank is slow *still* while its far steps over its last :data:`RECENT_MEMORY_STEPS` alone are more than its
#: share of its class's far steps over those steps (its own counted) allows, with a chance under
#: :data:`RECENT_ALPHA`. What it cost is remembered over :data:`MEMORY_STEPS` and its far steps over
#: :data:`COUNT_MEMORY_STEPS`: a slowdown that ended, or a slow start-up, would be told for seconds after it, kept
#: alive by the far steps every rank has now and then; and its peers' long tallies' rate is low for a while after it
#: (while it lasted it took their last places). The test is looser than :data:`ALPHA`, since it only confirms what
#: the long tallies found. What it cost the job over those steps is half its bar (:data:`COST_SHARE`) at least beyond
#: its class's typical rank's, without its costliest step there too (one pause is no slowdown come back).
RECENT_MEMORY_STEPS = 32
RECENT_ALPHA = 0.05
#: A rank last by far at this many of its newest steps in a row at least, more than its peers' rate of far steps
#: gives by chance, is slow at every step since (:meth:`MarginBook._judge_streaks`).
MIN_STREAK = 6
#: Ranks whose window sums the next view gathers, at most (the candidates: their phase).
WATCH = 48


@dataclass(frozen=True)
class Margins:
    """What :meth:`MarginBook.judge` finds, per rank of the view (in its order)."""

    found: np.ndarray  # bool: an intermittent straggler
    cost_s: np.ndarray  # what it costs the job per step on average beyond its class's typical rank, s (0: none)
    every: np.ndarray  # slow on one step in this many (NaN: not an intermittent straggler; a steady one)
    streak: np.ndarray  # bool: slow at every step of its newest run, which its medians may not hold yet


class MarginBook:
    """Each rank's margins at the collectives, counted once per step over :data:`MEMORY_STEPS`, kept from one
    snapshot to the next (the module docstring). Starts afresh when the ranks, their classes or their processes
    change. One book per aggregator; snapshots taken at once take it in turn."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[int, np.ndarray, np.ndarray | None] | None = None
        self._upto = np.zeros(0, np.int64)  # per class: the newest step counted
        self._cost = np.zeros(0)  # per rank: its margins' sum, decayed
        self._top = np.zeros(0)  # its largest margin, decayed alike
        self._capped = np.zeros(0)  # its margins' sum, each up to PATTERN_CAP_STEPS median steps, decayed alike
        self._far = np.zeros(0)  # its far steps, decayed over COUNT_MEMORY_STEPS
        self._long = np.zeros(0)  # its long steps, the same
        self._counted = np.zeros(0)  # its class's steps counted, the same
        self._steps = np.zeros(0)  # its class's steps counted, decayed over MEMORY_STEPS
        self._far_now = np.zeros(0)  # its far steps decayed over MEMORY_STEPS: how often it is slow now
        self._lasts = np.zeros(0)  # the steps it was last at, the same
        self._far_recent = np.zeros(0)  # its far steps decayed over RECENT_MEMORY_STEPS: slow still
        self._counted_recent = np.zeros(0)  # its class's steps counted, the same
        self._cost_recent = np.zeros(0)  # its margins' sum, the same
        self._top_recent = np.zeros(0)  # its largest margin, the same
        self._streak = np.zeros(0)  # how many of its newest steps counted in a row it was last at by far
        self._streak_cost = np.zeros(0)  # what the job paid it over those steps, s
        self.watch: np.ndarray = np.zeros(0, np.int64)  # ranks whose window sums the next view gathers

    def judge(self, nums: np.ndarray, waits: np.ndarray, class_ids: np.ndarray | None, ranks: np.ndarray,
              roster: int, median_step: float | None) -> Margins:  # fmt: skip
        """Count the steps of ``nums``/``waits`` (each rank's last steps' numbers and waits, newest first, -1: none;
        arrivals.py's input) not counted yet, then judge every rank (``ranks``, of ``class_ids``; ``roster``: the
        view's, which changes when a rank comes or restarts) against the job's ``median_step``."""
        n = len(ranks)
        none = Margins(np.zeros(n, bool), np.zeros(n), np.full(n, np.nan), np.zeros(n, bool))
        with self._lock:
            if not median_step or n < 2 or grid_of(nums) is not None:  # (node digests: intervals, no step's margin)
                self.watch = np.zeros(0, np.int64)
                return none
            self._count(nums, waits, class_ids, ranks, roster, median_step)
            return self._judge(class_ids, ranks, median_step)

    def _start(self, roster: int, ranks: np.ndarray, class_ids: np.ndarray | None, classes: int) -> None:
        n = len(ranks)
        self._key = (roster, ranks.copy(), None if class_ids is None else class_ids.copy())
        self._upto = np.full(classes, -1, np.int64)
        self._cost, self._top, self._far, self._steps = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        self._capped = np.zeros(n)
        self._long, self._counted, self._far_now, self._lasts = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        self._far_recent, self._counted_recent, self._cost_recent = np.zeros(n), np.zeros(n), np.zeros(n)
        self._top_recent = np.zeros(n)
        self._streak, self._streak_cost = np.zeros(n), np.zeros(n)

    def _count(self, nums: np.ndarray, waits: np.ndarray, class_ids: np.ndarray | None, ranks: np.ndarray,
               roster: int, median_step: float) -> None:  # fmt: skip
        n, width = nums.shape
        of, members = _classes(class_ids, n)
        key = self._key
        same_classes = key is not None and (
            key[2] is class_ids or (key[2] is not None and class_ids is not None and np.array_equal(key[2], class_ids))
        )
        if key is None or key[0] != roster or not np.array_equal(key[1], ranks) or not same_classes:  # fmt: skip
            self._start(roster, ranks, class_ids, len(members))
        newest = int(nums.max()) - SETTLING
        if newest < 0 or not width:
            return
        first = newest - width + 1
        at = nums - first
        at[(nums < 0) | (at < 0) | (at >= width)] = width
        grid = np.full((n, width + 1), np.nan)
        np.put_along_axis(grid, at, waits, axis=1)
        grid = grid[:, :width]  # (ranks, steps first..newest)
        order, starts = _grouped(of, members)
        ordered = grid if order is None else grid[order]
        held = np.add.reduceat((~np.isnan(ordered)).astype(np.int32), starts, axis=0) == members[:, None]
        held &= (members >= 2)[:, None]
        least = np.fmin.reduceat(np.where(np.isnan(ordered), np.inf, ordered), starts, axis=0)
        last = grid <= np.where(held, least, -np.inf)[of]  # (ranks, steps): arrived last there
        lasts = np.add.reduceat((last if order is None else last[order]).astype(np.int32), starts, axis=0)
        rest = np.where(last | np.isnan(grid), np.inf, grid)
        second = np.fmin.reduceat(rest if order is None else rest[order], starts, axis=0)
        full = held & (lasts == 1) & np.isfinite(second)  # (a tie, or a class of one: no margin)
        with np.errstate(invalid="ignore"):
            margin = np.where(full, second - least, 0.0)  # (classes, steps)
        steps = first + np.arange(width)
        new = full & (steps[None, :] > self._upto[:, None])  # (classes, steps): counted now
        if not new.any():
            return
        self._upto = np.maximum(self._upto, np.where(new, steps[None, :], -1).max(axis=1))
        fresh = new.sum(axis=1)[of]  # per rank: its class's steps counted now
        keep = (1.0 - 1.0 / MEMORY_STEPS) ** fresh
        paid = np.where(last & new[of], margin[of], 0.0)  # (ranks, steps): what the job paid it, counted now
        self._cost = self._cost * keep + paid.sum(axis=1)
        self._top = np.maximum(self._top * keep, paid.max(axis=1))
        self._capped = self._capped * keep + np.minimum(paid, PATTERN_CAP_STEPS * median_step).sum(axis=1)
        self._steps = self._steps * keep + fresh
        far = paid >= FAR_SHARE * median_step
        self._far_now = self._far_now * keep + far.sum(axis=1)
        fade = (1.0 - 1.0 / RECENT_MEMORY_STEPS) ** fresh
        self._far_recent = self._far_recent * fade + far.sum(axis=1)
        self._counted_recent = self._counted_recent * fade + fresh
        self._cost_recent = self._cost_recent * fade + paid.sum(axis=1)
        self._top_recent = np.maximum(self._top_recent * fade, paid.max(axis=1))
        self._lasts = self._lasts * keep + (last & new[of]).sum(axis=1)
        # its newest run of far steps: the steps counted now after its last one not far, added to the run before
        # where every one is far (a step not counted, a tie or a rank missing, neither ends nor adds to it)
        counted_now = new[of]
        place = np.arange(width)
        broke = np.where(counted_now & ~far, place, -1).max(axis=1)
        run = counted_now & (place[None, :] > broke[:, None])
        self._streak = np.where(broke < 0, self._streak, 0.0) + run.sum(axis=1)
        self._streak_cost = np.where(broke < 0, self._streak_cost, 0.0) + np.where(run, paid, 0.0).sum(axis=1)
        hold = (1.0 - 1.0 / COUNT_MEMORY_STEPS) ** fresh
        self._far = self._far * hold + (paid >= FAR_SHARE * median_step).sum(axis=1)
        self._long = self._long * hold + (paid >= LONG_SHARE * median_step).sum(axis=1)
        self._counted = self._counted * hold + fresh

    def _judge(self, class_ids: np.ndarray | None, ranks: np.ndarray, median_step: float) -> Margins:
        n = len(ranks)
        found, cost_s, every = np.zeros(n, bool), np.zeros(n), np.full(n, np.nan)
        streaks = np.zeros(n, bool)
        steps = np.maximum(self._steps, 1.0)
        cost = self._cost / steps
        robust = (self._cost - self._top) / steps
        pattern = (self._capped - np.minimum(self._top, PATTERN_CAP_STEPS * median_step)) / steps
        floor = max(COST_SHARE * median_step, COST_FLOOR_S)
        of, members = _classes(class_ids, n)
        watch: list[int] = []
        for c, size in enumerate(members.tolist()):
            if size < 2:
                continue
            ids = np.flatnonzero(of == c) if len(members) > 1 else np.arange(n)
            typical = _typical(cost[ids])
            cost_s[ids] = np.maximum(robust[ids] - typical, 0.0)  # (told without its costliest step)
            now = (self._cost_recent[ids] - self._top_recent[ids]) / np.maximum(self._counted_recent[ids], 1.0)
            beyond_now = now - _typical(now)
            t = float(np.median(self._counted[ids]))
            if t < max(MIN_STEPS_AT_LEAST, min(MIN_STEPS, MIN_SECONDS / median_step)):
                continue
            beyond = robust[ids] - typical
            watch.extend(ids[beyond >= floor / 2][: WATCH // 2].tolist())
            over = pattern[ids] - _typical(pattern[ids])
            allowance = 2.0 * HARDWARE_SPREAD * median_step if size == 2 else 0.0
            candidates = ids[(over >= floor + allowance) & (self._far[ids] >= MIN_FAR)]
            tallies = [
                (self._far, float(self._far[ids].sum()), PRIOR_FAR, PRIOR_STEPS),
                (self._long, float(self._long[ids].sum()), PRIOR_LONG, PRIOR_LONG_STEPS),
            ]
            counted_all = float(self._counted[ids].sum())
            # slow *still* is tested against its share of its class's far steps of late, its own counted: a straggler
            # takes the last places from its peers while it lasts, so their long tallies' rate is low for a while
            # after it; and in a small class one rank's far steps are its peers' near ones, so theirs alone is no null
            rate_now = (float(self._far_recent[ids].sum()) + PRIOR_FAR) / (float(self._counted_recent[ids].sum()) + PRIOR_STEPS)
            for i in candidates[:WATCH].tolist():
                m = self._counted[i]
                # at each bar: as many of its steps from the rest of the class's rate, with what chance
                chance = 1.0
                for tally, all_of, prior, prior_steps in tallies:
                    k = tally[i]
                    rate = (all_of - k + prior) / (counted_all - m + prior_steps)
                    chance = min(chance, 2 * _binomial_tail(int(round(k)), int(round(m)), rate))
                k = self._far[i]
                rate = (tallies[0][1] - k + PRIOR_FAR) / (counted_all - m + PRIOR_STEPS)
                beyond_rate = k - rate * m
                if beyond_rate <= 0:
                    continue
                # (last at most of its steps, by far or not: slow at every step, some of them within the noise)
                steady = m / beyond_rate < EVERY_FROM or self._lasts[i] >= (0.4 + 0.6 / size) * self._steps[i]
                # how often: over the steps its cost is counted on (a tally of 256 steps remembers the steps before
                # it was slow)
                often = self._steps[i] / max(self._far_now[i] - rate * self._steps[i], 1.0)
                # and slow still: its recent far steps alone beyond that share (its tallies remember a slowdown
                # that ended)
                recent = _binomial_tail(int(round(self._far_recent[i])), int(round(self._counted_recent[i])), rate_now)
                lately = recent < RECENT_ALPHA and beyond_now[i == ids][0] >= floor / 2
                if chance < ALPHA / size and lately and (not steady or beyond[i == ids][0] >= STEADY_COST_SHARE * median_step):
                    found[i] = True
                    every[i] = np.nan if steady else often
                    if self._streak[i] >= MIN_FAR and self._streak[i] >= self._far_now[i] - 1.0:
                        # (its far steps of late are one run, its newest: slow at every step since, not now and
                        # then; what it cost over the run, not over steps from before it)
                        every[i], streaks[i] = np.nan, True
                        cost_s[i] = max(self._streak_cost[i] / self._streak[i] - typical, cost_s[i])
            self._judge_streaks(ids, size, typical, median_step, counted_all, found, cost_s, every, streaks)
            watch.extend(ids[streaks[ids]].tolist())
        self.watch = ranks[np.unique(np.array(watch[:WATCH], np.int64))] if watch else np.zeros(0, np.int64)
        return Margins(found, np.where(found, cost_s, 0.0), every, streaks)

    def _judge_streaks(self, ids: np.ndarray, size: int, typical: float, median_step: float, counted_all: float,
                       found: np.ndarray, cost_s: np.ndarray, every: np.ndarray, streaks: np.ndarray) -> None:  # fmt: skip
        """A rank of the class ``ids`` last by far at each of its newest steps, more in a row than its peers' rate
        of far steps gives by chance (``ALPHA`` over the class's size, at any of its steps), costing the job
        :data:`STEADY_COST_SHARE` of its step (of two, plus twice what hardware may differ by) beyond its class's
        typical rank: slow at every step since that run began, told with what it cost over it (``found``,
        ``cost_s``, ``every`` NaN and ``streaks``, in place). Its long tallies and its windows' medians hold the
        steps before the run; at one step a second they take tens of seconds to tell a rank 30% slower from one slow
        on one step in six."""
        streak = self._streak[ids]
        far_all = float(self._far[ids].sum())
        for j in np.flatnonzero(streak >= MIN_STREAK).tolist():
            i = int(ids[j])
            rate = (far_all - self._far[i] + PRIOR_FAR) / (counted_all - self._counted[i] + PRIOR_STEPS)
            if math.log(max(rate, 1e-12)) * streak[j] + math.log(max(self._counted[i], 1.0)) >= math.log(ALPHA / size):
                continue
            paid = self._streak_cost[i] / streak[j] - typical
            allowance = 2.0 * HARDWARE_SPREAD * median_step if size == 2 else 0.0
            if paid >= STEADY_COST_SHARE * median_step + allowance:
                found[i], cost_s[i], every[i], streaks[i] = True, paid, np.nan, True


def _typical(values: np.ndarray) -> float:
    """A class's typical rank's figure of ``values`` (its members'): the median; of two, the lesser (the median of
    two is their midpoint, half a straggler's)."""
    return float(values.min()) if len(values) == 2 else float(np.median(values))


def _binomial_tail(k: int, m: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(m, p): the chance of as many far steps at the peers' rate."""
    if k <= 0:
        return 1.0
    if k > m:
        return 0.0
    p = min(max(p, 1e-12), 1 - 1e-12)
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for j in range(k, m + 1):
        term = math.exp(math.lgamma(m + 1) - math.lgamma(j + 1) - math.lgamma(m - j + 1) + j * lp + (m - j) * lq)
        total += term
        if term < 1e-16 * total:
            break
    return min(1.0, total)


def phase_of(means: np.ndarray, medians: np.ndarray, own: np.ndarray) -> int:
    """The phase (an index of ``own``'s True columns' order among all) where ``means`` pass ``medians`` most
    (1-D, a rank's; 2-D, several ranks': their median): where a few long steps spent their time. -1: none."""
    beyond = means - medians
    if beyond.ndim == 2:
        beyond = np.median(beyond, axis=0) if len(beyond) else np.zeros(beyond.shape[1])
    beyond = np.where(own, beyond, -np.inf)
    j = int(np.argmax(beyond))
    return j if np.isfinite(beyond[j]) and beyond[j] > 0 else -1
