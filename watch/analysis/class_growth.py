"""A peer class slower than it was: what comparing a rank with its peers cannot see when its peers are all slow.

A rank is judged against a healthy peer of its class (watch/analysis/stragglers.py). When a whole class slows
down together (a node that is a whole pipeline stage, a stage of one rank), every member is its own healthy
peer and nothing stands out. But the class's own work per step then grows against what it was, while the other
classes' does not: each class's reference (what its healthy peer does per phase: the median, with two the
faster, with one itself) is compared with its level when the class was last healthy (kept per rank by
:class:`~ranktop.watch.analysis.stragglers.ExcessHistory`), and its growth beyond what the job's other classes
grew by (the lower median of every class's growth, as a share of its work: a job whose every class does more
work per step, a longer sequence, is no class's slowdown; nor one whose every class grew by as many seconds, a
slower filesystem under every loader: the lesser of the two) is each member's class excess. A job of one class has
none: its growth is the job's.

The same bars as a rank's (stragglers.py): past 3% of the class's work and past the noise, which here is the
reference's (the class's median rank's window, over the members' count) against its level's and the other
classes'. No allowance for hardware: the class is compared with its own past. Numpy over the classes: O(1)
per rank.
"""

from __future__ import annotations

import warnings

import numpy as np

from ranktop.watch.analysis.stragglers import MEDIAN_ERROR, NOISE_Z, SLOW_FLOOR_FRACTION, SLOW_FLOOR_S, healthy_peer, peer_groups
from ranktop.wire.names import COMM_PHASE

#: A class's reference is kept as its level only from a window of this many steps (half the engine's 64): the
#: job's first steps (warm-up, lazy initialization) say little of what the class does (watch/analysis/judge.py).
SETTLED_STEPS = 32


def references(phases: np.ndarray, names: list[str], class_ids: np.ndarray | None) -> np.ndarray:
    """Per rank (a row of ``phases``, own seconds per phase of the live ranks), its class's reference per phase
    (the class's healthy peer: each phase's median from three members, the faster of two whole, a member alone
    itself); the waits (``comm``) are 0: they are no one's work."""
    own = np.array([name != COMM_PHASE for name in names], bool)
    out = np.zeros_like(phases)
    if not len(phases):
        return out
    columns = np.flatnonzero(own)
    for members, _ in peer_groups(class_ids, len(phases)):
        out[members, columns[:, None]] = healthy_peer(phases[members][:, own])[:, None]  # (columns x members)
    return out


def class_excess(reference: np.ndarray | None, level: np.ndarray | None, class_ids: np.ndarray | None, noise: np.ndarray,
                 window_steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Per rank: its class's growth beyond the job's since the class was last healthy (seconds a step; 0: none
    or not known), the phase that grew most (an index into the phases, -1: none), and the excess past which the
    growth is a slowdown (inf: not judged). ``reference``: :func:`references`; ``level``: the same when each
    rank was last healthy (NaN: not known); ``noise`` and ``window_steps``: each rank's own step-to-step spread
    (a robust SD, s) over how many steps. ``reference`` or ``class_ids`` None: one class, none."""
    n = len(noise)
    excess, culprit, bar = np.zeros(n), np.full(n, -1, np.int64), np.full(n, np.inf)
    if reference is None or class_ids is None or level is None or not n or level.shape != reference.shape:
        return excess, culprit, bar
    # A class's level then: its members' median (each member's is the class's reference when that member was last
    # healthy; a member judged slow keeps an older one, which must not stand for the class's: a pipeline stage with
    # an intermittent straggler in it read its level from before its warm-up ended, and the other stage grew)
    groups, levels = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (a class none of whose members was noted: all NaN)
        for m, _ in peer_groups(class_ids, n):  # (arrays: class_ids is not None)
            then_m = level[m[0]] if len(m) == 1 else np.nanmedian(level[m], axis=0)
            if not np.isnan(then_m).any():
                groups.append(m)
                levels.append(then_m)
    if len(groups) < 2:  # one class: its growth is the job's
        return excess, culprit, bar
    firsts = np.array([m[0] for m in groups])
    then_all = np.array(levels)
    work_then = then_all.sum(axis=1)
    added = (reference[firsts] - then_all).sum(axis=1)  # per class: seconds a step its work grew by
    grew = added / np.where(work_then > 0, work_then, np.inf)
    job = float(np.sort(grew)[(len(grew) - 1) // 2])  # the lower median: the job's other classes
    # ... and in seconds: a job whose every rank got slower alike grows each class by the same share where it
    # scales (a slower clock) and by the same seconds where time is added (a slower filesystem under every
    # loader): the first makes a smaller stage grow less in seconds, the second more as a share. A class grew
    # beyond the job only where it did by both.
    job_s = float(np.sort(added)[(len(groups) - 1) // 2])
    z = max(NOISE_Z, float(np.sqrt(2.0 * np.log(len(groups) * 1e3))))
    for members, then, then_level, grown_s in zip(groups, work_then.tolist(), then_all, added.tolist()):
        beyond = reference[members[0]] - then_level * (1.0 + job)
        size = min(float(np.clip(beyond, 0.0, None).sum()), max(0.0, grown_s - job_s))
        spread = float(np.median(np.nan_to_num(noise[members])))
        steps = max(1.0, float(np.median(window_steps[members])))
        error = MEDIAN_ERROR * spread / np.sqrt(steps) / np.sqrt(max(1.0, len(members) / 2.0))
        excess[members] = size
        culprit[members] = int(np.argmax(beyond)) if size > 0 else -1
        bar[members] = max(SLOW_FLOOR_S, SLOW_FLOOR_FRACTION * then, z * error * np.sqrt(3.0))
    return excess, culprit, bar


def class_keys(class_ids: np.ndarray | None, ranks: np.ndarray) -> np.ndarray:
    """Per rank, a number that names its class for good: its lowest rank and its size. A class id is only a
    place in one snapshot's numbering; a level kept against a class (:class:`~ranktop.watch.analysis.stragglers.
    ExcessHistory`) must be dropped when the rank's class is another one. ``class_ids`` None: one class."""
    n = len(ranks)
    ranks = np.asarray(ranks, np.int64)
    if not n:
        return np.zeros(0, np.int64)
    if class_ids is None:
        return np.full(n, (int(ranks.min()) << 32) + n, np.int64)
    order = np.argsort(class_ids, kind="stable")
    starts = np.concatenate(([0], np.flatnonzero(np.diff(class_ids[order])) + 1))
    sizes = np.diff(np.append(starts, n))
    keys = (np.minimum.reduceat(ranks[order], starts) << 32) + sizes
    out = np.empty(n, np.int64)
    out[order] = np.repeat(keys, sizes)
    return out
