"""One rank's last steps as columns of machine floats, with their medians kept until new steps arrive.

The straggler scoring needs, per rank, the median over its window of each
phase's *own* time (its waits in collectives taken out), of its step time and
of its time in collectives. Recomputing that from raw records for every rank
at every refresh is what made a snapshot of 1,024 ranks take seconds. Here a
step's own times are worked out once, when it arrives (and again only if its
collective waits come later), into one column per phase; the medians are
computed only when asked and only if a step arrived since (a sort of a few
dozen floats per column, in C).

The columns are rings of ``array('d')`` of the window's length: 8 bytes a
figure instead of a float object and a deque slot (about 40), which is most
of a viewer's memory at 4,096 ranks. A median needs no order, so it sorts a
ring as it lies; what needs the order (the first and last step, a step by
number) reads it from the ring's head.
"""

from __future__ import annotations

from array import array
from typing import Any, Iterator

from ranktop.wire import schema
from ranktop.wire.own_times import own_times

OTHER, COMM = schema.OTHER_PHASE, schema.COMM_PHASE


def _median(values) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class StepWindow:
    """The last ``window`` steps of one rank: their number, start and wall time, and a column per phase of
    own times, each a ring of the window's length (slot ``i`` of every ring is the same step)."""

    __slots__ = (
        "window", "waited", "names", "stats_version", "_n", "_t", "_w", "columns", "_raw", "_head", "_count",
        "_median_wall", "_median_stale", "_stats", "_dirty", "last_end",
    )  # fmt: skip

    def __init__(self, window: int):
        self.window = window
        self._n = array("q", bytes(8 * window))  # step numbers
        self._t = array("d", bytes(8 * window))  # starts (unix s, the rank's clock)
        self._w = array("d", bytes(8 * window))  # wall times (s)
        self.columns: dict[str, array] = {}  # phase -> own time (s) per slot
        self._raw: list[tuple[float, dict] | None] = [None] * window  # (wall, phases) to redo a step's own times
        self._head = 0  # the slot the next step goes in
        self._count = 0  # slots in use
        self.last_end: float | None = None  # when the newest step ended (its start plus its wall time)
        self.waited = False  # some step had collective waits: "comm" is known
        self.names: set[str] = set()  # every phase its steps named
        self._median_wall: float | None = None
        self._median_stale = False  # steps came since the median was worked out
        self._stats: dict[str, Any] | None = None
        self.stats_version: object = None  # changes (identity) whenever the medians are worked out again
        self._dirty = False

    def __len__(self) -> int:
        return self._count

    @property
    def dirty(self) -> bool:
        """A step arrived (or changed) since the statistics were last computed."""
        return self._dirty

    @property
    def steps(self) -> list[tuple[int, float, float]]:
        """(number, start, wall) of each step in the window, oldest first."""
        return [(self._n[i], self._t[i], self._w[i]) for i in self._slots()]

    def _slots(self) -> Iterator[int]:
        first = (self._head - self._count) % self.window
        return (((first + k) % self.window) for k in range(self._count))

    def _oldest(self) -> int:
        return (self._head - self._count) % self.window

    def _newest(self) -> int:
        return (self._head - 1) % self.window

    @property
    def first_number(self) -> int | None:
        return self._n[self._oldest()] if self._count else None


    def _slot(self, n: int, t: float, wall: float, raw: tuple[float, dict] | None) -> int:
        i = self._head
        self._n[i], self._t[i], self._w[i] = n, t, wall
        self.last_end = t + wall
        self._raw[i] = raw
        self._head = (i + 1) % self.window
        if self._count < self.window:
            self._count += 1
        self._median_stale = True
        self._dirty = True
        return i

    def _new_column(self) -> array:
        return array("d", bytes(8 * self.window))  # earlier steps spent nothing in a phase first seen now

    def add(self, n: int, t: float, wall: float, phases: dict[str, float], waits: dict | None) -> None:
        i = self._slot(n, t, wall, (wall, phases))
        self.names.update(phases)
        times = own_times(wall, phases, waits)
        if waits:
            self.waited = True
        self._put(i, times)

    def add_own(self, n: int, t: float, wall: float, own: dict[str, float]) -> None:
        """A record whose own times are already worked out (a node digest's interval, wire/node_digest.py).
        Thousands of ranks arrive this way several times a second: the usual case (the same phases as the
        last record) is a plain store per column."""
        i = self._slot(n, t, wall, None)  # its waits are already taken out: nothing to redo
        columns = self.columns
        if own.keys() == columns.keys():
            for name, column in columns.items():
                column[i] = own[name]
            return
        self.names.update(name for name in own if name != OTHER and name != COMM)
        if COMM in own:
            self.waited = True
        self._put(i, own)

    def _put(self, i: int, times: dict[str, float]) -> None:
        columns = self.columns
        for name, column in columns.items():
            column[i] = times.get(name, 0.0)
        for name, value in times.items():
            if name not in columns:
                column = columns[name] = self._new_column()
                column[i] = value

    def rewait(self, n: int, waits: dict) -> None:
        """Waits of step ``n`` that came after its record: work its own times out again."""
        for i in reversed(list(self._slots())):
            if self._n[i] == n:
                raw = self._raw[i]
                if raw is None:  # a digest's interval: its own times came worked out
                    return
                wall, phases = raw
                self.waited = True
                self._put(i, own_times(wall, phases, waits))
                self._dirty = True
                return

    def median_wall(self, refresh: bool = True) -> float | None:
        """The median step time over the window, worked out again after new steps only when ``refresh``
        (a snapshot of thousands of ranks refreshes a share at a time, as :meth:`stats`; a median over the
        window moves little in between)."""
        if self._count and (self._median_wall is None or (self._median_stale and refresh)):
            self._median_wall = _median(self._w[: self._count])  # a full ring, or the slots filled from 0 so far
            self._median_stale = False
        return self._median_wall

    def stats(self, names: list[str], min_steps: int, refresh: bool = True) -> dict[str, Any] | None:
        """Medians over the window: ``{"step", "phases" (in the order of names), "rate", "comm"}``;
        None with fewer than ``min_steps`` steps. Computed again only after new steps, and only when
        ``refresh`` (else the last ones, if any: a snapshot of thousands of ranks refreshes a share a time)."""
        if self._count < min_steps:
            return None
        if self._stats is None or (self._dirty and refresh):
            first, last, used = self._oldest(), self._newest(), self._count
            span = self._t[last] - self._t[first]
            medians = {name: _median(column[:used]) for name, column in list(self.columns.items())}
            self._stats = {
                "step": self.median_wall(),
                "medians": medians,
                "rate": (self._n[last] - self._n[first]) / span if span > 0 else None,
                "comm": medians.get(COMM, 0.0) if self.waited else None,
            }
            self._dirty = False
            self.stats_version = self._stats
        stats = self._stats
        medians = stats["medians"]
        return {"step": stats["step"], "phases": {name: medians.get(name, 0.0) for name in names}, "rate": stats["rate"], "comm": stats["comm"]}
