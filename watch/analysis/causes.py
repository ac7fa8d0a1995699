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


def figures(states: Sequence[State], field: str) -> np.ndarray:
    """Each rank's evidence figure ``field`` (NaN where its state says none)."""
    out = np.full(len(states), np.nan)
    for i, state in enumerate(states):
        ev = state.ev
        if ev is not None:
            value = getattr(ev, field)
            if value is not None:
                out[i] = value
    return out


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


def judge(
    values: np.ndarray, reference: np.ndarray, step_s: np.ndarray, excess_s: np.ndarray, kind: Kind
) -> list[Cause | None]:
    """The cause ``kind`` for each rank of these columns (its figure, a healthy peer's, its step, its excess), or None."""
    out: list[Cause | None] = []
    for value, ref, step, excess in zip(values.tolist(), reference.tolist(), step_s.tolist(), excess_s.tolist()):
        if value != value or ref != ref or step != step:  # NaN: no figure, no peer's, not scored
            out.append(None)
            continue
        extra = (value - ref) * step
        if value < RATIO * ref or value - ref < FLOOR or extra < EXPLAINS * excess:
            out.append(None)
            continue
        ratio = value / ref if ref > 0 else None
        beyond = _beyond(ratio, ref * step)
        out.append(Cause(kind=kind.name, text=kind.says(_per_step(value * step), beyond), value=value, peers=ref,
                         ratio=ratio, extra_s=extra))  # fmt: skip
    return out


def of_ranks(
    states: Sequence[State], step_s: np.ndarray, excess_s: np.ndarray, slow: np.ndarray, live: np.ndarray,
    class_ids: np.ndarray | None, evidence: Mapping[str, np.ndarray] | None = None,
) -> dict[int, list[Cause]]:  # fmt: skip
    """Row index -> the causes of each slow rank that has any, the one that costs most per step first. ``live``:
    the ranks whose figures count as peers' (not silent, scored). ``evidence``: each field's figures as columns
    (a gathered view's, watch/engine/rank_scalars.py), read instead of a pass over the states (None: read there)."""

    def figures_of(field: str) -> np.ndarray:
        return evidence[field].copy() if evidence is not None else figures(states, field)

    which = np.flatnonzero(slow)
    if not len(which):
        return {}
    found: dict[int, list[Cause]] = {}
    switches = None
    for kind in KINDS:
        values = figures_of(kind.field)
        values[~live & ~slow] = np.nan
        reference = peer_reference(values, class_ids, which)
        for i, cause in zip(which.tolist(), judge(values[which], reference, step_s[which], excess_s[which], kind)):
            if cause is None:
                continue
            if kind.name == "cpu_contention":
                switches = figures_of("nvcsw") if switches is None else switches
                peers = peer_reference(switches, class_ids, np.array([i]))[0]
                cause = _with_switches(cause, switches[i], peers)
            found.setdefault(i, []).append(cause)
    return {i: sorted(causes, key=lambda c: -c.extra_s) for i, causes in found.items()}


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
