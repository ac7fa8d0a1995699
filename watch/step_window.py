"""One rank's last steps as columns, with their medians kept until new steps arrive.

The straggler scoring needs, per rank, the median over its window of each
phase's *own* time (its waits in collectives taken out), of its step time and
of its time in collectives. Recomputing that from raw records for every rank
at every refresh is what made a snapshot of 1,024 ranks take seconds. Here a
step's own times are worked out once, when it arrives (and again only if its
collective waits come later), into one column per phase; the medians are
computed only when asked and only if a step arrived since (a sort of a few
dozen floats per column, in C).
"""

from __future__ import annotations

import collections
from typing import Any

from ranktop.wire import schema
from ranktop.wire.own_times import own_times

OTHER, COMM = schema.OTHER_PHASE, schema.COMM_PHASE


def _median(values) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class StepWindow:
    """The last ``window`` steps of one rank: (n, t, wall) and a column per phase of own times."""

    def __init__(self, window: int):
        self.window = window
        self.steps: collections.deque[tuple[int, float, float]] = collections.deque(maxlen=window)
        self.columns: dict[str, collections.deque[float]] = {}
        self.waited = False  # some step had collective waits: "comm" is known
        self.names: set[str] = set()  # every phase its steps named
        self._median_wall: float | None = None
        self._median_stale = False  # steps came since the median was worked out
        self._raw: collections.deque[tuple[float, dict] | None] = collections.deque(maxlen=window)  # (wall, phases) to redo a step
        self._stats: dict[str, Any] | None = None
        self.stats_version: object = None  # changes (identity) whenever the medians are worked out again
        self._dirty = False

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def dirty(self) -> bool:
        """A step arrived (or changed) since the statistics were last computed."""
        return self._dirty

    def add(self, n: int, t: float, wall: float, phases: dict[str, float], waits: dict | None) -> None:
        self.steps.append((n, t, wall))
        self._raw.append((wall, phases))
        self.names.update(phases)
        self._median_stale = True
        times = own_times(wall, phases, waits)
        if waits:
            self.waited = True
        length = len(self.steps)
        for name, column in self.columns.items():
            column.append(times.pop(name, 0.0))
        for name, value in times.items():  # a phase first seen now: earlier steps spent nothing in it
            column = self.columns[name] = collections.deque([0.0] * (length - 1), maxlen=self.window)
            column.append(value)
        self._dirty = True

    def add_own(self, n: int, t: float, wall: float, own: dict[str, float]) -> None:
        """A record whose own times are already worked out (a node digest's interval, wire/node_digest.py).
        Thousands of ranks arrive this way several times a second: the usual case (the same phases as the
        last record) is a plain append per column."""
        self.steps.append((n, t, wall))
        self._raw.append(None)  # its waits are already taken out: nothing to redo (and 4,096 ranks' dicts not kept)
        self._median_stale = True
        self._dirty = True
        columns = self.columns
        if own.keys() == columns.keys():
            for name, column in columns.items():
                column.append(own[name])
            return
        self.names.update(name for name in own if name != OTHER and name != COMM)
        if COMM in own:
            self.waited = True
        times = dict(own)
        length = len(self.steps)
        for name, column in columns.items():
            column.append(times.pop(name, 0.0))
        for name, value in times.items():
            column = columns[name] = collections.deque([0.0] * (length - 1), maxlen=self.window)
            column.append(value)

    def rewait(self, n: int, waits: dict) -> None:
        """Waits of step ``n`` that came after its record: work its own times out again."""
        for i in range(len(self.steps) - 1, -1, -1):
            if self.steps[i][0] == n:
                if self._raw[i] is None:  # a digest's interval: its own times came worked out
                    return
                wall, phases = self._raw[i]
                times = own_times(wall, phases, waits)
                self.waited = True
                length = len(self.steps)
                for name in times:
                    if name not in self.columns:
                        self.columns[name] = collections.deque([0.0] * length, maxlen=self.window)
                for name, column in self.columns.items():
                    column[i] = times.get(name, 0.0)
                self._dirty = True
                return

    def median_wall(self, refresh: bool = True) -> float | None:
        """The median step time over the window, worked out again after new steps only when ``refresh``
        (a snapshot of thousands of ranks refreshes a share at a time, as :meth:`stats`; a median over the
        window moves little in between)."""
        if self.steps and (self._median_wall is None or (self._median_stale and refresh)):
            self._median_wall = _median([w for _, _, w in list(self.steps)])  # list(): one step, whatever arrives
            self._median_stale = False
        return self._median_wall

    def stats(self, names: list[str], min_steps: int, refresh: bool = True) -> dict[str, Any] | None:
        """Medians over the window: ``{"step", "phases" (in the order of names), "rate", "comm"}``;
        None with fewer than ``min_steps`` steps. Computed again only after new steps, and only when
        ``refresh`` (else the last ones, if any: a snapshot of thousands of ranks refreshes a share a time)."""
        if len(self.steps) < min_steps:
            return None
        if self._stats is None or (self._dirty and refresh):
            steps = list(self.steps)
            first, last = steps[0], steps[-1]
            span = last[1] - first[1]
            medians = {name: _median(column) for name, column in list(self.columns.items())}
            self._stats = {
                "step": self.median_wall(),
                "medians": medians,
                "rate": (last[0] - first[0]) / span if span > 0 else None,
                "comm": medians.get(COMM, 0.0) if self.waited else None,
            }
            self._dirty = False
            self.stats_version = self._stats
        stats = self._stats
        medians = stats["medians"]
        return {"step": stats["step"], "phases": {name: medians.get(name, 0.0) for name in names}, "rate": stats["rate"], "comm": stats["comm"]}
