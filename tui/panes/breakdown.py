"""Per-rank step breakdown: one stacked bar per rank, coloured by phase.

Each row is ``rank host step-ms score [bar]``; the bar stacks the rank's median
phase times in ``snapshot.phase_names`` order, scaled so that the slowest step
shown fills the width. Rows are rendered line by line (Textual's line API) from
one widget, so only the rows on screen cost anything: 512 ranks scroll as
cheaply as 8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.segment import Segment
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from ranktop.tui.render import palette
from ranktop.watch import format as fmt
from ranktop.watch import SILENT, SLOW, STALLED
from ranktop.watch.model.rank_row import RankRow
from ranktop.watch.model.snapshot import Snapshot

#: Sort modes, in the order the sort key cycles through them.
SORTS = ("rank", "score", "step")
SORT_LABELS = {"rank": "rank", "score": "score, slowest first", "step": "step time"}

BLOCK = "█"
MIN_BAR = 10


@dataclass(frozen=True)
class Columns:
    """Widths of the fixed columns for one screen width; the bar takes the rest."""

    rank: int
    host: int
    step: int = 7
    score: int = 6
    bar: int = MIN_BAR

    @classmethod
    def fit(cls, width: int, rows: list[RankRow]) -> Columns:
        rank = max(4, max((len(str(r.rank)) for r in rows), default=1))
        # Hosts are trimmed harder on narrow screens: the bar matters more than the domain name.
        limit = 16 if width >= 100 else 10
        host = max(4, max((len(fmt.host(r.host, limit)) for r in rows), default=4))
        fixed = rank + host + cls.step + cls.score + 4  # four separating spaces
        return cls(rank=rank, host=host, bar=max(MIN_BAR, width - fixed))


def sort_rows(snapshot: Snapshot, mode: str) -> list[RankRow]:
    """The rows in the order of a sort mode.

    "score" follows ``snapshot.stragglers`` (silent, then slow, then by score,
    as the aggregator ranks suspicion), then every rank it does not list.
    """
    rows = snapshot.ranks
    if mode == "score":
        by_rank = {r.rank: r for r in rows}
        first = [by_rank[n] for n in snapshot.stragglers if n in by_rank]
        listed = set(snapshot.stragglers)
        return first + [r for r in rows if r.rank not in listed]
    if mode == "step":
        return sorted(rows, key=lambda r: (r.status == SILENT, r.step_s is None, -(r.step_s or 0.0), r.rank))
    return sorted(rows, key=lambda r: r.rank)


def bar_scale(rows: list[RankRow]) -> float:
    """Seconds that fill a whole bar: the largest step (or sum of phases) among ranks shown."""
    longest = 0.0
    for r in rows:
        if r.status == SILENT or r.step_s is None:
            continue
        longest = max(longest, r.step_s, sum(max(0.0, v) for v in r.phases.values()))
    return longest


def bar(phases: dict[str, float], phase_names: list[str], colours: dict[str, str], scale: float, width: int) -> Text:
    """A stacked bar; phase edges are rounded from running totals so rounding never accumulates."""
    text = Text(no_wrap=True)
    if scale <= 0 or width <= 0:
        return text
    total = 0.0
    drawn = 0
    for name in phase_names:
        total += max(0.0, phases.get(name, 0.0))
        end = min(width, round(total / scale * width))
        if end > drawn:
            text.append(BLOCK * (end - drawn), style=colours[name])
            drawn = end
    return text


def rank_text(row: RankRow, phase_names: list[str], colours: dict[str, str], scale: float, cols: Columns) -> Text:
    """One row: ``rank host step-ms score bar`` (silent ranks greyed, slow ones marked)."""
    silent = row.status == SILENT
    muted = palette.MUTED if silent else ""
    rank_style = palette.STATUS_STYLES[SLOW] if row.status == SLOW else (muted or "bold")
    host = fmt.host(row.host, cols.host)
    text = Text(no_wrap=True, overflow="crop")
    text.append(f"{row.rank:>{cols.rank}} ", style=rank_style)
    text.append(f"{host:<{cols.host}} ", style=muted)
    text.append(f"{fmt.ms(row.step_s):>{cols.step}} ", style=muted)
    if silent:
        text.append(f"{'':>{cols.score}} ")
        text.append(f"silent {fmt.ago(row.last_seen_s)}", style=palette.MUTED + " italic")
    elif row.step_s is None:
        text.append(f"{'':>{cols.score}} ")
        text.append(f"warming up ({row.steps_seen} steps seen)", style=palette.MUTED + " italic")
    else:
        score_style = palette.STATUS_STYLES[SLOW] if row.status == SLOW else palette.MUTED
        text.append(f"{fmt.score(row.score):>{cols.score}} ", style=score_style)
        text.append_text(bar(row.phases, phase_names, colours, scale, cols.bar))
    return text


def legend_text(phase_names: list[str], colours: dict[str, str], cols: Columns) -> Text:
    """Column headings, then a colour key for the phases where the bars begin."""
    text = Text(no_wrap=True, overflow="ellipsis", style="bold")
    text.append(f"{'rank':>{cols.rank}} {'host':<{cols.host}} {'step ms':>{cols.step}} {'score':>{cols.score}} ")
    text.append_text(_legend_key(phase_names, colours, cols.bar))
    return text


SHORT_NAMES = {"forward": "fwd", "backward": "bwd", "optimizer": "optim"}


def _legend_key(phase_names: list[str], colours: dict[str, str], width: int) -> Text:
    # Full names when they fit, then tighter spacing, then short names (user phases cut to 6).
    def short(name: str) -> str:
        return SHORT_NAMES.get(name, name[:6])

    for sep, label in ((" ", str), ("", str), ("", short)):
        key = Text(no_wrap=True, overflow="ellipsis")
        for name in phase_names:
            key.append("■", style=colours[name])
            key.append(f"{sep}{label(name)} ", style="not bold")
        if key.cell_len - 1 <= width:
            break
    key.rstrip()
    return key


def summary_text(rows: list[RankRow]) -> Text:
    """Median / p90 / max step over ranks with data: the job at a glance when rows scroll."""
    steps = sorted(r.step_s for r in rows if r.step_s is not None and r.status != SILENT)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{len(rows)} ranks", style="bold")
    if steps:
        p90 = steps[min(len(steps) - 1, math.ceil(0.9 * len(steps)) - 1)]
        worst = max((r for r in rows if r.step_s is not None and r.status != SILENT), key=lambda r: r.step_s)
        text.append("  step ms ", style=palette.MUTED)
        text.append("median ", style=palette.MUTED)
        text.append(fmt.ms(steps[(len(steps) - 1) // 2]), style="bold")
        text.append("  p90 ", style=palette.MUTED)
        text.append(fmt.ms(p90), style="bold")
        text.append("  max ", style=palette.MUTED)
        text.append(fmt.ms(worst.step_s), style="bold")
        text.append(f" (rank {worst.rank})", style=palette.MUTED)
    slow = sum(1 for r in rows if r.status == SLOW)
    silent = sum(1 for r in rows if r.status == SILENT)
    if slow:
        text.append(f"  {slow} slow", style=palette.STATUS_STYLES[SLOW])
    if silent:
        text.append(f"  {silent} silent", style=palette.STATUS_STYLES[SILENT])
    stalled = sum(1 for r in rows if r.status == STALLED)
    if stalled:
        text.append(f"  {stalled} stalled", style=palette.STATUS_STYLES[STALLED])
    return text


class RankBars(ScrollView, can_focus=True):
    """The rank rows, drawn only where visible."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rows: list[RankRow] = []
        self._phase_names: list[str] = []
        self._colours: dict[str, str] = {}
        self._scale = 0.0
        self._cols = Columns.fit(80, [])
        self._strips: dict[tuple[int, int], Strip] = {}  # (row index, width) -> line, until the next show

    def show(self, rows: list[RankRow], phase_names: list[str], colours: dict[str, str], cols: Columns) -> None:
        self._rows = rows
        self._phase_names = phase_names
        self._colours = colours
        self._scale = bar_scale(rows)
        self._cols = cols
        self._strips.clear()
        self.virtual_size = Size(self.content_width, len(rows))
        self.refresh()

    @property
    def content_width(self) -> int:
        return self.scrollable_content_region.width

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.scrollable_content_region.width
        style = self.rich_style
        if index >= len(self._rows):
            return Strip.blank(width, style)
        strip = self._strips.get((index, width))
        if strip is None:
            text = rank_text(self._rows[index], self._phase_names, self._colours, self._scale, self._cols)
            segments = list(Segment.apply_style(text.render(self.app.console), style))
            strip = self._strips[index, width] = Strip(segments).crop_extend(0, width, style)
        return strip


class Breakdown(Vertical):
    """Legend, an optional summary row (when the ranks do not fit), and the rank rows."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._last: tuple[Snapshot, str] | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="legend")
        yield Static(id="summary")
        yield RankBars(id="bars")

    def show(self, snapshot: Snapshot, sort: str) -> None:
        self._last = (snapshot, sort)
        bars = self.query_one(RankBars)
        rows = sort_rows(snapshot, sort)
        colours = palette.phase_colours(snapshot.phase_names)
        width = bars.content_width or self.size.width
        cols = Columns.fit(width, rows)
        self.query_one("#legend", Static).update(legend_text(snapshot.phase_names, colours, cols), layout=False)
        # Stacked under the table, the pane hugs its rows (up to its max-height) and leaves
        # the rest to the table; side by side, both panes take the full height.
        # The summary only when rows scroll: then it is the one line that speaks for all ranks.
        scrolls = len(rows) > bars.size.height
        height = "1fr" if self.screen.has_class("-wide") else str(len(rows) + 2 + scrolls)
        if str(self.styles.height) != height:
            self.styles.height = height
        summary = self.query_one("#summary", Static)
        if summary.display != scrolls:
            summary.display = scrolls
        if scrolls:
            summary.update(summary_text(rows), layout=False)
        scale = bar_scale(rows)
        full = f" · full bar {fmt.ms(scale)} ms" if scale else ""
        self.border_title = f"Step breakdown per rank · sort: {SORT_LABELS[sort]}{full}"
        bars.show(rows, snapshot.phase_names, colours, cols)

    def on_resize(self) -> None:
        # Column widths depend on the width: lay the rows out again at the new size.
        if self._last is not None:
            self.call_after_refresh(self.show, *self._last)
