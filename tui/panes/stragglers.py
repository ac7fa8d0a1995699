"""The straggler table: every rank, the flagged ones first; on a big job, the flagged ones and those that matter.

Slow and silent ranks come first, in the order of ``snapshot.stragglers``
(most suspicious first); every other rank follows by rank number. The
aggregator ranks healthy ranks too, by scores that differ only by noise, and
following that order would reshuffle the table on every refresh.

A big job's table (more than :data:`ALL_RANKS_UP_TO` ranks: the rank map shows
every rank) has :data:`TOP_ROWS` rows: the flagged ranks, then the ranks that
cost the job most, each rank's time per step beyond the median rank's (what the
job waits for it), the costliest first; not the first healthy ranks by number,
which say nothing. A rank listed stays while it is among the twice as many
costliest, so that noise between near-equal ranks does not swap rows in and out
at every refresh (a DataTable pays for each row it removes).

Rows are keyed by rank and updated cell by cell, and reordered only when the
order changed, so a refresh neither flickers nor loses the scroll position.
While the table has focus the highlighted rank stays highlighted as it moves;
otherwise the highlight keeps its place in the order (the top row is always
the worst straggler).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
from rich.text import Text
from textual.widgets import DataTable

from ranktop.tui.render import palette
from ranktop.watch import format as fmt
from ranktop.watch.model.snapshot import OK, SILENT, SLOW, STALLED, STATUSES, RankRow, Snapshot

#: (key, heading, width) of each column; widths are fixed so values never make the table jump.
COLUMNS = (
    ("rank", "rank", 5),
    ("host", "host", 16),
    ("step", "step", 8),
    ("step_ms", "step ms", 8),
    ("score", "score", 6),
    ("culprit", "culprit", 10),
    ("status", "status", 11),  # "stalled 28s"
    # Last, so that an 80-column terminal still shows the status: own work and collective wait.
    ("compute_ms", "own ms", 7),
    ("comm_ms", "comm ms", 7),
    # On a job whose parallel layout is known: the rank's coordinates, "5·7·63" under "pp·tp·dp".
    ("where", "where", 12),
)
HOST_WIDTH = dict((k, w) for k, _, w in COLUMNS)["host"]


def flagged_order(snapshot: Snapshot) -> list[int]:
    """Flagged ranks (slow, stalled, silent) in ``snapshot.stragglers`` order; those it does not list after them."""
    flagged = set(snapshot.ranks.having(*(s for s in STATUSES if s != OK)))
    first = [n for n in dict.fromkeys(snapshot.stragglers) if n in flagged]
    # A flagged rank the aggregator did not list still belongs at the top.
    return first + sorted(flagged - set(first))


def straggler_order(snapshot: Snapshot) -> list[int]:
    """Flagged ranks in ``snapshot.stragglers`` order, then the rest by rank number."""
    table = snapshot.ranks.table  # the columns: no rank's row is built here (watch/model/rank_table.py)
    first = flagged_order(snapshot)
    listed = set(first)
    return first + [n for n in table.rank.tolist() if n not in listed]


def costliest(snapshot: Snapshot, count: int, skip: Collection[int] = (), kept: Collection[int] = ()) -> list[int]:
    """Up to ``count`` ranks not in ``skip``, the costliest first: each rank's time per step beyond the median
    rank's (``excess_s``; a rank faster than it or without a step time costs nothing and is not listed). A rank of
    ``kept`` (listed before) stays while it is among the ``2 * count`` costliest; the others enter from the top
    ``count``. O(ranks) in numpy, then ``count``'s worth in Python."""
    if count <= 0:
        return []
    table = snapshot.ranks.table
    excess = np.nan_to_num(table.excess_s.astype(np.float64), nan=0.0)
    if skip:
        excess[[i for i in map(table.index, skip) if i is not None]] = 0.0
    wide = min(len(excess), 2 * count)
    if wide == 0:
        return []
    top = np.argpartition(-excess, wide - 1)[:wide] if wide < len(excess) else np.arange(len(excess))
    top = top[excess[top] > 0.0]
    top = top[np.argsort(-excess[top], kind="stable")]
    ranks = table.rank[top].tolist()
    stay = [r for r in ranks if r in kept]
    chosen = set(stay[:count])
    for r in ranks[:count]:
        if len(chosen) >= count:
            break
        chosen.add(r)
    return [r for r in ranks if r in chosen]


#: Every rank has a row up to this many ranks; above, the first TOP_ROWS of the same order (flagged
#: ranks, then by rank number: the rank map shows every rank), so a refresh costs the rows kept, not
#: the job's size. Following the scores of healthy ranks instead would swap rows in and out at every
#: refresh, and a DataTable pays for each row it removes.
ALL_RANKS_UP_TO = 512
TOP_ROWS = 128


def table_rows(ranks: int) -> int:
    """How many rows the table has for a job of ``ranks`` ranks (what :func:`table_order` returns, counted in O(1))."""
    return ranks if ranks <= ALL_RANKS_UP_TO else TOP_ROWS


def table_order(snapshot: Snapshot, kept: Collection[int] = ()) -> list[int]:
    """The rows of the table, top first: :func:`straggler_order`; in a big job the flagged ranks, then the
    costliest (:func:`costliest`; ``kept``: the ranks listed before), :data:`TOP_ROWS` at most."""
    if len(snapshot.ranks) <= ALL_RANKS_UP_TO:
        return straggler_order(snapshot)
    first = flagged_order(snapshot)[:TOP_ROWS]
    return first + costliest(snapshot, TOP_ROWS - len(first), skip=first, kept=kept)


def shown_values(row: RankRow) -> tuple:
    """What the cells of a row depend on: cheap to compare, so unchanged rows cost nothing."""
    silent_for = fmt.ago(row.last_seen_s) if row.status == SILENT else None
    return (
        row.host, row.step, fmt.ms(row.step_s), fmt.ms(row.compute_s), fmt.ms(row.collective_s),
        fmt.score(row.score), row.culprit_phase, row.status, silent_for,
        fmt.ago(row.stalled_s) if row.stalled_s is not None else None, row.stalled_phase, row.coords,
        round(row.every) if row.every is not None else None,
    )  # fmt: skip


def where_heading(roles: list[str]) -> str:
    """The coordinates column's heading: "pp·tp·dp" (the layout's roles), "where" before one is known."""
    return "·".join(roles) if roles else "where"


def where(row: RankRow, roles: list[str]) -> str:
    """A rank's coordinates in the heading's order: "5·7·63"."""
    coords = row.coords or {}
    return "·".join(str(coords[r]) if r in coords else "–" for r in roles) if coords else ""


def cells(row: RankRow, roles: list[str] | None = None) -> tuple[Text, ...]:
    muted = palette.MUTED if row.status == SILENT else ""
    host = fmt.host(row.host, HOST_WIDTH)
    has_data = row.step_s is not None and row.status != SILENT
    score_style = palette.STATUS_STYLES[SLOW] if row.status == SLOW else muted
    status = row.status if row.status != SILENT else f"silent {fmt.ago(row.last_seen_s)}"
    culprit = row.culprit_phase
    if row.status == SLOW and row.every is not None and round(row.every) != 1:  # slow on some steps only: 1 in how many
        status = f"slow 1/{row.every:.0f}"
    if row.status == STALLED:  # how long, and the phase it is stuck in (– outside every phase)
        status = f"stalled {fmt.ago(row.stalled_s or 0.0)}"
        culprit = row.stalled_phase or "–"
    return (
        Text(str(row.rank), justify="right", style="bold" if row.status == SLOW else muted),
        Text(host, style=muted),
        Text(str(row.step) if row.step >= 0 else "–", justify="right", style=muted),
        Text(fmt.ms(row.step_s), justify="right", style=muted),
        Text(fmt.score(row.score) if has_data else "", justify="right", style=score_style),
        Text(culprit or "", style=palette.STATUS_STYLES[row.status] if culprit else ""),
        Text(status, style=palette.STATUS_STYLES[row.status]),
        Text(fmt.ms(row.compute_s), justify="right", style=muted),
        Text(fmt.ms(row.collective_s), justify="right", style=muted),
        Text(where(row, roles or []), style=muted),
    )


class StragglerTable(DataTable):
    """rank, host, step, step ms, score, culprit phase, status, own (compute) ms, comm (collective wait) ms,
    and its coordinates in the parallel layout."""

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: dict[int, tuple[Text, ...]] = {}
        self._values: dict[int, tuple] = {}
        self._roles: list[str] = []

    def show(self, snapshot: Snapshot) -> None:
        if not self.columns:  # here rather than on_mount, which may run after the first snapshot
            for key, heading, width in COLUMNS:
                self.add_column(heading, key=key, width=width)
        if snapshot.layout_roles != self._roles:  # the layout was learned (or changed): every row's coordinates
            self._roles = list(snapshot.layout_roles)
            self.columns["where"].label = Text(where_heading(self._roles))
            self._values.clear()
            self.refresh()
        order = table_order(snapshot, self._shown)
        if len(snapshot.ranks) > ALL_RANKS_UP_TO:
            present = {n: snapshot.row(n) for n in order}
            self.border_title = f"Stragglers · flagged, then the costliest · {len(order)} of {len(snapshot.ranks):,} ranks"
        else:
            present = {r.rank: r for r in snapshot.ranks}
            self.border_title = "Stragglers · flagged first"
        for rank in [n for n in self._shown if n not in present]:
            self.remove_row(str(rank))
            del self._shown[rank], self._values[rank]
        for rank, row in present.items():
            values = shown_values(row)
            if self._values.get(rank) == values:
                continue
            self._values[rank] = values
            new = cells(row, self._roles)
            old = self._shown.get(rank)
            if old is None:
                self.add_row(*new, key=str(rank))
            elif old != new:
                for (column, _, _), value, before in zip(COLUMNS, new, old):
                    if value != before:
                        self.update_cell(str(rank), column, value)
            self._shown[rank] = new
        self._reorder(order)

    def _reorder(self, order: list[int]) -> None:
        if [int(row.key.value) for row in self.ordered_rows] == order:
            return
        selected = self.selected_rank() if self.has_focus else None
        position = {rank: i for i, rank in enumerate(order)}
        self.sort("rank", key=lambda cell: position[int(cell.plain)])
        if selected is not None:
            self.move_cursor(row=self.get_row_index(str(selected)))

    def selected_rank(self) -> int | None:
        """The rank under the cursor, if any."""
        if not self.row_count:
            return None
        return int(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
