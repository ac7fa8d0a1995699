"""Every rank of a job as one coloured cell, grouped by node: the layout of the rank map.

Like btop's per-core grid or the GitHub contribution calendar: a cell per rank
(or, when the ranks do not fit the space given, a cell per node holding its
worst rank), coloured by status and score, so the one red cell among 4,096
is found at a glance. Pure layout: which cell goes where for a width, and
its colour; the widget (tui/panes/rankmap.py) draws only the lines on screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ranktop.watch.model.rank_table import STATUS_CODE, RankRows
from ranktop.watch import OK, SILENT, SLOW, STALLED
from ranktop.watch.model.rank_row import RankRow

CELL = "■"
#: Cell glyphs of the flagged statuses and of ranks without data: the colour is never the only signal (NO_COLOR,
#: a monochrome or light terminal, a colour-blind eye). ``▲`` is the verdict line's mark of a slow rank.
STATUS_GLYPHS = {SILENT: "×", STALLED: "◆", SLOW: "▲"}
NO_DATA_GLYPH = "□"
RANKS, NODES = "ranks", "nodes"
NODES_PER_GROUP = 8  # in node cells, a space every this many nodes so the eye can count

#: Cell colours: flagged statuses, then healthy ranks by how far they are above the median.
STATUS_COLOURS = {SILENT: "red", STALLED: "magenta", SLOW: "dark_orange"}
NO_DATA = "grey35"
#: (score below which, colour) for healthy ranks.
SCORE_COLOURS = ((0.01, "green4"), (0.03, "green3"), (float("inf"), "yellow3"))
LEGEND = (("ok", "green4", CELL), ("a little slower", "yellow3", CELL), ("slow", "dark_orange", STATUS_GLYPHS[SLOW]),
          ("stalled", "magenta", STATUS_GLYPHS[STALLED]), ("silent", "red", STATUS_GLYPHS[SILENT]),
          ("no data yet", NO_DATA, NO_DATA_GLYPH))  # fmt: skip
_SEVERITY = {SILENT: 0, STALLED: 1, SLOW: 2, OK: 3}
_OK_CODE = STATUS_CODE[OK]


def severity(row: RankRow) -> tuple:
    """Sort key, worst first: status, then score."""
    return (_SEVERITY.get(row.status, 3), row.step_s is None and row.status == OK, -row.score, row.rank)


def colour(row: RankRow) -> str:
    if row.status in STATUS_COLOURS:
        return STATUS_COLOURS[row.status]
    if row.step_s is None:
        return NO_DATA
    for below, name in SCORE_COLOURS:
        if row.score < below:
            return name
    return SCORE_COLOURS[-1][1]


def glyph(row: RankRow) -> str:
    """The cell's character: its status's glyph when flagged, an empty square before any data, else a full one."""
    if row.status in STATUS_GLYPHS:
        return STATUS_GLYPHS[row.status]
    return NO_DATA_GLYPH if row.step_s is None else CELL


@dataclass(frozen=True)
class Cell:
    key: tuple  # ("rank", n) or ("node", host)
    host: str
    rows: Sequence[RankRow]  # the ranks it stands for, by rank (Members: built when read)
    worst: RankRow  # the one that colours it

    @property
    def style(self) -> str:
        return colour(self.worst)

    @property
    def glyph(self) -> str:
        return glyph(self.worst)


@dataclass(frozen=True)
class Layout:
    mode: str  # RANKS or NODES
    cells: list[Cell]
    lines: list[list[tuple[int, int]]]  # per line: (x, cell index), x counted after the label
    labels: list[str]  # per line: the first rank on it
    label_width: int

    def position(self, index: int) -> tuple[int, int]:
        """(line, x) of a cell."""
        for y, line in enumerate(self.lines):
            if line and line[0][1] <= index <= line[-1][1]:
                for x, i in line:
                    if i == index:
                        return y, x
        return 0, 0


class Members(Sequence):
    """A group's ranks (a node's, a stage's), their rows built when read: the map reads the worst of each
    group, the line labels and the group under the cursor, not 4,096 rows (watch/model/rank_table.py)."""

    __slots__ = ("_rows", "_indices", "ranks")

    def __init__(self, rows: RankRows, indices: list[int]):
        self._rows, self._indices = rows, indices
        self.ranks: list[int] = rows.table.rank[indices].tolist()  # their numbers, ascending

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self._rows[i] for i in self._indices[k]]
        return self._rows[self._indices[k]]

    def worst(self) -> RankRow:
        """The row that colours a group's cell: :func:`severity`'s first, read from the columns."""
        t = self._rows.table
        at = np.array(self._indices)
        nodata = np.isnan(t.step_s[at]) & (t.status[at] == _OK_CODE)
        order = np.lexsort((t.rank[at], -t.score[at], nodata, t.status[at]))  # statuses are coded worst first
        return self._rows[self._indices[int(order[0])]]


def nodes_of(rows: Sequence[RankRow]) -> list[tuple[str, Members]]:
    """Ranks grouped by host, hosts in the order of their lowest rank, ranks by number."""
    rows = RankRows.of(rows)
    by_host: dict[str, list[int]] = {}
    for i, host in enumerate(rows.table.host):  # the table is in rank order
        by_host.setdefault(host, []).append(i)
    return [(host, Members(rows, indices)) for host, indices in by_host.items()]


#: The label of a pipeline stage's group in the map (it stands where a host's name does when grouped by node).
STAGE_LABEL = "stage {}"


def stages_of(rows: Sequence[RankRow]) -> list[tuple[str, Members]]:
    """Ranks grouped by pipeline stage (their ``pp`` coordinate), stages in order, ranks by number; ranks of no
    known stage last, as "no stage"."""
    rows = RankRows.of(rows)
    by_stage: dict[int, list[int]] = {}
    rest = []
    for i in range(len(rows)):
        coords = rows.table.coords[i]
        stage = coords.get("pp") if coords else None
        if stage is None:
            rest.append(i)
        else:
            by_stage.setdefault(stage, []).append(i)
    out = [(STAGE_LABEL.format(stage), Members(rows, members)) for stage, members in sorted(by_stage.items())]
    return out + ([("no stage", Members(rows, rest))] if rest else [])


def layout(nodes: list[tuple[str, list[RankRow]]], width: int, height: int | None = None, mode: str | None = None) -> Layout:
    """Cells per rank when they fit ``height`` lines (or ``mode`` says so), else one per node."""
    total = sum(len(rows) for _, rows in nodes)
    label_width = len(str(max((_last_rank(rows) for _, rows in nodes), default=0))) + 1
    room = max(1, width - label_width)
    if mode is None:
        fits = height is None or total <= len(nodes) or rank_lines(nodes, room) <= height
        mode = RANKS if fits else NODES
    return _rank_layout(nodes, room, label_width) if mode == RANKS else _node_layout(nodes, room, label_width)


def rank_lines(nodes, room: int) -> int:
    """How many lines a cell per rank takes (the same walk as :func:`_rank_layout`, without the cells)."""
    lines, x = 1, 0
    for _, rows in nodes:
        n = len(rows)
        if x and x + n > room:
            lines, x = lines + 1, 0
        while x + n > room:  # a node wider than a line wraps
            n -= room - x
            lines, x = lines + 1, 0
        x += n + 1
    return lines


def _rank_layout(nodes, room: int, label_width: int) -> Layout:
    cells: list[Cell] = []
    lines: list[list[tuple[int, int]]] = [[]]
    x = 0
    for host, rows in nodes:
        if x and x + len(rows) > room:  # a node starts on a new line unless it is wider than a line
            lines.append([])
            x = 0
        for row in rows:
            if x >= room:
                lines.append([])
                x = 0
            lines[-1].append((x, len(cells)))
            cells.append(Cell(("rank", row.rank), host, (row,), row))
            x += 1
        x += 1  # a gap between nodes
    return Layout(RANKS, cells, lines, _labels(cells, lines), label_width)


def _node_layout(nodes, room: int, label_width: int) -> Layout:
    cells: list[Cell] = []
    lines: list[list[tuple[int, int]]] = [[]]
    x = 0
    for i, (host, rows) in enumerate(nodes):
        if x >= room:
            lines.append([])
            x = 0
        lines[-1].append((x, len(cells)))
        cells.append(Cell(("node", host), host, rows, rows.worst() if isinstance(rows, Members) else min(rows, key=severity)))
        x += 1
        if (len(lines[-1])) % NODES_PER_GROUP == 0:
            x += 1
    return Layout(NODES, cells, lines, _labels(cells, lines), label_width)


def _labels(cells: list[Cell], lines) -> list[str]:
    return [str(_first_rank(cells[line[0][1]].rows)) if line else "" for line in lines]


def _first_rank(rows) -> int:
    return rows.ranks[0] if isinstance(rows, Members) else rows[0].rank


def _last_rank(rows) -> int:
    return rows.ranks[-1] if isinstance(rows, Members) else rows[-1].rank


def ranks_of(rows) -> list[int]:
    """The rank numbers of a cell's rows (read from the columns where it can)."""
    return list(rows.ranks) if isinstance(rows, Members) else [r.rank for r in rows]
