"""The history screen: who cost the job what, the job's step time over the last minutes, and one rank's phases.

The engine keeps the history (watch/analysis/history.py: one sample a second, bounded, fed by every snapshot
whichever screen is open); this screen only draws it. The answer comes first: a timeline with a strip per culprit
(a rank or a node with an episode in the last 15 minutes), the costliest at the top, each with what its episodes
cost the job, so that at 80x24 the first lines say who held the job back, when, and how much. Then the job's step
time (the span ``[`` ``]`` change), each episode in a line, and the phases of the rank selected.
:func:`history_text` is a plain function of the history, the span and the width, so it is tested without a
terminal. Time runs left to right and ends at the latest sample ("now" live, the playing position in a replay).
"""

from __future__ import annotations

import statistics

from rich.text import Text
from textual.widgets import Static

from ranktop.tui import bindings
from ranktop.tui.render import palette
from ranktop.tui.screens.live_modal import LiveModal
from ranktop.watch import format as units
from ranktop.watch import NODE, STALL, Culprit, Episode, History, Sample

SPANS_S = (60, 120, 300, 600, 900)
DEFAULT_SPAN_S = 300
CHART_ROWS = 8
#: Strips of the timeline (the costliest culprits; a line counts the rest) and episodes listed below the chart.
MAX_LANES = 8
#: The timeline's span: the last 15 minutes (the history's), or all of a shorter history (a minute at least).
TIMELINE_S = 900.0
_EIGHTHS = " ▁▂▃▄▅▆▇█"
_EPISODE_STYLES = {STALL: palette.STATUS_STYLES["stalled"], NODE: palette.STATUS_STYLES["slow"]}


def _columns(samples: list[Sample], start: float, end: float, width: int) -> list[list[Sample]]:
    """The samples falling in each of ``width`` equal slices of [start, end]."""
    cols: list[list[Sample]] = [[] for _ in range(width)]
    span = max(end - start, 1e-9)
    for s in samples:
        i = min(width - 1, max(0, int((s.t - start) / span * width)))
        cols[i].append(s)
    for i in range(1, width):  # more columns than samples: a column between two samples shows the earlier one
        if not cols[i] and cols[i - 1]:
            cols[i] = [cols[i - 1][-1]]
    return cols


def _bar_rows(values: list[float | None], tops: list[float | None], scale: float, rows: int) -> list[Text]:
    """A column chart, ``rows`` high: each column filled to its value (bright) and on to its top (dim)."""
    lines = []
    for row in range(rows - 1, -1, -1):
        line = Text()
        for value, top in zip(values, tops):
            char, style = " ", ""
            for v, st in ((top, palette.STATUS_STYLES["slow"]), (value, "green3")):
                if v is None or scale <= 0:
                    continue
                eighths = int(round(v / scale * rows * 8)) - row * 8
                if eighths > 0:
                    char, style = _EIGHTHS[min(8, eighths)], st
            line.append(char, style=style)
        lines.append(line)
    return lines


def _spark(values: list[float | None], scale: float) -> Text:
    text = Text()
    for v in values:
        if v is None or scale <= 0:
            text.append(" ")
        else:
            text.append(_EIGHTHS[max(1, min(8, int(round(v / scale * 8))))])
    return text


def _ago(seconds: float) -> str:
    """A time before now as -m:ss (-h:mm:ss past an hour): short enough for a line of 80 columns."""
    total = max(0, int(round(seconds)))
    h, m, sec = total // 3600, total % 3600 // 60, total % 60
    return f"-{h}:{m:02d}:{sec:02d}" if h else f"-{m}:{sec:02d}"


def _span(seconds: float) -> str:
    """A span of time as m:ss (h:mm:ss past an hour)."""
    return _ago(seconds)[1:]


def _cost(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"


def episode_line(ep: Episode, now: float) -> str:
    what = {STALL: "stalled", NODE: "slow node"}.get(ep.kind, "slow")
    phase = f" in {ep.phase}" if ep.phase else ""
    when = f"from {_ago(now - ep.start)} " + ("on" if ep.open else f"to {_ago(now - ep.end)}")
    if ep.kind == STALL:
        waited = f", waited for rank(s) {', '.join(map(str, ep.waiting_for[:8]))}" if ep.waiting_for else ""
        more = f" and {len(ep.waiting_for) - 8} more" if len(ep.waiting_for) > 8 else ""
        return f"{ep.who} {what}{phase} {when}, {units.clock(ep.duration_s)} long{waited}{more}"
    return f"{ep.who} {what}{phase} {when}: +{units.ms(ep.peak_excess_s)} ms/step, cost {_cost(ep.cost_s)}"


def _strip(culprit: Culprit, start: float, span_s: float, width: int) -> Text:
    """One culprit's row of the timeline: a column per slice of [start, start + span_s], drawn where one of its
    episodes covers it (an episode shorter than a column still gets one: a short one is not lost at 15 minutes)."""
    on: list[str | None] = [None] * width  # each column's style: stalled over slow, where both were
    for ep in culprit.episodes:
        first = int((ep.start - start) / span_s * width)
        last = int((ep.end - start) / span_s * width)
        style = palette.STATUS_STYLES["stalled" if ep.kind == STALL else "slow"]
        for c in range(max(0, first), min(width - 1, last) + 1):
            if on[c] is None or ep.kind == STALL:
                on[c] = style
    strip = Text()
    for style in on:
        strip.append("━" if style else "·", style=style or palette.MUTED)
    return strip


def timeline_text(history: History, width: int, lanes: int = MAX_LANES) -> Text:
    """Who cost the job what over the last :data:`TIMELINE_S`: a strip per culprit (rank or node), the costliest
    first, each ending with what its episodes cost the job (a stall: how long it lasted) and whether it goes on."""
    samples = history.samples
    if not samples:
        return Text("")
    label_w, value_w = 12, 13
    cols = max(10, width - label_w - 1 - value_w)
    end = samples[-1].t
    span_s = min(TIMELINE_S, max(60.0, end - samples[0].t))
    start = end - span_s
    culprits = history.culprits_since(start)
    text = Text()
    text.append("who cost the job", style="bold")
    text.append(f"  last {_span(span_s)} · ", style=palette.MUTED)
    text.append("━ slow", style=palette.STATUS_STYLES["slow"])
    text.append(" · ", style=palette.MUTED)
    text.append("━ stalled", style=palette.STATUS_STYLES["stalled"])
    text.append(" · job seconds lost\n", style=palette.MUTED)
    if not culprits:
        text.append(f"{'':>{label_w}} nobody: no rank or node slow or stalled for 3 s or 3 steps\n", style="green3")
    for c in culprits[:lanes]:
        text.append(f"{c.who[:label_w]:>{label_w}} ", style="bold")
        text.append_text(_strip(c, start, span_s, cols))
        value = f"stalled {units.ago(c.cost_s)}" if c.kind == STALL else _cost(c.cost_s)
        text.append(f" {value:>{value_w - 5}}", style="bold" if c.open else "")
        text.append(" now\n" if c.open else "\n", style=palette.STATUS_STYLES["stalled" if c.kind == STALL else "slow"])
    if len(culprits) > lanes:
        rest = culprits[lanes:]
        text.append(f"{'':>{label_w}} and {len(rest)} more, {_cost(sum(c.cost_s for c in rest))} in all\n", style=palette.MUTED)
    axis = _ago(span_s)
    text.append(" " * (label_w + 1) + axis + " " * max(1, cols - len(axis) - 3) + "now\n", style=palette.MUTED)
    return text


def history_text(history: History, rank: int | None, span_s: float, width: int) -> Text:
    samples = list(history.samples)
    if not samples:
        return Text("no history yet: one sample a second once the ranks report steps", style=palette.MUTED)
    text = timeline_text(history, width)
    text.append("\n")
    label_w = 12
    width = max(10, width - label_w - 1 - 10)  # room for a label on the left and a value on the right
    end = samples[-1].t
    span_s = min(span_s, max(60.0, end - samples[0].t))  # a short history fills the width
    start = end - span_s
    shown = [s for s in samples if s.t >= start]
    cols = _columns(shown, start, end, width)
    med = [statistics.median([s.step_s for s in c if s.step_s is not None]) if any(s.step_s is not None for s in c) else None for c in cols]
    top = [max((s.max_step_s for s in c if s.max_step_s is not None), default=None) for c in cols]
    scale = max([v for v in top + med if v is not None], default=0.0)
    text.append("job step time", style="bold")
    text.append(f"  last {_span(span_s)} · ", style=palette.MUTED)
    text.append("▆ median", style="green3")
    text.append(" ", style=palette.MUTED)
    text.append("▆ slowest", style=palette.STATUS_STYLES["slow"])
    latest = shown[-1] if shown else samples[-1]
    text.append(f" · now {units.ms(latest.step_s)} / {units.ms(latest.max_step_s)} ms\n", style=palette.MUTED)
    for i, line in enumerate(_bar_rows(med, top, scale, CHART_ROWS)):
        label = f"{units.ms(scale)} ms" if i == 0 else ("0 ms" if i == CHART_ROWS - 1 else "")
        text.append(f"{label:>{label_w}} ", style=palette.MUTED)
        text.append_text(line)
        text.append("\n")
    axis = _ago(span_s)
    text.append(" " * (label_w + 1) + axis + " " * max(1, width - len(axis) - 3) + "now\n", style=palette.MUTED)

    episodes = history.episodes_since(start)
    text.append("\nepisodes", style="bold")
    if not episodes:
        text.append(f"  none in the last {_span(span_s)}\n", style=palette.MUTED)
    else:
        text.append(f"  the latest first{f', {MAX_LANES} of {len(episodes)}' if len(episodes) > MAX_LANES else ''}\n",
                    style=palette.MUTED)  # fmt: skip
    for ep in sorted(episodes, key=lambda e: -e.end)[:MAX_LANES]:
        text.append("━ ", style=_EPISODE_STYLES.get(ep.kind, palette.STATUS_STYLES["slow"]))
        text.append(episode_line(ep, end) + "\n")

    if rank is None:
        text.append("\nselect a rank in the straggler table (tab, arrows) to see its phases here\n", style=palette.MUTED)
        return text
    text.append(f"\nrank {rank} phases", style="bold")
    text.append("  own time per phase, median over its window\n", style=palette.MUTED)
    phase_names: list[str] = []
    for s in shown:
        for name in s.rank_phases.get(rank, {}):
            if name not in phase_names:
                phase_names.append(name)
    colours = palette.phase_colours(phase_names)
    series = {
        name: [
            statistics.median([s.rank_phases[rank].get(name, 0.0) for s in c if rank in s.rank_phases])
            if any(rank in s.rank_phases for s in c)
            else None
            for c in cols
        ]
        for name in phase_names
    }
    pscale = max([v for vs in series.values() for v in vs if v is not None], default=0.0)
    if not phase_names:
        text.append(f"{'':>{label_w}} no step times of rank {rank} in this span\n", style=palette.MUTED)
    for name in phase_names:
        last = next((v for v in reversed(series[name]) if v is not None), None)
        text.append(f"{name[:label_w]:>{label_w}} ", style=colours[name])
        spark = _spark(series[name], pscale)
        spark.stylize(colours[name])
        text.append_text(spark)
        text.append(f" {units.ms(last)} ms\n", style=palette.MUTED)
    return text


class HistoryScreen(LiveModal):
    """Redrawn at the app's refresh rate from the source's history; the main screen keeps updating beneath."""

    BINDINGS = list(bindings.HISTORY_KEYS)
    BOX_ID = "history"
    BOX_TITLE = "history"
    BOX_SUBTITLE = "[ ] span · esc closes"

    def __init__(self, history_of, rank: int | None, refresh_hz: float = 2.0):
        super().__init__(1.0 / refresh_hz)
        self._history_of = history_of  # the source's history now (a replay seeking back starts a new one)
        self.rank = rank
        self.span_s = DEFAULT_SPAN_S
        self._body = Static(id="history-text")

    def contents(self) -> tuple[Static]:
        return (self._body,)

    def on_mount(self) -> None:
        super().on_mount()
        # The first draw comes before the layout gives the text its width (a guess from the app's): drawn again
        # once it has it, so the picture never depends on whether the timer's next tick came first.
        self.call_after_refresh(self.redraw)

    def on_resize(self) -> None:
        self.call_after_refresh(self.redraw)

    def redraw(self) -> None:
        width = self._body.size.width or (self.app.size.width - 6)
        self._body.update(history_text(self._history_of(), self.rank, self.span_s, width))

    def action_span(self, step: int) -> None:
        i = SPANS_S.index(self.span_s) if self.span_s in SPANS_S else SPANS_S.index(DEFAULT_SPAN_S)
        self.span_s = SPANS_S[max(0, min(len(SPANS_S) - 1, i + step))]
        self.redraw()
