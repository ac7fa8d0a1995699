"""Why a slow rank is slow: the evidence its probe sends (probe/evidence.py), held against its peers'.

The step times say who and in which phase; they cannot tell a rank whose core
is shared with another process from one whose garbage collector runs every
step. Each rank's state carries rates over its last seconds (``ev``: time in
the garbage collector, time its training thread waited for a CPU); a slow
rank's figure is a *cause* when it is

- at least :data:`RATIO` times a healthy peer's (the lower median of its peers'
  figures, itself left out: with one peer, that peer's; the same rule as the
  step's excess, watch/analysis/stragglers.py),
- beyond it by at least :data:`FLOOR` seconds a second (1% of its time: a
  ratio over nothing is no evidence), and
- worth at least :data:`EXPLAINS` of the rank's excess per step: time it loses
  that way, per step, is a good part of what it adds to the job's step.

Work a rank is given is no time, so it is judged apart (:data:`LOADS`): a
slow rank's rows received in all-to-alls (``expert_load``) or inputs per step
(``input_imbalance``) are a cause at :data:`LOAD_RATIO` times a healthy peer's.
What they cost is estimated, as if its whole step grew with its load (at most
its excess). So are a GPU's clock against its peers' (``gpu_throttle``) and,
where the viewer says which phase is slow, a slow data phase
(``data_loader``, with the CPU its DataLoader workers use). Memory under pressure
(``memory_pressure``: the CUDA allocator's retries, pages swapped out) costs
what cannot be told from here: it is named with no cost, after the others.

Only ranks flagged slow get causes, so a healthy job has none, however its
ranks' figures differ. A rank is compared within its peer class (the ranks at
its pipeline stage), like its steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ranktop.watch import format as fmt
from ranktop.watch.model.rank_row import Cause
from ranktop.wire.messages import State

RATIO = 2.0
FLOOR = 0.01
EXPLAINS = 0.25


@dataclass(frozen=True)
class Kind:
    """A cause: its name, the evidence field it reads, and how its text says it."""

    name: str
    field: str  # of wire/messages.py's Evidence: seconds per second
    says: Callable[[str, str], str]  # (its time per step, its ratio to its peers) -> the text


KINDS = (
    Kind("gc_pause", "gc", lambda per_step, beyond: f"it spends {per_step} per step in Python's garbage collector, {beyond} (gc pause)"),
    Kind("cpu_contention", "runq", lambda per_step, beyond: f"its training thread waits {per_step} per step for a CPU, {beyond} (cpu contention)"),
)  # fmt: skip


#: A load this many times a healthy peer's is a cause (a healthy MoE's experts differ by less: routing noise).
LOAD_RATIO = 1.5
#: A GPU whose SM clock is this much below a healthy peer's (its peers' clock over its own) is throttled.
CLOCK_RATIO = 1.1
#: Memory pressure: allocator retries a second beyond its peers', and bytes swapped out beyond theirs.
RETRIES_FLOOR = 0.1
SWAP_FLOOR = 256 * 2**20


@dataclass(frozen=True)
class Load:
    """A cause read from the work a rank is given: its field, whether it is per second (else per step), its text."""

    name: str
    field: str  # of wire/messages.py's Evidence
    per_second: bool
    says: str  # the text's start, formatted with its ratio to its peers


LOADS = (
    Load("expert_load", "a2a_rows", True, "it receives {:.1f}x the all-to-all rows of its peers"),
    Load("input_imbalance", "tokens", False, "it takes in {:.1f}x the tokens of its peers"),
    Load("input_imbalance", "samples", False, "it takes in {:.1f}x the samples of its peers"),
)
#: The least figure a load or a clock is worth reading the peers' for (any above nothing).
_TINY = 1e-12
#: The phase a slow data loader shows in.
DATA_PHASE = "data"


def figures(states: Sequence[State], field: str, part: str = "ev") -> np.ndarray:
    """Each rank's evidence figure ``field`` (NaN where its state says none); ``part="gpu"``: a GPU gauge."""
    out = np.full(len(states), np.nan)
    for i, state in enumerate(states):
        if part == "ev":
            ev = state.ev
            value = getattr(ev, field) if ev is not None else None
        else:
            gpu = state.gpu
            value = gpu.get(field) if gpu is not None else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[i] = value
    return out


def column(
    states: Sequence[State], field: str, which: np.ndarray, peers_of: np.ndarray, at_least: float, part: str = "ev"
) -> np.ndarray | None:
    """:func:`figures` of ``field``, NaN for the ranks that are nobody's peers (``peers_of`` False), or None when no
    rank of ``which`` (the slow ones) has a figure of ``at_least``, the least that could make it a cause: a job of
    thousands of ranks pays a pass over every state only for a figure that may name one."""
    if not (figures([states[i] for i in which.tolist()], field, part) >= at_least).any():  # (NaN: False)
        return None
    values = figures(states, field, part)
    values[~peers_of] = np.nan
    return values


def peer_reference(values: np.ndarray, class_ids: np.ndarray | None, which: np.ndarray) -> np.ndarray:
    """For each rank of ``which`` (indices), a healthy peer's figure: the lower median of the other members of
    its class that have one (NaN: none has). ``values`` NaN: no figure."""
    out = np.full(len(which), np.nan)
    classes = class_ids if class_ids is not None else np.zeros(len(values), np.int64)
    for cls in np.unique(classes[which]):
        members = values[(classes == cls) & ~np.isnan(values)]
        ordered = np.sort(members)
        for k, i in enumerate(which):
            if classes[i] != cls:
                continue
            mine = values[i]
            if np.isnan(mine):
                peers = ordered
            else:  # leave one copy of its own figure out
                at = int(np.searchsorted(ordered, mine))
                peers = np.delete(ordered, at)
            if len(peers):
                out[k] = peers[(len(peers) - 1) // 2]
    return out


def _each(rule: Callable[..., Cause | None], mine: np.ndarray, reference: np.ndarray, step_s: np.ndarray,
          excess_s: np.ndarray, *more: Sequence) -> list[Cause | None]:  # fmt: skip
    """``rule(value, ref, step, excess, *more)`` for each rank of these columns (its figure, a healthy peer's, its
    step, its excess, and any further columns), or None where one of the first three is NaN (no figure, no peer's,
    not scored)."""
    return [
        None if value != value or ref != ref or step != step else rule(value, ref, step, excess, *rest)
        for value, ref, step, excess, *rest in zip(mine.tolist(), reference.tolist(), step_s.tolist(), excess_s.tolist(), *more)
    ]


def judge(
    values: np.ndarray, reference: np.ndarray, step_s: np.ndarray, excess_s: np.ndarray, kind: Kind
) -> list[Cause | None]:
    """The cause ``kind`` for each rank of these columns (its figure, a healthy peer's, its step, its excess), or None."""

    def rule(value: float, ref: float, step: float, excess: float) -> Cause | None:
        extra = (value - ref) * step
        if value < RATIO * ref or value - ref < FLOOR or extra < EXPLAINS * excess:
            return None
        ratio = value / ref if ref > 0 else None
        beyond = _beyond(ratio, ref * step)
        return Cause(kind=kind.name, text=kind.says(_per_step(value * step), beyond), value=value, peers=ref, ratio=ratio,
                     extra_s=extra)  # fmt: skip

    return _each(rule, values, reference, step_s, excess_s)


def judge_load(
    values: np.ndarray, reference: np.ndarray, step_s: np.ndarray, excess_s: np.ndarray, load: Load
) -> list[Cause | None]:
    """The cause ``load`` for each rank of these columns, or None: its figure :data:`LOAD_RATIO` times its peers'."""

    def rule(value: float, ref: float, step: float, excess: float) -> Cause | None:
        if ref <= 0 or value < LOAD_RATIO * ref:
            return None
        per_step = step if load.per_second else 1.0
        ratio = value / ref
        mine, peers = _count(value * per_step), _count(ref * per_step)
        text = f"{load.says.format(ratio)}, {mine} a step against {peers} ({load.name.replace('_', ' ')})"
        return Cause(kind=load.name, text=text, value=value, peers=ref, ratio=ratio, extra_s=_scaled(step, excess, ratio))

    return _each(rule, values, reference, step_s, excess_s)


def judge_clock(mine: np.ndarray, reference: np.ndarray, step_s: np.ndarray, excess_s: np.ndarray,
                reasons: Sequence[list | None]) -> list[Cause | None]:  # fmt: skip
    """``gpu_throttle`` for each rank of these columns (its SM clock, a healthy peer's, ..., its throttle reasons)."""

    def rule(value: float, ref: float, step: float, excess: float, why: list | None) -> Cause | None:
        if value <= 0 or ref < CLOCK_RATIO * value:
            return None
        slowing = [r for r in why or () if r in ("power", "thermal", "hw")]
        because = f" ({', '.join(slowing)} throttling)" if slowing else ""
        text = f"its GPU runs at {value:.0f} MHz against its peers' {ref:.0f}{because} (gpu throttle)"
        return Cause(kind="gpu_throttle", text=text, value=value, peers=ref, ratio=value / ref,
                     extra_s=_scaled(step, excess, ref / value))  # fmt: skip

    return _each(rule, mine, reference, step_s, excess_s, reasons)


def judge_memory(retries: float, peers_retries: float, swap: float, peers_swap: float) -> Cause | None:
    """``memory_pressure`` of one rank: allocator retries, or memory swapped out, well beyond a healthy peer's."""
    if retries == retries and retries - _zero(peers_retries) >= RETRIES_FLOOR and retries >= 2 * _zero(peers_retries):
        ref = _zero(peers_retries)
        text = (f"its CUDA allocator retries {retries:.1f} allocations a second against its peers' {ref:.1f}, "
                "freeing its cache and waiting for the GPU each time (memory pressure)")  # fmt: skip
        return Cause(kind="memory_pressure", text=text, value=retries, peers=ref, ratio=retries / ref if ref else None, extra_s=0.0)
    if swap == swap and swap - _zero(peers_swap) >= SWAP_FLOOR and swap >= 2 * _zero(peers_swap):
        ref = _zero(peers_swap)
        text = f"{fmt.size(swap)} of its memory is swapped out against its peers' {fmt.size(ref)} (memory pressure)"
        return Cause(kind="memory_pressure", text=text, value=swap, peers=ref, ratio=swap / ref if ref else None, extra_s=0.0)
    return None


def data_loader(data_s: float, peers_data_s: float, workers: float, peers_workers: float, count: float) -> Cause:
    """``data_loader`` for a rank whose slow phase is data: its data phase against a healthy peer's, and the CPUs
    its DataLoader workers use against theirs where /proc shows them."""
    text = f"its data phase takes {_per_step(data_s)} per step against its peers' {_per_step(_zero(peers_data_s))}"
    if count == count and count == 0:
        text += ", loaded on its training thread (no DataLoader workers)"
    elif workers == workers and count == count:
        text += f"; its {count:.0f} DataLoader workers use {workers:.1f} CPUs"
        text += f" against its peers' {peers_workers:.1f}" if peers_workers == peers_workers else ""
    extra = max(0.0, data_s - _zero(peers_data_s))
    ref = _zero(peers_data_s)
    return Cause(kind="data_loader", text=text + " (data loader)", value=data_s, peers=ref,
                 ratio=data_s / ref if ref > 0 else None, extra_s=extra,
                 workers=count if count == count else None, workers_cpus=workers if workers == workers else None,
                 peers_workers_cpus=peers_workers if peers_workers == peers_workers else None)  # fmt: skip


def of_ranks(
    states: Sequence[State], step_s: np.ndarray, excess_s: np.ndarray, slow: np.ndarray, live: np.ndarray,
    class_ids: np.ndarray | None, evidence: Mapping[str, np.ndarray] | None = None, *, culprit: np.ndarray | None = None,
    names: Sequence[str] = (), phases: np.ndarray | None = None,
) -> dict[int, list[Cause]]:  # fmt: skip
    """Row index -> the causes of each slow rank that has any, the one that costs most per step first. ``live``:
    the ranks whose figures count as peers' (not silent, scored). ``evidence``: the fields a gathered view keeps
    as columns (watch/engine/rank_scalars.py), read instead of a pass over the states. ``culprit`` (an index into
    ``names`` per rank, -1: none) and ``phases`` (ranks x names, seconds per step): where given, a rank slow in
    its data phase is named with ``data_loader``."""
    which = np.flatnonzero(slow)
    if not len(which):
        return {}
    found: dict[int, list[Cause]] = {}
    switches = None
    peers_of = live | slow

    def kept(field: str) -> np.ndarray | None:
        return evidence[field].copy() if evidence is not None and field in evidence else None

    step, excess = step_s[which], excess_s[which]

    def judged(field: str, at_least: float, judge_columns, part: str = "ev") -> list[tuple[int, Cause]]:
        """(row, cause) of each slow rank its figure ``field`` names, by ``judge_columns(its figures, its peers')``."""
        values = kept(field)  # (a GPU gauge too: ``sm_mhz``, where a gathered view keeps it)
        if values is not None:
            values[~peers_of] = np.nan
        else:
            values = column(states, field, which, peers_of, at_least, part)
        if values is None:
            return []
        found_here = judge_columns(values[which], peer_reference(values, class_ids, which))
        return [(i, cause) for i, cause in zip(which.tolist(), found_here) if cause is not None]

    for load in LOADS:
        for i, cause in judged(load.field, _TINY, lambda mine, peers, load=load: judge_load(mine, peers, step, excess, load)):
            if not any(c.kind == cause.kind for c in found.get(i, ())):
                found.setdefault(i, []).append(cause)
    reasons = [(states[i].gpu or {}).get("throttle") for i in which.tolist()]
    for i, cause in judged("sm_mhz", _TINY, lambda mine, peers: judge_clock(mine, peers, step, excess, reasons), "gpu"):
        found.setdefault(i, []).append(cause)
    _memory(states, which, peers_of, class_ids, found)
    if culprit is not None and phases is not None and DATA_PHASE in names:
        _data_loader(states, which, peers_of, class_ids, culprit, list(names).index(DATA_PHASE), phases, found)
    for kind in KINDS:
        for i, cause in judged(kind.field, FLOOR, lambda mine, peers, kind=kind: judge(mine, peers, step, excess, kind)):
            if kind.name == "cpu_contention":
                if switches is None:
                    switches = kept("nvcsw")
                    switches = figures(states, "nvcsw") if switches is None else switches
                peers = peer_reference(switches, class_ids, np.array([i]))[0]
                cause = _with_switches(cause, switches[i], peers)
            found.setdefault(i, []).append(cause)
    return {i: sorted(causes, key=lambda c: -c.extra_s) for i, causes in found.items()}


def _memory(states: Sequence[State], which: np.ndarray, peers_of: np.ndarray, class_ids: np.ndarray | None,
            found: dict[int, list[Cause]]) -> None:  # fmt: skip
    retries, swap = column(states, "retries", which, peers_of, RETRIES_FLOOR), column(states, "swap", which, peers_of, SWAP_FLOOR)
    if retries is None and swap is None:
        return
    nothing = np.full(len(states), np.nan)
    retries, swap = nothing if retries is None else retries, nothing if swap is None else swap
    peers_retries, peers_swap = peer_reference(retries, class_ids, which), peer_reference(swap, class_ids, which)
    for k, i in enumerate(which.tolist()):
        cause = judge_memory(retries[i], peers_retries[k], swap[i], peers_swap[k])
        if cause is not None:
            found.setdefault(i, []).append(cause)


def _data_loader(states: Sequence[State], which: np.ndarray, peers_of: np.ndarray, class_ids: np.ndarray | None,
                 culprit: np.ndarray, data: int, phases: np.ndarray, found: dict[int, list[Cause]]) -> None:  # fmt: skip
    in_data = which[culprit[which] == data]
    if not len(in_data):
        return
    data_s = np.where(peers_of, phases[:, data], np.nan)
    workers, count = figures(states, "kids"), figures(states, "kids_n")
    workers[~peers_of] = np.nan
    peers_data, peers_workers = peer_reference(data_s, class_ids, in_data), peer_reference(workers, class_ids, in_data)
    for k, i in enumerate(in_data.tolist()):
        found.setdefault(i, []).append(data_loader(data_s[i], peers_data[k], workers[i], peers_workers[k], count[i]))


def _scaled(step: float, excess: float, ratio: float) -> float:
    """What ``ratio`` times its peers' work costs a rank if its whole step grew with it, at most its excess."""
    return min(excess, step * (1 - 1 / ratio)) if ratio > 0 else 0.0


def _zero(value: float) -> float:
    return 0.0 if value != value else value


def _count(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def _with_switches(cause: Cause, mine: float, peers: float) -> Cause:
    if mine != mine:
        return cause
    text = cause.text.removesuffix(" (cpu contention)")
    text += f", {mine:.0f} involuntary context switches a second"
    text += f" against {peers:.0f} (cpu contention)" if peers == peers else " (cpu contention)"
    return Cause(**{**cause.__dict__, "text": text, "switches_per_s": mine, "peers_switches_per_s": None if peers != peers else peers})


def _beyond(ratio: float | None, peers_per_step: float) -> str:
    """How far beyond its peers: "9.5x its peers' 1.3 ms"; past 100x (or over nothing), their figure alone."""
    if ratio is None or ratio >= 100 or peers_per_step < 0.00005:
        return f"against its peers' {_per_step(peers_per_step)}"
    return f"{ratio:.1f}x its peers' {_per_step(peers_per_step)}"


def _per_step(seconds: float) -> str:
    return f"{fmt.ms_brief(seconds)} ms"
