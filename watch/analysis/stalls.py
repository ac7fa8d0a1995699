"""Stalled ranks, and which rank the others wait for: pure logic, no sockets, no terminal.

A rank's probe sends a heartbeat at least every second from its own thread,
even while training is blocked, carrying where the training thread is: the
step in progress, the last one finished, the open phase, how long the step
has been running, and (when collectives are instrumented) the last collective
it entered. A rank is *stalled* when it has not finished a step for much
longer than usual: more than ``factor`` times its median step time, and never
less than ``floor_s``. Without any step time to compare with (a TUI that
attached after the job froze, to a probe too old to report its median) the
bar is ``factor * floor_s``; a rank that has never finished a step is judged
only once other ranks have a median.

In synchronous training a hang freezes every rank: the ranks that arrived at a
collective wait in it for the one that never comes. The one they wait for is,
in order of evidence: a rank that went silent (dead or frozen hard); a rank
still in an earlier step; at the same step, a rank that is not inside a
collective while the stalled ones are, or whose last collective is older than
theirs (it never arrived at their latest); a rank in another phase than most
of the stalled ones (an earlier phase breaks a tie: forward comes before the
backward all-reduce); and when none of those stands out, a rank of the job's
world this viewer never heard from (a viewer that attached after a rank froze).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ranktop.watch import format as fmt
from ranktop.watch.format import ranks_text
from ranktop.watch.analysis.stacks import common_place
from ranktop.watch.engine.job_state import JobView
from ranktop.watch.model.rank_table import median_of
from ranktop.wire import schema
from ranktop.wire.messages import State

DEFAULT_STALL_FACTOR = 5.0
DEFAULT_STALL_FLOOR_S = 2.0


@dataclass(frozen=True)
class StallPolicy:
    factor: float = DEFAULT_STALL_FACTOR
    floor_s: float = DEFAULT_STALL_FLOOR_S

    def limit(self, median_step_s: float | None) -> float:
        """Seconds without finishing a step after which a rank is stalled."""
        if median_step_s is None:
            return self.factor * self.floor_s
        return max(self.factor * median_step_s, self.floor_s)


@dataclass(frozen=True)
class Position:
    """Where one rank's training thread is, as its last state said, brought up to now."""

    rank: int
    silent: bool
    step: int  # the step in progress, or the next one when between steps
    last: int  # the last step finished (-1: none yet)
    in_step: bool
    phase: str | None
    stuck_s: float  # seconds since it last finished a step (or since its step began)
    median_step_s: float | None
    collective: dict | None = None

    @property
    def inside_collective(self) -> bool:
        return bool(self.collective and self.collective.get("inside"))


@dataclass(frozen=True)
class StallReport:
    stalled: dict[int, Position]  # rank -> where it is stuck
    waiting_for: list[int]  # the ranks the stalled ones wait for (empty if none stands out)
    diagnosis: str | None  # one line for the user; None when nothing is stalled


def position(
    rank: int, state: State, *, now: float, state_at: float, progress_at: float, silent: bool, window_median_s: float | None,
    stepped_at: float = float("-inf"),
) -> Position | None:
    """A rank's position from its last state; None if it never sent one."""
    last = state.last
    if last is None:
        return None
    in_step = bool(state.in_step)
    step = state.step if in_step and state.step is not None else last + 1
    stuck = stuck_s(state, now, state_at, progress_at, stepped_at)
    median = window_median_s if window_median_s is not None else state.median_step_s
    return Position(rank, silent, step, last, in_step, state.phase, stuck, median, state.collective)


# -- the verdict ------------------------------------------------------------------------


def assess(positions: Iterable[Position], policy: StallPolicy = StallPolicy(), world: int | None = None) -> StallReport:
    """``world``: the job's size, when ranks never heard from may be named (None: they may not)."""
    positions = sorted(positions, key=lambda p: p.rank)
    job_median = median_of(p.median_step_s for p in positions if p.median_step_s is not None)
    stalled = {}
    for p in positions:
        if p.silent:
            continue
        median = p.median_step_s if p.median_step_s is not None else job_median
        if p.last < 0 and median is None:
            continue  # never finished a step and nobody has: still starting up, not stalled
        if p.stuck_s > policy.limit(median):
            stalled[p.rank] = p
    if not stalled:
        return StallReport({}, [], None)
    culprits, how = _culprits(positions, stalled)
    everyone = len(stalled) == sum(1 for p in positions if not p.silent)
    # Every rank heard is stuck and some were never heard: those are whom they wait for, not the one of them a
    # bucket behind the rest (it waits too: a collective of the unheard rank's never completes).
    if (not culprits or (everyone and how in ("behind", "collective", "phase"))) and world is not None:
        heard = {p.rank for p in positions}
        unheard = [n for n in range(world) if n not in heard] if len(heard) < world else []
        if unheard:
            group = list(stalled.values())
            text = (
                f"{ranks_text(stalled)} stalled {where_text(group)} for {fmt.ago(max(p.stuck_s for p in group))}, "
                f"waiting for {ranks_text(unheard)}: never heard from (silent since this viewer started)"
            )
            return StallReport(stalled, unheard, text)
    return StallReport(stalled, [p.rank for p in culprits], _diagnosis(stalled, culprits, how, everyone))


def _culprits(positions: list[Position], stalled: dict[int, Position]) -> tuple[list[Position], str]:
    silent = [p for p in positions if p.silent]
    if silent:
        return silent, "silent"
    live = [p for p in positions if not p.silent]
    front = max(p.step for p in stalled.values())
    behind = [p for p in live if p.step < front]
    if behind:
        return behind, "behind"
    at_front = [p for p in live if p.step == front]
    inside = [p for p in at_front if p.inside_collective]
    outside = [p for p in at_front if not p.inside_collective]
    if inside and outside and any(p.rank in stalled for p in inside):
        return outside, "outside"
    # The last collective each rank entered: one that has not reached the others' latest never arrived.
    seqs = {p.rank: p.collective.get("seq") for p in at_front if p.collective and isinstance(p.collective.get("seq"), int)}
    if seqs and len(seqs) == len(at_front):
        latest = max(seq for rank, seq in seqs.items() if rank in stalled) if set(seqs) & set(stalled) else None
        missing = [p for p in at_front if latest is not None and seqs[p.rank] < latest]
        if missing and len(missing) < len(at_front):
            return missing, "collective"
    phases = collections.Counter(p.phase for p in at_front if p.rank in stalled)
    if len({p.phase for p in at_front}) > 1 and phases:
        (top, count), *rest = phases.most_common()
        odd = [p for p in at_front if p.phase != top]
        if count > len(odd):
            return odd, "phase"
        order = {name: i for i, name in enumerate(schema.STANDARD_PHASES)}
        if all(p.phase in order for p in at_front):
            first = min(order[p.phase] for p in at_front)
            earliest = [p for p in at_front if order[p.phase] == first]
            if len(earliest) < len(at_front):
                return earliest, "phase"
    return [], ""


def where_text(positions: list[Position]) -> str:
    """``"in backward at step 30"`` when they agree; what they share otherwise."""
    phases, steps, coll = common_place(positions)
    parts = [f"in {phase}" if (phase := phases.pop()) else "between phases"] if len(phases) == 1 else []
    parts.append(f"at step {steps.pop()}" if len(steps) == 1 else f"at steps {min(steps)}-{max(steps)}")
    if coll:
        parts.append(f"({coll})")
    return " ".join(parts)


def _diagnosis(stalled: dict[int, Position], culprits: list[Position], how: str, everyone: bool) -> str:
    culprit_ranks = {p.rank for p in culprits}
    waiting = [p for p in stalled.values() if p.rank not in culprit_ranks]
    if not culprits:
        group = list(stalled.values())
        text = f"{ranks_text(stalled)} stalled {where_text(group)} for {fmt.ago(max(p.stuck_s for p in group))}"
        return text + ("; no rank stands out (all at the same place)" if everyone else "")
    if how == "silent":
        what = f"silent, last seen {where_text(culprits)}"
    else:
        what = where_text(culprits)
        if how == "outside":
            what += ", not in a collective"
        elif how == "collective":
            what += ", never entered the others' last collective"
    if not waiting:
        return f"{ranks_text(culprit_ranks)} stalled {what}"
    longest = max(p.stuck_s for p in waiting)
    return f"{ranks_text(p.rank for p in waiting)} stalled {where_text(waiting)} for {fmt.ago(longest)}, waiting for {ranks_text(culprit_ranks)}: {what}"


def none_stuck(stuck: np.ndarray, policy: StallPolicy) -> bool:
    """True when no live rank can be stalled: each finished a step, or began its current one, more recently
    than the shortest stall (the policy's floor). ``stuck``: the seconds of each live rank with a state
    (:func:`stuck_columns`). Then a snapshot of thousands of ranks skips their positions."""
    return not bool((stuck > policy.floor_s).any())


def stuck_columns(step_age: np.ndarray, state_at: np.ndarray, progress_at: np.ndarray, now: float,
                  stepped_at: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """:func:`stuck_s` over columns: ``step_age`` is NaN for a rank between steps (or that sent none)."""
    inside = ~np.isnan(step_age)
    stuck = np.where(inside, np.nan_to_num(step_age) + np.maximum(0.0, now - state_at), np.maximum(0.0, now - progress_at))
    if stepped_at is not None:
        stuck = np.where(stepped_at > state_at, np.minimum(stuck, np.maximum(0.0, now - stepped_at)), stuck)
    return stuck


def stuck_s(state: State, now: float, state_at: float, progress_at: float, stepped_at: float = float("-inf")) -> float:
    """Seconds without finishing a step: inside one, its age when the state was sent plus the time since;
    between steps, the time since the last step finished. A step heard of after the state (``stepped_at``,
    the viewer's clock: a node digest carries a running rank's state every few seconds only, its steps
    every quarter of one) finished since: the rank is stuck no longer than since then."""
    step_age = state.step_age
    if state.in_step and step_age is not None:
        stuck = step_age + max(0.0, now - state_at)
    else:
        stuck = max(0.0, now - progress_at)
    if stepped_at > state_at:
        stuck = min(stuck, max(0.0, now - stepped_at))
    return stuck


def positions_of(view: JobView, now: float, silent: set[int]) -> list[Position]:
    """Positions of a gathered view's ranks (those that sent a state)."""
    out = []
    ranks = view.rank.tolist()
    state_at, progress_at, stepped_at = view.state_at.tolist(), view.progress_at.tolist(), view.stepped_at.tolist()
    medians = view.median_wall.tolist()
    for i, state in enumerate(view.states):
        median = medians[i]
        p = position(
            ranks[i],
            state,
            now=now,
            state_at=state_at[i],
            progress_at=progress_at[i],
            silent=ranks[i] in silent,
            window_median_s=None if median != median else median,
            stepped_at=stepped_at[i],
        )
        if p is not None:
            out.append(p)
    return out


def stall_report(view: JobView, silent: np.ndarray, policy: StallPolicy) -> StallReport:
    """The stalled ranks of a gathered view, and whom they wait for; ``silent``: bool per rank
    (watch/analysis/silence.py). A job none of whose live ranks can be stalled yet skips the ranks' positions."""
    now = view.now - view.relays.behind_s
    stuck = stuck_columns(view.step_age, view.state_at, view.progress_at, now, view.stepped_at)
    if none_stuck(stuck[view.stated & ~silent], policy):
        return StallReport({}, [], None)
    positions = positions_of(view, now, set(view.rank[silent].tolist()))
    return assess(positions, policy, world=view.world if view.sure else None)
