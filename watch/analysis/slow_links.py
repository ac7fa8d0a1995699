"""Which node's network holds the job back: the links the relays measured, weighed by what the job waits in collectives.

Why the ranks alone cannot tell. A collective's wait is the members' arrival
skew plus the transfer. When one node's link slows, every member of the ring
waits the same longer transfer: no rank's own time grows, no rank arrives
late, and the straggler scoring (stragglers.py) rightly blames nobody. What
singles the node out is a measurement of the network itself: each node's
relay probes its links to the other relays (relay/links.py), and says each
link's rate, from its node to the peer, once a second (watch/engine/link_book.py
keeps them).

The rule, per node ``h`` (:func:`find`):

1. the *expected* rate is the median of the links that touch neither end of
   ``h`` (the job's network elsewhere: a node's own links never set the bar
   they are held to); a job of two nodes has no such link and gets no verdict;
2. ``h``'s network is slow when the median of its outgoing links, or of its
   incoming ones (a cap on one direction shows in one of them only), is at
   most :data:`SLOW_FACTOR` times below the expected rate, and that far below
   what its relay's probes to itself measured too (the noise floor: on a
   machine whose cores are oversubscribed, moving a probe through the relays'
   threads takes time of its own, which is no link's; the job's median
   relay's floor counts where it is the higher), and under :data:`RESOLVED_BPS`
   (a crossing longer than what a busy machine adds to one: 33 MB/s);
3. a pair ``a``-``b`` is slow when the links between them, both ways, are that
   far below the job's others, and neither end is slow as a node (one link
   one way is one measurement, which a busy machine can make look slow: a
   node is judged on the median of its links, a pair on both of its own);
4. what it costs: the job's collectives are bound by their slowest link
   (a ring's every step crosses it). A wait is arrival skew plus transfer,
   and the last member to arrive waits the transfer alone, so the job's
   transfer per step (``comm_s``) is read off the ranks that wait least
   (:data:`TRANSFER_PERCENTILE`); at the expected rate it would be
   ``comm_s * rate / expected``: ``excess_s`` is
   ``comm_s * (1 - rate / expected)``, and ``loss`` that over the median
   step. A link costing the job less than :data:`MIN_LOSS` is not named
   (a slow link the job does not wait on is no finding);
5. a node with a rank judged slow by its own work is not named, nor a pair
   with it at one end: its own work explains the job's waits (and a busy
   node answers its probes late too).

Limits (docs/detection.md): the relays measure the path their TCP traffic
takes, which is the job's only where the job's collectives go over the same
network (gloo, NCCL over sockets); a rate the prober cannot resolve (a fast
link's 32 KiB crossing in microseconds) reads as "at least" what it
measured, which is enough to show a slowed link far below it but not a link
a few tens of percent slow.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ranktop.watch import format as fmt
from ranktop.watch.engine.link_book import LinkColumns
from ranktop.watch.model.snapshot import Link, SlowLink
from ranktop.wire.link_probes import PROBE_BYTES

#: A node's (or pair's) links this many times slower than the job's other links are slow.
SLOW_FACTOR = 3.0
#: A slow link is named when it costs the job this share of its step at least.
MIN_LOSS = 0.05
#: A collective's wait is arrival skew plus transfer, and the last member to arrive waits the transfer alone: the
#: job's transfer per step is read as this percentile of its ranks' waits per step (0: the least; a straggler
#: waits least of all, the others its lateness too, so any higher percentile counts its lateness as the link's).
TRANSFER_PERCENTILE = 0
#: What a busy machine's scheduling can add to a probe's crossing (seconds): a link whose 32 KiB take less than
#: this more than a small probe is not told apart from a healthy one (a 2-core machine at a load of 5 to 10 read
#: healthy links at up to 0.4 ms; a link capped at 3 MB/s takes 8 to 20 ms). So a link is slow only below
#: PROBE_BYTES / NOISE_S (33 MB/s, 260 Mbit/s).
NOISE_S = 1e-3
#: The fastest rate a link may be called slow at.
RESOLVED_BPS = PROBE_BYTES / NOISE_S
#: Probes a link's rate must rest on before it counts.
MIN_PROBES = 3


def find(links: LinkColumns, comm_s: float | None, median_step_s: float | None,
         busy_hosts: Iterable[str] = ()) -> list[SlowLink]:  # fmt: skip
    """The slow nodes and pairs of ``links``, the costliest first (see the module docstring); ``comm_s``: the
    job's transfer in collectives per step; ``busy_hosts``: nodes with a rank judged slow by its own work.

    Vectorised: the medians of a node's links worked out only for the nodes that could be slow (half their links
    out or in under what any node's removal could raise the job's median to, counted in one pass), and the exact
    "elsewhere" median only for those: well under a millisecond for a healthy job of 2,048 nodes' 8,192 links (4
    peers each), a quarter of a second for 131,072."""
    if not len(links) or not comm_s or not median_step_s or comm_s <= 0 or median_step_s <= 0:
        return []
    counted = links.probes >= MIN_PROBES
    src, dst, rate = links.src[counted], links.dst[counted], links.rate[counted]
    total = len(rate)
    if not total:
        return []
    hosts = links.hosts
    n = len(hosts)
    busy = set(busy_hosts)
    ordered = np.sort(rate)
    touching = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    # Removing a node's k links raises the others' median to ordered[(total - k) // 2 + k] at most.
    ceiling = ordered[np.minimum(total - 1, (total - touching) // 2 + touching)]
    out, into = _medians_under(src, rate, ceiling, n), _medians_under(dst, rate, ceiling, n)
    floor = _floors(links.own, n)
    found: list[SlowLink] = []
    slow_nodes: set[int] = set()
    for h in np.flatnonzero(np.fmin(out, into) * SLOW_FACTOR <= ceiling).tolist():
        elsewhere = rate[(src != h) & (dst != h)]
        if not len(elsewhere):
            continue  # (two nodes: nothing to hold their link against)
        expected = float(np.median(elsewhere))
        bar = min(expected, floor[h])
        slow = {name: float(side[h]) for name, side in (("out", out), ("in", into))
                if not np.isnan(side[h]) and side[h] * SLOW_FACTOR <= bar and side[h] <= RESOLVED_BPS}  # fmt: skip
        if not slow:
            continue
        slow_nodes.add(h)
        if hosts[h] in busy:
            continue
        direction = "both" if len(slow) == 2 else next(iter(slow))
        item = _costed(hosts[h], [hosts[h]], min(slow.values()), expected, comm_s, median_step_s, direction)
        if item is not None:
            found.append(item)
    pair_ceiling = ordered[min(total - 1, (total - 2) // 2 + 2)]
    left_out = np.zeros(n, bool)  # slow nodes, and busy ones (a busy node's links are no pair's finding either)
    left_out[list(slow_nodes)] = True
    if busy:
        left_out[[i for i, h in enumerate(hosts) if h in busy]] = True
    low = np.flatnonzero((rate * SLOW_FACTOR <= pair_ceiling) & ~left_out[src] & ~left_out[dst])
    pairs = sorted({(min(a, b), max(a, b)) for a, b in zip(src[low].tolist(), dst[low].tolist())})
    for a, b in pairs:
        there, back = (src == a) & (dst == b), (src == b) & (dst == a)
        between = there | back
        if between.all() or not there.any() or not back.any():
            continue
        expected, slowest = float(np.median(rate[~between])), float(max(rate[there].min(), rate[back].min()))
        if slowest * SLOW_FACTOR <= min(expected, floor[a], floor[b]) and slowest <= RESOLVED_BPS:
            item = _costed(None, [hosts[a], hosts[b]], slowest, expected, comm_s, median_step_s, "both")
            if item is not None:
                found.append(item)
    return sorted(found, key=lambda item: -item.loss)


def _floors(own: np.ndarray | None, n: int) -> np.ndarray:
    """Each node's noise floor as a rate: the least of what its relay measured to itself and the job's median
    relay's (inf where none said)."""
    if own is None or not len(own) or np.isnan(own).all():
        return np.full(n, np.inf)
    return np.fmin(np.nan_to_num(own, nan=np.inf), float(np.nanmedian(own)))


#: Up to this many nodes that could be slow have their medians worked out one by one; more, all in one sort.
ONE_BY_ONE = 64


def _medians_under(group: np.ndarray, values: np.ndarray, ceiling: np.ndarray, n: int) -> np.ndarray:
    """The median of ``values`` for each group 0..n-1 whose median could be :data:`SLOW_FACTOR` times under its
    ``ceiling`` (NaN for the others, and for a group with none). A median is at most ``x`` only where half the
    group's values at least are: so the groups are counted first (two ``bincount``), and the few that pass get
    their medians (a job of 2,048 nodes: a healthy one has none, and the sort of every link was most of a
    snapshot's time in this module)."""
    low = values * SLOW_FACTOR <= ceiling[group]
    count = np.bincount(group, minlength=n)
    maybe = np.flatnonzero((count > 0) & (2 * np.bincount(group, weights=low, minlength=n) >= count))
    if len(maybe) > ONE_BY_ONE:
        every = _medians(group, values, n)
        out = np.full(n, np.nan)
        out[maybe] = every[maybe]
        return out
    out = np.full(n, np.nan)
    for g in maybe.tolist():
        out[g] = float(np.median(values[group == g]))
    return out


def _medians(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """The median of ``values`` for each group 0..n-1 (NaN for a group with none), in one sort."""
    out = np.full(n, np.nan)
    order = np.lexsort((values, group))
    g, v = group[order], values[order]
    every = np.arange(n)
    starts, ends = np.searchsorted(g, every, "left"), np.searchsorted(g, every, "right")
    counts = ends - starts
    has = counts > 0
    out[has] = (v[(starts + (counts - 1) // 2)[has]] + v[(starts + counts // 2)[has]]) / 2
    return out


def _costed(host: str | None, hosts: list[str], rate: float, expected: float, comm_s: float, step_s: float,
            direction: str) -> SlowLink | None:  # fmt: skip
    excess = comm_s * (1.0 - rate / expected)
    loss = excess / step_s
    if loss < MIN_LOSS:
        return None
    who = f"{host}'s network is slow" if host is not None else f"the link {hosts[0]}–{hosts[1]} is slow"
    which = {"out": "its links out", "in": "its links in", "both": "its links"}[direction] if host else "it"
    text = (f"{who}: {which} at {fmt.bandwidth(rate)} against {fmt.bandwidth(expected)} elsewhere, "
            f"the job loses {fmt.percent(loss)}")  # fmt: skip
    return SlowLink(host, hosts, rate, expected, excess, loss, direction, text)


#: Up to this many nodes the snapshot carries every measured link (the screen's node x node view); beyond, the
#: links of the slow nodes only.
MATRIX_NODES = 32


def shown(links: LinkColumns, slow: list[SlowLink]) -> list[Link]:
    """The links a snapshot carries: all of a job of up to :data:`MATRIX_NODES` nodes, else the slow ones' only."""
    if len(links.hosts) <= MATRIX_NODES:
        return links.rows()
    return links.rows({h for item in slow for h in item.hosts})


def of_job(links: LinkColumns, comm_s: np.ndarray, live: np.ndarray, median_step_s: float | None, hosts: list[str],
           slow: np.ndarray) -> list[SlowLink]:  # fmt: skip
    """:func:`find` on a judged view's columns (watch/analysis/judge.py): the transfer in the live ranks' waits in
    collectives per step (:data:`TRANSFER_PERCENTILE`), and the nodes of the ranks judged slow (``slow``: a mask
    over the ranks)."""
    if not len(links):
        return []
    waits = comm_s[live]
    waits = waits[~np.isnan(waits)]
    comm = float(np.percentile(waits, TRANSFER_PERCENTILE)) if len(waits) else None
    busy = {hosts[i] for i in np.flatnonzero(slow).tolist()}
    return find(links, comm, median_step_s, busy)
