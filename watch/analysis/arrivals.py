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
may still be on their way: watch/engine/step_columns.py ``put``). All of it is a few numpy operations over
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
    steps counted."""
    n = len(nums)
    share = np.full(n, np.nan)
    counted = np.zeros(n, np.int64)
    held = nums >= 0
    if n < 2 or not held.any():
        return share, counted
    newest = int(nums[held].max()) - SETTLING
    oldest = newest - nums.shape[1] + 1
    held &= (nums <= newest) & (nums >= oldest)
    if not held.any():
        return share, counted
    group = np.zeros(n, np.int64) if class_ids is None else np.asarray(class_ids, np.int64)
    width = newest - oldest + 1
    row, slot = np.nonzero(held)
    cell = group[row] * width + (nums[row, slot] - oldest)
    wait = waits[row, slot]
    cells = (int(group.max()) + 1) * width
    members = np.bincount(group, minlength=int(group.max()) + 1)
    present = np.bincount(cell, minlength=cells)
    least = np.full(cells, np.inf)
    most = np.full(cells, -np.inf)
    np.minimum.at(least, cell, wait)
    np.maximum.at(most, cell, wait)
    full = (present == np.repeat(members, width)) & (most > least) & (np.repeat(members, width) >= 2)
    counts = full[cell]
    last = counts & (wait <= least[cell])
    counted = np.bincount(row, weights=counts, minlength=n).astype(np.int64)
    lasts = np.bincount(row, weights=last, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(counted > 0, lasts / np.maximum(counted, 1), np.nan)
    return share, counted
