"""Half or more of a class slow: a node of a class's ranks slower than its other nodes (issue 46, item 2).

A rank is judged against a healthy peer of its class (watch/analysis/stragglers.py): each phase's median over the
class. When half the class is slow, one node of a two-node data-parallel job, that median is the midpoint
between the slow and the healthy ranks: the slow ones stand out by half their slowdown, or not at all, and the
size told is half the truth (before issue 46 a slow node of two was never named from 8 ranks a node). The job's
healthy speed is then what its *fastest coherent group* does: the ranks of a class are grouped by node, each
node's work per phase is its healthy rank's (of two, the lesser whole; of more, each phase's lower median: one slow
rank does not make its node slow), and the reference is a healthy node's, the same way over the nodes (of two,
the faster one whole, as a rank against a single peer). Only where the ranks' waits in collectives are known:
elsewhere they land in a phase, and nodes that wait in it would differ from nodes that do not by them. A
node's excess is the sum over phases of its median beyond that reference.

A node is slow past all of: 1 ms; 3% of the reference's work plus twice the hardware allowance (4%: its median
is compared with one other node's, which may itself be fast; a node's ranks drift together); and the noise of two
medians of the node's ranks' steps (``NOISE_Z`` standard errors, the class's nodes counted as chances). Its every
rank is then slow with that excess (the size told is what the job pays: the others wait for the node), so the
verdict names the node (``slow_node``). Only nodes with two ranks or more of the class count (a lone rank of a
class on a node is a rank, judged as one), and a class on two such nodes at least. Numpy over each class's ranks:
O(1) per rank.
"""

from __future__ import annotations

import numpy as np

from ranktop.watch.analysis.stragglers import MEDIAN_ERROR, NOISE_Z, SLOW_FLOOR_FRACTION, SLOW_FLOOR_S, peer_groups
from ranktop.wire.names import COMM_PHASE

#: A node counts when it holds this many of its class's ranks at least.
MIN_RANKS = 2
#: A node is slow past the floor plus this share of a healthy node's work: what two nodes' healthy hardware may
#: differ by as a whole. A node is judged by its healthy rank, which a rank's own lasting bias does not move, so
#: this is less than twice a rank's allowance against one peer (stragglers.HARDWARE_SPREAD).
NODE_SPREAD = 0.04


def node_excess(work: np.ndarray, names: list[str], class_ids: np.ndarray | None, host_id: np.ndarray,
                noise: np.ndarray, window_steps: np.ndarray, waited: np.ndarray,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """``work`` (ranks x names): each live rank's own seconds per phase (checkpoints and evaluations out);
    ``host_id`` its node as a number; ``noise`` and ``window_steps`` its own step-to-step spread (a robust SD, s)
    over how many steps; ``waited``: its waits in collectives are known (a class with a rank whose are not is not
    judged: its waits land in a phase, and nodes that wait in it and nodes that do not would differ by them). Per
    rank: its node's excess over a healthy node of its class (seconds a step; 0: none or
    not judged), the phase beyond the most (an index into ``names``, -1: none), and the excess past which it is
    slow (inf: not judged)."""
    n = len(work)
    excess, culprit, bar = np.zeros(n), np.full(n, -1, np.int64), np.full(n, np.inf)
    if n < 2 * MIN_RANKS:
        return excess, culprit, bar
    own = np.array([name != COMM_PHASE for name in names], dtype=np.bool_)
    columns = np.flatnonzero(own)
    noise = np.nan_to_num(noise)
    for members, count in peer_groups(class_ids, n):
        if count < 2 * MIN_RANKS:
            continue
        ids = np.arange(n)[members]
        if not waited[ids].all():
            continue
        _, at, sizes = np.unique(host_id[ids], return_inverse=True, return_counts=True)
        at = at.reshape(-1)
        big = sizes >= MIN_RANKS
        if int(big.sum()) < 2:
            continue
        if not big.all():
            keep = big[at]
            ids, at = ids[keep], (np.cumsum(big) - 1)[at[keep]]
            sizes = sizes[big]
        # (each node as its healthy rank, worked out for every node at once: a node is slow when its ranks are,
        # not one of them)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        mine = work[ids][:, own]
        medians = _healthy_of_groups(mine, at, starts, sizes)  # nodes x own phases
        reference = _healthy(medians)  # a healthy node: of two, the faster one whole
        beyond = np.clip(medians - reference, 0.0, None)
        sizes_s = beyond.sum(axis=1)
        healthy = float(reference.sum())
        z = max(NOISE_Z, float(np.sqrt(2.0 * np.log(len(sizes) * 1e3))))
        spread = _lower_middle_of_groups(noise[ids], at, starts, sizes)
        steps = np.maximum(1.0, _lower_middle_of_groups(window_steps[ids].astype(np.float64), at, starts, sizes))
        error = MEDIAN_ERROR * spread / np.sqrt(steps) / np.sqrt(sizes)
        floor = max(SLOW_FLOOR_S, (SLOW_FLOOR_FRACTION + NODE_SPREAD) * healthy)
        excess[ids] = sizes_s[at]
        culprit[ids] = np.where(sizes_s[at] > 0, columns[np.argmax(beyond, axis=1)][at], -1)
        bar[ids] = np.maximum(floor, z * error * np.sqrt(2.0))[at]
    return excess, culprit, bar


def _healthy(block: np.ndarray) -> np.ndarray:
    """What a healthy row of ``block`` does, as stragglers.healthy_peer has it but lower: of two the lesser whole,
    of more each column's lower median (one slow rank does not make its node slow)."""
    if len(block) == 2:
        return block[np.argmin(block.sum(axis=1))]
    return np.sort(block, axis=0)[(len(block) - 1) // 2]


def _lower_middle_of_groups(values: np.ndarray, group: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each group's lower median of ``values`` (``group``: each value's group, 0..; ``starts`` and ``sizes``: the
    groups' places in a sort by group), for every group in one sort."""
    if len(sizes) and (sizes == sizes[0]).all():  # nodes alike (the usual job): a sort along each node's ranks
        k = int(sizes[0])
        grouped = values[np.argsort(group, kind="stable")].reshape(len(sizes), k)
        return np.partition(grouped, (k - 1) // 2, axis=1)[:, (k - 1) // 2]
    order = np.lexsort((values, group))
    return values[order][starts + (sizes - 1) // 2]


def _healthy_of_groups(block: np.ndarray, group: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """:func:`_healthy` of each group's rows of ``block``, for every group at once (a sort per column): a group of
    two, its lesser row whole; of more, each column's lower median."""
    if len(sizes) and (sizes == sizes[0]).all() and sizes[0] > 2:  # nodes alike: every column in one partition
        k = int(sizes[0])
        grouped = block[np.argsort(group, kind="stable")].reshape(len(sizes), k, block.shape[1])
        return np.partition(grouped, (k - 1) // 2, axis=1)[:, (k - 1) // 2]
    out = np.empty((len(sizes), block.shape[1]))
    for c in range(block.shape[1]):
        out[:, c] = _lower_middle_of_groups(block[:, c], group, starts, sizes)
    pairs = np.flatnonzero(sizes == 2)
    if len(pairs):
        order = np.lexsort((block.sum(axis=1), group))
        out[pairs] = block[order[starts[pairs]]]
    return out
