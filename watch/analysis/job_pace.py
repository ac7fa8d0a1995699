"""The job slower than itself: every rank's step grew together, so nobody stands out among its peers (issue 46).

A straggler is found against its peers, a slow class against the other classes (stragglers.py, class_growth.py);
when every rank slows down alike (a slower filesystem under every data loader, thermal limits on every node, a
network slower for all) each is every other's healthy peer and nothing there moves. What moves is the job's own
step against what it was. This module keeps, between snapshots, a baseline of the job's median step and of each
phase's median over the live ranks, and says the job is slower when all of these hold:

- its median step is :data:`SLOWER_FROM` (10%) beyond the baseline's, and 1 ms;
- the median rank's own phases grew beyond their baseline, each counted past :data:`NOISE_Z` standard errors of
  a window's median of that phase (its ranks' step-to-step spread, a robust SD, over the window's steps, the
  baseline's error as much again), by half the step's growth at least: input lengths that vary step to step move
  a window's median, and a heavy-tailed distribution of them makes it wander; a step's growth no phase explains
  past its noise is that wander; and one rank slower makes every other wait, which moves their waits, not the
  median rank's own work (that is a straggler's, or a slow link's);
- both have held for :data:`PERSIST_S` seconds and as long as a window takes to fill with new steps
  (:data:`PERSIST_STEPS` steps' time), so that what is told rests on windows of steps that overlap nothing of
  the first one that crossed the bar: one window of long inputs is no slowdown.

The baseline is the job's own mean pace over the last minutes: it follows the job both ways over about
:data:`FOLLOW_S` seconds (a baseline that followed faster windows down at once and slower ones up slowly would sit
at the bottom of a wandering median, and every wander up would cross the bar), down at once only when the job is
faster by the same bar (a warm-up ended, a fix), and stands still while the job is told slower, for
:data:`HOLD_S` at most (then that is the job's pace). It is judged only from :data:`SETTLED_S` seconds of windows
of :data:`SETTLED_STEPS` steps or more (the job's first steps, a warm-up, say little of its pace; the bars and
the persistence above, not a long wait, keep a wandering median quiet, so a job that slows 8 s after the viewer
came is told). The phase
that grew most is named. Job-wide figures only: a few operations per snapshot, whatever the job's size.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ranktop.watch.analysis.stragglers import MEDIAN_ERROR
from ranktop.watch.model.snapshot import JobSlower
from ranktop.wire.names import COMM_PHASE, PAUSE_PHASES

__all__ = ["JobPace", "JobSlower", "SLOWER_FROM"]

#: The job is slower when its median step is this share beyond its baseline, ...
SLOWER_FROM = 0.10
#: ... and by this many seconds at least, ...
SLOWER_FLOOR_S = 0.001
#: ... some phase grew past this many standard errors of its window's median (its and its baseline's), ...
NOISE_Z = 5.0
#: ... and both have held for this many seconds and this many steps' time (a window's worth: 64 steps).
PERSIST_S = 4.0
PERSIST_STEPS = 64
#: The baseline follows the job both ways over about this many seconds, ...
FOLLOW_S = 120.0
#: ... and stands still while the job is told slower, for this long at most.
HOLD_S = 300.0
#: Seconds of settled windows before the job is judged against its baseline (then the persistence above), ...
SETTLED_S = 5.0
#: ... a settled window holding this many steps at least (watch/analysis/class_growth.py SETTLED_STEPS).
SETTLED_STEPS = 32


class JobPace:
    """The job's baseline step and phases, kept from snapshot to snapshot (the aggregator holds one; snapshots taken
    on two threads at once share it: a lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.step_s: float | None = None
        self.phases: dict[str, float] = {}
        self.settled_s = 0.0  # seconds of settled windows seen
        self.crossed: float | None = None  # when the bars were first all passed (viewer's clock), while they are
        self.since: float | None = None  # when it began (unix s), while it is told
        self._at: float | None = None

    def judge(self, median_step: float | None, median_phases: dict[str, float], phase_error: dict[str, float],
              settled: bool, now: float, wall: float, step_rate: float | None) -> JobSlower | None:  # fmt: skip
        """The job now against its baseline (then the baseline moves toward it). ``phase_error``: each phase's
        standard error of a window's median (s); ``settled``: the ranks' windows hold SETTLED_STEPS steps; ``now``:
        the viewer's clock; ``wall``: unix seconds; ``step_rate``: the job's steps a second (None: not known)."""
        with self._lock:
            elapsed = 0.0 if self._at is None else max(0.0, now - self._at)
            self._at = now
            if median_step is None or not settled or median_step <= 0:
                return None
            if self.step_s is None:
                self.step_s, self.phases = median_step, dict(median_phases)
                return None
            self.settled_s += elapsed
            base = self.step_s
            grown = median_step - base
            growth = {name: value - self.phases.get(name, value) for name, value in median_phases.items()
                      if name not in PAUSE_PHASES and name != COMM_PHASE}  # fmt: skip
            past = {name: g for name, g in growth.items() if g > NOISE_Z * math.sqrt(2.0) * phase_error.get(name, 0.0)}
            # (the median rank's own work grew, and explains half the step's growth at least: one rank slower makes
            # every other wait, which moves their waits, not the median rank's own phases)
            crossing = (self.settled_s >= SETTLED_S and grown > max(SLOWER_FROM * base, SLOWER_FLOOR_S)
                        and sum(past.values()) >= grown / 2)  # fmt: skip
            found = None
            if crossing:
                if self.crossed is None:
                    self.crossed = now
                persist = max(PERSIST_S, PERSIST_STEPS / step_rate if step_rate else PERSIST_S)
                if now - self.crossed >= persist:
                    if self.since is None:
                        self.since = wall - (now - self.crossed)
                    phase = max(past, key=lambda name: past[name])
                    found = JobSlower(share=grown / base, excess_s=grown, since=self.since, baseline_s=base,
                                      phase=phase, phase_excess_s=past[phase])  # fmt: skip
            else:
                self.crossed = self.since = None
            if self.crossed is None or (self.since is not None and wall - self.since >= HOLD_S):
                self._follow(median_step, median_phases, elapsed, fast=grown < -max(SLOWER_FROM * base, SLOWER_FLOOR_S))
            return found

    def _follow(self, median_step: float, median_phases: dict[str, float], elapsed: float, fast: bool) -> None:
        """The baseline moves toward the job now over FOLLOW_S (at once when ``fast``: the job is faster by the bar)."""
        assert self.step_s is not None
        move = 1.0 if fast else 1.0 - math.exp(-elapsed / FOLLOW_S)
        self.step_s += (median_step - self.step_s) * move
        for name, value in median_phases.items():
            before = self.phases.get(name, value)
            self.phases[name] = before + (value - before) * move


def phase_errors(names: list[str], phase_sd: np.ndarray, window_steps: np.ndarray, live: np.ndarray) -> dict[str, float]:
    """Each phase's standard error of a window's median, from the ``live`` ranks' robust SDs per phase (the median
    rank's) over their windows' steps (the median's): MEDIAN_ERROR x SD / sqrt(steps)."""
    if not live.any():
        return {}
    steps = max(1.0, float(np.median(window_steps[live])))
    sd = np.median(np.ascontiguousarray(phase_sd[live].T), axis=1)
    return dict(zip(names, (MEDIAN_ERROR * sd / math.sqrt(steps)).tolist()))
