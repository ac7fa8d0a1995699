"""The links the job's relays measured (relay/links.py), as the viewer last heard them: one entry per node pair.

Each relay says, about once a second, the rate its probes crossed from its
node to each peer it probed (a ``links`` message, wire/messages.py). The book
keeps each relay's latest word, and forgets a relay not heard for
:data:`FORGET_S` (its node gone, or probing turned off). It hands the judge
columns (:class:`LinkColumns`), made again only when a relay said something
new: a job of 2,048 nodes, each probing 4 peers, has 8,192 links, and a
snapshot must not build an object per link (each relay's rows are made when
its message comes, and joined at once: :class:`LinkBook`).
"""

from __future__ import annotations

import array
from dataclasses import dataclass

import numpy as np

from ranktop.watch.model.snapshot import Link
from ranktop.wire.messages import Links

#: A relay not heard for this long no longer speaks for its links.
FORGET_S = 10.0
#: Relays kept at most (a job's nodes; a flood of made-up hosts cannot grow the book past it).
MAX_RELAYS = 65536
#: Host names kept at most, relays and the peers they name (a legitimate peer is a relay of the job too).
MAX_HOSTS = 2 * MAX_RELAYS
#: Links kept at most, every relay's together (a relay of a real job says MAX_PEERS + 1 = 5: relay/links.py).
MAX_BOOK_LINKS = 1 << 20


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
        at: list[int] | range
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
    """Each relay's latest word on its links, kept as the rows a snapshot needs.

    A relay's rows are made once, when its message is taken (a few microseconds: it says about 5 links), as two
    small arrays; a snapshot joins every relay's bytes in one call and reads them as columns (a job of 2,048
    nodes: 8,192 links in well under a millisecond) instead of building each link in Python (2 ms, 6 ms on a busy
    machine, every snapshot). Host names become numbers in one table shared by every relay's rows, so that
    joined rows need no lookup. Every name in it came from the network, so it keeps only the names the relays'
    latest words hold (counted, and given back when the last row naming one goes: a relay naming new peers in
    every message cannot grow it), :data:`MAX_HOSTS` at most, and the book :data:`MAX_BOOK_LINKS` links at most.
    """

    def __init__(self) -> None:
        self._rows: dict[str, _RelayRows] = {}  # by relay, the least lately heard first
        self._index: dict[str, int] = {}  # host name -> its number in the rows
        self._names: list[str] = []  # number -> host name ("" while free)
        self._refs: list[int] = []  # number -> rows naming it
        self._free: list[int] = []  # numbers given back, to be used again
        self._links = 0  # links in every relay's rows
        self._numbering: tuple[list[str], np.ndarray] | None = None  # the hosts in order, and each number's place
        self._columns: LinkColumns | None = NO_LINKS
        self.refused = 0  # messages left out: past MAX_RELAYS, MAX_HOSTS or MAX_BOOK_LINKS

    def take(self, msg: Links, now: float) -> None:
        host, links = msg.host, msg.links
        old = self._rows.get(host)
        names = tuple([entry.peer for entry in links])
        if old is not None and names == old.names:  # (as a relay says it every second: the same peers)
            ids, pairs = old.ids, old.pairs
        else:
            held = self._admit(host, names, old)
            if held is None:
                self.refused += 1
                return
            ids = held  # (its probes to itself among them: its machine's own share of a crossing)
            pairs = array.array("q", [n for at in ids[:-1] for n in (ids[-1], at)])
        values = array.array("d", [x for entry in links for x in (entry.rate, entry.rtt, entry.probes)])
        if old is not None:
            del self._rows[host]  # (and in again at the end: the least lately heard stay first)
            self._links -= len(old.names)
            if old.ids is not ids:
                self._let_go(old.ids)
        self._rows[host] = _RelayRows(now, names, ids, pairs, values, msg.cost)
        self._links += len(names)
        self._columns = None

    def _admit(self, host: str, names: tuple[str, ...], old: _RelayRows | None) -> list[int] | None:
        """The numbers of ``names`` and then of ``host`` (held), if the book has room for them; else None."""
        if old is None and len(self._rows) >= MAX_RELAYS:
            return None
        if self._links + len(names) - (0 if old is None else len(old.names)) > MAX_BOOK_LINKS:
            return None
        new = {name for name in (*names, host) if name not in self._index}
        if len(new) > MAX_HOSTS - len(self._index):
            return None
        return [self._hold(name) for name in (*names, host)]  # (held before the old rows let go: a name in both stays)

    def _hold(self, name: str) -> int:
        i = self._index.get(name)
        if i is None:
            if self._free:
                i = self._free.pop()
                self._names[i] = name
            else:
                i = len(self._names)
                self._names.append(name)
                self._refs.append(0)
            self._index[name] = i
            self._numbering = None
        self._refs[i] += 1
        return i

    def _let_go(self, ids: list[int]) -> None:
        for i in ids:
            self._refs[i] -= 1
            if not self._refs[i]:
                del self._index[self._names[i]]
                self._names[i] = ""
                self._free.append(i)
                self._numbering = None

    def columns(self, now: float) -> LinkColumns:
        """Every link measured by a relay heard lately (joined again only after news)."""
        gone = []
        for host, rows in self._rows.items():  # (the least lately heard first: stops at the first heard lately)
            if now - rows.at <= FORGET_S:
                break
            gone.append(host)
        for host in gone:
            rows = self._rows.pop(host)
            self._let_go(rows.ids)
            self._links -= len(rows.names)
        if gone or self._columns is None:
            self._columns = self._join()
        return self._columns

    def _join(self) -> LinkColumns:
        """The rows of every relay as columns, the hosts numbered anew from 0 in the order of their names."""
        if not self._rows:
            return NO_LINKS
        if self._numbering is None:  # (only when a name came or went)
            hosts = sorted(self._index)
            place = np.zeros(len(self._names), np.int64)
            place[[self._index[name] for name in hosts]] = np.arange(len(hosts))
            self._numbering = hosts, place
        hosts, place = self._numbering
        relays = self._rows.values()
        pairs = place[np.frombuffer(b"".join([rows.pairs for rows in relays]), np.int64)].reshape(-1, 2)
        values = np.frombuffer(b"".join([rows.values for rows in relays]), np.float64).reshape(-1, 3)
        selves = pairs[:, 0] == pairs[:, 1]
        own = np.full(len(hosts), np.nan)
        own[pairs[selves, 0]] = values[selves, 0]
        links = ~selves
        return LinkColumns(hosts, pairs[links, 0], pairs[links, 1], values[links, 0], values[links, 1],
                           values[links, 2].astype(np.int64), own)  # fmt: skip

    @property
    def names_held(self) -> int:
        """Slots in the book's table of host names, free ones included: what the names the relays sent cost the
        viewer (the most its relays' words held at once, the slots given back used again; :data:`MAX_HOSTS` at
        most)."""
        return len(self._names)

    def cost_bps(self) -> dict[str, float]:
        """What each relay said its probing sent a second."""
        return {host: rows.cost for host, rows in self._rows.items()}


class _RelayRows:
    """One relay's latest word: when it came, the peers it named (itself among them) and their numbers in the
    book's table (its own last); its links as ``src, dst`` number pairs (made again only when its peers change)
    and ``rate, rtt, probes`` triples (its probes to itself among them, ``src == dst``), each one array the
    snapshot joins with the other relays' at no per-link cost; and its probing's cost. (A plain class with slots:
    one is made per message, 2,048 a second in a job of 2,048 nodes.)"""

    __slots__ = ("at", "names", "ids", "pairs", "values", "cost")

    def __init__(self, at: float, names: tuple[str, ...], ids: list[int], pairs: array.array[int],
                 values: array.array[float], cost: float) -> None:  # fmt: skip
        self.at, self.names, self.ids, self.pairs, self.values, self.cost = at, names, ids, pairs, values, cost
