"""The relays a viewer hears the job through: which it knows, which it has heard, which dropped, how late.

The aggregator keeps one :class:`Endpoints` (under its lock): the receiver tells it of relays found and of
connections made or lost, every message tells it when it arrived and how old it was. From that a snapshot
reads, in one :meth:`Endpoints.view`, what it needs to judge ranks fairly: whether this viewer is behind on
the job's messages (then a quiet rank is not yet silent), which relays dropped (their ranks are cut off,
not stalled), and which nodes it is still connecting to (their ranks are not yet heard).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


#: Messages reaching this viewer this much later than they used to: it is behind (too much to decode), and says so.
BEHIND_AFTER_S = 1.0
#: A node first heard less than this long ago counts as not yet heard: while a viewer of thousands of ranks is still
#: connecting (CURVE handshakes with hundreds of relays take seconds) its ranks are not silent, and the ranks of the
#: nodes it has not reached yet are not "never heard from".
SETTLING_S = 5.0


@dataclass(frozen=True)
class RelayFacts:
    """Every relay this viewer knows at one instant, in the order they came: facts only, copies (whether one is lost
    is the analysis' to say: watch/analysis/relays.py)."""

    urls: tuple[str, ...]
    hosts: tuple[str | None, ...]
    heard: np.ndarray  # bool: a message came through it
    quiet: np.ndarray  # seconds since its last message (never heard: since it was found)
    down: np.ndarray  # bool: the receiver saw its connection drop (a relay killed)
    ranks: dict[str, tuple[int, ...]]  # url -> the ranks last heard through it


@dataclass(frozen=True)
class EndpointsView:
    """What one snapshot reads of the relays."""

    behind_s: float  # how far behind this viewer is on the job's messages (0 below BEHIND_AFTER_S)
    links: dict[str, tuple[bool, float]]  # url -> (down now, when it last dropped): relays that ever dropped
    settling: frozenset[str]  # relays first heard less than SETTLING_S ago: their quiet ranks are not silent yet
    settled: bool  # every relay known has been heard, or was found SETTLING_S ago (a dead one): unheard ranks count

    def cut_off(self, endpoint: str | None, last_seen: float) -> bool:
        """A rank heard through a relay that dropped, and not heard through it since: cut off, not stalled."""
        link = self.links.get(endpoint) if endpoint is not None else None
        return link is not None and (link[0] or last_seen <= link[1])


class Endpoints:
    """Every relay this viewer knows, by telemetry URL, as columns (a slot per relay, in the order they came):
    a snapshot reads them in a few whole-array operations, not a Python pass over thousands of relays. Not
    thread-safe: the aggregator's lock guards it."""

    def __init__(self) -> None:
        self._slot: dict[str, int] = {}
        self._urls: list[str] = []
        self._hosts: list[str | None] = []
        self._frozen: tuple[tuple[str, ...], tuple[str | None, ...]] | None = None  # the two above, until a relay comes or goes
        self._dropped: dict[
            str, float
        ] = {}  # url -> when it last dropped (or replaced a relay that did): ranks not heard since are cut off
        # A slot per relay (_BLANK past the last one): when it was found; its first message (NaN: none yet), as a
        # node heard for less than SETTLING_S is still being connected; its last; whether the receiver saw its
        # connection drop (a relay killed: lost now, not after silent_after_s); and how late its messages reach us:
        # their age when ingested (our wall clock less their own), less the least age seen (a constant clock skew
        # between hosts is not lateness). It grows when this viewer falls behind.
        self._added, self._first, self._last, self._down, self._floor, self._late = (
            np.full(8, _BLANK[name], _DTYPE[name]) for name in _COLUMNS
        )  # fmt: skip
        self._heard: tuple[memoryview[Any], ...] = self._heard_views()

    def urls(self) -> list[str]:
        return list(self._urls)

    def __len__(self) -> int:
        return len(self._urls)

    def add(self, url: str, host: str | None, now: float) -> None:
        if url in self._slot:
            return
        n = len(self._urls)
        if n == len(self._added):
            self._resize(2 * n)
        self._slot[url] = n
        self._urls.append(url)
        self._hosts.append(host)
        self._frozen = None
        self._added[n] = now  # (its other columns blank)

    def replace(self, old: str, new: str, host: str | None, now: float) -> None:
        """A node's relay came back elsewhere (a new port): the old one goes; the new one starts as a drop, so
        the node's ranks are cut off until heard through it."""
        slot = self._slot.pop(old, None)
        if slot is not None:
            self._dropped.pop(old, None)
            del self._urls[slot], self._hosts[slot]
            for name in _COLUMNS:
                column = getattr(self, name)
                column[slot:-1] = column[slot + 1 :].copy()
                column[len(self._urls)] = _BLANK[name]  # (the slot it vacated at the end)
            self._slot = {url: i for i, url in enumerate(self._urls)}
            self._frozen = None
        if new not in self._slot:
            self.add(new, host, now)
            self._dropped[new] = now

    def note_link(self, url: str, up: bool, now: float) -> None:
        slot = self._slot.get(url)
        if slot is not None:
            self._down[slot] = not up
            if not up:
                self._dropped[url] = now

    def heard(self, url: str, now: float, age: float) -> None:
        """A message through ``url`` arrived at ``now``, ``age`` seconds after it was sent (by the two clocks).
        (It runs for every message: its columns are written through memoryviews, a numpy item each is dearer.)"""
        slot = self._slot.get(url)
        if slot is None:
            return
        first, last, floors, late = self._heard
        if first[slot] != first[slot]:  # (NaN: its first)
            first[slot] = now
        last[slot] = now
        floor = floors[slot]
        if age < floor:
            floors[slot] = floor = age
        late[slot] = age - floor

    def host_of(self, url: str | None) -> str | None:
        slot = self._slot.get(url) if url is not None else None
        return self._hosts[slot] if slot is not None else None

    def view(self, now: float) -> EndpointsView:
        n = len(self._urls)
        first = self._first[:n]
        behind = float(self._late[:n].max()) if n else 0.0
        return EndpointsView(
            behind_s=behind if behind > BEHIND_AFTER_S else 0.0,
            links={url: (bool(self._down[self._slot[url]]), at) for url, at in self._dropped.items()},
            settling=frozenset(self._urls[i] for i in np.flatnonzero(now - first < SETTLING_S).tolist()),  # (NaN: never heard)
            settled=bool(np.all((first == first) | (now - self._added[:n] >= SETTLING_S))),
        )

    def facts(self, now: float, ranks_by_url: dict[str, tuple[int, ...]]) -> RelayFacts:
        """What is known of each relay now, for the snapshot's rows (watch/analysis/relays.py says which are lost)."""
        n = len(self._urls)
        last = self._last[:n]
        heard = last == last
        if self._frozen is None:
            self._frozen = (tuple(self._urls), tuple(self._hosts))
        quiet = now - np.where(heard, last, self._added[:n])
        return RelayFacts(*self._frozen, heard, quiet, self._down[:n].copy(), ranks_by_url)

    def _resize(self, size: int) -> None:
        for name in _COLUMNS:
            old = getattr(self, name)
            column = np.full(size, _BLANK[name], _DTYPE[name])
            column[: len(old)] = old
            setattr(self, name, column)
        self._heard = self._heard_views()

    def _heard_views(self) -> tuple[memoryview[Any], ...]:
        """The columns :meth:`heard` writes, as memoryviews (made again when the columns grow)."""
        return tuple(column.data for column in (self._first, self._last, self._floor, self._late))


NAN = float("nan")
_COLUMNS = ("_added", "_first", "_last", "_down", "_floor", "_late")
_BLANK = {"_added": 0.0, "_first": NAN, "_last": NAN, "_down": False, "_floor": np.inf, "_late": 0.0}
_DTYPE = {name: bool if name == "_down" else float for name in _COLUMNS}
