"""Why a slow rank is slow: the evidence its probe sends (probe/evidence.py), held against its peers'.

The step times say who and in which phase; they cannot tell a rank whose core
is shared with another process from one whose garbage collector runs every
step. Each rank's state carries rates over its last seconds (``ev``); a slow
rank's figure is held against a healthy peer's (the lower median of its peers'
figures, itself left out: with one peer, that peer's; the same rule as the
step's excess, watch/analysis/stragglers.py), and every cause says what share
of the rank's excess it explains (``explains``, 0-1).

Evidence or nothing: each cause reads a figure of its own, never the phase
name. Costs measured before estimated:

- **measured** (``basis="measured"``): a time the rank lost, per step, beyond
  its peers': ``gc_pause`` (time in the garbage collector), ``cpu_contention``
  and ``oversubscribed`` (waits on a run queue; another process's, or its own
  threads' when they use its cores), ``data_loader`` (time inside the
  DataLoader's ``__next__`` less the GC and run-queue time it may hold),
  ``recompile`` (time torch.compile spent compiling), ``host_bound`` (CPU time
  of the training thread the others leave unexplained: Python the step waits on),
  ``page_faults`` (major faults, costed by the time the thread was blocked off its
  CPU outside its collectives, and its kernel time, beyond its peers').
  Such a figure is a cause at :data:`RATIO` times a healthy peer's (a kind's
  own in :data:`RATIOS`) and :data:`FLOOR` seconds a second beyond it.
- **estimated** (``basis="estimated"``): work it is given, as a ratio:
  ``expert_load`` (all-to-all rows), ``input_imbalance`` (padded tokens where
  said, else tokens, else samples), ``gpu_throttle`` (SM clock). What it costs
  is estimated from the ratio and the rank's own compute (its step less its
  collective wait and its data phase): ``compute * (1 - 1/ratio)``, never
  simply the excess.
- **untold** (``basis="untold"``): ``memory_pressure`` (allocator retries,
  swap) is named with no cost (``explains`` 0).

Causes come measured first, then estimated, then untold, each costliest
first. The verdict (watch/model/verdict.py) says "because" for the first that
explains :data:`BECAUSE` or more, "partly because" from :data:`PARTLY`; when
none does, a last entry of kind ``unknown`` lists what the rank's evidence
ruled out ("not GC, CPU contention, input size or memory").

Only ranks flagged slow get causes, so a healthy job has none, however its
ranks' figures differ. A rank is compared within its peer class (the ranks at
its pipeline stage), like its steps.

Beyond one rank, by the same shares: a slow node's other processes (:func:`of_nodes`, ``node_busy``), a stalled
rank's stack (:func:`of_stalls`: what it is in now, ``basis="seen"``), and a job slower than itself
(:class:`JobEvidence`: its ranks' medians against the job's own past), which also learns each class's healthy
routing spread for ``expert_load``.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from ranktop.watch import format as fmt
from ranktop.watch.model.rank_row import (
    BECAUSE as BECAUSE,
    PARTLY as PARTLY,
    UNKNOWN_CAUSE,
    Cause,
    named_cause,
)  # (the shares, said here too)

from ranktop.wire.messages import Gpu, State


class States(Protocol):
    """Each row's last state, by row: the store's column of them (an object array, watch/engine/rank_store.py) or a
    list. The rows read are those judged, which have one."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[State]: ...
    def __getitem__(self, row: int, /) -> State: ...


#: :func:`of_ranks`' ``pair``: a figure's column for the slow ranks and a healthy peer's, or None (none could be a cause).
Pair = Callable[..., "tuple[np.ndarray, np.ndarray] | None"]

#: A measured figure is a cause at this many times a healthy peer's (a kind's own in :data:`RATIOS`) ...
RATIO = 2.0
#: ... and this many seconds a second beyond it (1% of its time: a ratio over nothing is no evidence).
FLOOR = 0.01

MEASURED, ESTIMATED, UNTOLD, NONE = "measured", "estimated", "untold", "none"
_ORDER = {MEASURED: 0, ESTIMATED: 1, UNTOLD: 2, NONE: 3}


@dataclass(frozen=True)
class Kind:
    """A cause: its name, the evidence field it reads, and how its text says it."""

    name: str
    field: str  # of wire/messages.py's Evidence: seconds per second
    says: Callable[[str, str], str]  # (its time per step, its ratio to its peers) -> the text


KINDS = (
    Kind("gc_pause", "gc", lambda per_step, beyond: f"it spends {per_step} per step in Python's garbage collector, {beyond} (gc pause)"),
    Kind("cpu_contention", "runq",
         lambda per_step, beyond: f"its training thread waits {per_step} per step for a CPU, {beyond} (cpu contention)"),
)  # fmt: skip
GC_KIND, RUNQ_KIND = KINDS
#: ``cpu_contention`` where the training threads' CPU time is known: its wait against what its peers wait for as
#: much CPU (on a busy machine a thread waits in proportion to the CPU it asks for: more work waits more).
RUNQ_SCALED_KIND = Kind(
    "cpu_contention",
    "runq",
    lambda per_step, beyond: f"its training thread waits {per_step} per step for a CPU, {beyond} for as much CPU time (cpu contention)",
)
LOADER_KIND = Kind("data_loader", "ld", lambda per_step, beyond: f"it waits {per_step} per step inside its DataLoader's __next__, {beyond}")
COMPILE_KIND = Kind("recompile", "jit", lambda per_step, beyond: f"torch.compile spends {per_step} per step compiling on it, {beyond}")
HOST_KIND = Kind("host_bound", "cpu", lambda per_step, beyond: f"its training thread runs {per_step} per step on a CPU, {beyond}")
#: The ratio to a healthy peer's a kind needs, where not :data:`RATIO`: a loader's wait and a thread's CPU time
#: are large on every rank, so their difference, not their ratio, is the news.
RATIOS = {"data_loader": 1.3, "host_bound": 1.2}

#: A load this many times a healthy peer's is a cause (a healthy MoE's experts differ by less: routing noise).
LOAD_RATIO = 1.5
#: A GPU whose SM clock is this much below a healthy peer's (its peers' clock over its own) is throttled ...
CLOCK_RATIO = 1.1
#: ... when power or heat held its clocks down this share of the sampler's window (probe/gpu_sampler.py).
HELD_SHARE = 0.2
#: The GPU gauge of the clock, and the one over the sampler's window read instead where the rank sends it.
CLOCK_FIELD, WINDOWED_CLOCK = "sm_mhz", "sm_avg"
#: Memory pressure: allocator retries a second beyond its peers', and bytes swapped out beyond theirs.
RETRIES_FLOOR = 0.1
SWAP_FLOOR = 256 * 2**20
#: Its own other threads use this many CPUs beyond its peers', and that CPU per step is this share of its
#: run-queue wait or more: the rank contends with itself (``oversubscribed``), not with another process.
OWN_CPUS = 0.3
OWN_SHARE = 0.5


@dataclass(frozen=True)
class Load:
    """A cause read from the work a rank is given: its field, whether it is per second (else per step), its text."""

    name: str
    field: str  # of wire/messages.py's Evidence
    per_second: bool
    says: str  # the text's start, formatted with its ratio to its peers


LOADS = (
    Load("expert_load", "a2a_rows", True, "it receives {:.1f}x the all-to-all rows of its peers"),
    Load("input_imbalance", "padded", False, "it computes on {:.1f}x the tokens of its peers, padding included"),
    Load("input_imbalance", "tokens", False, "it takes in {:.1f}x the tokens of its peers"),
    Load("input_imbalance", "samples", False, "it takes in {:.1f}x the samples of its peers"),
)
#: Which input figure stands for the rank's work: the first of these it sends (padding is compute).
INPUT_FIELDS = ("padded", "tokens", "samples")
#: The least figure a load or a clock is worth reading the peers' for (any above nothing).
_TINY = 1e-12
#: The phase a DataLoader's wait shows in (left out of the compute a ratio is applied to).
DATA_PHASE = "data"

#: What the verdict's "cause unknown" says was ruled out, by the figures the rank sent, in this order.
RULED_OUT = (
    ("GC", ("gc",)), ("CPU contention", ("runq",)), ("Python on its CPU", ("cpu",)), ("the data loader", ("ld",)),
    ("recompiles", ("jit_n",)), ("input size", ("padded", "tokens", "samples", "a2a_rows")),
    ("page faults", ("majflt",)), ("memory", ("swap", "retries")),
)  # fmt: skip
#: Every kind a cause may have (docs/json-schema.md lists each with its evidence).
ALL_KINDS = ("gc_pause", "cpu_contention", "oversubscribed", "data_loader", "recompile", "host_bound", "page_faults",
             "expert_load", "input_imbalance", "gpu_throttle", "memory_pressure", "node_busy", "checkpoint_write",
             "unknown")  # fmt: skip

#: Page faults: major faults a second this many times a healthy peer's (:data:`RATIO`) and this many beyond it.
MAJFLT_FLOOR = 20.0


#: Figures a rank's evidence leaves out until it has any (dynamo never imported, no DataLoader iterated): a rank
#: that sends evidence without them has spent nothing there, which is a peer's figure all the same (0).
NIL_WHEN_ABSENT = frozenset({"jit", "jit_n", "breaks", "ld", "ld_cpu"})


def figures(states: States, field: str, part: str = "ev") -> np.ndarray:
    """Each rank's evidence figure ``field`` (NaN where its state says none; 0 for :data:`NIL_WHEN_ABSENT`'s
    when it sends evidence without it); ``part="gpu"``: a GPU gauge."""
    out = np.full(len(states), np.nan)
    nil = 0.0 if part == "ev" and field in NIL_WHEN_ABSENT else None
    for i, state in enumerate(states):
        if part == "ev":
            ev = state.ev
            value = (nil if (value := getattr(ev, field)) is None else value) if ev is not None else None
        else:
            gpu = state.gpu
            value = gpu.get(field) if gpu is not None else None
            if field == CLOCK_FIELD and gpu is not None and _number(gpu.get(WINDOWED_CLOCK)):
                value = gpu.get(WINDOWED_CLOCK)  # the clock over the sampler's window, where sent
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[i] = value
    return out


def column(states: States, field: str, which: np.ndarray, peers_of: np.ndarray, at_least: float, part: str = "ev") -> np.ndarray | None:
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
          excess_s: np.ndarray, *more: Sequence[Any]) -> list[Cause | None]:  # fmt: skip
    """``rule(value, ref, step, excess, *more)`` for each rank of these columns (its figure, a healthy peer's, its
    step, its excess, and any further columns), or None where one of the first three is NaN (no figure, no peer's,
    not scored)."""
    return [
        None if value != value or ref != ref or step != step else rule(value, ref, step, excess, *rest)
        for value, ref, step, excess, *rest in zip(mine.tolist(), reference.tolist(), step_s.tolist(), excess_s.tolist(), *more)
    ]


def share(extra: float, excess: float) -> float:
    """The share of ``excess`` that ``extra`` explains, within [0, 1]."""
    if excess != excess or excess <= 0 or extra != extra:
        return 0.0
    return float(min(1.0, max(0.0, extra / excess)))


def judge(values: np.ndarray, reference: np.ndarray, step_s: np.ndarray, excess_s: np.ndarray, kind: Kind,
          less: np.ndarray | None = None) -> list[Cause | None]:  # fmt: skip
    """The measured cause ``kind`` for each rank of these columns (its figure, a healthy peer's, its step, its
    excess), or None: its figure :data:`RATIO` times its peers' (``RATIOS``) and :data:`FLOOR` beyond. ``less``:
    seconds per step of the difference that other measured causes already hold (its cost is what remains)."""
    ratio_needed = RATIOS.get(kind.name, RATIO)
    spent = np.zeros(len(values)) if less is None else less

    def rule(value: float, ref: float, step: float, excess: float, held: float) -> Cause | None:
        extra = (value - ref) * step - held
        if value < ratio_needed * ref or value - ref < FLOOR or extra <= 0 or extra < FLOOR * step:
            return None
        ratio = value / ref if ref > 0 else None
        beyond = _beyond(ratio, ref * step)
        return Cause(kind=kind.name, text=kind.says(_per_step(value * step), beyond), value=value, peers=ref, ratio=ratio,
                     extra_s=extra, explains=share(extra, excess), basis=MEASURED)  # fmt: skip

    return _each(rule, values, reference, step_s, excess_s, spent.tolist())


def judge_load(values: np.ndarray, reference: np.ndarray, step_s: np.ndarray, excess_s: np.ndarray, load: Load,
               compute_s: np.ndarray | None = None, needed: np.ndarray | None = None) -> list[Cause | None]:  # fmt: skip
    """The cause ``load`` for each rank of these columns, or None: its figure :data:`LOAD_RATIO` times its peers'
    (``needed``: each rank's own ratio, where its class's healthy spread is learned: :class:`JobEvidence`).
    Its cost is estimated: the rank's own compute per step (``compute_s``; else its step) had it done its peers'
    work, ``compute * (1 - 1/ratio)``."""
    compute = step_s if compute_s is None else compute_s
    ratios = np.full(len(values), LOAD_RATIO) if needed is None else needed

    def rule(value: float, ref: float, step: float, excess: float, own: float, at_least: float) -> Cause | None:
        if ref <= 0 or value < at_least * ref:
            return None
        per_step = step if load.per_second else 1.0
        ratio = value / ref
        mine, peers = _count(value * per_step), _count(ref * per_step)
        text = f"{load.says.format(ratio)}, {mine} a step against {peers} ({load.name.replace('_', ' ')})"
        extra = _scaled(own, ratio)
        return Cause(kind=load.name, text=text, value=value, peers=ref, ratio=ratio, extra_s=extra,
                     explains=share(extra, excess), basis=ESTIMATED)  # fmt: skip

    return _each(rule, values, reference, step_s, excess_s, compute.tolist(), ratios.tolist())


def judge_clock(mine: np.ndarray, reference: np.ndarray, step_s: np.ndarray, excess_s: np.ndarray,
                reasons: Sequence[list[str] | None], compute_s: np.ndarray | None = None,
                held: Sequence[dict[str, float] | None] | None = None) -> list[Cause | None]:  # fmt: skip
    """``gpu_throttle`` for each rank of these columns (its SM clock over the sampler's window, a healthy peer's,
    ..., its throttle reasons now, and ``held``: the shares of the window its clocks were held down by power and by
    heat, probe/gpu_sampler.py), or None. A clock :data:`CLOCK_RATIO` below its peers' is a cause only with a
    reason: held down :data:`HELD_SHARE` of the window by power or heat where the shares are said, else a power or
    thermal reason now (a probe before the shares); a lower clock alone is a symptom (a GPU less busy clocks
    otherwise). Its cost estimated as a load's, from the clocks' ratio and its compute."""
    compute = step_s if compute_s is None else compute_s
    shares = list(held) if held is not None else [None] * len(mine)

    def rule(value: float, ref: float, step: float, excess: float, why: list[str] | None, own: float,
             kept: dict[str, float] | None) -> Cause | None:  # fmt: skip
        if value <= 0 or ref < CLOCK_RATIO * value:
            return None
        if kept:
            said = [(name, share_) for name, share_ in kept.items() if share_ >= HELD_SHARE]
            if not said:
                return None
            because = " (held down by " + " and ".join(f"{name} {share_:.0%} of the time" for name, share_ in said) + ")"
        else:
            slowing = [r for r in why or () if r in ("power", "thermal", "hw")]
            if not slowing:
                return None
            because = f" ({', '.join(slowing)} throttling)"
        text = f"its GPU runs at {value:.0f} MHz against its peers' {ref:.0f}{because} (gpu throttle)"
        extra = _scaled(own, ref / value)
        return Cause(kind="gpu_throttle", text=text, value=value, peers=ref, ratio=value / ref, extra_s=extra,
                     explains=share(extra, excess), basis=ESTIMATED)  # fmt: skip

    return _each(rule, mine, reference, step_s, excess_s, reasons, compute.tolist(), shares)


def held_shares(gpu: Gpu | None) -> dict[str, float] | None:
    """The shares of its sampler's window a GPU's clocks were held down, by what (``power``, ``heat``), where its
    gauges say them (probe/gpu_sampler.py ``held_power``, ``held_thermal``); None where they do not."""
    if not gpu:
        return None
    out = {}
    for key, name in (("held_power", "power"), ("held_thermal", "heat")):
        value = gpu.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
            out[name] = float(value)
    return out or None


def judge_memory(retries: float, peers_retries: float, swap: float, peers_swap: float) -> Cause | None:
    """``memory_pressure`` of one rank: allocator retries, or memory swapped out, well beyond a healthy peer's.
    What it costs is not told from here (``explains`` 0): named, never the verdict's "because"."""
    if retries == retries and retries - _zero(peers_retries) >= RETRIES_FLOOR and retries >= 2 * _zero(peers_retries):
        ref = _zero(peers_retries)
        text = (f"its CUDA allocator retries {retries:.1f} allocations a second against its peers' {ref:.1f}, "
                "freeing its cache and waiting for the GPU each time (memory pressure)")  # fmt: skip
        return Cause(kind="memory_pressure", text=text, value=retries, peers=ref, ratio=retries / ref if ref else None,
                     extra_s=0.0, explains=0.0, basis=UNTOLD)  # fmt: skip
    if swap == swap and swap - _zero(peers_swap) >= SWAP_FLOOR and swap >= 2 * _zero(peers_swap):
        ref = _zero(peers_swap)
        text = f"{fmt.size(swap)} of its memory is swapped out against its peers' {fmt.size(ref)} (memory pressure)"
        return Cause(kind="memory_pressure", text=text, value=swap, peers=ref, ratio=swap / ref if ref else None,
                     extra_s=0.0, explains=0.0, basis=UNTOLD)  # fmt: skip
    return None


def unknown(ruled_out: Sequence[str]) -> Cause:
    """The last entry of a slow rank no cause explains: what its evidence ruled out."""
    names = list(ruled_out)
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return Cause(kind=UNKNOWN_CAUSE, text=f"not {listed}", value=0.0, peers=0.0, ratio=None, extra_s=0.0, explains=0.0,
                 basis=NONE, ruled_out=tuple(names))  # fmt: skip


#: The cause the verdict names among a rank's (watch/model/rank_row.py).
explaining = named_cause


def of_ranks(
    states: States, step_s: np.ndarray, excess_s: np.ndarray, slow: np.ndarray, live: np.ndarray,
    class_ids: np.ndarray | None, evidence: Mapping[str, np.ndarray] | None = None, *, culprit: np.ndarray | None = None,
    names: Sequence[str] = (), phases: np.ndarray | None = None, comm_s: np.ndarray | None = None,
    load_ratio: np.ndarray | None = None,
) -> dict[int, list[Cause]]:  # fmt: skip
    """Row index -> the causes of each slow rank that has any: measured first, then estimated, then untold, each
    costliest first, and ``unknown`` last when none explains :data:`PARTLY` of its excess. ``live``: the ranks
    whose figures count as peers' (not silent, scored). ``evidence``: the fields a gathered view keeps as columns
    (watch/engine/rank_scalars.py), read instead of a pass over the states. ``names``/``phases`` (ranks x names,
    seconds per step) and ``comm_s`` (its collective wait per step): where given, they take the data phase and
    the wait out of the compute a ratio is applied to. ``load_ratio``: per row, the ratio of all-to-all rows to its
    peers' an ``expert_load`` needs (its class's healthy routing spread, learned: :meth:`JobEvidence.load_ratios`;
    None: :data:`LOAD_RATIO`). (``culprit`` is accepted and not read: a phase's name is no evidence.)"""
    del culprit
    which = np.flatnonzero(slow)
    if not len(which):
        return {}
    found: dict[int, list[Cause]] = {}
    peers_of = live | slow
    k_all = len(which)
    step, excess = step_s[which], excess_s[which]

    def kept(field: str) -> np.ndarray | None:
        return evidence[field].copy() if evidence is not None and field in evidence else None

    def pair(field: str, at_least: float, part: str = "ev") -> tuple[np.ndarray, np.ndarray] | None:
        """(the slow ranks' figures, a healthy peer's for each), or None when no slow rank has ``at_least``."""
        values = kept(field)  # (a GPU gauge too: ``sm_mhz``, where a gathered view keeps it)
        if values is not None:
            values[~peers_of] = np.nan
        else:
            values = column(states, field, which, peers_of, at_least, part)
        if values is None:
            return None
        return values[which], peer_reference(values, class_ids, which)

    def add(causes_found: list[Cause | None]) -> None:
        for i, cause in zip(which.tolist(), causes_found):
            if cause is not None:
                found.setdefault(i, []).append(cause)

    def beyond(field: str, at_least: float = FLOOR) -> np.ndarray:
        """Seconds per step of ``field`` beyond a healthy peer's (0 where not said or not beyond)."""
        got = pair(field, at_least)
        if got is None:
            return np.zeros(k_all)
        mine, ref = got
        return np.nan_to_num(np.maximum(0.0, (mine - ref) * step), nan=0.0)

    compute = _compute(step, which, names, phases, comm_s)
    # estimated: the work it is given
    loads_est = np.zeros(k_all)
    judged_inputs = np.zeros(k_all, bool)  # its input figure has been read (padded, else tokens, else samples)
    for load in LOADS:
        got = pair(load.field, _TINY)
        if got is None:
            continue
        mine, ref = got
        needed = load_ratio[which] if load_ratio is not None and load.name == "expert_load" else None
        here = judge_load(mine, ref, step, excess, load, compute, needed)
        if load.name == "input_imbalance":  # the first input figure it and its peers send stands for its work
            here = [None if judged_inputs[k] else c for k, c in enumerate(here)]
            judged_inputs |= (np.nan_to_num(mine) > 0) & (np.nan_to_num(ref) > 0)
        for k, c in enumerate(here):
            if c is not None:
                loads_est[k] = max(loads_est[k], c.extra_s)
        add(here)
    got = pair("sm_mhz", _TINY, "gpu")
    if got is not None:
        reasons = [_throttle(states[i].gpu) for i in which.tolist()]
        held = [held_shares(states[i].gpu) for i in which.tolist()]
        add(judge_clock(got[0], got[1], step, excess, reasons, compute, held))
    _memory(states, which, peers_of, class_ids, found)
    # measured: time it lost
    gc_s, jit_s = beyond("gc"), beyond("jit")
    cpu_got = pair("cpu", FLOOR)
    # what its peers wait for a CPU per CPU second they run (0 where not known): the wait any rank's CPU work meets
    wait_per_cpu = np.zeros(k_all)
    runq_got = pair("runq", FLOOR)
    if cpu_got is not None and runq_got is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            wait_per_cpu = np.nan_to_num(np.where(cpu_got[1] > 0, runq_got[1] / cpu_got[1], 0.0), nan=0.0, posinf=0.0)
    got = pair("gc", FLOOR)
    if got is not None:
        add(judge(got[0], got[1], step, excess, GC_KIND))
    got = pair("jit", FLOOR)
    if got is not None:
        add(_with_compiles(judge(got[0], got[1], step, excess, COMPILE_KIND), which, states))
    runq_s = np.zeros(k_all)
    if runq_got is not None:
        mine, ref = runq_got
        kind = RUNQ_KIND
        if cpu_got is not None:  # its peers' wait, for as much CPU as its own
            scaled = cpu_got[0] * wait_per_cpu
            ref, kind = np.where(np.isnan(scaled) | (cpu_got[1] <= 0), ref, scaled), RUNQ_SCALED_KIND
        contention = _contention(judge(mine, ref, step, excess, kind), states, which, pair, step)
        runq_s = np.array([0.0 if c is None else c.extra_s for c in contention])
        add(contention)
    got = pair("ld", FLOOR)
    if got is not None:
        loader = judge(got[0], got[1], step, excess, LOADER_KIND, gc_s + runq_s)
        add(_with_workers(loader, states, which, pair))
    got = pair("majflt", MAJFLT_FLOOR)
    if got is not None:
        blocked = _blocked(states, step_s, comm_s, peers_of, class_ids, which)
        add(_page_faults(got[0], got[1], blocked, beyond("sys") if blocked is not None else None, step, excess))
    if cpu_got is not None:  # (its kernel time, page faults' and system calls', is not Python the step waits on)
        held = gc_s + jit_s + beyond("ld_cpu") + loads_est + beyond("sys")
        add(_host_bound(judge(cpu_got[0], cpu_got[1], step, excess, HOST_KIND, held), wait_per_cpu, excess))
    out: dict[int, list[Cause]] = {}
    for k, i in enumerate(which.tolist()):
        told = sorted(found.get(i, ()), key=lambda c: (_ORDER.get(c.basis, 3), -c.extra_s))
        if named_cause(told) is None:
            ruled = _ruled_out(states[i], evidence, i, told)
            if ruled:
                told.append(unknown(ruled))
        if told:
            out[i] = told
    return out


def _throttle(gpu: Gpu | None) -> list[str] | None:
    """A GPU's clock slowdown reasons now, where its gauges say them (read by name, as a map of gauges reads too)."""
    return gpu.get("throttle") if gpu is not None else None


def _compute(step: np.ndarray, which: np.ndarray, names: Sequence[str], phases: np.ndarray | None,
             comm_s: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """Each slow rank's own compute per step, what a ratio of work scales: its step less its collective wait and
    its data phase, where known."""
    out = step.copy()
    if comm_s is not None:
        out -= np.nan_to_num(comm_s[which], nan=0.0)
    if phases is not None and DATA_PHASE in names:
        out -= np.nan_to_num(phases[which, list(names).index(DATA_PHASE)], nan=0.0)
    return np.maximum(out, 0.0)


def _ruled_out(state: State, evidence: Mapping[str, np.ndarray] | None, row: int, causes: Sequence[Cause]) -> list[str]:
    """What the rank's own figures rule out: each family it sends a figure of (none explains enough), but memory
    when it is under pressure (a cause whose cost is not told is not ruled out)."""
    ev = state.ev
    out = []
    untold = any(c.basis == UNTOLD for c in causes)
    for name, fields in RULED_OUT:
        if untold and name == "memory":
            continue
        for field in fields:
            value = getattr(ev, field, None) if ev is not None else None
            if value is None and evidence is not None and field in evidence:
                column_value = evidence[field][row]
                value = None if column_value != column_value else column_value
            if value is not None:
                out.append(name)
                break
    return out


def _contention(found: list[Cause | None], states: States, which: np.ndarray, pair: Pair, step: np.ndarray) -> list[Cause | None]:
    """A run-queue wait is ``oversubscribed`` when the rank's own other threads use most of its cores and more CPU
    beyond its peers' than half its wait; else ``cpu_contention`` (another process), with its switches."""
    if not any(c is not None for c in found):
        return found
    cpu, pcpu, switches = pair("cpu", 0.0), pair("pcpu", 0.0), pair("nvcsw", 0.0)
    out: list[Cause | None] = []
    for k, cause in enumerate(found):
        if cause is None:
            out.append(None)
            continue
        i = int(which[k])
        ev = states[i].ev
        cores = getattr(ev, "cores", None) if ev is not None else None
        if cpu is not None and pcpu is not None:
            others, peers_others = pcpu[0][k] - cpu[0][k], pcpu[1][k] - cpu[1][k]
            beyond_peers = others - _zero(peers_others)
            if others == others and beyond_peers >= OWN_CPUS and beyond_peers * step[k] >= OWN_SHARE * cause.extra_s:
                threads = getattr(ev, "thr", None)
                many = f"its own {threads} threads" if threads else "its own threads"
                text = cause.text.removesuffix(" (cpu contention)")
                of = f" of its {cores} CPUs" if cores else " CPUs"
                text += f", while {many} use {pcpu[0][k]:.1f}{of} (oversubscribed)"
                out.append(Cause(**{**cause.__dict__, "kind": "oversubscribed", "text": text}))
                continue
        if switches is not None:
            cause = _with_switches(cause, switches[0][k], switches[1][k])
        out.append(cause)
    return out


def _with_workers(found: list[Cause | None], states: States, which: np.ndarray, pair: Pair) -> list[Cause | None]:
    """``data_loader``'s text with the CPU its training thread used there and its DataLoader workers' CPU."""
    if not any(c is not None for c in found):
        return found
    workers = pair("kids", 0.0)
    out: list[Cause | None] = []
    for k, cause in enumerate(found):
        if cause is None:
            out.append(None)
            continue
        ev = states[int(which[k])].ev
        count = getattr(ev, "kids_n", None) if ev is not None else None
        mine = workers[0][k] if workers is not None else float("nan")
        peers = workers[1][k] if workers is not None else float("nan")
        text = cause.text
        if count == 0:
            text += ", loaded on its training thread (no DataLoader workers)"
        elif count is not None and mine == mine:
            text += f"; its {count:.0f} DataLoader workers use {mine:.1f} CPUs"
            text += f" against its peers' {peers:.1f}" if peers == peers else ""
        # (a name of its own: the column pair above is read again for the next rank)
        figures_said = {
            "workers": None if count is None else float(count),
            "workers_cpus": mine if mine == mine else None,
            "peers_workers_cpus": peers if peers == peers else None,
        }
        out.append(Cause(**{**cause.__dict__, "text": text + " (data loader)", **figures_said}))
    return out


def _with_compiles(found: list[Cause | None], which: np.ndarray, states: States) -> list[Cause | None]:
    out: list[Cause | None] = []
    for k, cause in enumerate(found):
        if cause is None:
            out.append(None)
            continue
        ev = states[int(which[k])].ev
        frames, breaks = (getattr(ev, "jit_n", None), getattr(ev, "breaks", None)) if ev is not None else (None, None)
        text = cause.text
        if frames is not None:
            text += f", {frames:.1f} frames compiled a second"
            text += f" and {breaks:.1f} graph breaks" if breaks else ""
        out.append(Cause(**{**cause.__dict__, "text": text + " (recompile)"}))
    return out


def _host_bound(found: list[Cause | None], wait_per_cpu: np.ndarray, excess: np.ndarray) -> list[Cause | None]:
    """``host_bound``'s text, and its cost with the wait for a CPU that much more CPU work meets at its peers'
    rate (``wait_per_cpu``: seconds waited per CPU second)."""
    out: list[Cause | None] = []
    for k, c in enumerate(found):
        if c is None:
            out.append(None)
            continue
        extra = c.extra_s * (1.0 + float(wait_per_cpu[k]))
        text = c.text + ", more than its GC, compiles, loading and inputs explain: Python the step waits on (host bound)"
        out.append(Cause(**{**c.__dict__, "text": text, "extra_s": extra, "explains": share(extra, float(excess[k]))}))
    return out


def _memory(states: States, which: np.ndarray, peers_of: np.ndarray, class_ids: np.ndarray | None,
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


def _scaled(compute: float, ratio: float) -> float:
    """What ``ratio`` times its peers' work costs a rank whose own compute per step is ``compute``: what it
    would have saved doing its peers' share, ``compute * (1 - 1/ratio)``."""
    return max(0.0, compute * (1 - 1 / ratio)) if ratio > 0 and compute == compute else 0.0


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


def _blocked(states: States, step_s: np.ndarray, comm_s: np.ndarray | None, peers_of: np.ndarray,
             class_ids: np.ndarray | None, which: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:  # fmt: skip
    """(the slow ranks', a healthy peer's) seconds per step the training thread was off its CPU, not waiting for
    one and not waiting at a collective: ``(1 - cpu - runq) * step - collective wait``, blocked on something
    else (a page read from disk, I/O, a lock); None where no rank says its CPU time."""
    cpu = column(states, "cpu", which, peers_of, 0.0)
    if cpu is None:
        return None
    runq = np.nan_to_num(figures(states, "runq"), nan=0.0)
    comm = np.zeros(len(states)) if comm_s is None else np.nan_to_num(comm_s, nan=0.0)
    blocked = np.maximum(0.0, (1.0 - cpu - runq) * step_s - comm)
    blocked[~peers_of] = np.nan
    return blocked[which], peer_reference(blocked, class_ids, which)


def _page_faults(mine: np.ndarray, reference: np.ndarray, blocked: tuple[np.ndarray, np.ndarray] | None,
                 kernel: np.ndarray | None, step_s: np.ndarray, excess_s: np.ndarray) -> list[Cause | None]:  # fmt: skip
    """``page_faults`` for each slow rank: its process's major faults a second :data:`RATIO` times a healthy peer's
    and :data:`MAJFLT_FLOOR` beyond. Its cost is measured: the time its training thread was blocked per step (off
    its CPU, outside its collectives) beyond a healthy peer's, and its time in the kernel beyond theirs
    (``kernel``, seconds per step: a fault's own handling); faults that block it no such time are no cause. Where
    its CPU time is not said, it is named with no cost (``untold``)."""
    out: list[Cause | None] = []
    for k, (value, ref) in enumerate(zip(mine.tolist(), reference.tolist())):
        ref = _zero(ref)
        if value != value or value < RATIO * ref or value - ref < MAJFLT_FLOOR:
            out.append(None)
            continue
        step, excess = float(step_s[k]), float(excess_s[k])
        text = f"its process takes {value:.0f} major page faults a second against its peers' {ref:.0f}"
        extra = float("nan")
        if blocked is not None:
            extra = float(blocked[0][k] - blocked[1][k])
        if extra != extra:
            out.append(Cause(kind="page_faults", text=text + " (page faults)", value=value, peers=ref,
                             ratio=value / ref if ref else None, extra_s=0.0, explains=0.0, basis=UNTOLD))  # fmt: skip
            continue
        if extra < FLOOR * step:
            out.append(None)
            continue
        text += (f"; its training thread is blocked {_per_step(extra)} per step beyond its peers, off its CPU and "
                 "outside its collectives")  # fmt: skip
        in_kernel = float(kernel[k]) if kernel is not None else 0.0
        if in_kernel >= FLOOR * step:
            text += f", and runs {_per_step(in_kernel)} more in the kernel"
            extra += in_kernel
        text += " (page faults)"
        out.append(Cause(kind="page_faults", text=text, value=value, peers=ref, ratio=value / ref if ref else None,
                         extra_s=extra, explains=share(extra, excess), basis=MEASURED))  # fmt: skip
    return out


# -- beyond one rank: a slow node, a stall, the job slower than itself --------------------------------------------

#: Other processes on a slow node use this many times a healthy node's CPU ...
NODE_RATIO = 2.0
#: ... and this many CPUs beyond it (a shell, a monitor, the relay use a little on every node).
NODE_CPUS = 0.5
#: The healthy nodes read for a slow node's reference, at most (evenly spaced among them).
NODE_SAMPLE = 64
#: A stalled rank's stack, as its probe says it (wire/messages.py ``Doing``): the kind and the text of its cause.
DOING = {
    "compile": ("recompile", "its training thread is compiling (torch.compile: its stack is in dynamo or inductor)"),
    "checkpoint": (
        "checkpoint_write",
        "its training thread is writing or reading a checkpoint (its stack is in torch.save/load or a distributed checkpoint)",
    ),
    "loader": ("data_loader", "its training thread waits inside its DataLoader (its stack is in torch.utils.data)"),
    "gc": ("gc_pause", "its training thread is in Python's garbage collector"),
}  # fmt: skip
#: Basis of a cause read from where a stuck rank is now (its stack), not from a time it lost.
SEEN = "seen"


def of_stalls(states: States, stalled: np.ndarray) -> dict[int, list[Cause]]:
    """Row index -> the cause of each stalled rank whose probe says what its training thread is in (its stack,
    read while it has finished no step for seconds: probe/evidence.py ``doing``). It explains the stall whole:
    the rank is there now (basis ``seen``)."""
    out: dict[int, list[Cause]] = {}
    for i in np.flatnonzero(stalled).tolist():
        ev = states[i].ev
        what = getattr(ev, "doing", None) if ev is not None else None
        if what in DOING:
            kind, text = DOING[what]
            out[i] = [Cause(kind=kind, text=text, value=1.0, peers=0.0, ratio=None, extra_s=0.0, explains=1.0, basis=SEEN)]
    return out


def of_nodes(states: States, hosts: Sequence[str], slow_hosts: Sequence[str], slow: np.ndarray,
             live: np.ndarray, step_s: np.ndarray, excess_s: np.ndarray,
             host_id: np.ndarray | None = None) -> dict[str, list[Cause]]:  # fmt: skip
    """Host -> the node-level cause of each slow node whose ranks say their node's CPU (probe/evidence.py
    ``node_cpu``): other processes (the node's busy CPU less what its ranks and their workers use) using
    :data:`NODE_RATIO` times a healthy node's and :data:`NODE_CPUS` beyond it: ``node_busy``. Its cost is
    measured where the ranks say their run-queue wait: the node's ranks' median wait per step beyond the healthy
    nodes' ranks' median, against the node's median excess; else named with no cost. ``host_id``: each row's node
    as a number (the job state's column): the slow nodes' ranks and those of :data:`NODE_SAMPLE` healthy nodes at
    most are read, not every rank of a job of thousands of nodes."""
    if not slow_hosts:
        return {}
    rows: Sequence[int] = range(len(states))
    if host_id is not None and len(host_id):
        named = np.array([h in set(slow_hosts) for h in (hosts[i] for i in np.unique(host_id, return_index=True)[1].tolist())])
        ids = np.unique(host_id)
        healthy_ids = ids[~named]
        if len(healthy_ids) > NODE_SAMPLE:
            healthy_ids = healthy_ids[np.linspace(0, len(healthy_ids) - 1, NODE_SAMPLE).astype(np.int64)]
        rows = np.flatnonzero(np.isin(host_id, np.concatenate([ids[named], healthy_ids]))).tolist()
    figures_of: dict[str, list[tuple[float, float, float, float, int]]] = {}
    for i in rows:
        state = states[i]
        ev = state.ev
        if ev is None or not (live[i] or slow[i]):
            continue
        node = getattr(ev, "node_cpu", None)
        ranks_cpu = _zero(getattr(ev, "pcpu", None) or float("nan")) + _zero(getattr(ev, "kids", None) or float("nan"))
        runq = getattr(ev, "runq", None)
        figures_of.setdefault(hosts[i], []).append((float("nan") if node is None else node, ranks_cpu,
                                                    float("nan") if runq is None else runq * float(step_s[i]),
                                                    float(getattr(ev, "ncpu", None) or 0), i))  # fmt: skip
    others: dict[str, float] = {}
    waits: dict[str, float] = {}
    for host, said in figures_of.items():
        nodes = np.array([r[0] for r in said])
        if np.isnan(nodes).all():
            continue
        others[host] = max(0.0, float(np.nanmedian(nodes)) - sum(r[1] for r in said))
        host_waits = np.array([r[2] for r in said])
        if not np.isnan(host_waits).all():
            waits[host] = float(np.nanmedian(host_waits))
    healthy = sorted(v for h, v in others.items() if h not in slow_hosts)
    healthy_waits = sorted(v for h, v in waits.items() if h not in slow_hosts)
    if not healthy:
        return {}
    ref = healthy[(len(healthy) - 1) // 2]
    ref_wait = healthy_waits[(len(healthy_waits) - 1) // 2] if healthy_waits else float("nan")
    out: dict[str, list[Cause]] = {}
    for host in slow_hosts:
        mine = others.get(host)
        if mine is None or mine < NODE_RATIO * ref or mine - ref < NODE_CPUS:
            continue
        said = figures_of[host]
        cpus = int(max(r[3] for r in said))
        of = f" of its {cpus} CPUs" if cpus else " CPUs"
        text = f"other processes on it use {mine:.1f}{of} against {ref:.1f} on a healthy node"
        at = np.array([r[4] for r in said if slow[r[4]]], np.int64)
        excess = float(np.median(excess_s[at])) if len(at) else 0.0
        wait = waits.get(host, float("nan"))
        extra = wait - ref_wait if wait == wait and ref_wait == ref_wait else float("nan")
        if extra == extra and extra >= FLOOR * float(np.median(step_s[at]) if len(at) else 0.0):
            text += f"; its ranks wait {_per_step(wait)} per step for a CPU against {_per_step(ref_wait)} there (node busy)"
            cause = Cause(kind="node_busy", text=text, value=mine, peers=ref, ratio=mine / ref if ref else None,
                          extra_s=extra, explains=share(extra, excess), basis=MEASURED)  # fmt: skip
        else:
            cause = Cause(kind="node_busy", text=text + " (node busy)", value=mine, peers=ref,
                          ratio=mine / ref if ref else None, extra_s=0.0, explains=0.0, basis=UNTOLD)  # fmt: skip
        out[host] = [cause]
    return out


#: The job's evidence against its own past: each family's figure (the live ranks' median, per second), the kind it
#: stands for, the ratio to its baseline it needs (:data:`RATIOS`), and its text (its time per step now, before).
JOB_FAMILIES = (
    ("gc", "gc_pause", "every rank spends {now} per step in Python's garbage collector, {before} before (gc pause)"),
    ("runq", "cpu_contention", "every rank's training thread waits {now} per step for a CPU, {before} before (cpu contention)"),
    ("ld_wait", "data_loader", "every rank waits {now} per step for its DataLoader's batches, {before} before (data loader)"),
    ("jit", "recompile", "torch.compile spends {now} per step compiling on every rank, {before} before (recompile)"),
    (
        "fault_wait",
        "page_faults",
        "every rank's training thread is blocked {now} per step off its CPU, {before} before, taking {faults} major page faults "
        "a second (page faults)",
    ),
    ("cpu", "host_bound", "every rank's training thread runs {now} per step on a CPU, {before} before (host bound)"),
)  # fmt: skip
#: The healthy routing spread of a class: at most this many members read a snapshot, ...
SPREAD_SAMPLE = 64
#: ... its peak forgotten over this many seconds, learned after this many, ...
SPREAD_FORGET_S = 600.0
SPREAD_LEARN_S = 30.0
#: ... a rank's rows beyond it by this factor are an expert's load, and never under this ratio to its peers'.
SPREAD_MARGIN = 1.15
SPREAD_LEAST = 1.2
#: What a job slower than itself with no cause rules out, by the families its ranks' evidence covers.
JOB_RULED_OUT = (("gc", "GC"), ("runq", "CPU contention"), ("cpu", "Python on its CPU"), ("ld_wait", "the data loader"),
                 ("jit", "recompiles"), ("majflt", "page faults"))  # fmt: skip
#: The most live ranks read for the job's medians (evenly spaced): a median of 256 is the job's to a few percent,
#: and a snapshot of 16,384 ranks pays for 256.
JOB_SAMPLE = 256
#: The baseline takes in what the job's ranks said this many seconds ago (their rates are over 10 s windows and the
#: job is told slower after seconds more: what it takes in is from before the change).
JOB_LAG_S = 20.0


class JobEvidence:
    """The job's evidence against its own past, for a job slower than itself (watch/analysis/job_pace.py): the
    live ranks' median of each measured family, kept as a baseline that follows the job over ``follow_s`` seconds
    (what it said :data:`JOB_LAG_S` ago) and stands still while the job is told slower. The aggregator keeps one."""

    def __init__(self, follow_s: float = 120.0) -> None:
        self.follow_s = follow_s
        self.base: dict[str, float] = {}
        self._waiting: list[tuple[float, dict[str, float]]] = []
        self._at: float | None = None
        # the healthy routing spread of each class (key -> its decaying peak, when last moved, when first learned)
        self.spread: dict[int, list[float]] = {}
        self._spreads_waiting: list[tuple[float, int, float]] = []

    def load_ratios(self, states: States, healthy: np.ndarray, slow: np.ndarray, class_keys: np.ndarray,
                    now: float) -> np.ndarray | None:  # fmt: skip
        """Per row, the ratio of all-to-all rows to its peers' an ``expert_load`` needs: its class's healthy routing
        spread learned from the job's own past (the most rows a healthy member receives over the class's median,
        at most :data:`SPREAD_SAMPLE` members read a class), times :data:`SPREAD_MARGIN`, and
        :data:`SPREAD_LEAST` at least; :data:`LOAD_RATIO` where not learned yet (:data:`SPREAD_LEARN_S` of it). A
        spread is taken in :data:`JOB_LAG_S` after it was seen, and dropped if a rank of its class was flagged
        slow meanwhile (a hot expert's rank before it was flagged is no healthy spread). None: no rank sends
        all-to-all rows."""
        idx = np.flatnonzero(healthy)
        if not self.spread and not self._spreads_waiting:  # (a job without all-to-alls pays a look at 16 ranks)
            look = idx[np.linspace(0, len(idx) - 1, min(16, len(idx))).astype(np.int64)] if len(idx) else idx
            if not (figures([states[i] for i in look.tolist()], "a2a_rows") >= 0).any():
                return None
        keys_now = class_keys[idx]
        seen_any = False
        for key in np.unique(keys_now).tolist():
            members = idx[keys_now == key]
            if len(members) > SPREAD_SAMPLE:
                members = members[np.linspace(0, len(members) - 1, SPREAD_SAMPLE).astype(np.int64)]
            rows = figures([states[i] for i in members.tolist()], "a2a_rows")
            rows = rows[~np.isnan(rows)]
            if len(rows) < 3:
                continue
            seen_any = True
            middle = float(np.median(rows))
            if middle > 0:
                self._spreads_waiting.append((now, int(key), float(rows.max()) / middle))
        flagged = set(np.unique(class_keys[slow]).tolist()) if slow.any() else set()
        kept = []
        for at, key, spread in self._spreads_waiting:
            if key in flagged:
                continue  # (its class has a slow rank now: what it saw may be that rank's load growing)
            if now - at < JOB_LAG_S:
                kept.append((at, key, spread))
                continue
            peak = self.spread.get(key)
            if peak is None:
                self.spread[key] = [spread, at, at]
            else:
                peak[0] = max(spread, peak[0] * math.exp(-max(0.0, at - peak[1]) / SPREAD_FORGET_S))
                peak[1] = at
        self._spreads_waiting = kept
        if not seen_any and not self.spread:
            return None
        out = np.full(len(class_keys), LOAD_RATIO)
        for key, (top, _, first) in self.spread.items():
            if now - first >= SPREAD_LEARN_S:
                out[class_keys == key] = max(SPREAD_LEAST, top * SPREAD_MARGIN)
        return out

    def note(self, states: States, live: np.ndarray, step_s: np.ndarray, comm_s: np.ndarray | None,
             now: float, slower: Any) -> list[Cause]:  # fmt: skip
        """The job's medians now into the baseline (while ``slower`` is None), or its causes against the baseline
        (``slower``: the JobSlower told, its ``excess_s`` what a step grew): families beyond their baseline by their
        ratio and :data:`FLOOR`, each saying the share of the growth it explains, costliest first."""
        idx = np.flatnonzero(live)
        if not len(idx):
            return []
        if len(idx) > JOB_SAMPLE:
            idx = idx[np.linspace(0, len(idx) - 1, JOB_SAMPLE).astype(np.int64)]
        medians = _job_medians([states[i] for i in idx.tolist()], step_s[idx], None if comm_s is None else comm_s[idx])
        step = float(np.nanmedian(step_s[idx])) if not np.isnan(step_s[idx]).all() else float("nan")
        if step == step:
            medians["step"] = step
        if slower is None:
            self._waiting.append((now, medians))
            while self._waiting and now - self._waiting[0][0] >= JOB_LAG_S:
                at, old = self._waiting.pop(0)
                move = 1.0 if self._at is None else 1.0 - math.exp(-max(0.0, at - self._at) / self.follow_s)
                self._at = at
                for name, value in old.items():
                    before = self.base.get(name)
                    self.base[name] = value if before is None else before + (value - before) * move
            return []
        self._waiting = [w for w in self._waiting if now - w[0] < JOB_LAG_S]  # (told: what came meanwhile is not the past)
        return self._causes(medians, step, float(slower.excess_s))

    def _causes(self, medians: dict[str, float], step: float, excess: float) -> list[Cause]:
        out: list[Cause] = []
        if step != step:
            return out
        base_step = self.base.get("step", step)
        for family, kind, says in JOB_FAMILIES:
            now, before = medians.get(family), self.base.get(family)
            if now is None or before is None:
                continue
            mine, was = now * step, before * base_step  # seconds per step, now and in the past
            extra = mine - was
            if mine < RATIOS.get(kind, RATIO) * was or now - before < FLOOR or extra < FLOOR * step:
                continue
            faults = medians.get("majflt", 0.0)
            if kind == "page_faults" and faults < max(MAJFLT_FLOOR, RATIO * self.base.get("majflt", 0.0)):
                continue
            text = says.format(now=_per_step(mine), before=_per_step(was), faults=f"{faults:.0f}")
            out.append(Cause(kind=kind, text=text, value=now, peers=before, ratio=now / before if before > 0 else None,
                             extra_s=extra, explains=share(extra, excess), basis=MEASURED))  # fmt: skip
        out.sort(key=lambda c: -c.extra_s)
        if named_cause(out) is None:
            ruled = [name for family, name in JOB_RULED_OUT if family in medians and family in self.base]
            if ruled:
                out.append(unknown(ruled))
        return out


def _job_medians(states: States, step_s: np.ndarray, comm_s: np.ndarray | None) -> dict[str, float]:
    """The median over ``states`` of each family of :data:`JOB_FAMILIES` (seconds per second; ``majflt``: faults
    a second), where a rank says it: the loader's wait is ``ld - ld_cpu``; a fault's wait, the training thread's
    time off its CPU, not waiting for one nor at a collective (per second)."""
    out: dict[str, float] = {}
    cols: dict[str, list[float]] = {name: [] for name in ("gc", "runq", "ld_wait", "jit", "cpu", "majflt", "fault_wait")}
    for k, state in enumerate(states):
        ev = state.ev
        if ev is None:
            continue
        for name in ("gc", "runq", "jit", "cpu", "majflt"):
            value = getattr(ev, name, None)
            if value is None and name in NIL_WHEN_ABSENT:
                value = 0.0
            if value is not None:
                cols[name].append(value)
        cols["ld_wait"].append(max(0.0, (ev.ld or 0.0) - (ev.ld_cpu or 0.0)))
        step = float(step_s[k])
        if ev.cpu is not None and step == step and step > 0:
            comm = 0.0 if comm_s is None or comm_s[k] != comm_s[k] else float(comm_s[k])
            cols["fault_wait"].append(max(0.0, 1.0 - ev.cpu - (ev.runq or 0.0) - comm / step))
    for name, values in cols.items():
        if values:
            out[name] = float(np.median(values))
    return out
