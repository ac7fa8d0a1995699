"""Straggler scoring: which rank holds the job back, and in which phase. Pure Python over rank windows.

In synchronous data-parallel training every rank's step takes the same wall
time: the slow rank computes longer and the others wait for it inside a
collective, so their wait lands in whichever phase holds the collective
(backward under DDP). Comparing step times therefore finds nothing. Instead
each phase of each rank is compared with the median of that phase across
ranks: the slow rank stands out in the phase it is slow in, while the waiting
ranks, being the majority, *are* the median of the phase they wait in. A
rank's slowdown is the sum of its phases' excess over those medians (only the
positive part: time it spent that others did not), and the phase with the
largest excess is named as the culprit. Medians over a window make one slow
step count for nothing: only a persistent slowdown scores. A rank is *slow*
when its slowdown exceeds a floor (5% of the median step, 1 ms) and a robust
spread of everyone's slowdown (3 x MAD), so noise on a healthy job flags no one.

With collectives seen, each phase counts only the rank's *own* time: the wait
in collectives is taken out of the phase it happened in and shown as ``comm``.

On a job whose layout is known (watch/layout.py) ranks are compared within
their **peer class** only: the ranks at the same pipeline stage. A stage with
more layers is not a slow rank; it is the pipeline's imbalance, a finding of
its own (:func:`stages`). Within a class the lower median is the reference
(with two peers, the faster one: the slower one's whole excess is its own).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable

from ranktop.watch.snapshot import OK, SILENT, SLOW, STALLED, RankRow
from ranktop.watch.window import RankWindow
from ranktop.wire import schema

MIN_STEPS_TO_SCORE = 3
SLOW_FLOOR_FRACTION = 0.05
SLOW_FLOOR_S = 0.001


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
    slow_above_s: float  # a rank whose excess passes this is slow
    median_step_s: float | None

    def of(self, rank: int) -> tuple[float, str | None]:
        return self.excess.get(rank, (0.0, None))

    def is_slow(self, rank: int) -> bool:
        return self.median_step_s is not None and self.of(rank)[0] > self.slow_above_s

    def score(self, rank: int) -> float:
        """The slowdown as a fraction of the median step (0.25: 25% slower)."""
        return self.of(rank)[0] / self.median_step_s if self.median_step_s else 0.0


def phase_names(windows: Iterable[RankWindow]) -> list[str]:
    """Column order: standard phases seen, user phases, then "other" (and "comm" before it, with collectives)."""
    seen: set[str] = set()
    comm = False
    for w in windows:
        seen |= w.own.names
        comm = comm or w.own.waited
    standard = [p for p in schema.STANDARD_PHASES if p in seen]
    custom = sorted(seen - set(schema.STANDARD_PHASES) - {schema.OTHER_PHASE})
    return standard + custom + ([schema.COMM_PHASE] if comm else []) + [schema.OTHER_PHASE]


def rank_stats(w: RankWindow, names: list[str], refresh: bool = True) -> RankStats | None:
    """Medians over the window (watch/step_window.py keeps them until new steps), or None before
    :data:`MIN_STEPS_TO_SCORE` steps. Each phase counts the rank's own time: its waits in collectives
    are taken out and shown as ``comm``."""
    own = w.own
    if not (refresh and own.dirty) and w.stats_cache is not None and w.stats_cache[0] == names and w.stats_cache[1] is own.stats_version:
        return w.stats_cache[2]  # nothing new since: thousands of ranks cost a lookup each
    stats = own.stats(names, MIN_STEPS_TO_SCORE, refresh)
    if stats is None:
        return None
    result = RankStats(stats["step"], stats["phases"], stats["rate"], stats["comm"])
    w.stats_cache = (list(names), own.stats_version, result)
    return result


def score(live: dict[int, RankStats], names: list[str], classes: dict[int, tuple] | None = None) -> Scores:
    """Compare the live ranks' phases with their cross-rank medians; with ``classes`` (rank -> peer class,
    watch/layout.py), with the medians of their own class."""
    if classes:
        by_class: dict[tuple, dict[int, RankStats]] = {}
        for rank, s in live.items():
            by_class.setdefault(classes.get(rank, ()), {})[rank] = s
        excess = {}
        for members in by_class.values():
            excess.update(_excess(members, names, statistics.median_low))
    else:
        excess = _excess(live, names)
    spread = _mad([e for e, _ in excess.values()]) if len(excess) >= 3 else 0.0
    median_step = statistics.median(s.step_s for s in live.values()) if live else None
    floor = max(SLOW_FLOOR_S, SLOW_FLOOR_FRACTION * median_step, 3 * spread) if median_step else float("inf")
    return Scores(excess, floor, median_step)


def _excess(stats: dict[int, RankStats], names: list[str], middle=statistics.median) -> dict[int, tuple[float, str | None]]:
    """Per rank: seconds spent beyond the cross-rank median, summed over phases, and the worst phase."""
    if len(stats) < 2:
        return {rank: (0.0, None) for rank in stats}
    names = [name for name in names if name != schema.COMM_PHASE]  # waiting is not this rank's own work
    medians = [(name, middle([s.phases.get(name, 0.0) for s in stats.values()])) for name in names]
    out = {}
    for rank, s in stats.items():
        phases = s.phases
        total, culprit, worst = 0.0, None, 0.0
        for name, median in medians:
            d = phases.get(name, 0.0) - median
            if d > 0:
                total += d
                if d > worst:
                    culprit, worst = name, d
        out[rank] = (total, culprit)
    return out


def _mad(values: list[float]) -> float:
    if not values:
        return 0.0
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values)


def slow_hosts(rows: list[RankRow]) -> list[str]:
    """Hosts whose every rank is slow, when the job spans several hosts: then the node is the suspect."""
    by_host: dict[str, list[RankRow]] = {}
    for row in rows:
        if row.status != SILENT and row.step_s is not None:
            by_host.setdefault(row.host, []).append(row)
    if len(by_host) < 2:
        return []
    return sorted(host for host, members in by_host.items() if all(r.status == SLOW for r in members))


def ranking(rows: list[RankRow], waited_for: Iterable[int]) -> list[int]:
    """Rank numbers, most suspicious first: those others wait for, then by status, then by score."""
    order = {SILENT: 0, STALLED: 1, SLOW: 2, OK: 3}
    waited = set(waited_for)
    return [
        row.rank
        for row in sorted(rows, key=lambda row: (row.rank not in waited, order[row.status], -row.score, row.rank))
        if row.step_s is not None or row.status in (SILENT, STALLED)
    ]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: the medians over its ranks, per step."""

    stage: int
    ranks: int  # how many ranks are at this stage
    work_s: float  # own time per step (the step less its waits)
    wait_s: float  # time waiting per step (bubble, and the stage's other collectives)


#: Stages are unbalanced when the busiest does this much more own work than the lightest.
IMBALANCE_RATIO = 1.2


def stages(live: dict[int, RankStats], stage_of) -> list[Stage]:
    """Per pipeline stage (``stage_of(rank)``, None: no stage), its own work and its wait per step."""
    by_stage: dict[int, list[RankStats]] = {}
    for rank, s in live.items():
        stage = stage_of(rank)
        if stage is not None:
            by_stage.setdefault(stage, []).append(s)
    out = []
    for stage in sorted(by_stage):
        members = by_stage[stage]
        waits = [s.comm_s or 0.0 for s in members]
        work = [s.step_s - w for s, w in zip(members, waits)]
        out.append(Stage(stage, len(members), statistics.median_low(work), statistics.median_high(waits)))  # a slow rank's own excess is not the stage's
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
