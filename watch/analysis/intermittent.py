"""Intermittent stragglers: a rank slow on some steps only, which its window's medians hide (issue 46, item 1).

A rank 134 ms slower on one step in ten holds every rank back 134 ms on that step: the job pays 13 ms a step on
average, yet the rank's median (what stragglers.py compares) is its usual time. The job state counts, per rank,
the steps of its window whose own time was *far* beyond its median (watch/engine/step_columns.py: by 3 robust SDs
and 10% of it at least) and what those steps spent beyond each phase's median. Every rank has some far steps: a
GC, the OS, a long input now and then. What tells an intermittent straggler is that it has **more of them than its
peers do**, more than chance allows:

- the rate of far steps a healthy rank of its class has is its peers' (the rest of the class, pooled, with a
  prior of :data:`PRIOR_FAR` far steps in :data:`PRIOR_STEPS`: a class of two has one peer's window to go by);
- its count is tested against that rate (at two bars: far, and long, :data:`~ranktop.watch.engine.step_columns.LONG_FRACTION`
  of its median beyond it: a busy machine's jitter makes many of a quiet rank's short steps far, few long), the peers' own few counts weighed (conditional binomial: of the far
  steps of it and its peers together, were their rates alike, each would be its with the chance of its share of
  the steps; one-sided): chance alone gives as many with a probability under :data:`ALPHA` over the class's size
  (at any look, any of its ranks: the straggler bar's odds);
- what those steps cost the job, averaged over the window (their time beyond the medians / the window's steps),
  less what its class's typical rank pays the same way (heavy-tailed inputs make every rank pay some), passes
  :data:`SHARE_FROM` of the job's median step and :data:`FLOOR_S`, over its tally and over its window now (a rank
  no longer slow is let go once its window holds no more of its slow steps, whatever its tally remembers).

A test of counts against the peers' own rate, not a fixed count, is what keeps a job whose inputs are heavy-tailed
quiet: its every rank has far steps at the same rate, however many that is. How often: ``every``, one step in
``window / (far - expected)``. The size told is what it costs on average. Numpy over the ranks' columns, a pass per
peer class; the tail is worked out for the few ranks whose cost passes the bar.
"""

from __future__ import annotations

import math

import numpy as np

from ranktop.watch.analysis.stragglers import peer_groups
from ranktop.wire.names import COMM_PHASE, PAUSE_PHASES

#: What an intermittent straggler costs the job beyond its class's typical rank, averaged over steps: this share
#: of the job's median step at least (a rank costing the job 3% is worth naming, as a slow rank's floor), ...
SHARE_FROM = 0.03
#: ... and this many seconds.
FLOOR_S = 0.001
#: Its far steps are more than its peers' rate allows with a chance of at most this over its class's size.
ALPHA = 1e-3
#: The peers' rate is counted with this prior: as many far steps in as many steps (a few percent: one of a class of
#: two with no far step in its window still expects some).
PRIOR_FAR = 0.5
PRIOR_STEPS = 64.0
#: Its window must hold this many far steps now: one is a pause of the OS or the GC, or a rank's periodic work (a
#: checkpoint saved every 100 steps where it is not timed as one), which its tally, remembering an episode of
#: slow steps from before, would otherwise make a pattern of.
MIN_RECENT = 2
#: Ranks with fewer steps tallied than this are not judged (a few steps say nothing of a rate).
MIN_WINDOW = 16


def of_columns(far_counts: tuple[np.ndarray, ...], far_of: np.ndarray, far_recent: np.ndarray, far_s: np.ndarray,
               far_recent_s: np.ndarray, window_steps: np.ndarray, names: list[str], class_ids: np.ndarray | None,
               median_step: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """``far_counts`` of ``far_of``: each rank's tallies of far steps of its last steps (watch/engine/step_columns.py:
    each weighing less as more come), at each bar (far, long); ``far_s`` (ranks x names): what they spent beyond
    each phase's median; ``far_recent`` and ``far_recent_s``: the same of its window now (none far: it is no longer
    slow, whatever its tally remembers), of ``window_steps``. Per rank: whether it is an intermittent straggler,
    what it costs the job per step on average beyond its class's typical rank (seconds: over its window, as the job
    pays it now; its tally, which remembers steps from before it was slow, says whether, not how much), its culprit
    phase (an index into ``names``, -1: none) and one step in how many it is slow (NaN: not one)."""
    n = len(far_of)
    found = np.zeros(n, bool)
    cost = np.zeros(n)
    culprit = np.full(n, -1, np.int64)
    every = np.full(n, np.nan)
    if n < 2 or not median_step:
        return found, cost, culprit, every
    own = np.array([name != COMM_PHASE and name not in PAUSE_PHASES for name in names], bool)
    paid = far_s[:, own].sum(axis=1) / np.maximum(far_of, 1.0)  # what its far steps cost a step, on average
    now = far_recent_s[:, own].sum(axis=1) / np.maximum(window_steps, 1)  # the same over its window
    floor = max(SHARE_FROM * median_step, FLOOR_S)
    steps = np.round(far_of)
    for members, count in peer_groups(class_ids, n):
        if count < 2:
            continue
        mine, recent = paid[members], now[members]
        typical = float(mine.min()) if count == 2 else float(np.median(mine))
        ids = np.arange(n)[members]
        cost[members] = np.maximum(recent - (float(recent.min()) if count == 2 else float(np.median(recent))), 0.0)
        # (what it costs over its tally and over its window now: a rank no longer slow is let go once its window
        # holds no more of its slow steps, whatever its tally remembers)
        candidates = ids[(paid[ids] - typical > floor) & (cost[ids] > floor) & (steps[ids] >= MIN_WINDOW) & (far_recent[ids] >= MIN_RECENT)]
        if not len(candidates):
            continue
        steps_all = float(steps[ids].sum())
        tallies = [(np.round(tally), float(np.round(tally)[ids].sum())) for tally in reversed(far_counts)]
        for i in candidates.tolist():
            m = int(steps[i])
            their_steps = steps_all - m + PRIOR_STEPS
            # at each bar: given the far steps of it and its peers together, were the rates alike each would be
            # its with the chance of its share of the steps (a test of its rate against its peers', their own few
            # counts weighed); the longer bar first (fewer of a healthy rank's steps pass it: how often is its)
            for far, far_all in tallies:
                k = int(far[i])
                others = far_all - k + PRIOR_FAR
                if upper_tail(k, int(round(k + others)), m / (m + their_steps)) < ALPHA / (count * len(far_counts)):
                    found[i] = True
                    every[i] = m / max(k - others / their_steps * m, 1.0)
                    culprit[i] = int(np.argmax(np.where(own, far_s[i], -np.inf)))
                    break
    return found, cost, culprit, every


def upper_tail(k: int, n: int, p: float) -> float:
    """The chance of ``k`` or more successes in ``n`` trials of chance ``p`` each (binomial)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    base = math.lgamma(n + 1)
    return min(1.0, sum(math.exp(base - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq)
                        for j in range(k, n + 1)))  # fmt: skip
