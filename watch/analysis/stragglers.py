"""Straggler scoring: which rank holds the job back, and in which phase. Numpy over the ranks' columns.

In synchronous data-parallel training every rank's step takes the same wall
time: the slow rank computes longer and the others wait for it inside a
collective, so their wait lands in whichever phase holds the collective
(backward under DDP). Comparing step times therefore finds nothing. Instead
each phase of each rank is compared with the median of that phase across
ranks: the slow rank stands out in the phase it is slow in, while the waiting
ranks, being the majority, *are* the median of the phase they wait in. A
rank's slowdown is the sum of its phases' excess over those medians (only the
positive part: time it spent that others did not; a phase where it is *faster*
may be the others' wait for it, where no collective is seen), and the phase
with the largest excess is named as the culprit. Medians over a window make one slow
step count for nothing: only a persistent slowdown scores. A rank is *slow*
when its excess passes 3% of a healthy peer's own work and a noise test from its
own step-to-step spread, whose bar rises with its class's size (constants below;
:func:`score_columns`); the judge (watch/analysis/judge.py) then weighs its history,
its last arrivals at the collectives and its class's growth. docs/detection.md
says the whole policy and how often it is right.

With collectives seen, each phase counts only the rank's *own* time: the wait
in collectives is taken out of the phase it happened in and shown as ``comm``.

On a job whose layout is known (watch/analysis/layout.py) ranks are compared within
their **peer class** only: the ranks at the same pipeline stage. A stage with
more layers is not a slow rank; it is the pipeline's imbalance, a finding of
its own (:func:`stage_columns`).

The reference is what a **healthy peer** does, in every class and on a job
with no layout alike: with two peers the faster one (by its own time in all,
phase by phase: it has no excess, and the slower one's whole excess is its
own: a 2-rank job's 20 ms slowdown reads 20 ms, not the 10 ms its midpoint
would say); with more, each phase's lower median, as the healthy majority does
the step. The size told is then what the rank adds to the job's
step, whatever the world size (benchmarks/accuracy.py measures how close).
"""

from __future__ import annotations

import threading
from statistics import NormalDist
from typing import overload

import numpy as np

from ranktop.watch.engine.step_columns import MIN_STEPS_TO_SCORE  # noqa: F401  (read as stragglers.MIN_STEPS_TO_SCORE)
from ranktop.watch.model.rank_table import STATUS_CODE, RankTable
from ranktop.watch.model.snapshot import Stage
from ranktop.watch.statuses import SILENT, SLOW, STALLED
from ranktop.wire.names import COMM_PHASE

#: A rank is slow when its excess passes all of: this share of a healthy peer's own work per step (a rank 3%
#: slower does 3% more work than its peers; the job's step, longer by its waits and a pipeline's bubbles, would
#: hide it), ...
SLOW_FLOOR_FRACTION = 0.03
#: ... this many seconds, ...
SLOW_FLOOR_S = 0.001
#: ... this many standard errors of its window's median (its own step-to-step noise and its reference's), at
#: least: noise alone passes 4 about once in 30,000 looks at a rank (one-sided, gaussian). A class of many
#: ranks has as many chances to show one by chance, so the bar rises with its size: noise flags any of its ranks
#: at a look with a chance of at most NOISE_ANY (4.2 standard errors at 64 ranks, 5.0 at 4,096), ...
NOISE_Z = 4.0
NOISE_ANY = 1e-3
#: ... and, unless its excess grew by the floor since it was last seen healthy (:class:`ExcessHistory`), the floor
#: plus what healthy hardware may differ by: a rank may be this much slower than the median rank for good (a
#: typical reference, from three peers on), twice that against a single peer (the faster of two may itself be
#: that much faster). A rank 2% slower for good is no straggler; one that became 3% slower, or is 5%, is.
HARDWARE_SPREAD = 0.03
#: Where healthy ranks' speeds wander (their own time's spread about their class's reference of late, a standard
#: deviation: :meth:`ExcessHistory.wander`), a rank that did not grow is slow past the floor plus this many times
#: that spread, if it is more than the hardware spread: ranks wandering ±4% over tens of seconds are at times 6-8%
#: apart (issue 46, item 7).
WANDER_TIMES = 2.0
#: Where healthy ranks drift (:meth:`ExcessHistory.drift`: how far their own time strays from its own average of
#: the last seconds, beyond what their windows' noise explains, by more than :data:`DRIFT_QUIET` of their work), a
#: rank whose excess outran its level has grown only past the noise and this many times that much more: a crest
#: of a rank wandering ±4% over 20 s outruns its level as fast as a 5% fault's onset does (issue 46, item 7). A
#: job whose ranks stray less than :data:`DRIFT_NOISES` times their windows' noise is not drifting (a job whose
#: inputs vary, or that pauses, strays by its noise), and pays nothing.
DRIFT_TIMES = 2.0
DRIFT_QUIET = 0.01
DRIFT_NOISES = 4.0
#: A rank's level follows its excess up by the floor over this many of its windows' lengths, this many seconds at
#: least (:func:`level_rise`): a rank that grew by the floor within fewer is one that became slower, one whose speed
#: crept up as far more slowly drifted (issue 46, item 7), and is held to the floor plus the hardware spread.
RISE_WINDOWS = 3.0
RISE_MIN_S = 6.0
#: Without the ranks' noise (rows made by hand, old recordings): this many MADs of every rank's excess instead.
SPREAD_MADS = 3.0
#: The noise test above weighs an excess (positive parts beyond the reference, summed over phases) with the
#: standard error of a rank's whole own time, which understates how such a sum spreads, and node digests carry
#: no noise figure: alone, those bars flagged healthy ranks of a noisy 4,096-rank job every few seconds
#: (benchmarks/accuracy.py, dp4096). From this many ranks on, the bar is also the ranks' own excesses' median
#: plus as many of their standard deviations (from their MAD) as the noise test asks for.
EMPIRICAL_FROM = 8
MAD_SIGMA = 1.4826
#: A window's median is about this many standard deviations of its steps / sqrt(steps) off (gaussian noise).
MEDIAN_ERROR = 1.2533


def score_columns(
    phases: np.ndarray, steps: np.ndarray, names: list[str], class_ids: np.ndarray | None = None,
    own_sd: np.ndarray | None = None, window_steps: np.ndarray | None = None, before: np.ndarray | None = None,
    phase_sd: np.ndarray | None = None, phase_before: np.ndarray | None = None, reference: np.ndarray | None = None,
    wander: float = 0.0, drift: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float | None]:  # fmt: skip
    """The comparison over columns: ``phases`` (ranks x names, own seconds) and ``steps`` (seconds) of the
    live ranks with statistics; ``class_ids`` (a small whole number per rank) their peer classes; ``own_sd``
    and ``window_steps`` how much each one's own time varies from step to step (a robust SD) over how many
    steps (None: not known, the spread of everyone's excess stands in); ``before`` each one's excess when it was
    last seen healthy (NaN or None: not known, :class:`ExcessHistory`); ``phase_sd`` (ranks x names) how much
    each phase varies from step to step and ``phase_before`` each phase's time beyond the reference when last
    healthy (None: not known; see :func:`_phase_beyond`); ``reference`` (ranks x names) each one's class's healthy
    peer, where the caller worked it out already (watch/analysis/class_growth.py ``references`` of these phases
    and classes; None: worked out here); ``wander`` how far healthy ranks' own time spreads about their class's
    reference of late, a share of it (:meth:`ExcessHistory.wander`): a rank that did not grow is slow past the
    floor plus the hardware spread or that many times it, the more; ``drift`` how far healthy ranks drift beyond
    their windows' noise (:meth:`ExcessHistory.drift`): a rank grew only past :data:`DRIFT_TIMES` that, less
    :data:`DRIFT_QUIET`, more.
    Per rank its excess (seconds beyond a healthy peer's, summed over phases, less what every peer shows of
    noise) and its culprit (an index into ``names``, -1: none); per rank the excess past which it is slow;
    the median step (None: no rank)."""
    n = len(steps)
    excess = np.zeros(n)
    culprit = np.full(n, -1, np.int64)
    if n == 0:
        return excess, culprit, np.full(0, np.inf), None
    own = np.array([name != COMM_PHASE for name in names], bool)  # waiting is not this rank's own work
    peers = np.ones(n)  # how many peers the reference is drawn from
    noise = np.full(n, np.nan) if own_sd is None else np.nan_to_num(own_sd)
    work = np.zeros(n)  # the reference's own time per step: what a healthy peer does
    beyond = np.zeros(n, bool)  # some phase beyond its own noise by the floor (_phase_beyond)
    for members, count in peer_groups(class_ids, n):
        if count < 2:  # a class of one is compared with nobody
            continue
        mine = phases[members][:, own]
        middle = healthy_peer(mine) if reference is None else reference[_first(members), own]
        _excess(mine, middle, members, count, own, excess, culprit, peers, noise, work)
        if phase_sd is not None and phase_before is not None and window_steps is not None:
            beyond[members] = _phase_beyond(mine, middle, phase_sd, phase_before, window_steps, own, members, count)
    median_step = float(np.median(steps))
    if not median_step:
        return excess, culprit, np.full(n, np.inf), median_step
    healthy = np.where(work > 0, work, median_step)  # the shares below are of a healthy peer's own work per step
    floor = np.maximum(SLOW_FLOOR_S, SLOW_FLOOR_FRACTION * healthy)
    middle_excess, mad = _median_and_mad(excess) if n >= 3 else (0.0, 0.0)
    whole = floor  # past the noise of the whole step's own time
    if own_sd is not None and window_steps is not None:
        error = MEDIAN_ERROR * noise / np.sqrt(np.maximum(window_steps, 1))
        whole = np.maximum(floor, _noise_z(peers) * error * np.sqrt(1.0 + 1.0 / peers))
        # A rank with a phase beyond that phase's own noise by the floor (_phase_beyond) is past it: the noise of
        # the whole step, input sizes that vary, is mostly other phases'.
        floor = np.where(beyond, floor, whole)
    elif n >= 3:
        floor = whole = np.maximum(floor, SPREAD_MADS * mad)
    if n >= EMPIRICAL_FROM:  # and past what the ranks' excess itself spreads, at the same odds
        empirical = middle_excess + _noise_z(peers) * MAD_SIGMA * mad
        floor, whole = np.maximum(floor, empirical), np.maximum(whole, empirical)
    spread = np.where(peers > 1, 1.0, 2.0) * np.maximum(HARDWARE_SPREAD, WANDER_TIMES * wander) * healthy
    # Grown since it was last healthy by more than the floor and the whole step's noise (a phase's noise alone
    # would let a rank a little slower for good, its hardware, be seen to grow whenever its noise rises).
    grew = (excess - before > whole if before is not None else np.zeros(n, bool)) | beyond
    # Where healthy ranks drift (DRIFT_TIMES), a rank's crest outruns its level as a fault's onset does: it grew
    # only past that much more.
    lift = DRIFT_TIMES * max(0.0, drift - DRIFT_QUIET) * healthy
    if before is not None and lift.any():
        grew &= excess - before > whole + lift
    return excess, culprit, np.where(grew, floor, floor + spread), median_step


def level_rise(work: np.ndarray, window_steps: np.ndarray, step_s: np.ndarray) -> np.ndarray:
    """How fast a healthy rank's level (:class:`ExcessHistory`) follows its excess up, seconds a second: by the
    floor (a share of ``work``, a healthy peer's own seconds a step) over :data:`RISE_WINDOWS` of its windows'
    lengths (``window_steps`` steps of ``step_s`` seconds), :data:`RISE_MIN_S` at least. A fault's onset moves its
    windows' medians by its size within one window's length, past the level by the floor from 4.5% on; a drift
    creeps, and the level keeps up with it."""
    span = np.maximum(RISE_MIN_S, RISE_WINDOWS * np.nan_to_num(window_steps * step_s))
    return SLOW_FLOOR_FRACTION * np.nan_to_num(work) / span


def _averaging(since: float, elapsed: float, horizon: float) -> float:
    """The weight of a look ``since`` seconds after the one before in an average over about ``horizon`` seconds,
    ``elapsed`` seconds after its first look: over the looks so far while that is shorter (an exponential average
    would start from zero and take a horizon to forget it)."""
    return max(1.0 - float(np.exp(-since / horizon)), since / max(elapsed, since))


def _noise_z(peers: np.ndarray) -> np.ndarray:
    """The standard errors past which a rank of a class of ``2 x peers`` ranks is not noise (NOISE_Z, NOISE_ANY)."""
    sizes, at = np.unique(np.maximum(2.0, 2.0 * peers), return_inverse=True)
    z = [max(NOISE_Z, NormalDist().inv_cdf(1.0 - NOISE_ANY / size)) for size in sizes.tolist()]
    return np.asarray(z)[at.reshape(-1)]


class ExcessHistory:
    """Each rank's excess when it was last seen healthy, from one snapshot to the next: the judge asks what it was
    (:meth:`before`) and tells what it is (:meth:`note`). It follows a healthy rank's excess down fast (a job's
    warm-up is over in seconds) and up slowly, and stands still while the rank is slow: not at once down, or its
    level would be the lowest its noise ever took it to. A rank that is a little slower for good (its hardware)
    has that as its own level, a rank that became slower stands out from its own level.

    Up, at most by the floor over a few of its windows' lengths (``rise``, :meth:`note`), where the judge knows
    them: a fault starts at once, and its windows' medians take it in over one window's length; a healthy rank's
    speed drifts a few percent over tens of seconds (clocks, heat, the OS: issue 46's "drift is not a fault"),
    and its level keeps up with that. Without ``rise``, over :data:`FOLLOW_S`. Where the ranks' speeds wander
    faster than that (:meth:`drift`), a rank grew only past what they stray. Kept by the aggregator as it
    keeps the peer classes (snapshots taken on two threads at once share it: a lock)."""

    #: How long the excess a healthy rank shows takes to become its level (1 - 1/e of it), seconds: up, down.
    FOLLOW_S = 30.0
    FOLLOW_DOWN_S = 1.0
    #: The same for its time beyond its class's reference per phase, up and down alike.
    PHASE_FOLLOW_S = 10.0
    #: The size told of a rank slow since the snapshot before is its excess averaged over about this long (a
    #: window's length at 16 steps a second): a window's median of a job whose inputs vary 15% step to step is
    #: 1% of the step off, a fifth of a 5% slowdown; the average of the windows of 4 s is 0.6 times that.
    SIZE_FOLLOW_S = 4.0
    #: A rank's levels stand still for this long after it was last judged slow, seconds.
    HOLD_S = 15.0
    #: The ranks' spread about their reference is averaged over about this long (:meth:`wander`).
    WANDER_S = 60.0
    #: How far each rank strays from its own average over about this long (a drift of tens of seconds, not its
    #: hardware), averaged over the ranks' looks over about :data:`DRIFT_S` (:meth:`drift`).
    DRIFT_MEAN_S = 10.0
    DRIFT_S = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranks = np.zeros(0, np.int64)  # ascending
        self._level = np.zeros(0)
        self._slow_at = np.zeros(0)  # per rank: when it was last judged slow (-inf: never)
        self._reference = np.zeros((0, 0))  # per rank and phase: its class's reference (watch/analysis/class_growth.py)
        self._differences = np.zeros((0, 0))  # per rank and phase: its time beyond that reference
        self._classes = np.zeros(0, np.int64)  # per rank: the class those two were noted in (class_growth.class_keys)
        self._at = -np.inf
        self._sizes = (np.zeros(0, np.int64), np.zeros(0), -np.inf)  # (slow ranks ascending, their size told, when)
        self._wander, self._first = 0.0, np.inf  # (:meth:`wander`; when the first look it counts was)
        self._mean = np.zeros(0)  # per rank: its own time beyond its reference averaged over DRIFT_MEAN_S (NaN: not known)
        # (:meth:`drift`: how far ranks stray, beyond their windows' noise; that noise; when the first look it counts was)
        self._drift, self._noise, self._drift_from = 0.0, 0.0, np.inf

    def wander(self) -> float:
        """How far healthy ranks' own time spreads about their class's reference of late, a share of that
        reference's: at each look the spread of the ranks not judged slow (a standard deviation, from their MAD),
        averaged over :data:`WANDER_S` (over the looks so far, before that). Ranks that drift a few percent over
        tens of seconds are that far apart at any moment without a fault; ranks whose speeds hold, by their
        windows' noise."""
        with self._lock:
            return self._wander

    def drift(self) -> float:
        """How far healthy ranks drift, a share of their reference's own time: at each look the spread (a
        standard deviation, from the median distance) of each one's own time beyond its class's reference less its
        own average of it over :data:`DRIFT_MEAN_S`, beyond what its window's median's error explains, averaged
        over :data:`DRIFT_S` (over the looks so far, before that); 0 where that is under :data:`DRIFT_NOISES`
        times the error (noise, no drift).
        Unlike :meth:`wander`, a rank a little slower for good (its hardware) does not count: it strays from its
        reference, not from its own past."""
        with self._lock:
            return self._drift if self._drift > DRIFT_NOISES * self._noise else 0.0

    def _note_drift(self, ranks: np.ndarray, strays: np.ndarray, noise: np.ndarray | None, slow: np.ndarray, since: float,
                    now: float) -> np.ndarray:  # fmt: skip
        """Fold one look's ``strays`` (:meth:`note`) of the ranks not ``slow`` and their windows' ``noise`` into
        the drift; each rank's average of its strays, for the next look."""
        mean = self._lookup(ranks, self._mean)
        dev = strays - mean
        ok = ~slow & ~np.isnan(dev)
        if ok.sum() >= 2 and np.isfinite(since) and now > self._at:
            spread = MAD_SIGMA * float(np.median(np.abs(dev[ok])))
            floor = float(np.median(noise[ok])) if noise is not None else 0.0
            beyond = float(np.sqrt(max(0.0, spread**2 - floor**2)))
            self._drift_from = min(self._drift_from, self._at)
            weight = _averaging(since, now - self._drift_from, self.DRIFT_S)
            self._drift += weight * (beyond - self._drift)
            self._noise += weight * (floor - self._noise)
        w = 1.0 - np.exp(-since / self.DRIFT_MEAN_S) if np.isfinite(since) else 1.0
        return np.where(np.isnan(mean), strays, np.where(slow | np.isnan(strays), mean, mean + w * (strays - mean)))

    def _note_wander(self, shares: np.ndarray, since: float, now: float) -> None:
        """Fold one look's ``shares`` (healthy ranks' own time beyond their reference, a share of it) into the
        wander."""
        if len(shares) < 2 or not np.isfinite(self._at) or now <= self._at:
            return
        self._first = min(self._first, self._at)
        spread = MAD_SIGMA * float(np.median(np.abs(shares - np.median(shares))))
        weight = _averaging(since, now - self._first, self.WANDER_S)
        self._wander += weight * (spread - self._wander)

    def size(self, ranks: np.ndarray, excess: np.ndarray, slow: np.ndarray, now: float) -> np.ndarray:
        """The size to tell of each of ``ranks`` (its ``excess`` now; those ``slow``, their excess averaged over
        :data:`SIZE_FOLLOW_S` while they have been slow), kept for the next snapshot."""
        with self._lock:
            kept, sizes, at = self._sizes
            out = np.asarray(excess, np.float64).copy()
            slow_ranks = np.asarray(ranks, np.int64)[slow]
            if len(kept) and len(slow_ranks) and now > at:
                where = np.minimum(np.searchsorted(kept, slow_ranks), len(kept) - 1)
                known = kept[where] == slow_ranks
                moved = 1.0 - np.exp(-(now - at) / self.SIZE_FOLLOW_S)
                mine = out[slow]
                mine[known] = sizes[where[known]] + moved * (mine[known] - sizes[where[known]])
                out[slow] = mine
            if now >= at:
                order = np.argsort(slow_ranks, kind="stable")
                self._sizes = (slow_ranks[order], out[slow][order], now)
            return out

    def before(self, ranks: np.ndarray) -> np.ndarray:
        """The level of each of ``ranks`` (NaN: not seen yet)."""
        with self._lock:
            return self._lookup(ranks, self._level)

    def reference_before(self, ranks: np.ndarray, width: int, classes: np.ndarray | None = None) -> np.ndarray:
        """The level of each of ``ranks``' class reference, per phase (``width`` phases; NaN: not known, or noted
        in another class than ``classes`` says it is in now)."""
        with self._lock:
            return self._in_class(ranks, self._reference, width, classes)

    def differences_before(self, ranks: np.ndarray, width: int, classes: np.ndarray | None = None) -> np.ndarray:
        """The level of each of ``ranks``' time beyond its class reference, per phase (NaN: not known, or noted in
        another class)."""
        with self._lock:
            return self._in_class(ranks, self._differences, width, classes)

    def _in_class(self, ranks: np.ndarray, levels: np.ndarray, width: int, classes: np.ndarray | None) -> np.ndarray:
        """Levels relative to a rank's class mean nothing in another class: a rank's class changes when the
        layout is learned (a pipeline's stages, one class until the ranks' groups are known) or its class's
        members come or go, and the level it had against the whole job is no level of its stage's."""
        if levels.shape[1:] != (width,):
            return np.full((len(ranks), width), np.nan)
        out = self._lookup(ranks, levels)
        if classes is not None:
            out[self._lookup(ranks, self._classes, missing=-1) != classes] = np.nan
        return out

    def note(self, ranks: np.ndarray, excess: np.ndarray, slow: np.ndarray, now: float,
             reference: np.ndarray | None = None, differences: np.ndarray | None = None,
             classes: np.ndarray | None = None, rise: np.ndarray | None = None,
             strays: np.ndarray | None = None, noise: np.ndarray | None = None) -> None:  # fmt: skip
        """What ``ranks`` showed at ``now`` (the viewer's clock): their excess, which were judged slow, their
        classes' reference per phase and their phases less it (None: not kept), and the class each is in
        (:func:`~ranktop.watch.analysis.class_growth.class_keys`; None: all one); ``rise``: how fast each one's
        level may follow its excess up, seconds per second (:func:`level_rise`; None: over :data:`FOLLOW_S`);
        ``strays``: each one's own time beyond its class's reference, a share of it (NaN: not known; None: none
        known), for :meth:`wander` and :meth:`drift`, and ``noise`` the error of its window's median of its own
        time, a share of the reference's (None: not known)."""
        if classes is None:
            classes = np.zeros(len(ranks), np.int64)
        with self._lock:
            since = max(0.0, now - self._at) if np.isfinite(self._at) else np.inf
            up, down = (1.0 - np.exp(-since / s) for s in (self.FOLLOW_S, self.FOLLOW_DOWN_S))

            def follow(level: np.ndarray, value: np.ndarray, held: np.ndarray) -> np.ndarray:
                moved = level + np.where(value > level, up, down) * (value - level)
                return np.where(np.isnan(level), value, np.where(held, level, moved))

            if strays is not None:
                self._note_wander(np.asarray(strays)[~slow & ~np.isnan(strays)], since, now)
                mean = self._note_drift(np.asarray(ranks, np.int64), np.asarray(strays, np.float64), noise, slow, since, now)
            else:
                mean = np.full(len(ranks), np.nan)
            # (held while slow, and for HOLD_S after: a slowdown that the noise, or a drift, takes under its bar for
            # a look is not taken into its level meanwhile)
            slow_at = np.where(slow, now, self._lookup(ranks, self._slow_at, missing=-np.inf))
            held = slow_at > now - self.HOLD_S
            was = self._lookup(ranks, self._level)
            level = follow(was, excess, held)
            if rise is not None and np.isfinite(since):  # up by a drift's pace at most, down as before
                climbed = np.minimum(excess, was + np.asarray(rise) * since)
                level = np.where(np.isnan(was) | held | (excess <= was), level, climbed)
            ranks = np.asarray(ranks, np.int64)
            # (a view's ranks come ascending: no sort then)
            order = slice(None) if len(ranks) < 2 or bool((ranks[1:] > ranks[:-1]).all()) else np.argsort(ranks, kind="stable")
            if reference is not None:  # a rank in another class than before starts its level afresh
                before = self._in_class(ranks, self._reference, reference.shape[1], classes)
                self._reference = follow(before, reference, slow[:, None])[order]
            else:
                self._reference = np.zeros((0, 0))
            if differences is not None:  # followed alike up and down (a level at the bottom of its noise would
                # make the noise look like growth), held while slow
                before = self._in_class(ranks, self._differences, differences.shape[1], classes)
                moved = before + (1.0 - np.exp(-since / self.PHASE_FOLLOW_S)) * (differences - before)
                self._differences = np.where(np.isnan(before), differences, np.where(held[:, None], before, moved))[order]
            else:
                self._differences = np.zeros((0, 0))
            self._ranks, self._level, self._at = np.array(ranks, np.int64)[order], level[order], max(self._at, now)
            self._slow_at = slow_at[order]
            self._mean = mean[order]
            self._classes = np.array(classes, np.int64)[order]  # (copies: never a view of the caller's arrays)

    def _lookup(self, ranks: np.ndarray, levels: np.ndarray, missing: float = np.nan) -> np.ndarray:
        """``levels`` (a row per kept rank) for each of ``ranks``, ``missing`` where one is not kept. The usual
        case, the same ranks as the snapshot before, is a copy (no search: a few of these per snapshot of
        16,384 ranks cost milliseconds)."""
        kept = self._ranks
        out = np.full((len(ranks), *levels.shape[1:]), missing, np.float64 if np.isnan(missing) else levels.dtype)
        if len(kept) != len(levels):
            return out
        if len(ranks) == len(kept) and np.array_equal(ranks, kept):
            out[:] = levels
            return out
        if len(kept):
            at = np.minimum(np.searchsorted(kept, ranks), len(kept) - 1)
            known = kept[at] == ranks
            out[known] = levels[at[known]]
        return out


@overload
def peer_groups(class_ids: np.ndarray, n: int) -> list[tuple[np.ndarray, int]]: ...
@overload
def peer_groups(class_ids: None, n: int) -> list[tuple[slice, int]]: ...
@overload
def peer_groups(class_ids: np.ndarray | None, n: int) -> list[tuple[np.ndarray, int]] | list[tuple[slice, int]]: ...
def peer_groups(class_ids: np.ndarray | None, n: int) -> list[tuple[np.ndarray, int]] | list[tuple[slice, int]]:
    """Each peer class of ``n`` ranks (``class_ids``: a small whole number per rank; None: one class of all) as
    an index of its members into the ranks' columns, and how many they are. One class of every rank is a slice:
    its columns are read as they lie, where an index would gather a copy of thousands of rows for each."""
    if class_ids is None:
        return [(slice(0, n), n)]
    order = np.argsort(class_ids, kind="stable")
    return [(members, len(members)) for members in np.split(order, np.flatnonzero(np.diff(class_ids[order])) + 1)]


def _first(members: np.ndarray | slice) -> int:
    """The first member of a :func:`peer_groups` class."""
    return int(members.start) if isinstance(members, slice) else int(members[0])


def healthy_peer(mine: np.ndarray) -> np.ndarray:
    """What a healthy peer of a class spends in each own phase (``mine``: its members' own phases): with two
    members the faster one's, whole (it has no excess, the slower's is all its own); with more each phase's
    median (a partition, on the phases' columns laid out contiguous: no full sort of thousands of ranks)."""
    if len(mine) == 2:
        return mine[np.argmin(mine.sum(axis=1))]
    return np.median(np.ascontiguousarray(mine.T), axis=1)


def _excess(mine: np.ndarray, middle: np.ndarray, members: np.ndarray | slice, count: int, own: np.ndarray,
            excess: np.ndarray, culprit: np.ndarray, peers: np.ndarray, noise: np.ndarray, work: np.ndarray) -> None:  # fmt: skip
    """Per member (``mine``: their own phases; ``middle``: a healthy peer's, :func:`healthy_peer`): seconds spent
    beyond a healthy peer's (with two members the faster one's, phase by phase;
    with more each phase's median), summed over its own phases, and the worst phase. From three
    members on, what the class's median member shows is taken off: every phase's noise has a positive part
    beyond the reference, and summed over phases it is no one's slowdown (the size told is then what the
    rank adds to the step, not that plus noise); and a member's noise is at least its class's median
    member's (a window of a few steps says little of its own spread). A class of one is compared with nobody.
    ``members`` and ``count``: :func:`peer_groups`."""
    if count > 2:
        noise[members] = np.maximum(noise[members], np.median(noise[members]))
    beyond = np.clip(mine - middle, 0.0, None)
    total = beyond.sum(axis=1)
    worst = np.argmax(beyond, axis=1)
    if count >= 3:
        total = np.clip(total - np.median(total), 0.0, None)
    excess[members] = total
    culprit[members] = np.where(total > 0, np.flatnonzero(own)[worst], -1)
    peers[members] = 1 if count == 2 else count / 2
    work[members] = middle.sum()


def _phase_beyond(mine: np.ndarray, middle: np.ndarray, spread: np.ndarray, before: np.ndarray,
                  window_steps: np.ndarray, own: np.ndarray, members: np.ndarray | slice, count: int) -> np.ndarray:  # fmt: skip
    """Per member: whether one of its own phases is beyond a healthy peer's (as :func:`_excess` draws it), and
    grew beyond what it was when last healthy (``before``, NaN: not known, not beyond), each by the floor (3% of
    that peer's work) and by the phase's own noise: as many standard errors of its window median (its spread,
    at least the class's median member's) as the noise test asks for at the class's size, times the phases
    (each is a chance). A slowdown sits in a phase; the noise of the whole step is mostly the other phases'
    (input sizes that vary move forward and backward, not the data or the optimizer), so a slowdown of 5% of
    the step in one phase stands out of that phase's noise when it does not out of the step's. Grown, not only
    beyond: a rank a little slower for good (its hardware) is beyond in every phase a little, and its noise
    would sometimes take one over the bar."""
    sd = spread[members][:, own]
    if count == 2:
        peers = 1.0
    else:
        sd = np.maximum(sd, np.median(np.ascontiguousarray(sd.T), axis=1))
        peers = count / 2
    error = MEDIAN_ERROR * sd / np.sqrt(np.maximum(window_steps[members], 1))[:, None]
    z = float(_noise_z(np.array([peers * own.sum()]))[0])
    bar = np.maximum(SLOW_FLOOR_FRACTION * middle.sum(), z * error * np.sqrt(1.0 + 1.0 / peers))
    beyond = mine - middle
    with np.errstate(invalid="ignore"):
        return ((beyond > bar) & (beyond - before[members][:, own] > bar)).any(axis=1)


def _median_and_mad(values: np.ndarray) -> tuple[float, float]:
    """The median of ``values`` and their median absolute deviation from it (0.0, 0.0: none)."""
    if not len(values):
        return 0.0, 0.0
    med = float(np.median(values))
    return med, float(np.median(np.abs(values - med)))


def ranking(table: RankTable, waited_for: list[int]) -> list[int]:
    """Rank numbers, most suspicious first: those others wait for, then by status, then by score; ranks with
    statistics, or silent or stalled."""
    shown = ~np.isnan(table.step_s) | table.statuses(SILENT, STALLED)
    which = np.flatnonzero(shown)
    rank = table.rank[which]
    not_waited = ~np.isin(rank, list(waited_for)) if waited_for else np.ones(len(which), bool)
    # lexsort((rank, -score, status, not_waited)) in two stable sorts (a 4-key lexsort of 16,384 ranks is most of
    # the ranking's cost): by score, ranks in order (they are) where scores tie; then by the small whole number
    # (waited for, status), which numpy sorts by radix.
    by_score = np.argsort(-table.score[which], kind="stable")
    first = (not_waited.astype(np.int16) * 256 + table.status[which].astype(np.int16))[by_score]
    return rank[by_score[np.argsort(first, kind="stable")]].tolist()


def slow_hosts(table: RankTable) -> list[str]:
    """Hosts whose every rank with statistics is slow, when the job spans several hosts: the node is the suspect."""
    counted = ~np.isnan(table.step_s) & (table.status != STATUS_CODE[SILENT])
    which = np.flatnonzero(counted)
    if not len(which):
        return []
    host_id = table.host_id[which]
    if len(np.unique(host_id)) < 2:
        return []
    members = np.bincount(host_id)
    slow = np.bincount(host_id, weights=(table.status[which] == STATUS_CODE[SLOW]), minlength=len(members))
    suspects = np.flatnonzero((slow == members) & (members > 0))
    return sorted(table.host[which[np.argmax(host_id == h)]] for h in suspects.tolist())  # (a rank of each host names it)


#: Stages are unbalanced when the busiest does this much more own work than the lightest.
IMBALANCE_RATIO = 1.2


def stage_columns(stage: np.ndarray, work: np.ndarray, wait: np.ndarray) -> list[Stage]:
    """The same over columns: each rank's stage, own work and wait per step. A slow rank's own excess is not
    its stage's: the lower middle of the work, the upper middle of the waits."""
    out = []
    for number in np.unique(stage).tolist():
        mine = stage == number
        count = int(mine.sum())
        low = np.sort(work[mine])[(count - 1) // 2]
        high = np.sort(wait[mine])[count // 2]
        out.append(Stage(number, count, float(low), float(high)))
    return out if len(out) > 1 else []


def imbalance(stage_rows: list[Stage], median_step_s: float | None) -> str | None:
    """One line when the pipeline's stages are unbalanced: who does how much more, and what idles."""
    if len(stage_rows) < 2 or not median_step_s:
        return None
    least = min(s.work_s for s in stage_rows)
    light = next(s for s in stage_rows if s.work_s <= least * 1.02)  # of stages equal within noise, the first
    most = max(s.work_s for s in stage_rows)
    heavy = next(s for s in stage_rows if s.work_s >= most * 0.98)
    if light.work_s <= 0 or heavy.work_s < IMBALANCE_RATIO * light.work_s:
        return None
    idle = max(0.0, 1 - sum(s.work_s for s in stage_rows) / (len(stage_rows) * median_step_s))
    ratio = heavy.work_s / light.work_s
    return (f"stage {heavy.stage} does {ratio:.1f}x the work of stage {light.stage}: "
            f"the pipeline idles {idle * 100:.0f}% of each step")  # fmt: skip
