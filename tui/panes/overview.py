"""The job overview, for jobs with more ranks than bars fit: every rank at a glance.

Three parts, top to bottom: the distribution of the ranks' slowdown (their
own time beyond the median rank, the straggler score in milliseconds), the
rank map (a cell per rank or per node, grouped by node), and one line on the
cell under the map's cursor. Only the distribution and the map's grouping
look at every rank; the map draws only the lines on screen.
"""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from ranktop.tui.panes.rankmap import RankMap
from ranktop.tui.render import palette
from ranktop.tui.render.histogram import histogram_lines
from ranktop.tui.render.rankmap_layout import LEGEND, NODES, Cell, nodes_of, ranks_of, stages_of
from ranktop.watch import format as fmt
from ranktop.watch.format import ranks_text
from ranktop.watch import SILENT, SLOW, STALLED, STATUSES
from ranktop.watch.model.snapshot import Snapshot

#: Terminal heights below which the distribution gets one line of columns instead of three.
SHORT = 30
#: The most of the panes' height the overview takes when stacked over the straggler table.
MAP_SHARE = 0.65


def slowdown_samples(snapshot: Snapshot) -> tuple[list[float], list[tuple[float, str]]]:
    """Every live, scored rank's slowdown in ms, and those of the flagged ones with their status colour."""
    table = snapshot.ranks.table  # the columns: the distribution builds no rank's row
    live = ~np.isnan(table.step_s) & ~table.statuses(SILENT)
    values = (table.excess_s[live] * 1000.0).tolist()
    flagged = live & table.statuses(SLOW, STALLED)
    marks = [
        (ms, palette.STATUS_STYLES[STATUSES[code]])
        for ms, code in zip((table.excess_s[flagged] * 1000.0).tolist(), table.status[flagged].tolist())
    ]
    return values, marks


def distribution_text(snapshot: Snapshot, width: int, height: int) -> Text:
    values, marks = slowdown_samples(snapshot)
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append("slowdown vs the median rank", style="bold")
    head.append(f"  {len(values):,} ranks scored, columns log-scaled", style=palette.MUTED)
    if not values:
        return head
    table = snapshot.ranks.table
    live = np.flatnonzero(~np.isnan(table.step_s) & ~table.statuses(SILENT))
    worst = live[np.argmax(table.excess_s[live])]
    label = f"rank {table.rank[worst]}" if table.excess_s[worst] > 0 else None
    lines = histogram_lines(values, width, height, unit="ms", label=label, marks=marks)
    return Text("\n").join([head, *lines])


def cell_text(cell: Cell | None, mode: str | None) -> Text:
    """The line under the map: what the cursor is on, and what enter does."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if cell is None:
        return text
    worst = cell.worst
    if cell.key[0] == "node":
        text.append(cell.host if cell.host.startswith("stage") else f"node {cell.host}", style="bold")
        text.append(f" {ranks_text(ranks_of(cell.rows))}", style=palette.MUTED)
        text.append(" · worst ", style=palette.MUTED)
        text.append(f"rank {worst.rank}", style="bold")
    else:
        text.append(f"rank {worst.rank}", style="bold")
        text.append(f" on {worst.host}", style=palette.MUTED)
    status = worst.status
    text.append(f" {status}", style=palette.STATUS_STYLES[status])
    if status == SLOW:
        text.append(f" {fmt.score(worst.score)}")
        if worst.culprit_phase:
            text.append(f" in {worst.culprit_phase}")
    elif status == STALLED:
        text.append(f" {fmt.ago(worst.stalled_s or 0.0)} in {worst.stalled_phase or '–'}")
    elif status == SILENT:
        text.append(f" {fmt.ago(worst.last_seen_s)}")
    if worst.step_s is not None:
        text.append(f" · step {fmt.ms(worst.step_s)} ms", style=palette.MUTED)
    text.append("  enter: " + ("its ranks" if cell.key[0] == "node" else "details"), style=palette.MUTED)
    return text


def legend_text(mode: str | None, nodes: int, group: str = "node") -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"a cell per {group} (its worst rank)" if mode == NODES else f"a cell per rank, grouped by {group}", style="bold")
    text.append(f" · {nodes:,} {group}{'s' if nodes != 1 else ''} ·", style=palette.MUTED)
    for name, colour, mark in LEGEND:
        text.append(f" {mark}", style=colour)
        text.append(f" {name}", style=palette.MUTED)
    return text


class Overview(Vertical):
    """Distribution, rank map, and the cursor's cell."""

    _lines = 0  # lines of the distribution shown
    group_by = "node"  # or "stage": the map's groups (pipeline stages, on a job whose layout is known)

    def compose(self) -> ComposeResult:
        yield Static(id="distribution")
        yield Static(id="map-legend")
        yield RankMap(id="rankmap")
        yield Static(id="map-cell")

    def show(self, snapshot: Snapshot, table_lines: int | None = None) -> None:
        """``table_lines``: the lines the straggler table stacked over the overview needs for its rows (None: not
        known); the map may take the rest, past :data:`MAP_SHARE`."""
        self._snapshot = snapshot
        width = max(10, self.content_region.width or self.size.width or 80)
        height = 1 if self.screen.size.height < SHORT else 3
        dist = self.query_one("#distribution", Static)
        text = distribution_text(snapshot, width, height)
        lines = len(text.plain.splitlines())
        dist.update(text, layout=lines != self._lines)  # its height (auto) follows its lines
        self._lines = lines
        by_stage = self.group_by == "stage" and "pp" in snapshot.layout_roles
        nodes = stages_of(snapshot.ranks) if by_stage else nodes_of(snapshot.ranks)
        rankmap = self.query_one(RankMap)
        # Stacked under the table, the overview takes up to a share of the panes, or what the table's rows leave
        # if more, and the map as many lines as it needs within that; the table takes the rest.
        panes = self.parent.size.height if self.parent is not None else self.screen.size.height
        budget = max(4, int(panes * MAP_SHARE), panes - table_lines if table_lines is not None else 0)
        room = max(1, budget - (1 + lines + 2))  # border, distribution, legend, cursor line
        rankmap.show(nodes, room)
        height = min(room, rankmap.line_count)
        if rankmap.styles.height is None or rankmap.styles.height.value != height:
            rankmap.styles.height = height
        self.query_one("#map-legend", Static).update(legend_text(rankmap.mode, len(nodes), "stage" if by_stage else "node"), layout=False)
        self._show_cell()
        self.border_title = f"All {len(snapshot.ranks):,} ranks"

    def _show_cell(self) -> None:
        rankmap = self.query_one(RankMap)
        self.query_one("#map-cell", Static).update(cell_text(rankmap.cell, rankmap.mode), layout=False)

    def on_rank_map_moved(self, _: RankMap.Moved) -> None:
        self._show_cell()
