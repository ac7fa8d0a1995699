"""The memory and throughput panel: per rank, memory against capacity, its recent history, creep, and work per second.

Each row is ``rank host used [bar] sparkline trend samples/s tokens/s TFLOP/s MFU``.
The bar is CUDA allocated against the device's capacity (reserved, the
allocator's cache, drawn lighter behind it) where the rank uses CUDA, else the
process RSS against the largest RSS shown. The sparkline is the recent history
of the same figure; the trend is its slope, in red with ``creep`` when the
aggregator flags memory creep (watch/engine/memory_history.py). The first line is the
job's throughput; MFU is "unknown" where no peak FLOP/s is known (a CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from ranktop.tui.render import palette
from ranktop.tui.render.lines import LazyLines
from ranktop.watch import format as fmt
from ranktop.watch import SILENT
from ranktop.watch.model.rank_row import RankRow, Throughput
from ranktop.watch.model.snapshot import Snapshot

SPARKS = "▁▂▃▄▅▆▇█"
BLOCK, SHADE, EMPTY = "█", "▓", "░"
CREEP_STYLE = "bold red"
#: Bar colour by how full the device is.
FILL_STYLES = ((0.9, "red"), (0.75, "dark_orange"), (0.0, "green3"))


def sparkline(values: list[float], width: int) -> str:
    """The last ``width`` values as block characters, scaled between their min and max."""
    values = values[-width:] if width > 0 else []
    if not values:
        return ""
    low, high = min(values), max(values)
    if high - low <= 1e-9:
        return SPARKS[0] * len(values)
    top = len(SPARKS) - 1
    return "".join(SPARKS[round((v - low) / (high - low) * top)] for v in values)


def fill_style(fraction: float) -> str:
    for threshold, style in FILL_STYLES:
        if fraction >= threshold:
            return style
    return FILL_STYLES[-1][1]


#: A bar against the largest RSS shown, not a capacity: how full it is says nothing alarming.
RELATIVE_STYLE = "steel_blue1"


def gauge(used: float, total: float, width: int, *, behind: float | None = None, style: str | None = None) -> Text:
    """A bar of ``used`` / ``total`` cells; ``behind`` (>= used) is drawn shaded after it.

    ``style`` overrides the colour by fullness: a bar scaled to the largest value
    shown rather than to a capacity is always "full" somewhere, and must not read as an alarm.
    """
    text = Text(no_wrap=True)
    if width <= 0:
        return text
    if not total or total <= 0:
        return Text(EMPTY * width, style=palette.MUTED)
    full = min(width, round(used / total * width))
    shade = min(width, round((behind or 0) / total * width)) - full if behind else 0
    shade = max(0, shade)
    text.append(BLOCK * full, style=style or fill_style(used / total))
    text.append(SHADE * shade, style=palette.MUTED)
    text.append(EMPTY * (width - full - shade), style="grey23")
    return text


def tflops_text(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value >= 0.01 else f"{value:.4f}"


def mfu_text(t: Throughput | None) -> str:
    if t is None or t.tflops is None:
        return "–"
    return f"{t.mfu * 100:.1f}%" if t.mfu is not None else "unknown"


@dataclass(frozen=True)
class Columns:
    rank: int = 4
    host: int = 8
    used: int = 9
    bar: int = 12
    spark: int = 0
    trend: int = 14
    rate: int = 9
    flops: int = 8
    mfu: int = 7
    throughput: bool = True

    @classmethod
    def fit(cls, width: int, rows: list[RankRow]) -> Columns:
        throughput = any(r.throughput is not None for r in rows)
        rank = max(4, max((len(str(r.rank)) for r in rows), default=1))
        fixed = rank + cls.host + cls.used + cls.trend + 5
        if throughput:
            fixed += 2 * cls.rate + cls.flops + cls.mfu + 4
        room = max(0, width - fixed)
        spark = min(24, max(0, room - 14)) if room >= 24 else 0
        return cls(rank=rank, bar=max(6, room - spark - (1 if spark else 0)), spark=spark, throughput=throughput)


def used_text(row: RankRow) -> str:
    mem = row.memory
    if mem is None:
        return "–"
    if mem.tracked == "cuda" and mem.allocated is not None:
        return fmt.size(mem.allocated)
    return fmt.size(mem.rss_bytes)


def trend_text(row: RankRow) -> Text:
    mem = row.memory
    if mem is None or mem.creep_mb_per_min is None:
        return Text("")
    rate = mem.creep_mb_per_min
    if mem.creep:
        return Text(f"creep {rate:+.0f}MB/m", style=CREEP_STYLE)
    return Text(f"{rate:+.1f} MB/m", style=palette.MUTED)


def legend_text(cols: Columns, capacity: bool = True) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis", style="bold")
    against = "vs capacity" if capacity else "vs largest"
    text.append(f"{'rank':>{cols.rank}} {'host':<{cols.host}} {'memory':>{cols.used}} {against:<{cols.bar}} ")
    if cols.spark:
        text.append(f"{'history':<{cols.spark}} ")
    text.append(f"{'trend':<{cols.trend}} ")
    if cols.throughput:
        text.append(f"{'samples/s':>{cols.rate}} {'tokens/s':>{cols.rate}} {'TFLOP/s':>{cols.flops}} {'MFU':>{cols.mfu}}")
    return text


def row_text(row: RankRow, cols: Columns, rss_scale: float) -> Text:
    silent = row.status == SILENT
    muted = palette.MUTED if silent else ""
    mem = row.memory
    text = Text(no_wrap=True, overflow="crop")
    text.append(f"{row.rank:>{cols.rank}} ", style=CREEP_STYLE if mem is not None and mem.creep else (muted or "bold"))
    text.append(f"{fmt.host(row.host, cols.host):<{cols.host}} ", style=muted)
    text.append(f"{used_text(row):>{cols.used}} ", style=muted)
    if mem is None:
        text.append(" " * cols.bar)
    elif mem.tracked == "cuda" and mem.allocated is not None and mem.capacity:
        text.append_text(gauge(mem.allocated, mem.capacity, cols.bar, behind=mem.reserved))
    else:
        text.append_text(gauge(mem.rss_bytes or 0, rss_scale, cols.bar, style=RELATIVE_STYLE))
    text.append(" ")
    if cols.spark:
        spark = sparkline(mem.history_mb, cols.spark) if mem is not None else ""
        text.append(f"{spark:<{cols.spark}} ", style=CREEP_STYLE if mem is not None and mem.creep else "cyan")
    trend = trend_text(row)
    trend.truncate(cols.trend, pad=True)
    text.append_text(trend)
    text.append(" ")
    if cols.throughput:
        t = row.throughput
        text.append(f"{fmt.si(t.samples_per_s if t else None):>{cols.rate}} ", style=muted)
        text.append(f"{fmt.si(t.tokens_per_s if t else None):>{cols.rate}} ", style=muted)
        text.append(f"{tflops_text(t.tflops if t else None):>{cols.flops}} ", style=muted)
        text.append(f"{mfu_text(t):>{cols.mfu}}", style=palette.MUTED if mfu_text(t) == "unknown" else muted)
    return text


def job_text(snapshot: Snapshot) -> Text:
    """The job's line: throughput, MFU (or why it is unknown), and who creeps."""
    text = Text(no_wrap=True, overflow="ellipsis")
    creeping = [r for r in snapshot.ranks if r.memory is not None and r.memory.creep]
    if creeping:  # first: the one thing on this line that needs action
        names = ", ".join(f"{r.rank} ({r.memory.creep_mb_per_min:+.0f} MB/min)" for r in creeping[:4])
        more = f" +{len(creeping) - 4}" if len(creeping) > 4 else ""
        text.append(f"memory creep on rank{'s' if len(creeping) > 1 else ''} {names}{more}", style=CREEP_STYLE)
        text.append("  ")
    text.append("job ", style="bold")
    t = snapshot.throughput
    if t is None:
        text.append("throughput: tell the probe the work per step (probe.init(batch_size=..., tokens_per_step=...))", style=palette.MUTED)
    else:
        parts = [(t.samples_per_s, "samples/s"), (t.tokens_per_s, "tokens/s")]
        for value, unit in parts:
            if value is not None:
                text.append(f"{fmt.si(value)} ", style="bold")
                text.append(f"{unit}  ", style=palette.MUTED)
        if t.tflops is not None:
            text.append(f"{tflops_text(t.tflops)} ", style="bold")
            text.append("TFLOP/s  ", style=palette.MUTED)
            if t.mfu is not None:
                text.append("MFU ", style=palette.MUTED)
                text.append(f"{t.mfu * 100:.1f}%", style="bold")
                text.append(f" of {t.peak_tflops:.0f} TFLOP/s peak", style=palette.MUTED)
            else:
                text.append("MFU unknown (no peak FLOP/s for this device; set RANKTOP_PEAK_TFLOPS)", style=palette.MUTED)
    return text


class PanelLines:
    """The pane's lines for one snapshot, built one at a time: job, legend, then a row per rank."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        self.rows = sorted(snapshot.ranks, key=lambda r: r.rank)
        rss = [r.memory.rss_bytes for r in self.rows if r.memory is not None and r.memory.rss_bytes]
        self.rss_scale = max(rss) if rss else 0.0
        self.capacity = any(r.memory is not None and r.memory.tracked == "cuda" and r.memory.capacity for r in self.rows)
        self._cols: dict[int, Columns] = {}

    def __len__(self) -> int:
        return 2 + len(self.rows)

    def line(self, index: int, width: int) -> Text:
        if index == 0:
            return job_text(self.snapshot)
        cols = self._cols.get(width)
        if cols is None:
            cols = self._cols[width] = Columns.fit(width, self.rows)
        if index == 1:
            return legend_text(cols, self.capacity)
        return row_text(self.rows[index - 2], cols, self.rss_scale)


def panel_text(snapshot: Snapshot, width: int) -> Text:
    """Every line at once (tests, and anything that wants the whole pane as text)."""
    lines = PanelLines(snapshot)
    return Text("\n").join(lines.line(i, width) for i in range(len(lines)))


def has_data(snapshot: Snapshot) -> bool:
    table = snapshot.ranks.table  # the columns: no rank's row is built to ask
    return bool(table.with_memory.any() or table.with_throughput.any()) or snapshot.throughput is not None


class MemoryPanel(LazyLines):
    """The job's throughput, then one row per rank: memory, history, creep, work per second."""

    def show(self, snapshot: Snapshot) -> None:
        lines = PanelLines(snapshot)
        self.show_lines(len(lines), lines.line)
        rows = [r for r in snapshot.ranks if r.memory is not None]
        tracked = "CUDA allocated vs device memory" if any(r.memory.tracked == "cuda" for r in rows) else "process RSS"
        self.border_title = f"Memory · {tracked} · throughput"
