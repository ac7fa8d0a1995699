"""The links the job's relays measured (relay/links.py), as the viewer last heard them: one entry per node pair.

Each relay says, about once a second, the rate its probes crossed from its
node to each peer it probed (a ``links`` message, wire/messages.py). The book
keeps each relay's latest word, and forgets a relay not heard for
:data:`FORGET_S` (its node gone, or probing turned off). It hands the judge
columns (:class:`LinkColumns`), made again only when a relay said something
new: a job of 2,048 nodes, each probing 4 peers, has 8,192 links, and a
snapshot must not build an object per link.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ranktop.wire.messages import Links

#: A relay not heard for this long no longer speaks for its links.
FORGET_S = 10.0
#: Relays kept at most (a job's nodes; a flood of made-up hosts cannot grow the book past it).
MAX_RELAYS = 65536


@dataclass(frozen=True)
class Link:
    """One measured link: from ``src``'s node to ``dst``'s, its rate (bytes a second) and least round trip."""

    src: str
    dst: str
    rate_bps: float
    rtt_s: float
    probes: int


@dataclass(frozen=True)
class LinkColumns:
    """Every measured link as columns: ``hosts[src[i]]`` to ``hosts[dst[i]]`` at ``rate[i]`` bytes a second."""

    hosts: list[str]
    src: np.ndarray  # int64 indexes into hosts
    dst: np.ndarray
    rate: np.ndarray  # float64, bytes a second
    rtt: np.ndarray  # float64, seconds
    probes: np.ndarray  # int64
    own: np.ndarray | None = None  # float64 per host: the rate of its relay's probes to itself (NaN: not said)

    def __len__(self) -> int:
        return len(self.rate)

    def link(self, i: int) -> Link:
        return Link(self.hosts[int(self.src[i])], self.hosts[int(self.dst[i])], float(self.rate[i]), float(self.rtt[i]),
                    int(self.probes[i]))  # fmt: skip

    def rows(self, hosts: set[str] | None = None) -> list[Link]:
        """The links as records (those touching ``hosts`` only, when given), in order of their two ends."""
        if hosts is None:
            at = range(len(self))
        else:
            wanted = np.array([h in hosts for h in self.hosts], bool)
            at = np.flatnonzero(wanted[self.src] | wanted[self.dst]).tolist() if len(self) else []
        return sorted((self.link(i) for i in at), key=lambda link: (link.src, link.dst))

    @staticmethod
    def of(links: list[Link]) -> "LinkColumns":
        """Columns of ``links`` records (tests, and what a recording replays)."""
        hosts = sorted({link.src for link in links} | {link.dst for link in links})
        at = {h: i for i, h in enumerate(hosts)}
        return LinkColumns(
            hosts, np.array([at[link.src] for link in links], np.int64), np.array([at[link.dst] for link in links], np.int64),
            np.array([link.rate_bps for link in links], np.float64), np.array([link.rtt_s for link in links], np.float64),
            np.array([link.probes for link in links], np.int64),
        )  # fmt: skip


NO_LINKS = LinkColumns([], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64))


class LinkBook:
    def __init__(self) -> None:
        self._latest: dict[str, tuple[float, Links]] = {}
        self._columns: LinkColumns | None = NO_LINKS

    def take(self, msg: Links, now: float) -> None:
        if msg.host not in self._latest and len(self._latest) >= MAX_RELAYS:
            return
        self._latest[msg.host] = (now, msg)
        self._columns = None

    def columns(self, now: float) -> LinkColumns:
        """Every link measured by a relay heard lately (made again only after news)."""
        gone = [h for h, (at, _) in self._latest.items() if now - at > FORGET_S]
        for host in gone:
            del self._latest[host]
        if gone or self._columns is None:
            self._columns = self._build()
        return self._columns

    def _build(self) -> LinkColumns:
        index: dict[str, int] = {}
        src, dst, rate, rtt, probes = [], [], [], [], []
        own: dict[int, float] = {}
        for host in sorted(self._latest):
            msg = self._latest[host][1]
            me = index.setdefault(host, len(index))
            for entry in msg.links:
                if entry.peer == host:  # its probes to itself: its machine's own share of a crossing
                    own[me] = entry.rate
                    continue
                src.append(me)
                dst.append(index.setdefault(entry.peer, len(index)))
                rate.append(entry.rate)
                rtt.append(entry.rtt)
                probes.append(entry.probes)
        selves = np.full(len(index), np.nan)
        selves[list(own)] = list(own.values())
        return LinkColumns(list(index), np.array(src, np.int64), np.array(dst, np.int64), np.array(rate, np.float64),
                           np.array(rtt, np.float64), np.array(probes, np.int64), selves)  # fmt: skip

    def cost_bps(self) -> dict[str, float]:
        """What each relay said its probing sent a second."""
        return {host: msg.cost for host, (_, msg) in self._latest.items()}
