"""Drill-down from the rank map: a node's ranks, then one rank's detail.

Both screens follow the live snapshot: the App hands them each snapshot it
draws (``show``), so they update at the refresh rate and freeze with pause.
A node's ranks are few (8 on most clusters), so they are drawn as the main
screen's bars; a rank's detail puts in one place what the main screen spreads
over panes: its phases against the median rank, its recent history, its
collectives, memory and GPU.
"""

from __future__ import annotations

import collections

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from ranktop.tui import bindings
from ranktop.tui.panes import gpus, memory
from ranktop.tui.panes.breakdown import Columns, bar, bar_scale, rank_text
from ranktop.tui.panes.collectives import cells as collective_cells
from ranktop.tui.render import palette
from ranktop.tui.render.rankmap_layout import nodes_of, severity, stages_of
from ranktop.watch import format as fmt
from ranktop.watch.format import ranks_text
from ranktop.watch import SILENT, SLOW, STALLED
from ranktop.watch.model.rank_row import RankRow, coords_text
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.model.rank_row import PARTLY

HISTORY = 120  # refreshes of a rank's step time kept while its detail is open


class DrillScreen(Screen[None]):
    """A screen the App feeds with every snapshot it draws."""

    BINDINGS = list(bindings.DRILL_KEYS)

    def show(self, snapshot: Snapshot) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def action_close(self) -> None:
        self.dismiss()

    def action_open(self) -> None:
        pass


# -- a node's ranks ------------------------------------------------------------------


def node_title(host: str, rows: list[RankRow]) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(host if host.startswith("stage ") else f"node {host}", style="bold")
    text.append(f"  {ranks_text(r.rank for r in rows)}", style=palette.MUTED)
    for status in (SILENT, STALLED, SLOW):
        count = sum(1 for r in rows if r.status == status)
        if count:
            text.append(f"  {count} {status}", style=palette.STATUS_STYLES[status])
    stage = host.startswith("stage ")
    if all(r.status == SLOW for r in rows) and len(rows) > 1 and not stage:
        text.append("  every rank slow: the node is the suspect", style=palette.STATUS_STYLES[SLOW])
    text.append(f"   enter: a rank's detail · [ ]: other {'stages' if stage else 'nodes'} · esc: back", style=palette.MUTED)
    return text


class NodeScreen(DrillScreen):
    """The ranks of one node as bars; enter opens a rank."""

    def __init__(self, host: str, snapshot: Snapshot, by_stage: bool = False) -> None:
        super().__init__()
        self.host = host  # a host, or a pipeline stage's label ("stage 3") when the map is grouped by stage
        self._snapshot = snapshot
        self._ranks: list[int] = []
        self._groups = stages_of if by_stage else nodes_of

    def compose(self) -> ComposeResult:
        yield Static(id="drill-title")
        yield OptionList(id="node-ranks")
        yield Footer()

    def on_mount(self) -> None:
        self.show(self._snapshot)
        self.query_one(OptionList).focus()

    def show(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        if not self.query("#node-ranks"):
            return  # pushed, not composed yet (the list comes last): on_mount draws it
        rows = dict(self._groups(snapshot.ranks)).get(self.host, [])
        self.query_one("#drill-title", Static).update(node_title(self.host, rows))
        listing = self.query_one(OptionList)
        width = max(40, (listing.content_region.width or self.size.width) - 2)
        cols = Columns.fit(width, rows)
        colours = palette.phase_colours(snapshot.phase_names)
        scale = bar_scale(rows)
        highlighted = listing.highlighted
        ranks = [r.rank for r in rows]
        options = [Option(rank_text(r, snapshot.phase_names, colours, scale, cols), id=str(r.rank)) for r in rows]
        if ranks != self._ranks:
            listing.clear_options()
            listing.add_options(options)
            self._ranks = ranks
            if ranks:  # first shown: on the worst rank of the node, the one the map's cell stood for
                worst = ranks.index(min(rows, key=severity).rank)
                listing.highlighted = worst if highlighted is None else min(highlighted, len(ranks) - 1)
        else:
            for option in options:
                listing.replace_option_prompt(option.id, option.prompt)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.app.push_screen(RankScreen(int(event.option.id), self._snapshot))

    def action_open(self) -> None:
        listing = self.query_one(OptionList)
        if listing.highlighted is not None and self._ranks:
            self.app.push_screen(RankScreen(self._ranks[listing.highlighted], self._snapshot))

    def action_other(self, step: int) -> None:
        hosts = [host for host, _ in self._groups(self._snapshot.ranks)]
        if self.host in hosts:
            self.host = hosts[(hosts.index(self.host) + step) % len(hosts)]
            self._ranks = []
            self.query_one(OptionList).highlighted = None
            self.show(self._snapshot)


# -- one rank's detail ---------------------------------------------------------------


def rank_title(row: RankRow, roles: list[str] | None = None) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"rank {row.rank}", style="bold")
    where = coords_text(row.coords, roles or [])
    if where:
        text.append(f" ({where})", style="bold")  # its place in the parallel layout
    text.append(f"  on {row.host} (local rank {row.local_rank}, pid {row.pid})", style=palette.MUTED)
    text.append(f"  {row.status}", style=palette.STATUS_STYLES[row.status])
    if row.status == SLOW:
        text.append(f" {fmt.score(row.score)} (+{fmt.ms(row.excess_s)} ms)")
        if row.culprit_phase:
            text.append(f" in {row.culprit_phase}", style="bold")
    elif row.status == STALLED:
        text.append(f" for {fmt.ago(row.stalled_s or 0.0)} in {row.stalled_phase or 'no phase'}")
    elif row.status == SILENT:
        text.append(f" for {fmt.ago(row.last_seen_s)}")
    text.append(f"  step {row.step}", style=palette.MUTED)
    text.append("   [ ]: other ranks · esc: back", style=palette.MUTED)
    return text


def phases_text(row: RankRow, snapshot: Snapshot, width: int) -> Text:
    """Per phase: this rank's median time, the median rank's, the difference, and a bar of each."""
    medians = snapshot.phase_medians()
    colours = palette.phase_colours(snapshot.phase_names)
    out = Text(no_wrap=True, overflow="crop")
    out.append(f"{'phase':<12} {'this rank':>9} {'median':>9} {'diff':>9}\n", style="bold")
    for name in snapshot.phase_names:
        mine, median = row.phases.get(name, 0.0), medians.get(name, 0.0)
        diff = mine - median
        style = palette.STATUS_STYLES[SLOW] if name == row.culprit_phase else ""
        out.append("■ ", style=colours[name])
        change = "0" if abs(diff) < 5e-6 else ("+" if diff > 0 else "-") + fmt.ms(abs(diff))
        out.append(f"{name:<10} {fmt.ms(mine) if row.phases else '–':>9} {fmt.ms(median):>9} {change:>9}\n", style=style)
    scale = max(sum(row.phases.values()), sum(medians.values()), row.step_s or 0.0)
    bar_width = max(10, width - 12)
    out.append(f"{'this rank':<11} ", style="bold")
    out.append_text(bar(row.phases, snapshot.phase_names, colours, scale, bar_width))
    out.append(f"\n{'median rank':<11} ", style="bold")
    out.append_text(bar(medians, snapshot.phase_names, colours, scale, bar_width))
    return out


def history_text(steps: list[float], row: RankRow, width: int) -> Text:
    out = Text(no_wrap=True, overflow="crop")
    room = max(10, width - 22)
    out.append(f"{'step ms':<12}", style="bold")
    if steps:
        out.append(memory.sparkline(steps, room), style="cyan")
        out.append(f" {fmt.ms(min(steps) / 1000)}-{fmt.ms(max(steps) / 1000)}", style=palette.MUTED)
    else:
        out.append("–", style=palette.MUTED)
    out.append("  (since this view opened)\n", style=palette.MUTED)
    if row.memory is not None and row.memory.history_mb:
        out.append(f"{'memory MB':<12}", style="bold")
        out.append(memory.sparkline(row.memory.history_mb, room), style=memory.CREEP_STYLE if row.memory.creep else "cyan")
        out.append_text(Text(" ").append_text(memory.trend_text(row)))
        out.append("\n")
    if row.gpu is not None and row.gpu.util_history:
        out.append(f"{'GPU util %':<12}", style="bold")
        out.append(memory.sparkline(row.gpu.util_history, room), style="green3")
        out.append("\n")
    out.rstrip()
    return out


def collectives_text(row: RankRow, snapshot: Snapshot) -> Text:
    stats = [s for s in snapshot.collectives if s.rank == row.rank]
    jobs = {s.op: s for s in snapshot.collectives if s.rank < 0}
    out = Text(no_wrap=True, overflow="crop")
    if row.last_arrivals is not None:  # the peers' waits say whom they waited for (watch/analysis/arrivals.py)
        out.append(f"{'arrives last':<12}", style="bold")
        out.append(f" at {fmt.percent(row.last_arrivals)} of its last steps' collectives\n")
    if not stats:
        out.append("no collectives seen from this rank", style=palette.MUTED)
        return out
    out.append(f"{'op':<26} {'calls':>7} {'mean ms':>8} {'p95 ms':>8} {'busbw GB/s':>10}  {'job mean ms':>11}\n", style="bold")
    for s in stats:
        c = collective_cells(s)
        job = jobs.get(s.op)
        out.append(f"{c[1].plain:<26} {c[2].plain:>7} {c[5].plain:>8} {c[6].plain:>8} {c[8].plain:>10}  ")
        out.append(f"{fmt.ms(job.mean_s) if job else '–':>11}\n", style=palette.MUTED)
    out.rstrip()
    return out


def resources_text(row: RankRow, width: int) -> Text:
    out = Text(no_wrap=True, overflow="crop")
    mem = row.memory
    if mem is None:
        out.append("memory: not reported", style=palette.MUTED)
    else:
        out.append(f"{'memory':<12}", style="bold")
        out.append(f"{memory.used_text(row):>9} ")
        if mem.tracked == "cuda" and mem.allocated is not None and mem.capacity:
            out.append_text(memory.gauge(mem.allocated, mem.capacity, 24, behind=mem.reserved))
            out.append(f" of {fmt.size(mem.capacity)}", style=palette.MUTED)
        else:
            out.append("process RSS (no known capacity)", style=palette.MUTED)
    if row.gpu is not None:
        out.append("\n")
        if row.gpu.na is not None:  # no gauges: say why, as the GPU pane does
            out.append(f"{'GPU':<12}", style="bold")
            out.append(f"none ({row.gpu.na})", style=palette.MUTED)
        else:
            out.append_text(gpus.gpu_line(row, selected=False, wide=width >= 140))
    return out


def causes_text(row: RankRow) -> Text:
    """Why it is slow, as its evidence says against its peers' (watch/analysis/causes.py): likeliest first, one
    a line, the first in the slow style."""
    out = Text()
    for k, cause in enumerate(row.causes):
        if k:
            out.append("\n")
        if cause.kind == "unknown":
            out.append("cause unknown: ", style="bold")
            out.append(cause.text)
            continue
        named = k == 0 and cause.explains >= PARTLY
        out.append(f"{cause.kind.replace('_', ' ')}: ", style=palette.STATUS_STYLES[SLOW] if named else "bold")
        out.append(_explains(cause), style=palette.MUTED)
        out.append(cause.text.rsplit(" (", 1)[0] if cause.text.endswith(")") else cause.text)
    return out


def _explains(cause) -> str:
    """ "explains 80% (measured) · ": the share of the excess a cause explains, and how its cost is known."""
    if cause.basis == "untold":
        return "cost not measured · "
    return f"explains {cause.explains * 100:.0f}% ({cause.basis}) · "


def section(title: str) -> Text:
    return Text(title, style="bold underline")


class RankScreen(DrillScreen):
    """One rank: phases vs the median rank, history, collectives, memory, GPU."""

    def __init__(self, rank: int, snapshot: Snapshot) -> None:
        super().__init__()
        self.rank = rank
        self._snapshot = snapshot
        self._steps: collections.deque[float] = collections.deque(maxlen=HISTORY)

    def compose(self) -> ComposeResult:
        yield Static(id="drill-title")
        with VerticalScroll(id="rank-detail"):
            yield Static(id="rank-body")
        yield Footer()

    def on_mount(self) -> None:
        self.show(self._snapshot)

    def show(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        if not self.query("#rank-body"):
            return  # pushed, not composed yet (the body, inside its scroll, comes last): on_mount draws it
        row = next((r for r in snapshot.ranks if r.rank == self.rank), None)
        title = self.query_one("#drill-title", Static)
        body = self.query_one("#rank-body", Static)
        if row is None:
            title.update(Text(f"rank {self.rank}: not heard from", style=palette.WARNING))
            body.update("")
            return
        if row.step_s is not None:
            self._steps.append(row.step_s * 1000.0)
        width = max(40, self.size.width - 2)
        title.update(rank_title(row, snapshot.layout_roles))
        why = [section("Why · its evidence against its peers'"), causes_text(row), Text("")] if row.causes else []
        parts = [
            *why,
            section(f"Phases · median per step, {'GPU time' if row.rank in snapshot.device_time_ranks else 'CPU wall time'}"),
            phases_text(row, snapshot, width), Text(""),
            section("History"), history_text(list(self._steps), row, width), Text(""),
            section("Collectives · this rank's wait per call"), collectives_text(row, snapshot), Text(""),
            section("Memory and GPU"), resources_text(row, width),
        ]  # fmt: skip
        body.update(Text("\n").join(parts))

    def action_other(self, step: int) -> None:
        ranks = sorted(r.rank for r in self._snapshot.ranks)
        if self.rank in ranks:
            self.rank = ranks[(ranks.index(self.rank) + step) % len(ranks)]
            self._steps.clear()
            self.show(self._snapshot)
