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
  of the training thread the others leave unexplained: Python the step waits on).
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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ranktop.watch import format as fmt
from ranktop.watch.model.rank_row import BECAUSE as BECAUSE, PARTLY as PARTLY, UNKNOWN_CAUSE, Cause, named_cause  # (the shares, said here too)

from ranktop.wire.messages import State

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
    Kind("cpu_contention", "runq", lambda per_step, beyond: f"its training thread waits {per_step} per step for a CPU, {beyond} (cpu contention)"),
)  # fmt: skip
GC_KIND, RUNQ_KIND = KINDS
#: ``cpu_contention`` where the training threads' CPU time is known: its wait against what its peers wait for as
#: much CPU (on a busy machine a thread waits in proportion to the CPU it asks for: more work waits more).
RUNQ_SCALED_KIND = Kind("cpu_contention", "runq", lambda per_step, beyond: f"its training thread waits {per_step} per step for a CPU, {beyond} for as much CPU time (cpu contention)")
LOADER_KIND = Kind("data_loader", "ld", lambda per_step, beyond: f"it waits {per_step} per step inside its DataLoader's __next__, {beyond}")
COMPILE_KIND = Kind("recompile", "jit", lambda per_step, beyond: f"torch.compile spends {per_step} per step compiling on it, {beyond}")
HOST_KIND = Kind("host_bound", "cpu", lambda per_step, beyond: f"its training thread runs {per_step} per step on a CPU, {beyond}")
#: The ratio to a healthy peer's a kind needs, where not :data:`RATIO`: a loader's wait and a thread's CPU time
#: are large on every rank, so their difference, not their ratio, is the news.
RATIOS = {"data_loader": 1.3, "host_bound": 1.2}

#: A load this many times a healthy peer's is a cause (a healthy MoE's experts differ by less: routing noise).
LOAD_RATIO = 1.5
#: A GPU whose SM clock is this much below a healthy peer's (its peers' clock over its own) is throttled.
CLOCK_RATIO = 1.1
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
    ("recompiles", ("jit_n",)), ("input size", ("padded", "tokens", "samples", "a2a_rows")), ("memory", ("swap", "retries")),
)  # fmt: skip
#: Every kind a cause may have (docs/json-schema.md lists each with its evidence).
ALL_KINDS = ("gc_pause", "cpu_contention", "oversubscribed", "data_loader", "recompile", "host_bound", "expert_load",
             "input_imbalance", "gpu_throttle", "memory_pressure", "unknown")  # fmt: skip


#: Figures a rank's evidence leaves out until it has any (dynamo never imported, no DataLoader iterated): a rank
#: that sends evidence without them has spent nothing there, which is a peer's figure all the same (0).
NIL_WHEN_ABSENT = frozenset({"jit", "jit_n", "breaks", "ld", "ld_cpu"})


def figures(states: Sequence[State], field: str, part: str = "ev") -> np.ndarray:
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
               compute_s: np.ndarray | None = None) -> list[Cause | None]:  # fmt: skip
    """The cause ``load`` for each rank of these columns, or None: its figure :data:`LOAD_RATIO` times its peers'.
    Its cost is estimated: the rank's own compute per step (``compute_s``; else its step) had it done its peers'
    work, ``compute * (1 - 1/ratio)``."""
    compute = step_s if compute_s is None else compute_s

    def rule(value: float, ref: float, step: float, excess: float, own: float) -> Cause | None:
        if ref <= 0 or value < LOAD_RATIO * ref:
            return None
        per_step = step if load.per_second else 1.0
        ratio = value / ref
        mine, peers = _count(value * per_step), _count(ref * per_step)
        text = f"{load.says.format(ratio)}, {mine} a step against {peers} ({load.name.replace('_', ' ')})"
        extra = _scaled(own, ratio)
        return Cause(kind=load.name, text=text, value=value, peers=ref, ratio=ratio, extra_s=extra,
                     explains=share(extra, excess), basis=ESTIMATED)  # fmt: skip

    return _each(rule, values, reference, step_s, excess_s, compute.tolist())


def judge_clock(mine: np.ndarray, reference: np.ndarray, step_s: np.ndarray, excess_s: np.ndarray,
                reasons: Sequence[list | None], compute_s: np.ndarray | None = None) -> list[Cause | None]:  # fmt: skip
    """``gpu_throttle`` for each rank of these columns (its SM clock, a healthy peer's, ..., its throttle reasons);
    its cost estimated as a load's, from the clocks' ratio and its compute."""
    compute = step_s if compute_s is None else compute_s

    def rule(value: float, ref: float, step: float, excess: float, why: list | None, own: float) -> Cause | None:
        if value <= 0 or ref < CLOCK_RATIO * value:
            return None
        slowing = [r for r in why or () if r in ("power", "thermal", "hw")]
        because = f" ({', '.join(slowing)} throttling)" if slowing else ""
        text = f"its GPU runs at {value:.0f} MHz against its peers' {ref:.0f}{because} (gpu throttle)"
        extra = _scaled(own, ref / value)
        return Cause(kind="gpu_throttle", text=text, value=value, peers=ref, ratio=value / ref, extra_s=extra,
                     explains=share(extra, excess), basis=ESTIMATED)  # fmt: skip

    return _each(rule, mine, reference, step_s, excess_s, reasons, compute.tolist())


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
    states: Sequence[State], step_s: np.ndarray, excess_s: np.ndarray, slow: np.ndarray, live: np.ndarray,
    class_ids: np.ndarray | None, evidence: Mapping[str, np.ndarray] | None = None, *, culprit: np.ndarray | None = None,
    names: Sequence[str] = (), phases: np.ndarray | None = None, comm_s: np.ndarray | None = None,
) -> dict[int, list[Cause]]:  # fmt: skip
    """Row index -> the causes of each slow rank that has any: measured first, then estimated, then untold, each
    costliest first, and ``unknown`` last when none explains :data:`PARTLY` of its excess. ``live``: the ranks
    whose figures count as peers' (not silent, scored). ``evidence``: the fields a gathered view keeps as columns
    (watch/engine/rank_scalars.py), read instead of a pass over the states. ``names``/``phases`` (ranks x names,
    seconds per step) and ``comm_s`` (its collective wait per step): where given, they take the data phase and
    the wait out of the compute a ratio is applied to. (``culprit`` is accepted and not read: a phase's name is
    no evidence.)"""
    del culprit
    which = np.flatnonzero(slow)
    if not len(which):
        return {}
    found: dict[int, list[Cause]] = {}
    peers_of = live | slow
    k_all = len(which)
    step, excess = step_s[which], excess_s[which]
    nothing = np.full(k_all, np.nan)

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
        here = judge_load(mine, ref, step, excess, load, compute)
        if load.name == "input_imbalance":  # the first input figure it and its peers send stands for its work
            here = [None if judged_inputs[k] else c for k, c in enumerate(here)]
            judged_inputs |= (np.nan_to_num(mine) > 0) & (np.nan_to_num(ref) > 0)
        for k, c in enumerate(here):
            if c is not None:
                loads_est[k] = max(loads_est[k], c.extra_s)
        add(here)
    reasons = [(states[i].gpu or {}).get("throttle") for i in which.tolist()]
    got = pair("sm_mhz", _TINY, "gpu")
    if got is not None:
        add(judge_clock(got[0], got[1], step, excess, reasons, compute))
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
    if cpu_got is not None:
        held = gc_s + jit_s + beyond("ld_cpu") + loads_est
        add(_host_bound(judge(cpu_got[0], cpu_got[1], step, excess, HOST_KIND, held), wait_per_cpu, excess))
    out: dict[int, list[Cause]] = {}
    for k, i in enumerate(which.tolist()):
        mine = sorted(found.get(i, ()), key=lambda c: (_ORDER.get(c.basis, 3), -c.extra_s))
        if named_cause(mine) is None:
            ruled = _ruled_out(states[i], evidence, i, mine)
            if ruled:
                mine.append(unknown(ruled))
        if mine:
            out[i] = mine
    return out


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


def _contention(found: list[Cause | None], states: Sequence[State], which: np.ndarray, pair, step: np.ndarray) -> list[Cause | None]:
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


def _with_workers(found: list[Cause | None], states: Sequence[State], which: np.ndarray, pair) -> list[Cause | None]:
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
        out.append(Cause(**{**cause.__dict__, "text": text + " (data loader)", "workers": None if count is None else float(count),
                            "workers_cpus": mine if mine == mine else None, "peers_workers_cpus": peers if peers == peers else None}))  # fmt: skip
    return out


def _with_compiles(found: list[Cause | None], which: np.ndarray, states: Sequence[State]) -> list[Cause | None]:
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


def _scaled(compute: float, ratio: float) -> float:
    """What ``ratio`` times its peers' work costs a rank whose own compute per step is ``compute``: what it
    would have saved doing its peers' share, ``compute * (1 - 1/ratio)``."""
    return max(0.0, compute * (1 - 1 / ratio)) if ratio > 0 and compute == compute else 0.0


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
