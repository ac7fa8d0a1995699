"""The GPU panel: one gauge line per rank's GPU, grouped by host, throttling flagged.

Each line: ``rank  GPU name  GPU [bar] %  mem [bar] used/total  power/limit  temp  clock/max  PCIe  history  flags``
(GPU %: the time a kernel ran, not the SMs busy).
A gauge NVML could not read shows "N/A". Hosts whose ranks report no GPU
gauges get one line each: ``no NVIDIA GPU on host X (why)``. The rank selected
in the straggler table is highlighted. Thresholds: bars turn orange past 75%
and red past 90%; temperature past 80 °C is orange, 87 °C red; a clock below
90% of its maximum with a power or thermal reason active is flagged
``THROTTLED``, a classic cause of one slow rank.
"""

from __future__ import annotations

from rich.text import Text

from ranktop.tui.panes.memory import gauge, sparkline
from ranktop.tui.render import palette
from ranktop.tui.render.lines import LazyLines
from ranktop.watch import format as fmt
from ranktop.watch.model.rank_row import GpuStat, RankRow
from ranktop.watch.model.snapshot import Snapshot

THROTTLE_STYLE = "bold red"
BAR = 8
SPARK = 12
#: Reasons that slow a GPU down against its will (others, like sync_boost, are informational).
SLOWDOWNS = ("power", "thermal", "hw")


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    return fmt.NA if value is None else f"{value:{spec}}{suffix}"


def temp_style(temp: float | None) -> str:
    if temp is None:
        return palette.MUTED
    return "red" if temp >= 87 else "dark_orange" if temp >= 80 else ""


def throttled(gpu: GpuStat) -> list[str]:
    """The slowdown reasons active on a GPU (power, thermal, hw)."""
    return [r for r in gpu.throttle or () if r in SLOWDOWNS]


def gpu_line(row: RankRow, *, selected: bool, wide: bool) -> Text:
    gpu = row.gpu
    assert gpu is not None and gpu.na is None
    text = Text(no_wrap=True, overflow="ellipsis", style="reverse" if selected else "")
    text.append(f"  r{row.rank:<4}", style="bold")
    name = (gpu.name or fmt.NA).replace("NVIDIA ", "")
    text.append(f"{name[:14]:<14} ", style=palette.MUTED)
    reasons = throttled(gpu)  # first, so that no terminal is too narrow to show it
    flag = f"⚠ {'+'.join(reasons)}" if reasons else ""
    text.append(f"{flag:<10} ", style=THROTTLE_STYLE)
    text.append("GPU ", style=palette.MUTED)  # nvidia-smi's GPU-Util: time a kernel ran, not SMs busy
    text.append_text(gauge(gpu.util or 0, 100, BAR) if gpu.util is not None else Text(fmt.NA.ljust(BAR), style=palette.MUTED))
    text.append(f" {_num(gpu.util, '3.0f', '%'):>4} ")
    text.append("mem ", style=palette.MUTED)
    if gpu.mem_used is not None and gpu.mem_total:
        text.append_text(gauge(gpu.mem_used, gpu.mem_total, BAR))
        text.append(f" {gpu.mem_used / 2**30:.0f}/{gpu.mem_total / 2**30:.0f} GB  ")
    else:
        text.append(f"{fmt.NA}  ", style=palette.MUTED)
    if gpu.power_w is None and gpu.power_limit_w is None:
        text.append(f"{fmt.NA} W  ", style=palette.MUTED)
    else:
        text.append(f"{_num(gpu.power_w, '.0f')}/{_num(gpu.power_limit_w, '.0f', ' W')}  ")
    text.append(f"{_num(gpu.temp_c, '.0f', '°C')}  ", style=temp_style(gpu.temp_c))
    if gpu.sm_mhz is None and gpu.sm_max_mhz is None:
        text.append(f"{fmt.NA} MHz  ", style=palette.MUTED)
    else:
        text.append(f"{_num(gpu.sm_mhz, '.0f')}/{_num(gpu.sm_max_mhz, '.0f', ' MHz')}  ")
    if wide:
        tx = "–" if gpu.pcie_tx is None else fmt.size(gpu.pcie_tx)
        rx = "–" if gpu.pcie_rx is None else fmt.size(gpu.pcie_rx)
        text.append(f"PCIe ↑{tx}/s ↓{rx}/s  ", style=palette.MUTED)
        text.append(f"{sparkline(gpu.util_history, SPARK):<{SPARK}} ", style="cyan")
    if gpu.throttle is None:
        text.append("throttle N/A", style=palette.MUTED)
    elif set(gpu.throttle) - set(SLOWDOWNS):  # the informational ones (sync boost, application clocks)
        text.append(f"clocks: {', '.join(r for r in gpu.throttle if r not in SLOWDOWNS)}", style=palette.MUTED)
    return text


class PanelLines:
    """The pane's lines for one snapshot: per host a heading and a gauge line per GPU, or one "no GPU" line."""

    def __init__(self, snapshot: Snapshot, selected: int | None = None):
        self.selected = selected
        by_host: dict[str, list[RankRow]] = {}
        for row in sorted(snapshot.ranks, key=lambda r: r.rank):
            if row.gpu is not None:
                by_host.setdefault(row.host, []).append(row)
        self.items: list[tuple[str, object]] = []  # ("host", (host, rows)), ("gpu", row), ("none", (host, rows, named))
        for host, rows in by_host.items():
            gauges = [r for r in rows if r.gpu.na is None]
            missing = [r for r in rows if r.gpu.na is not None]
            if gauges:
                self.items.append(("host", (host, gauges)))
                self.items += [("gpu", r) for r in gauges]
            if missing:
                self.items.append(("none", (host, missing, bool(gauges))))

    def __len__(self) -> int:
        return len(self.items)

    def line(self, index: int, width: int) -> Text:
        kind, item = self.items[index]
        if kind == "gpu":
            return gpu_line(item, selected=item.rank == self.selected, wide=width >= 140)
        if kind == "host":
            host, gauges = item
            head = Text(host, style="bold")
            hot = [r for r in gauges if throttled(r.gpu)]
            if hot:
                head.append(f"  {len(hot)} throttled", style=THROTTLE_STYLE)
            return head
        host, missing, named = item
        reasons = sorted({r.gpu.na for r in missing})
        ranks = f" for rank{'s' if len(missing) > 1 else ''} {', '.join(str(r.rank) for r in missing)}" if named else ""
        return Text(f"no NVIDIA GPU on host {host}{ranks} ({'; '.join(reasons)})", style=palette.MUTED)


def panel_text(snapshot: Snapshot, *, selected: int | None = None, width: int = 120) -> Text:
    """Every line at once (tests, and anything that wants the whole pane as text)."""
    lines = PanelLines(snapshot, selected)
    return Text("\n").join(lines.line(i, width) for i in range(len(lines)))


def has_data(snapshot: Snapshot) -> bool:
    return bool(snapshot.ranks.table.with_gpu.any())  # the columns: no rank's row is built to ask


class GpuPanel(LazyLines):
    """Gauges per GPU grouped by host, or one line per host without one."""

    def show(self, snapshot: Snapshot, selected: int | None = None, lines: PanelLines | None = None) -> None:
        """``lines``: the pane's lines, when the caller built them already (to know how tall the pane wants to be)."""
        lines = lines if lines is not None else PanelLines(snapshot, selected)
        self.show_lines(len(lines), lines.line)
        count = int(snapshot.ranks.table.gpu_sampled.sum())
        self.border_title = f"GPUs · {count} sampled by NVML" if count else "GPUs"
