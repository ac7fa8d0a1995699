"""Who arrives last at the job's collectives: a second signal beside the phase times, from the ranks' waits alone.

At a collective every rank waits for the last to arrive, so the rank that waited least arrived last: the
others' waits say whom they waited for. A straggler arrives last at most of its steps' collectives; on a
healthy job the last one is whoever was slowest that step, each rank about its fair share (1 in n). The
figure is independent of the phase scores (stragglers.py compares own times with a healthy peer's; this
compares waits step by step), so each corroborates the other: a rank flagged by its phase times that is
never last at the collectives holds nobody back there (its excess may be spent where nobody waits for it).

Per step and peer class (watch/analysis/peers.py: the ranks that do the same work, and so meet at the same
collectives) the rank with the least wait ("comm", every collective of the step summed) is that step's last
arrival. A step counts only where every rank of the class has it in its window and someone waited longer
than another (a step with no collective says nothing), and the job's newest steps are left out (their waits
may still be on their way: watch/engine/step_columns.py ``put``). All of it is a few whole-array numpy operations over
the ranks' last steps (watch/engine/step_columns.py ``recent_waits``): O(1) per rank.
"""

from __future__ import annotations

import numpy as np

#: Steps counted, at least, before "never last" overrules the phase times (watch/analysis/judge.py).
VETO_AFTER = 16
#: The job's newest steps left out: a step's waits may come in a message after its step's.
SETTLING = 2


def last_arrivals(nums: np.ndarray, waits: np.ndarray, class_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per rank (a row of ``nums``, its last steps' numbers, -1: none; ``waits``, their collective waits), the
    share of its counted steps at which it arrived last among its peer class (NaN: none counted), and how many
    steps counted.

    Each rank's steps are laid out in a grid, a column per step of the window (the newest ``nums.shape[1]``
    settled ones): per class and column, whether every member has that step, the least and the most wait, in
    a few whole-array passes (no ``ufunc.at``, which is an element at a time). Where no step can count (the
    steps of node digests end at each node's own moment, so a big job's ranks seldom share a step number),
    the grid of waits is never made."""
    n, width = nums.shape
    share = np.full(n, np.nan)
    counted = np.zeros(n, np.int64)
    if n < 2 or not width:
        return share, counted
    newest = int(nums.max()) - SETTLING
    if newest < 0:
        return share, counted
    at = nums - (newest - width + 1)  # the step's column; what is outside the window goes in a last column, dropped
    at[(nums < 0) | (at < 0) | (at >= width)] = width
    if class_ids is None:
        of, members = np.zeros(n, np.intp), np.array([n])
    else:
        _, of, members = np.unique(np.asarray(class_ids, np.int64), return_inverse=True, return_counts=True)
    classes = len(members)
    present = np.bincount((at + (of * (width + 1))[:, None]).ravel(), minlength=classes * (width + 1))
    full = present.reshape(classes, width + 1)[:, :width] == members[:, None]
    full &= (members >= 2)[:, None]
    if not full.any():
        return share, counted
    grid = np.full((n, width + 1), np.nan)
    np.put_along_axis(grid, at, waits, axis=1)
    grid = grid[:, :width]
    if classes == 1:
        order, ordered, starts = None, grid, np.zeros(1, np.intp)
    else:
        order = np.argsort(of, kind="stable")  # the classes' members together, for whole-class reductions
        ordered, starts = grid[order], np.r_[0, np.cumsum(members)[:-1]]
    least = np.fmin.reduceat(ordered, starts, axis=0)  # (the class's members have every full column's step)
    full &= np.fmax.reduceat(ordered, starts, axis=0) > least  # someone waited longer than another
    bar = np.where(full, least, -np.inf)  # a counted step's least wait (a wait at no other step is ever at it)
    last = (ordered <= (bar[0] if order is None else np.repeat(bar, members, axis=0))).sum(axis=1)
    counted = full.sum(axis=1)[of]
    if order is None:
        lasts = last
    else:
        lasts = np.empty(n, np.int64)
        lasts[order] = last
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(counted > 0, lasts / np.maximum(counted, 1), np.nan)
    return share, counted
