"""A relay as a snapshot shows it: :class:`Endpoint`, and a snapshot's relays as columns (:class:`EndpointRows`).
The engine's relay book (watch/engine/endpoints.py) fills the columns; a row is made only when read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from ranktop.watch.statuses import ENDPOINT_STATES


@dataclass(slots=True)
class Endpoint:
    """A relay as a snapshot shows it, made when read (:class:`EndpointRows`). Not frozen, as the snapshot's other
    rows are not: a frozen dataclass's ``__init__`` costs four times as much."""

    url: str
    host: str | None
    state: str  # one of ENDPOINT_STATES
    quiet_s: float  # seconds since the last message (or since we started waiting)
    ranks: tuple[int, ...] = ()  # the ranks last heard through it: those a lost relay took with it


class EndpointRows(Sequence[Endpoint]):
    """A snapshot's relays as columns, in the order the viewer came to know them: a row (an :class:`Endpoint`) is
    made only when read. A job of 2,048 nodes made 2,048 rows a snapshot, 2 to 4 ms of it with the job's lock held,
    while the screen reads only the lost and waiting ones (few) and counts the rest (:meth:`by_state`)."""

    __slots__ = ("_urls", "_hosts", "_states", "_quiet", "_ranks", "_which")

    def __init__(self, urls: tuple[str, ...] = (), hosts: tuple[str | None, ...] = (), states: np.ndarray | None = None,
                 quiet: np.ndarray | None = None, ranks: dict[str, tuple[int, ...]] | None = None,
                 which: np.ndarray | None = None):  # fmt: skip
        self._urls, self._hosts, self._ranks = urls, hosts, ranks or {}
        self._states = np.zeros(len(urls), np.int8) if states is None else states  # an index of ENDPOINT_STATES
        self._quiet = np.zeros(len(urls)) if quiet is None else quiet
        self._which = np.arange(len(urls)) if which is None else which  # the rows of the columns this holds

    @classmethod
    def of(cls, rows: Iterable[Endpoint]) -> EndpointRows:
        """Rows made by hand (a test's, a snapshot built of rows), as columns."""
        rows = list(rows)
        return cls(tuple(e.url for e in rows), tuple(e.host for e in rows),
                   np.array([ENDPOINT_STATES.index(e.state) for e in rows], np.int8), np.array([e.quiet_s for e in rows], float),
                   {e.url: e.ranks for e in rows if e.ranks})  # fmt: skip

    def __len__(self) -> int:
        return len(self._which)

    @overload
    def __getitem__(self, i: int) -> Endpoint: ...
    @overload
    def __getitem__(self, i: slice) -> list[Endpoint]: ...
    def __getitem__(self, i: int | slice) -> Endpoint | list[Endpoint]:
        if isinstance(i, slice):
            return [self._row(j) for j in self._which[i].tolist()]
        return self._row(int(self._which[i]))

    def __iter__(self) -> Iterator[Endpoint]:
        return map(self._row, self._which.tolist())

    def by_state(self) -> dict[str, EndpointRows]:
        """The relays of each state (ENDPOINT_STATES), their rows still unmade."""
        states = self._states[self._which]
        return {state: EndpointRows(self._urls, self._hosts, self._states, self._quiet, self._ranks, self._which[states == code])
                for code, state in enumerate(ENDPOINT_STATES)}  # fmt: skip

    def _row(self, j: int) -> Endpoint:
        url = self._urls[j]
        return Endpoint(url, self._hosts[j], ENDPOINT_STATES[self._states[j]], float(self._quiet[j]), self._ranks.get(url, ()))
