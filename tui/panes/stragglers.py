"""The straggler table: every rank, the flagged ones first; on a big job, the flagged ones and those that matter.

Slow and silent ranks come first, in the order of ``snapshot.stragglers``
(most suspicious first); every other rank follows by rank number. The
aggregator ranks healthy ranks too, by scores that differ only by noise, and
following that order would reshuffle the table on every refresh.

A big job's table (more than :data:`ALL_RANKS_UP_TO` ranks: the rank map shows
every rank) lists the flagged ranks, then the ranks that cost the job
something: a score (the rank's time per step beyond its healthy peers', a share
of the median step) of :data:`NOTICEABLE` or more, the costliest first,
:data:`TOP_ROWS` rows at most. Not the first healthy ranks by number, nor the
costliest of a healthy crowd: at 1,024 ranks half of them are a hair slower
than the median, 0.1 to 0.3% by noise alone, and 127 rows of "±0%", a
different 127 at each refresh, said nothing but took the screen. The title
counts the ranks left out ("1,023 other ranks healthy (under +1%)").

Nothing reshuffles on its own: a rank listed stays while its score shows at
least +1% and it is among the twice as many costliest (a DataTable pays for
each row it removes), and listed ranks of equal shown score keep their order;
so do flagged ranks that look alike (a slow node's eight, at any job size).

Rows are keyed by rank and updated cell by cell, and reordered only when the
order changed, so a refresh neither flickers nor loses the scroll position.
While the table has focus the highlighted rank stays highlighted as it moves;
otherwise the highlight keeps its place in the order (the top row is always
the worst straggler).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
from rich.text import Text
from textual.widgets import DataTable

from ranktop.tui.render import palette
from ranktop.tui.render.rankmap_layout import SCORE_COLOURS
from ranktop.watch import format as fmt
from ranktop.watch import OK, SILENT, SLOW, STALLED, STATUSES
from ranktop.watch.model.rank_row import RankRow
from ranktop.watch.model.snapshot import Snapshot

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


def flagged_order(snapshot: Snapshot, kept: Sequence[int] = ()) -> list[int]:
    """Flagged ranks (slow, stalled, silent) in ``snapshot.stragglers`` order; those it does not list after them.
    Ranks that look alike on screen (the same status and shown score: the eight ranks of a slow node, +21% each)
    keep their order in ``kept`` (the rows as shown before), at the place of the first of them: the aggregator
    orders them by noise, and following it swapped their rows now and then."""
    flagged = set(snapshot.ranks.having(*(s for s in STATUSES if s != OK)))
    first = [n for n in dict.fromkeys(snapshot.stragglers) if n in flagged]
    # A flagged rank the aggregator did not list still belongs at the top.
    order = first + sorted(flagged - set(first))
    if len(order) < 2 or not kept:
        return order
    table = snapshot.ranks.table
    at = np.searchsorted(table.rank, np.asarray(order, np.int64))
    looks = list(zip(table.status[at].tolist(), shown_percent(table.score[at]).tolist()))
    group = {look: i for i, look in reversed(list(enumerate(looks)))}  # each look's first place
    before = {r: i for i, r in enumerate(kept)}
    place = sorted(range(len(order)), key=lambda i: (group[looks[i]], before.get(order[i], len(before)), i))
    return [order[i] for i in place]


def straggler_order(snapshot: Snapshot, kept: Sequence[int] = ()) -> list[int]:
    """Flagged ranks in ``snapshot.stragglers`` order (:func:`flagged_order`), then the rest by rank number."""
    table = snapshot.ranks.table  # the columns: no rank's row is built here (watch/model/rank_table.py)
    first = flagged_order(snapshot, kept)
    listed = set(first)
    return first + [n for n in table.rank.tolist() if n not in listed]


def shown_percent(score: np.ndarray) -> np.ndarray:
    """The whole percent ``fmt.score`` shows for each score (NaN: 0), as an array."""
    return np.round(np.nan_to_num(score.astype(np.float64), nan=0.0) * 100.0)


#: Every rank has a row up to this many ranks; above, the flagged ranks and those past NOTICEABLE, TOP_ROWS at
#: most, so a refresh costs the rows kept, not the job's size.
ALL_RANKS_UP_TO = 512
TOP_ROWS = 128
#: A score from which a healthy rank of a big job is listed: the rank map's first shade past plain "ok"
#: (tui/render/rankmap_layout.py), so the table lists the ranks the map tints. Below it a rank's excess is noise
#: to the eye (0.1-0.3% on the simulator's healthy ranks); a listed rank stays while its score shows as +1%.
NOTICEABLE = SCORE_COLOURS[0][0]


def costliest(snapshot: Snapshot, count: int, skip: Collection[int] = (), kept: Sequence[int] = ()) -> list[int]:
    """Up to ``count`` ranks not in ``skip`` that cost the job something, the costliest first: a score of
    :data:`NOTICEABLE` or more (the rank's time per step beyond its peers', a share of the median step; a rank
    within noise of them, faster, or without a step time is not listed). A rank of ``kept`` (listed before, in
    the order shown) stays while its score still shows as +1% and it is among the ``2 * count`` costliest; the
    others enter from the top ``count``. Ranks of equal shown score keep ``kept``'s order, so that noise does not
    swap them at each refresh. O(ranks) in numpy, then ``count``'s worth in Python."""
    if count <= 0:
        return []
    table = snapshot.ranks.table
    score = np.nan_to_num(table.score.astype(np.float64), nan=0.0)
    score[np.isnan(table.step_s)] = 0.0
    if skip:
        score[[i for i in map(table.index, skip) if i is not None]] = 0.0
    wide = min(len(score), 2 * count)
    if wide == 0:
        return []
    top = np.argpartition(-score, wide - 1)[:wide] if wide < len(score) else np.arange(len(score))
    top = top[shown_percent(score[top]) >= 1.0]  # what stays must still show as +1%
    top = top[np.argsort(-score[top], kind="stable")]
    ranks = table.rank[top].tolist()
    entering = set(table.rank[top[score[top] >= NOTICEABLE][:count]].tolist())
    listed = set(kept)
    stay = [r for r in ranks if r in listed]
    chosen = set(stay[:count])
    for r in ranks:
        if len(chosen) >= count:
            break
        if r in entering:
            chosen.add(r)
    shown = dict(zip(ranks, shown_percent(table.score[top]).tolist()))
    place = {r: i for i, r in enumerate(ranks)}
    before = {r: i for i, r in enumerate(kept)}
    return sorted(chosen, key=lambda r: (-shown[r], before.get(r, len(before)), place[r]))


def table_rows(ranks: int) -> int:
    """The most rows the table has for a job of ``ranks`` ranks (what :func:`table_order` returns at most, in O(1))."""
    return ranks if ranks <= ALL_RANKS_UP_TO else TOP_ROWS


def table_order(snapshot: Snapshot, kept: Sequence[int] = ()) -> list[int]:
    """The rows of the table, top first (``kept``: the rows as shown before): :func:`straggler_order`; in a big job
    the flagged ranks, then those
    that cost the job something (:func:`costliest`; ``kept``: the ranks listed before, in order), :data:`TOP_ROWS`
    at most."""
    if len(snapshot.ranks) <= ALL_RANKS_UP_TO:
        return straggler_order(snapshot, kept)
    first = flagged_order(snapshot, kept)[:TOP_ROWS]
    return first + costliest(snapshot, TOP_ROWS - len(first), skip=first, kept=kept)


def big_job_title(snapshot: Snapshot, order: Sequence[int]) -> str:
    """A big job's table title: how many ranks are listed (``order``), and what the others are ("1 of 1,024
    ranks · 1,023 other ranks healthy (under +1%)"). O(ranks) in numpy."""
    table = snapshot.ranks.table
    total = len(table)
    left = ~np.isin(table.rank, np.asarray(order, np.int64))
    flagged = ~table.statuses(OK)
    untimed = left & ~flagged & np.isnan(table.step_s)
    # Past TOP_ROWS: flagged, or as costly as a listed rank, and not listed.
    more = int((left & (flagged | (np.nan_to_num(table.score.astype(np.float64)) >= NOTICEABLE) & ~untimed)).sum())
    healthy = int(left.sum()) - more - int(untimed.sum())
    if healthy == total:
        return f"Stragglers · none: all {total:,} ranks healthy (under +1%)"
    parts = [f"{len(order):,} of {total:,} ranks"]
    if more:
        parts.append(f"{more:,} more flagged or past +1%")
    if healthy:
        parts.append(f"{healthy:,} {'other ' if order else ''}ranks healthy (under +1%)")
    if untimed.any():
        parts.append(f"{int(untimed.sum()):,} not timed yet")
    return "Stragglers · " + " · ".join(parts)


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
        self._order: list[int] = []  # the rows' ranks as last shown, top first

    def show(self, snapshot: Snapshot) -> None:
        if not self.columns:  # here rather than on_mount, which may run after the first snapshot
            for key, heading, width in COLUMNS:
                self.add_column(heading, key=key, width=width)
        if snapshot.layout_roles != self._roles:  # the layout was learned (or changed): every row's coordinates
            self._roles = list(snapshot.layout_roles)
            self.columns["where"].label = Text(where_heading(self._roles))
            self._values.clear()
            self.refresh()
        order = table_order(snapshot, self._order)
        if len(snapshot.ranks) > ALL_RANKS_UP_TO:
            present = {n: snapshot.row(n) for n in order}
            self.border_title = big_job_title(snapshot, order)
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
        self._order = order
        if [int(row.key.value) for row in self.ordered_rows] == order:
            return
        selected = self.selected_rank() if self.has_focus else None
        position = {rank: i for i, rank in enumerate(order)}
        self.sort("rank", key=lambda cell: position[int(cell.plain)])
        if selected is not None:
            self.move_cursor(row=self.get_row_index(str(selected)))

    def lines_wanted(self) -> int:
        """The lines its rows need (one at least, empty or not), with its title, heading and scrollbar."""
        scrollbar = self.styles.scrollbar_size_horizontal if self.show_horizontal_scrollbar else 0
        return 1 + 1 + max(1, self.row_count) + scrollbar

    def selected_rank(self) -> int | None:
        """The rank under the cursor, if any."""
        if not self.row_count:
            return None
        return int(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
