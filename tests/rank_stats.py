"""The straggler scoring of watch/analysis/stragglers.py with a rank's figures as a record each: what the tests write.

The viewer scores columns (``score_columns``, ``stage_columns``: every rank at once, from the job's arrays);
a test states a few ranks' medians by hand. These wrappers lay such records out as the columns and read the
result back per rank: test code, kept out of the package.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ranktop.watch.analysis.stragglers import score_columns, stage_columns
from ranktop.watch.model.snapshot import Stage


@dataclass(frozen=True)
class RankStats:
    """Medians over one rank's window."""

    step_s: float  # wall time of a step
    phases: dict[str, float]  # own time per phase, "comm" included when collectives are seen
    rate: float | None  # steps per second
    comm_s: float | None  # time waited in collectives per step (None: no collective seen)


@dataclass(frozen=True)
class Scores:
    """The cross-rank comparison of one refresh."""

    excess: dict[int, tuple[float, str | None]]  # rank -> (seconds beyond the medians, worst phase)
    slow_above_s: dict[int, float]  # rank -> the excess past which it is slow
    median_step_s: float | None

    def of(self, rank: int) -> tuple[float, str | None]:
        return self.excess.get(rank, (0.0, None))

    def is_slow(self, rank: int) -> bool:
        return self.median_step_s is not None and self.of(rank)[0] > self.slow_above_s.get(rank, float("inf"))

    def score(self, rank: int) -> float:
        """The slowdown as a fraction of the median step (0.25: 25% slower)."""
        return self.of(rank)[0] / self.median_step_s if self.median_step_s else 0.0


def score(live: dict[int, RankStats], names: list[str], classes: dict[int, tuple] | None = None) -> Scores:
    """Compare the live ranks' phases with their cross-rank medians; with ``classes`` (rank -> peer class,
    watch/analysis/layout.py), with the medians of their own class."""
    ranks = list(live)
    phases = np.array([[live[r].phases.get(name, 0.0) for name in names] for r in ranks]).reshape(len(ranks), len(names))
    steps = np.array([live[r].step_s for r in ranks])
    class_ids = None
    if classes:
        keys: dict[tuple, int] = {}
        class_ids = np.array([keys.setdefault(classes.get(r, ()), len(keys)) for r in ranks], np.int64)
    excess, culprit, floor, median_step = score_columns(phases, steps, names, class_ids)
    return Scores(
        {r: (float(excess[i]), names[culprit[i]] if culprit[i] >= 0 else None) for i, r in enumerate(ranks)},
        {r: float(floor[i]) for i, r in enumerate(ranks)},
        median_step,
    )


def stages(live: dict[int, RankStats], stage_of) -> list[Stage]:
    """Per pipeline stage (``stage_of(rank)``, None: no stage), its own work and its wait per step."""
    at = [(stage, s) for rank, s in live.items() if (stage := stage_of(rank)) is not None]
    waits = np.array([s.comm_s or 0.0 for _, s in at])
    work = np.array([s.step_s for _, s in at]) - waits
    return stage_columns(np.array([stage for stage, _ in at], np.int64), work, waits)
