"""The collectives panel: per op for the job, then per rank and op.

Latency is this rank's wait for the call, launch to completion; bandwidths
follow nccl-tests (algorithm bandwidth = bytes / time, bus bandwidth scaled by
the op's data movement); alpha and beta are the least-squares fit of
T = alpha + n/beta, shown once three sizes were seen, and "fit" says how far
the latest calls sit from it (+40% = 40% slower than the model predicts).
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from ranktop.tui.render import palette
from ranktop.watch import format as fmt
from ranktop.watch.snapshot import CollectiveStat, Snapshot

COLUMNS = (
    ("rank", "rank", 4),
    ("op", "op", 22),
    ("calls", "calls", 7),
    ("rate", "calls/s", 7),
    ("mbps", "MB/s", 8),
    ("mean", "mean ms", 8),
    ("p95", "p95 ms", 8),
    ("algbw", "algbw GB/s", 10),
    ("busbw", "busbw GB/s", 10),
    ("alpha", "α µs", 7),
    ("beta", "β GB/s", 7),
    ("fit", "fit", 6),
)


def _num(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "–" if value is None else f"{value * scale:.{digits}f}"


def cells(stat: CollectiveStat) -> tuple[Text, ...]:
    job = stat.rank < 0
    style = "bold" if job else ""
    fit_style = palette.WARNING if stat.fit_dev is not None and stat.fit_dev > 0.5 else ""
    values = (
        ("all" if job else str(stat.rank), style),
        (f"{stat.op} ×{stat.group_size}", style),
        (str(stat.calls), style),
        (_num(stat.calls_per_s), style),
        (_num(stat.bytes_per_s, 1e-6), style),
        (fmt.ms(stat.mean_s), style),
        (fmt.ms(stat.p95_s), style),
        (_num(stat.algbw_bps, 1e-9, 3), style),
        (_num(stat.busbw_bps, 1e-9, 3), style),
        (_num(stat.alpha_s, 1e6, 0), style),
        (_num(stat.beta_bps, 1e-9, 2), style),
        ("–" if stat.fit_dev is None else fmt.score(stat.fit_dev), fit_style),
    )
    return tuple(Text(text, style=s, justify="left" if i < 2 else "right") for i, (text, s) in enumerate(values))


#: Above this many ranks, per-rank rows are kept for the top stragglers only: 64 near-identical rows hide the answer.
ALL_RANKS_UP_TO = 16
TOP_RANKS = 8


def shown_stats(snapshot: Snapshot) -> list[CollectiveStat]:
    """The job's rows (rank -1) first, then per-rank rows: every rank's in a small job, the top stragglers' in a big one."""
    stats = snapshot.collectives
    job = [s for s in stats if s.rank < 0]
    if len(snapshot.ranks) <= ALL_RANKS_UP_TO:
        return job + [s for s in stats if s.rank >= 0]
    top = {n: i for i, n in enumerate(snapshot.stragglers[:TOP_RANKS])}
    mine = [s for s in stats if s.rank in top]
    return job + sorted(mine, key=lambda s: top[s.rank])


class CollectiveTable(DataTable):
    """One row per op for the job ("all"), then per rank and op."""

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: dict[str, tuple[Text, ...]] = {}

    def show(self, snapshot: Snapshot) -> None:
        if not self.columns:
            for key, heading, width in COLUMNS:
                self.add_column(heading, key=key, width=width)
        keys = []
        stats = shown_stats(snapshot)
        ranks = len(snapshot.ranks)
        title = "Collectives · wait per call, launch to completion"
        if ranks > ALL_RANKS_UP_TO:
            title += f" · job rows, then the top {TOP_RANKS} stragglers (a rank's detail has its own)"
        self.border_title = title
        for stat in stats:
            key = f"{stat.rank}:{stat.op}"
            keys.append(key)
            new = cells(stat)
            old = self._shown.get(key)
            if old is None:
                self.add_row(*new, key=key)
            elif old != new:
                for (column, _, _), value, before in zip(COLUMNS, new, old):
                    if value != before:
                        self.update_cell(key, column, value)
            self._shown[key] = new
        keyset = set(keys)
        for key in [k for k in self._shown if k not in keyset]:
            self.remove_row(key)
            del self._shown[key]
