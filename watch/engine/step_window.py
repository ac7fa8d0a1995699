"""One rank's last steps: its row of the job's step columns (watch/engine/step_columns.py), with the writes ingest makes.

A step's own times (its waits in collectives taken out, wire/own_times.py) are
worked out once, when it arrives, and again only if its waits come later; the
medians are the columns' business, worked out for every rank at once when a
snapshot asks. A window made on its own (a test, a tool) gets columns of its own.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ranktop.watch.engine.step_columns import StepColumns
from ranktop.wire.own_times import own_times

__all__ = ["StepWindow", "own_times"]


class StepWindow:
    """The last ``window`` steps of one rank, as row ``row`` of ``columns``."""

    __slots__ = ("columns", "row", "_raw")

    def __init__(self, window: int, columns: StepColumns | None = None):
        self.columns = columns if columns is not None else StepColumns(window, rows=1)
        self.row = self.columns.new_row()
        self._raw: dict[int, tuple[float, dict[str, float]]] = {}  # slot -> (wall, phases): to redo a step's own times

    @property
    def last_end(self) -> float | None:
        """When the newest step ended (its start plus its wall time); None before any."""
        end = self.columns.views_end[self.row]
        return None if end != end else end

    @last_end.setter
    def last_end(self, end: float | None) -> None:
        self.columns.views_end[self.row] = float("nan") if end is None else end

    @property
    def window(self) -> int:
        return self.columns.window

    def __len__(self) -> int:
        return int(self.columns.count[self.row])

    @property
    def waited(self) -> bool:
        """Some step had collective waits: "comm" is known."""
        return bool(self.columns.waited[self.row])

    @property
    def dirty(self) -> bool:
        """A step arrived (or changed) since the medians were last worked out."""
        return bool(self.columns.changed[self.row] != self.columns.stats_at[self.row])

    @property
    def steps(self) -> list[tuple[int, float, float]]:
        """(number, start, wall) of each step in the window, oldest first."""
        return self.columns.steps(self.row)

    @property
    def first_number(self) -> int | None:
        if not len(self):
            return None
        return int(self.columns.num[self.row, self.columns.oldest(self.row)])

    def clear(self) -> None:
        """Forget every step (the rank's new process starts afresh in the same row)."""
        self.columns.clear(self.row)
        self._raw.clear()
        self.columns.raw_rows.discard(self.row)
        self.last_end = None

    def add(self, n: int, t: float, wall: float, phases: dict[str, float], waits: Mapping[str | None, float] | None) -> None:
        i = self.columns.add(self.row, n, t, wall, own_times(wall, phases, waits))
        self._raw[i] = (wall, phases)
        self.columns.raw_rows.add(self.row)
        self.last_end = t + wall

    def forget_raw(self) -> None:
        """Its next slot will hold a record whose own times came worked out (a node digest's interval, written
        by StepColumns.add_block with other ranks' right after): nothing of the slot's to redo."""
        if self._raw:
            self._raw.pop(int(self.columns.head[self.row]), None)
            if not self._raw:
                self.columns.raw_rows.discard(self.row)

    def rewait(self, n: int, waits: Mapping[str | None, float]) -> None:
        """Waits of step ``n`` that came after its record: work its own times out again."""
        i = self.columns.slot_of(self.row, n)
        raw = self._raw.get(i) if i is not None else None
        if i is not None and raw is not None:  # None: not in the window, or a digest's interval (its own times came worked out)
            self.columns.put(self.row, i, own_times(raw[0], raw[1], waits))

    def median_wall(self) -> float | None:
        """The median step time over the window as last worked out (None before)."""
        value = self.columns.median_wall[self.row]
        return None if self.columns.stats_at[self.row] < 0 or np.isnan(value) else float(value)
