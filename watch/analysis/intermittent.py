"""Intermittent stragglers: a rank slow on some steps only, which its window's medians hide (issue 46, item 1).

A rank 134 ms slower on one step in ten holds every rank back 134 ms on that step: the job pays 13 ms a step
on average, yet the rank's median (what stragglers.py compares) is its usual time. So the judge also compares
what a rank pays *on average*: per phase its mean over the window less its median (the job state keeps the
mean with the window's step of most own time left out, so that one pause, a GC or the OS, is no pattern:
watch/engine/step_columns.py), positive parts summed over its own phases, less what its class's median rank
shows of it (every rank's mean sits a little above its median: the noise's tail). A rank is an intermittent
straggler when that cost is :data:`SHARE_FROM` of the job's median step or more, beyond its peers' by
:data:`SPREAD_Z` robust standard deviations, and its window has :data:`MIN_SPIKES` steps or more far beyond its
median (step_columns.py: by half the longest step's excess over it, 3 robust SDs and 3% of the median at least). How often: one step in ``window / spikes``
(the rank's ``every``). Numpy over the ranks' columns, a pass per peer class.
"""

from __future__ import annotations

import numpy as np

from ranktop.watch.analysis.stragglers import MAD_SIGMA, peer_groups
from ranktop.wire.names import COMM_PHASE, PAUSE_PHASES

#: What an intermittent straggler costs the job, averaged over steps: this share of the median step at least, ...
SHARE_FROM = 0.05
#: ... and this many seconds; ...
FLOOR_S = 0.001
#: ... beyond its class's median rank by this many robust SDs of the class's costs (a class of 3 ranks or more), ...
SPREAD_Z = 6.0
#: ... with this many steps of its window far beyond its median (one or two are pauses of the OS or GC: a rank
#: with pauses on 1% of its steps has three in a window of 64 one time in 40).
MIN_SPIKES = 3


def of_columns(work: np.ndarray, means: np.ndarray, names: list[str], class_ids: np.ndarray | None,
               spikes: np.ndarray, window_steps: np.ndarray, median_step: float | None,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """``work`` and ``means`` (ranks x names): each rank's median and mean own time per phase over its window
    (checkpoints and evaluations left out: pauses.without); ``spikes``: its window's steps far beyond its median;
    ``window_steps``: its window's steps. Per rank: whether it is an intermittent straggler, what it costs the job
    per step on average (seconds beyond its class's median rank), its culprit phase (an index into ``names``,
    -1: none) and one step in how many it is slow (NaN: not an intermittent straggler)."""
    n = len(work)
    found = np.zeros(n, bool)
    cost = np.zeros(n)
    culprit = np.full(n, -1, np.int64)
    every = np.full(n, np.nan)
    if n < 2 or not median_step:
        return found, cost, culprit, every
    own = np.array([name != COMM_PHASE and name not in PAUSE_PHASES for name in names], bool)
    over = np.zeros((n, len(names)))
    over[:, own] = np.clip(means[:, own] - work[:, own], 0.0, None)
    per = over.sum(axis=1)
    floor = max(SHARE_FROM * median_step, FLOOR_S)
    for members, count in peer_groups(class_ids, n):
        if count < 2:
            continue
        mine = per[members]
        # the class's typical rank: with two, the one with less (the other's whole cost is its own), else the median
        typical = float(mine.min()) if count == 2 else float(np.median(mine))
        cost[members] = mine - typical
        bar = floor
        if count >= 3:
            bar = max(bar, SPREAD_Z * MAD_SIGMA * float(np.median(np.abs(mine - typical))))
        found[members] = (cost[members] > bar) & (spikes[members] >= MIN_SPIKES)
        if found[members].any():
            typical_phase = np.median(over[members], axis=0) if count > 2 else over[members].min(axis=0)
            culprit[members] = np.argmax(np.where(own, over[members] - typical_phase, -np.inf), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        every = np.where(found, window_steps / np.maximum(spikes, 1), np.nan)
    culprit[~found] = -1
    return found, np.maximum(cost, 0.0), culprit, every
