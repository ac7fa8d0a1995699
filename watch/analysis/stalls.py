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

A rank saving a checkpoint, evaluating or recompiling (its open phase ``checkpoint``, ``eval`` or ``compile``,
wire/names.py PAUSE_PHASES) finishes no step for as long as that takes, and the others wait for it in a barrier
or their next collective: while any live rank is in one, nobody is stalled (watch/analysis/pauses.py says what
the pause costs). A job stuck with none under way still is, though later by as long as its pauses take: when one
ends, the rank that paused reports its next step before the ranks that waited for it report theirs (their
messages are on their way), and for that moment they would read as stalled. A recompilation comes first in its
step, not last: after it, the step's rest and its record are still to come while every rank has been stuck as
long as it took; so a rank still in the step its state last named a pause in holds the stall off for one stall
limit more (:func:`paying`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ranktop.watch import format as fmt
from ranktop.watch.format import ranks_text
from ranktop.watch.analysis.stacks import collective_text
from ranktop.watch.engine.rank_store import JobView
from ranktop.watch.engine.rank_scalars import HAS_SEQ, INSIDE, NO_STEP
from ranktop.watch.model.stall import Position, StallReport
from ranktop.wire.names import STANDARD_PHASES
from ranktop.wire.names import PAUSE_PHASES
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


def position(
    rank: int,
    state: State,
    *,
    now: float,
    state_at: float,
    progress_at: float,
    silent: bool,
    window_median_s: float | None,
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


class StalledPositions(Mapping[int, Position]):
    """Rank -> :class:`Position` of the stalled ranks, each built when read: a hang of 16,384 ranks stalls every
    one, and a snapshot reads a few (the rows it shows). ``ranks``: the stalled ranks, ascending."""

    def __init__(self, places: "Places", stalled: np.ndarray):
        self.ranks = places.rank[stalled]
        self._rows = np.flatnonzero(stalled)
        self._places = places
        self._built: dict[int, Position] = {}

    def _at(self, rank: object) -> int:
        if not isinstance(rank, (int, np.integer)):
            raise KeyError(rank)
        at = int(np.searchsorted(self.ranks, rank))
        if at >= len(self.ranks) or self.ranks[at] != rank:
            raise KeyError(rank)
        return at

    def __getitem__(self, rank: int) -> Position:
        at = self._at(rank)
        found = self._built.get(at)
        if found is None:
            found = self._built[at] = self._places.position(int(self._rows[at]))
        return found

    def where(self, rank: int) -> tuple[str | None, float, int]:
        """Its Position's ``phase``, ``stuck_s`` and ``step``, read off the columns without building it (the
        history opens an episode per stalled rank: thousands at once in a big hang)."""
        row = int(self._rows[self._at(rank)])
        at = self._places
        return at.names[int(at.phase[row])], float(at.stuck[row]), int(at.step[row])

    def __iter__(self) -> Iterator[int]:
        return iter(self.ranks.tolist())

    def __len__(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class Places:
    """Where each rank with a position is, as columns in rank order: what the verdict reads of every rank, so
    that a hang of thousands of ranks is judged in a few numpy operations (rule 5: no Python pass per rank).
    ``phase`` indexes ``names``; ``coll``: a row per rank that two ranks share when their last collectives
    read the same (op, number, size, inside: ``coll_text`` gives its words); ``position(i)``: row i's
    :class:`Position`, built only for the ranks a report names."""

    rank: np.ndarray
    silent: np.ndarray
    step: np.ndarray
    last: np.ndarray
    phase: np.ndarray
    names: Sequence[str | None]
    stuck: np.ndarray
    median: np.ndarray  # NaN: none known
    inside: np.ndarray
    seq: np.ndarray
    has_seq: np.ndarray
    coll: np.ndarray  # (ranks, k) int64
    coll_text: Callable[[int], str]  # row i's last collective in words (stacks.collective_text)
    position: Callable[[int], Position]
    # seconds since its state last named a pause phase in the step it is still in (inf: none; None: not known)
    paused_ago: np.ndarray | None = None


def places_of(positions: Sequence[Position]) -> Places:
    """The columns of a few positions (sorted by rank): how :func:`assess` judges a list of them."""
    names: dict[str | None, int] = {None: 0}
    texts: dict[str, int] = {}
    phase = [names.setdefault(p.phase, len(names)) for p in positions]
    coll = [[texts.setdefault(collective_text(p.collective), len(texts))] for p in positions]
    seqs = [p.collective.get("seq") if p.collective else None for p in positions]
    has_seq = [isinstance(seq, int) for seq in seqs]
    return Places(
        rank=np.array([p.rank for p in positions], np.int64),
        silent=np.array([p.silent for p in positions], bool),
        step=np.array([p.step for p in positions], np.int64),
        last=np.array([p.last for p in positions], np.int64),
        phase=np.array(phase, np.int64),
        names=list(names),
        stuck=np.array([p.stuck_s for p in positions], np.float64),
        median=np.array([np.nan if p.median_step_s is None else p.median_step_s for p in positions], np.float64),
        inside=np.array([p.inside_collective for p in positions], bool),
        seq=np.array([seq if has else 0 for seq, has in zip(seqs, has_seq)], np.int64),
        has_seq=np.array(has_seq, bool),
        coll=np.array(coll, np.int64).reshape(len(positions), 1),
        coll_text=lambda i: collective_text(positions[i].collective),
        position=lambda i: positions[i],
    )


def assess(positions: Iterable[Position], policy: StallPolicy = StallPolicy(), world: int | None = None) -> StallReport:
    """``world``: the job's size, when ranks never heard from may be named (None: they may not)."""
    ordered = sorted(positions, key=lambda p: p.rank)
    return assess_places(places_of(ordered), policy, world)


def assess_places(at: Places, policy: StallPolicy = StallPolicy(), world: int | None = None, grace_s: float = 0.0) -> StallReport:
    """:func:`assess` over columns (a snapshot's ranks: :func:`stall_report`); ``grace_s``: how long the job's
    checkpoints or evaluations take (:func:`pause_grace`), added to every rank's limit."""
    known = ~np.isnan(at.median)
    job_median = float(np.median(at.median[known])) if known.any() else None  # (rank_table.median_of, NaN left out)
    median = np.where(known, at.median, np.nan if job_median is None else job_median)
    # policy.limit over the column: factor * floor without a median, else factor * median and never under the floor
    limit = np.where(np.isnan(median), policy.factor * policy.floor_s, np.maximum(policy.factor * median, policy.floor_s)) + grace_s
    starting = (at.last < 0) & np.isnan(median)  # never finished a step and nobody has: still starting up, not stalled
    stalled = ~at.silent & ~starting & (at.stuck > limit)
    if not stalled.any() or pausing(at).any() or paying(at, limit).any():
        return StallReport({}, [], None)
    culprits, how = _culprits(at, stalled)
    live = ~at.silent
    everyone = int(stalled.sum()) == int(live.sum())
    report = StalledPositions(at, stalled)
    # Every rank heard is stuck and some were never heard: those are whom they wait for, not the one of them a
    # bucket behind the rest (it waits too: a collective of the unheard rank's never completes).
    if (culprits is None or (everyone and how in ("behind", "collective", "phase"))) and world is not None:
        unheard = np.setdiff1d(np.arange(world), at.rank).tolist() if len(np.unique(at.rank)) < world else []
        if unheard:
            text = (
                f"{ranks_text(report.ranks.tolist())} stalled {_where(at, stalled)} for {fmt.ago(float(at.stuck[stalled].max()))}, "
                f"waiting for {ranks_text(unheard)}: never heard from (silent since this viewer started)"
            )
            return StallReport(report, unheard, text)
    waiting_for = at.rank[culprits].tolist() if culprits is not None else []
    return StallReport(report, waiting_for, _diagnosis(at, stalled, culprits, how, everyone))


def pausing(at: Places) -> np.ndarray:
    """Per rank: live and saving a checkpoint or evaluating now (its open phase is one of PAUSE_PHASES)."""
    paused = [i for i, name in enumerate(at.names) if name in PAUSE_PHASES]
    return ~at.silent & np.isin(at.phase, paused) if paused else np.zeros(len(at.rank), bool)


def paying(at: Places, limit: np.ndarray) -> np.ndarray:
    """Per rank: live, out of a pause phase (a recompilation, most often: it comes first in its step) but still in
    the step it paused in, for less than its stall limit since. The others waited for it in their next collective,
    and nobody's step is over until that collective is: till their records come, every rank reads as stuck for as
    long as the pause took, and the pause's own record (:func:`pause_grace`) is not in yet. Past the limit, a job
    stuck after a pause is told as any other."""
    if at.paused_ago is None:
        return np.zeros(len(at.rank), bool)
    return ~at.silent & (at.paused_ago <= limit)


def _culprits(at: Places, stalled: np.ndarray) -> tuple[np.ndarray | None, str]:
    """Whom the stalled ranks wait for (a mask), and by which evidence; None when no rank stands out."""
    if at.silent.any():
        return at.silent, "silent"
    live = ~at.silent
    front = at.step[stalled].max()
    behind = live & (at.step < front)
    if behind.any():
        return behind, "behind"
    at_front = live & (at.step == front)
    inside = at_front & at.inside
    outside = at_front & ~at.inside
    if inside.any() and outside.any() and (inside & stalled).any():
        return outside, "outside"
    # The last collective each rank entered: one that has not reached the others' latest never arrived.
    front_count = int(at_front.sum())
    if front_count and at.has_seq[at_front].all():
        mine = at_front & stalled
        if mine.any():
            missing = at_front & (at.seq < at.seq[mine].max())
            if missing.any() and int(missing.sum()) < front_count:
                return missing, "collective"
    phases = at.phase[at_front & stalled]
    if len(np.unique(at.phase[at_front])) > 1 and len(phases):
        ids, first, counts = np.unique(phases, return_index=True, return_counts=True)
        best = counts.max()
        top = ids[counts == best][np.argmin(first[counts == best])]  # (a tie goes to the lowest rank's: Counter's order)
        odd = at_front & (at.phase != top)
        if best > int(odd.sum()):
            return odd, "phase"
        order = {name: i for i, name in enumerate(STANDARD_PHASES)}
        present = np.unique(at.phase[at_front]).tolist()
        if all(at.names[p] in order for p in present):
            rank_of = np.full(len(at.names), len(order), np.int64)
            rank_of[present] = [order[at.names[p]] for p in present]
            place = rank_of[at.phase]
            earliest = at_front & (place == place[at_front].min())
            if int(earliest.sum()) < front_count:
                return earliest, "phase"
    return None, ""


def _where(at: Places, members: np.ndarray) -> str:
    """``"in backward at step 30"`` when they agree; what they share otherwise (stacks.common_place)."""
    phases = np.unique(at.phase[members])
    steps = at.step[members]
    parts = []
    if len(phases) == 1:
        phase = at.names[int(phases[0])]
        parts.append(f"in {phase}" if phase else "between phases")
    low, high = int(steps.min()), int(steps.max())
    parts.append(f"at step {low}" if low == high else f"at steps {low}-{high}")
    rows = np.flatnonzero(members)
    colls = at.coll[rows]
    if (colls == colls[0]).all():
        coll = at.coll_text(int(rows[0]))
    else:  # different collectives may still read the same
        texts = {at.coll_text(int(rows[k])) for k in np.unique(colls, axis=0, return_index=True)[1].tolist()}
        coll = texts.pop() if len(texts) == 1 else ""
    if coll:
        parts.append(f"({coll})")
    return " ".join(parts)


def where_text(positions: list[Position]) -> str:
    """``"in backward at step 30"`` when they agree; what they share otherwise."""
    ordered = sorted(positions, key=lambda p: p.rank)
    return _where(places_of(ordered), np.ones(len(ordered), bool))


def _diagnosis(at: Places, stalled: np.ndarray, culprits: np.ndarray | None, how: str, everyone: bool) -> str:
    if culprits is None:
        text = f"{ranks_text(at.rank[stalled].tolist())} stalled {_where(at, stalled)} for {fmt.ago(float(at.stuck[stalled].max()))}"
        return text + ("; no rank stands out (all at the same place)" if everyone else "")
    if how == "silent":
        what = f"silent, last seen {_where(at, culprits)}"
    else:
        what = _where(at, culprits)
        if how == "outside":
            what += ", not in a collective"
        elif how == "collective":
            what += ", never entered the others' last collective"
    culprit_ranks = at.rank[culprits].tolist()
    waiting = stalled & ~culprits
    if not waiting.any():
        return f"{ranks_text(culprit_ranks)} stalled {what}"
    longest = float(at.stuck[waiting].max())
    stalled_text = f"{ranks_text(at.rank[waiting].tolist())} stalled {_where(at, waiting)} for {fmt.ago(longest)}"
    return f"{stalled_text}, waiting for {ranks_text(culprit_ranks)}: {what}"


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


def places(view: JobView, now: float, silent: np.ndarray) -> Places:
    """The places of a gathered view's ranks that said one (a state with a last step), from the columns the job
    state keeps of their states (watch/engine/rank_scalars.py: RankScalars.take_state)."""
    where = view.where
    rows = np.flatnonzero(where["state_last"] != NO_STEP)
    stuck = stuck_columns(view.step_age[rows], view.state_at[rows], view.progress_at[rows], now, view.stepped_at[rows])
    window = view.median_wall[rows]
    flags = where["coll_flags"][rows]
    states, rank = view.states, view.rank

    def position_of(i: int) -> Position:
        row = int(rows[i])
        median = float(window[i])
        found = position(
            int(rank[row]), states[row], now=now, state_at=float(view.state_at[row]), progress_at=float(view.progress_at[row]),
            silent=bool(silent[row]), window_median_s=None if median != median else median, stepped_at=float(view.stepped_at[row]),
        )  # fmt: skip
        assert found is not None  # (a row with a last step)
        return found

    return Places(
        rank=rank[rows],
        silent=silent[rows],
        step=where["state_step"][rows],
        last=where["state_last"][rows],
        phase=where["phase"][rows],
        names=view.state_names,
        stuck=stuck,
        median=np.where(np.isnan(window), where["state_median"][rows], window),
        inside=(flags & INSIDE) != 0,
        seq=where["coll_seq"][rows],
        has_seq=(flags & HAS_SEQ) != 0,
        coll=np.stack([where["coll_op"][rows], where["coll_seq"][rows], where["coll_b"][rows], flags.astype(np.int64)], axis=1),
        coll_text=lambda i: collective_text(states[int(rows[i])].collective),
        position=position_of,
        paused_ago=None if view.paused_step is None or view.paused_at is None else np.where(
            view.paused_step[rows] == where["state_step"][rows], np.maximum(0.0, now - view.paused_at[rows]), np.inf),
    )  # fmt: skip


def pause_grace(view: JobView, silent: np.ndarray) -> float:
    """How long one of the job's checkpoints or evaluations takes: the longest average of a pause phase over the
    steps that had one, on any live rank's window (0: none in any)."""
    live = ~silent & (view.pause_steps > 0).any(axis=1)
    if not live.any():
        return 0.0
    return float((view.pause_s[live] / np.maximum(view.pause_steps[live], 1)).max())


def stall_report(view: JobView, silent: np.ndarray, policy: StallPolicy) -> StallReport:
    """The stalled ranks of a gathered view, and whom they wait for; ``silent``: bool per rank
    (watch/analysis/silence.py). A job none of whose live ranks can be stalled yet skips the ranks' places."""
    now = view.now - view.relays.behind_s
    stuck = stuck_columns(view.step_age, view.state_at, view.progress_at, now, view.stepped_at)
    if none_stuck(stuck[view.stated & ~silent], policy):
        return StallReport({}, [], None)
    return assess_places(places(view, now, silent), policy, world=view.world if view.sure else None, grace_s=pause_grace(view, silent))
