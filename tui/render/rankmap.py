"""Every rank of a job as one coloured cell, grouped by node: the layout of the rank map.

Like btop's per-core grid or the GitHub contribution calendar: a cell per rank
(or, when the ranks do not fit the space given, a cell per node holding its
worst rank), coloured by status and score, so the one red cell among 4,096
is found at a glance. Pure layout: which cell goes where for a width, and
its colour; the widget (tui/panes/rankmap.py) draws only the lines on screen.
"""

from __future__ import annotations

from dataclasses import dataclass

from ranktop.watch.snapshot import OK, SILENT, SLOW, STALLED, RankRow

CELL = "■"
RANKS, NODES = "ranks", "nodes"
NODES_PER_GROUP = 8  # in node cells, a space every this many nodes so the eye can count

#: Cell colours: flagged statuses, then healthy ranks by how far they are above the median.
STATUS_COLOURS = {SILENT: "red", STALLED: "magenta", SLOW: "dark_orange"}
NO_DATA = "grey35"
#: (score below which, colour) for healthy ranks.
SCORE_COLOURS = ((0.01, "green4"), (0.03, "green3"), (float("inf"), "yellow3"))
LEGEND = (("ok", "green4"), ("a little slower", "yellow3"), ("slow", "dark_orange"), ("stalled", "magenta"),
          ("silent", "red"), ("no data yet", NO_DATA))  # fmt: skip
_SEVERITY = {SILENT: 0, STALLED: 1, SLOW: 2, OK: 3}


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


@dataclass(frozen=True)
class Cell:
    key: tuple  # ("rank", n) or ("node", host)
    host: str
    rows: tuple[RankRow, ...]  # the ranks it stands for, by rank
    worst: RankRow  # the one that colours it

    @property
    def style(self) -> str:
        return colour(self.worst)


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


def nodes_of(rows: list[RankRow]) -> list[tuple[str, list[RankRow]]]:
    """Ranks grouped by host, hosts in the order of their lowest rank, ranks by number."""
    by_host: dict[str, list[RankRow]] = {}
    ordered = all(a.rank < b.rank for a, b in zip(rows, rows[1:]))  # a Snapshot's ranks are sorted already
    for row in rows if ordered else sorted(rows, key=lambda r: r.rank):
        by_host.setdefault(row.host, []).append(row)
    return list(by_host.items())


#: The label of a pipeline stage's group in the map (it stands where a host's name does when grouped by node).
STAGE_LABEL = "stage {}"


def stages_of(rows: list[RankRow]) -> list[tuple[str, list[RankRow]]]:
    """Ranks grouped by pipeline stage (their ``pp`` coordinate), stages in order, ranks by number; ranks of no
    known stage last, as "no stage"."""
    by_stage: dict[int, list[RankRow]] = {}
    rest = []
    for row in sorted(rows, key=lambda r: r.rank):
        stage = row.coords.get("pp") if row.coords else None
        if stage is None:
            rest.append(row)
        else:
            by_stage.setdefault(stage, []).append(row)
    out = [(STAGE_LABEL.format(stage), members) for stage, members in sorted(by_stage.items())]
    return out + ([("no stage", rest)] if rest else [])


def layout(nodes: list[tuple[str, list[RankRow]]], width: int, height: int | None = None, mode: str | None = None) -> Layout:
    """Cells per rank when they fit ``height`` lines (or ``mode`` says so), else one per node."""
    total = sum(len(rows) for _, rows in nodes)
    label_width = len(str(max((rows[-1].rank for _, rows in nodes), default=0))) + 1
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
        cells.append(Cell(("node", host), host, tuple(rows), min(rows, key=severity)))
        x += 1
        if (len(lines[-1])) % NODES_PER_GROUP == 0:
            x += 1
    return Layout(NODES, cells, lines, _labels(cells, lines), label_width)


def _labels(cells: list[Cell], lines) -> list[str]:
    return [str(cells[line[0][1]].rows[0].rank) if line else "" for line in lines]

