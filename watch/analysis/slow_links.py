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
   most :data:`SLOW_FACTOR` times below the expected rate;
3. a pair ``a``-``b`` is slow when the links between them are that far below
   the links touching neither, and neither end is slow as a node;
4. what it costs: the job's collectives are bound by their slowest link
   (a ring's every step crosses it), and with every member on time a wait is
   the transfer, so at the expected rate the job's median wait per step
   (``comm_s``) would be ``comm_s * rate / expected``: ``excess_s`` is
   ``comm_s * (1 - rate / expected)``, and ``loss`` that over the median
   step. A link costing the job less than :data:`MIN_LOSS` is not named
   (a slow link the job does not wait on is no finding);
5. a node with a rank judged slow by its own work is not named: its own work
   explains the job's waits (and a busy node answers its probes late too).

Limits (docs/detection.md): the relays measure the path their TCP traffic
takes, which is the job's only where the job's collectives go over the same
network (gloo, NCCL over sockets); a rate the prober cannot resolve (a fast
link's 16 KiB crossing in microseconds) reads as "at least" what it
measured, which is enough to show a slowed link far below it but not a link
a few tens of percent slow.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from ranktop.watch import format as fmt
from ranktop.watch.engine.link_book import Link

#: A node's (or pair's) links this many times slower than the job's other links are slow.
SLOW_FACTOR = 3.0
#: A slow link is named when it costs the job this share of its step at least.
MIN_LOSS = 0.05
#: Probes a link's rate must rest on before it counts.
MIN_PROBES = 3


@dataclass(frozen=True)
class SlowLink:
    """A node (``host``) or a pair of nodes (``hosts``) whose network is slow, and what it costs the job."""

    host: str | None  # the node, when one node's links are slow (None: a pair)
    hosts: list[str]  # the node, or the pair's two ends
    rate_bps: float  # what its links measured (bytes a second: the median of its slow direction)
    expected_bps: float  # what the job's other links measured
    excess_s: float  # what it adds to every step
    loss: float  # the share of the job's step lost to it
    direction: str = "both"  # "out", "in", or "both": which of its links are slow (a pair: "both")
    text: str = field(default="", compare=False)  # "node-c's network is slow: its links at ... elsewhere, the job loses 38%"


def find(links: Iterable[Link], comm_s: float | None, median_step_s: float | None,
         busy_hosts: Iterable[str] = ()) -> list[SlowLink]:  # fmt: skip
    """The slow nodes and pairs of ``links``, the costliest first (see the module docstring); ``comm_s``: the
    job's median wait in collectives per step; ``busy_hosts``: nodes with a rank judged slow by its own work."""
    links = [link for link in links if link.probes >= MIN_PROBES]
    if not links or not comm_s or not median_step_s or comm_s <= 0 or median_step_s <= 0:
        return []
    busy = set(busy_hosts)
    hosts = sorted({link.src for link in links} | {link.dst for link in links})
    found: list[SlowLink] = []
    slow_nodes: set[str] = set()
    for host in hosts:
        elsewhere = [link.rate_bps for link in links if host not in (link.src, link.dst)]
        if not elsewhere:
            continue
        expected = statistics.median(elsewhere)
        out = [link.rate_bps for link in links if link.src == host]
        into = [link.rate_bps for link in links if link.dst == host]
        sides = {name: statistics.median(rates) for name, rates in (("out", out), ("in", into)) if rates}
        slow = {name: rate for name, rate in sides.items() if rate * SLOW_FACTOR <= expected}
        if not slow:
            continue
        slow_nodes.add(host)
        if host in busy:
            continue
        direction = "both" if len(slow) == 2 else next(iter(slow))
        item = _costed(host, [host], min(slow.values()), expected, comm_s, median_step_s, direction)
        if item is not None:
            found.append(item)
    pairs = {tuple(sorted((link.src, link.dst))) for link in links}
    for a, b in sorted(pairs):
        if a in slow_nodes or b in slow_nodes:
            continue
        between = [link.rate_bps for link in links if {link.src, link.dst} == {a, b}]
        elsewhere = [link.rate_bps for link in links if {link.src, link.dst} != {a, b}]
        if not elsewhere:
            continue
        expected, rate = statistics.median(elsewhere), min(between)
        if rate * SLOW_FACTOR <= expected:
            item = _costed(None, [a, b], rate, expected, comm_s, median_step_s, "both")
            if item is not None:
                found.append(item)
    return sorted(found, key=lambda item: -item.loss)


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


def matrix(links: Iterable[Link]) -> tuple[list[str], dict[tuple[str, str], float]]:
    """The nodes and each measured link's rate by (from, to): the screen's node x node view."""
    rates = {(link.src, link.dst): link.rate_bps for link in links}
    hosts = sorted({h for pair in rates for h in pair})
    return hosts, rates


def of_job(links: list[Link], comm_s, live, median_step_s: float | None, hosts: list[str], slow) -> list[SlowLink]:
    """:func:`find` on a judged view's columns (watch/analysis/judge.py): the live ranks' median wait in
    collectives per step, and the nodes of the ranks judged slow (``slow``: a mask over the ranks)."""
    if not links:
        return []
    waits = comm_s[live]
    waits = waits[~np.isnan(waits)]
    comm = float(np.median(waits)) if len(waits) else None
    busy = {hosts[i] for i in np.flatnonzero(slow).tolist()}
    return find(links, comm, median_step_s, busy)
