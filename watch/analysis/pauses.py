"""Checkpoints and evaluations: what they cost the job, told as what they are, never as a straggler or a stall.

A rank that saves a checkpoint (``torch.save``, a distributed checkpoint) or evaluates the model spends that
time on no training step's work, and the others wait for it in a barrier or their next collective. Automatic
mode times them as the phases ``checkpoint`` and ``eval`` (probe/auto.py; ``probe.phase()`` of either name is
the same: wire/names.py PAUSE_PHASES). So the viewer judges them apart:

- they are no rank's own work: the straggler scoring leaves them out (:func:`without`), a rank that saves
  every checkpoint is not slow for it;
- while a live rank is in one, nobody is stalled (watch/analysis/stalls.py ``pausing``): the others wait;
- what they cost is their share of the job's time: each rank's seconds in them over its window of steps
  against the window's wall seconds, the costliest rank's (the others wait for it), averaged over the last
  minute of snapshots (:class:`PauseBook`: a window of 64 steps holds a checkpoint saved every 100 steps only
  now and then, and its share would come and go). From :data:`SHARE_FROM` of the job's time the verdict
  says it (watch/model/verdict.py: kinds ``checkpoint`` and ``eval``).

Per snapshot it reads three columns the job state sums over each rank's window (watch/engine/step_columns.py
``window_sums``) and the open phase of each rank's state: numpy over the ranks, no pass per rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ranktop.watch.analysis.stalls import stuck_columns
from ranktop.watch.engine.rank_store import JobView
from ranktop.watch.model.snapshot import PAUSE_SHARE_FROM as SHARE_FROM, Pause
from ranktop.wire.names import CHECKPOINT_PHASE, EVAL_PHASE, PAUSE_PHASES

__all__ = ["CHECKPOINT_PHASE", "EVAL_PHASE", "Pause", "PauseBook", "SHARE_FROM", "of_view", "without"]

#: Its share is averaged over about this many seconds of snapshots.
AVERAGE_S = 60.0
#: Ranks a pause names, at most.
NAMED = 8


@dataclass
class PauseBook:
    """Each kind's share of the job's time, averaged over the last :data:`AVERAGE_S` seconds of snapshots (each
    weighted by the seconds since the one before: the first snapshot's share stands until more come)."""

    average_s: float = AVERAGE_S
    _kept: dict[str, tuple[float, float]] = field(default_factory=dict)  # kind -> (average, its weight in seconds)
    _at: float | None = None

    def average(self, shares: dict[str, float], now: float) -> dict[str, float]:
        elapsed = 0.0 if self._at is None else min(max(0.0, now - self._at), self.average_s)
        self._at = now
        fade = math.exp(-elapsed / self.average_s)
        out = {}
        for kind, share in shares.items():
            average, weight = self._kept.get(kind, (share, 0.0))
            weight *= fade
            total = weight + elapsed
            average = share if total <= 0 else (average * weight + share * elapsed) / total
            self._kept[kind] = (average, total)
            out[kind] = average
        return out


def without(phases: np.ndarray, names: list[str]) -> np.ndarray:
    """``phases`` (ranks x names) with the pause phases' columns zero: what the straggler scoring compares (a
    copy only where a pause phase is among ``names``)."""
    at = [j for j, name in enumerate(names) if name in PAUSE_PHASES]
    if not at:
        return phases
    out = phases.copy()
    out[:, at] = 0.0
    return out


def of_view(view: JobView, silent: np.ndarray, limit_s: float, book: PauseBook | None = None) -> list[Pause]:
    """The job's checkpoints and evaluations, each kind with some share of its time or one under way (none: an
    empty list). ``silent``: bool per rank; ``limit_s``: the stall limit (watch/analysis/stalls.py StallPolicy),
    past which the job is waiting for the one under way; ``book``: the shares kept from the snapshots before
    (None: this view's alone)."""
    n = len(view.rank)
    live = ~silent
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(live[:, None] & (view.window_s > 0)[:, None], view.pause_s / view.window_s[:, None], 0.0)
    if n:
        now_share = {kind: float(shares[:, j].max()) for j, kind in enumerate(PAUSE_PHASES)}
    else:
        now_share = {kind: 0.0 for kind in PAUSE_PHASES}
    kept = book.average(now_share, view.now) if book is not None else now_share
    phase = view.where.get("phase") if view.where else None
    names = view.state_names
    found = []
    for j, kind in enumerate(PAUSE_PHASES):
        inside = np.zeros(n, bool)
        if phase is not None and kind in names:
            inside = live & view.stated & (phase == names.index(kind))
        share = kept[kind]
        had = live & (view.pause_s[:, j] > 0)
        if not inside.any() and not had.any() and share <= 0.0:
            continue
        top = int(np.argmax(shares[:, j])) if n else 0
        each = every = None
        if view.pause_steps[top, j] > 0:
            each = float(view.pause_s[top, j] / view.pause_steps[top, j])
            if view.pause_steps[top, j] >= 2:
                every = float(view.window_steps[top] / view.pause_steps[top, j])
        under_way = None
        holding = False
        if inside.any():
            rows = np.flatnonzero(inside)
            now = view.now - view.relays.behind_s
            stuck = stuck_columns(view.step_age[rows], view.state_at[rows], view.progress_at[rows], now, view.stepped_at[rows])
            order = rows[np.argsort(-stuck, kind="stable")]
            under_way = float(stuck.max())
            holding = under_way > limit_s
            named = order
        else:
            named = np.flatnonzero(had)
            named = named[np.argsort(-shares[named, j], kind="stable")]
        count = len(named)
        first = int(named[0]) if count else top
        found.append(Pause(
            kind=kind, ranks=view.rank[named[:NAMED]].tolist(), count=count, host=view.host[first] if n else None,
            share=share, each_s=each, every=every, under_way_s=under_way, holding=holding,
            everyone=bool(count > 1 and count >= int(live.sum())),
        ))  # fmt: skip
    return found
