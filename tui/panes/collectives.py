"""The collectives panel: per op for the job, then per rank and op, for the ranks that matter.

Latency is this rank's wait for the call (on a GPU, the compute stream's
stall); bandwidths follow nccl-tests over two times: "wait GB/s" is bytes over
the wait (no link rate: an overlapped call waits little, a late peer long),
"bus GB/s" bytes over the collectives' kernel time, scaled by the op's data
movement (the link's rate; "–" where no kernel time is known); alpha and beta are the least-squares fit of
T = alpha + n/beta, shown once three sizes were seen, and "fit" says how far
the latest calls sit from it (+40% = 40% slower than the model predicts).

Every number goes through watch/format.py: counts and rates with an SI suffix
(``124k``), byte rates with their unit (``879 GB/s``); an op key is shortened
in its name, never in its role (``reduce_scatter…@dp ×64``).
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from ranktop.tui.render import palette
from ranktop.watch import format as fmt
from ranktop.watch.model.snapshot import ALL_RANKS_UP_TO, LEAST_WAIT, MOST_WAIT, WHY_ORDER, CollectiveStat, Snapshot

COLUMNS = (
    ("rank", "rank", 4),
    ("op", "op", 22),
    ("calls", "calls", 6),
    ("rate", "calls/s", 7),
    ("bytes", "bytes/s", 9),
    ("mean", "mean ms", 7),
    ("p95", "p95 ms", 6),
    # bytes over the wait, and nccl-tests' bus bandwidth over the kernel time, headed short so that a 120-column
    # terminal shows "fit".
    ("algbw", "wait GB/s", 8),
    ("busbw", "bus GB/s", 8),
    ("alpha", "α µs", 5),
    ("beta", "β GB/s", 6),
    ("fit", "fit", 6),
    # Last, so that the numbers keep their columns: why this rank has rows of its own (flagged, waited for, ...).
    ("why", "why", 10),
)
OP_WIDTH = dict((k, w) for k, _, w in COLUMNS)["op"]


def _gbps(value: float | None) -> str:
    return "–" if value is None else fmt.significant(value / 1e9)


def cells(stat: CollectiveStat, why: str = "") -> tuple[Text, ...]:
    job = stat.rank < 0
    style = "bold" if job else ""
    fit_style = palette.WARNING if stat.fit_dev is not None and stat.fit_dev > 0.5 else ""
    values = (
        ("all" if job else str(stat.rank), style),
        (fmt.op_key(stat.op, OP_WIDTH, stat.group_size), style),
        (fmt.si(stat.calls), style),
        (fmt.si(stat.calls_per_s), style),
        (fmt.bandwidth(stat.bytes_per_s), style),
        (fmt.ms(stat.mean_s), style),
        (fmt.ms(stat.p95_s), style),
        (_gbps(stat.algbw_bps), style),
        (_gbps(stat.busbw_bps), style),
        ("–" if stat.alpha_s is None else fmt.si(stat.alpha_s * 1e6), style),
        (_gbps(stat.beta_bps), style),
        ("–" if stat.fit_dev is None else fmt.score(stat.fit_dev), fit_style),
        (why, palette.STATUS_STYLES.get(why, palette.MUTED)),
    )
    return tuple(Text(text, style=s, justify="left" if i < 2 or i == len(values) - 1 else "right") for i, (text, s) in enumerate(values))


def shown_stats(snapshot: Snapshot) -> list[tuple[CollectiveStat, str]]:
    """The snapshot's rows with why each is shown, as the analysis chose and ordered them (the job's first, then
    every rank's in a small job, those of the ranks that matter in a big one: watch/analysis/collectives.py
    rows_shown); the rows it did not choose (why None) are left out."""
    return [(s, s.why) for s in snapshot.collectives if s.why is not None]


def title(snapshot: Snapshot, shown: list[tuple[CollectiveStat, str]]) -> str:
    """The pane's title: which ranks stand out and why (the why column is off a narrow screen); in a big job,
    which ranks have rows, and when no rank is flagged, that none is."""
    text = "Collectives · wait per call, launch to completion"
    reasons = dict(sorted(((s.rank, why) for s, why in shown if s.rank >= 0 and why), key=lambda pair: WHY_ORDER.get(pair[1], 0)))
    if len(snapshot.ranks) <= ALL_RANKS_UP_TO:  # every rank has rows: the title names those that stand out
        return text + "".join(f" · rank {rank} {why}" for rank, why in reasons.items())
    if not reasons:
        return text + " · job rows only: no rank has collectives of its own yet"
    listed = ", ".join(f"{rank} {why}" for rank, why in reasons.items())
    if all(why in (MOST_WAIT, LEAST_WAIT) for why in reasons.values()):
        return text + f" · no rank flagged; per rank: {listed}"
    return text + f" · per rank: {listed}"


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
        self.border_title = title(snapshot, stats)
        # The why column is last: where the screen cuts it, it stays empty (the title says why) rather than
        # showing the first letter of each reason.
        whole = self.size.width == 0 or sum(w + 2 for _, _, w in COLUMNS) + 1 <= self.size.width
        if self.columns["why"].label.plain != ("why" if whole else ""):
            self.columns["why"].label = Text("why" if whole else "")
            self.refresh()
        for stat, why in stats:
            key = f"{stat.rank}:{stat.op}"
            keys.append(key)
            new = cells(stat, why if whole else "")
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
        if [row.key.value for row in self.ordered_rows] != keys:  # a rank that starts to matter goes to its place
            position = {(row[0].plain, row[1].plain): i for i, row in enumerate(self._shown[k] for k in keys)}
            self.sort("rank", "op", key=lambda pair: position.get((pair[0].plain, pair[1].plain), len(position)))
