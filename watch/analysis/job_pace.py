"""The job slower than itself: every rank's step grew together, so nobody stands out among its peers (issue 46).

A straggler is found against its peers, a slow class against the other classes (stragglers.py,
class_growth.py); when every rank slows down alike (a slower filesystem under every data loader, a model
change, thermal limits on every node, a network slower for all) each is every other's healthy peer and
nothing there moves. What does move is the job's own step against what it was: this module keeps, between
snapshots, the job's median step and each phase's median (over the live ranks scored) as a baseline, and
says the job is slower when its step now is :data:`SLOWER_FROM` beyond it.

The baseline follows the job down within seconds (a warm-up, a faster job after a fix) and up over minutes
(:data:`FOLLOW_UP_S`): a job that became slower for good is told so for several minutes, then that is its
pace. It is judged only from :data:`SETTLED_S` seconds of windows of :data:`SETTLED_STEPS` steps or more (a
baseline of a few seconds says nothing of "the last minutes", and a viewer that listens for six seconds
judges nothing of this). The phase that grew most against its baseline is named with it.
Job-wide figures only: a few operations per snapshot, whatever the job's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ranktop.watch.model.snapshot import JobSlower
from ranktop.wire.names import PAUSE_PHASES

__all__ = ["JobPace", "JobSlower", "SLOWER_FROM"]

#: The job is slower when its median step is this share beyond its baseline, ...
SLOWER_FROM = 0.10
#: ... and by this many seconds at least.
SLOWER_FLOOR_S = 0.001
#: The baseline follows a slower job up over about this many seconds, ...
FOLLOW_UP_S = 180.0
#: ... a faster one down over about this many.
FOLLOW_DOWN_S = 5.0
#: Seconds of settled windows before the job is judged against its baseline, ...
SETTLED_S = 15.0
#: ... a settled window holding this many steps at least (watch/analysis/class_growth.py SETTLED_STEPS).
SETTLED_STEPS = 32


@dataclass
class JobPace:
    """The job's baseline step and phases, kept from snapshot to snapshot (the aggregator holds one)."""

    step_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    settled_s: float = 0.0  # seconds of settled windows seen
    since: float | None = None  # when the job was first seen slower (unix s), while it is
    _at: float | None = None

    def judge(self, median_step: float | None, median_phases: dict[str, float], settled: bool, now: float,
              wall: float, window_s: float = 0.0) -> JobSlower | None:  # fmt: skip
        """The job now against its baseline (then the baseline moves toward it). ``settled``: the ranks' windows
        hold SETTLED_STEPS steps; ``now``: the viewer's clock; ``wall``: unix seconds; ``window_s``: how much
        time a rank's window spans (a slowdown shows in the median once it covers half of it: ``since`` is
        dated back that much)."""
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
        found = None
        if self.settled_s >= SETTLED_S and grown > max(SLOWER_FROM * base, SLOWER_FLOOR_S):
            if self.since is None:
                self.since = wall - window_s / 2
            growth = {name: value - self.phases.get(name, 0.0) for name, value in median_phases.items()
                      if name not in PAUSE_PHASES}  # fmt: skip
            phase = max(growth, key=growth.get) if growth else None
            found = JobSlower(share=grown / base, excess_s=grown, since=self.since, baseline_s=base, phase=phase,
                              phase_excess_s=growth.get(phase) if phase is not None else None)  # fmt: skip
        else:
            self.since = None
        self._follow(median_step, median_phases, elapsed)
        return found

    def _follow(self, median_step: float, median_phases: dict[str, float], elapsed: float) -> None:
        """The baseline moves toward the job now: fast down, slowly up (each phase as its step does)."""
        assert self.step_s is not None
        pace = FOLLOW_DOWN_S if median_step < self.step_s else FOLLOW_UP_S
        move = 1.0 - math.exp(-elapsed / pace)
        self.step_s += (median_step - self.step_s) * move
        for name, value in median_phases.items():
            before = self.phases.get(name, value)
            self.phases[name] = before + (value - before) * move
