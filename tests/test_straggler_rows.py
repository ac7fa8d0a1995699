"""The straggler table of a big job: the flagged ranks, then the ranks that cost the job something, not rank 0, 1, 2...
nor the healthy crowd's noise.

The simulated job is the simulator's (demo/simulate.py: its ranks' messages summed by their nodes' relays into
digests, as a big job's viewer receives them), replayed into the real engine on a clock of its own: one rank slow,
the 1,023 others running the same work with noise only. The rules of the listing (who enters, who stays, in which
order) are read on jobs built by hand, where each rank's score is known.
"""

from __future__ import annotations

import asyncio

import pytest
from test_app_render import job_snapshot, rank_row

from ranktop.tui.app import RanktopApp
from ranktop.tui.panes import StragglerTable
from ranktop.tui.panes.stragglers import ALL_RANKS_UP_TO, NOTICEABLE, TOP_ROWS, costliest, table_order
from ranktop.watch import format as fmt
from ranktop.watch.statuses import OK, SLOW

SCORE = 4  # the score column (tui/panes/stragglers.py COLUMNS)
STATUS = 6


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A snapshot of a simulated 1,024-rank job, rank 700 slow in forward (+20 ms a step)."""
    from ranktop.demo.simulate import Scenario, Simulator
    from ranktop.watch.aggregator import Aggregator

    s = Scenario(job="sim-rows", ranks=1024, nodes=128, slow_rank=700, slow_ms=20.0, slow_phase="forward")
    clock = [0.0]
    agg = Aggregator(s.job, clock=lambda: clock[0], wall_clock=lambda: clock[0])
    folder = tmp_path_factory.mktemp("rdv")
    for now, frames in Simulator(s, directory=str(folder)).replay(15, digests=True):
        clock[0] = now
        for f in frames:
            agg.ingest_frames(f)
    snap = agg.snapshot()
    assert len(snap.ranks) == 1024 > ALL_RANKS_UP_TO
    return snap


def shown_table(snapshot, size=(80, 24)):
    """The straggler table as the app draws it: its rows' cells, top first, and its title."""

    class Source:
        def snapshot(self):
            return snapshot

    async def main():
        app = RanktopApp(Source(), refresh_hz=2.0)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            table = app.query_one(StragglerTable)
            rows = [[cell.plain for cell in table.get_row(row.key)] for row in table.ordered_rows]
            return rows, str(table.border_title)

    return asyncio.run(main())


def test_on_1024_ranks_with_one_straggler_the_straggler_is_first_and_no_row_claims_a_healthy_rank_costs_the_job(big):
    """The spec: the first row is the straggler; a row under it says its rank costs the job at least +1% of a step;
    the healthy ranks, a hair slower or faster than the median by noise (0.1-0.3% here), are counted, not listed."""
    table = big.ranks.table
    assert (table.score[table.rank != 700] > 0).any()  # the healthy ranks' noise: what a table could list as costs

    rows, title = shown_table(big)
    assert rows[0][0] == "700" and rows[0][STATUS] == SLOW and rows[0][SCORE].startswith("+")
    for cells in rows[1:]:
        row = big.row(int(cells[0]))
        assert row.status != OK or row.score >= NOTICEABLE / 2, f"rank {row.rank} listed at {cells[SCORE]}"
        assert cells[SCORE] not in ("±0%", "") and not cells[SCORE].startswith("-")
    # every rank is listed or counted
    assert f"{len(rows)} of 1,024 ranks" in title and f"{1024 - len(rows):,} other ranks healthy (under +1%)" in title
    assert [int(r[0]) for r in rows] == table_order(big)


def big_job(scores: dict[int, float], ranks: int = 600, slow: tuple[int, ...] = ()) -> object:
    """A job of ``ranks`` ranks built by hand: each rank's score as given (0.2% noise otherwise), ``slow`` flagged."""
    rows = [rank_row(n, score=scores.get(n, 0.002 if n % 2 else -0.001)) for n in range(ranks)]
    for n in slow:
        rows[n] = rank_row(n, step_ms=130.0, status=SLOW, score=scores.get(n, 0.3), culprit="forward")
    assert ranks > ALL_RANKS_UP_TO
    return job_snapshot(rows, stragglers=list(slow) + [n for n in range(ranks) if n not in slow])


def test_the_flagged_ranks_come_first_then_those_that_cost_the_job_the_costliest_first():
    snap = big_job({5: 0.3, 40: 0.02, 41: 0.05, 42: 0.011, 43: 0.009}, slow=(5,))
    # 43 at 0.9% is not listed (it enters from 1%), nor is the crowd at 0.2%
    assert table_order(snap) == [5, 41, 40, 42]


def test_a_listed_rank_stays_while_it_shows_as_plus_1_percent_and_leaves_below():
    snap = big_job({40: 0.02, 43: 0.007, 44: 0.004})
    assert table_order(snap) == [40]  # 43 (0.7%) and 44 (0.4%) do not enter
    assert table_order(snap, kept=[40, 43, 44]) == [40, 43]  # 43, listed, still shows as +1%: it stays; 44 leaves
    assert fmt.score(0.007) == "+1%" and fmt.score(0.004) == "±0%"


def test_ranks_showing_the_same_score_keep_their_order_through_noise():
    snap = big_job({40: 0.024, 41: 0.021, 42: 0.05})
    assert table_order(snap) == [42, 40, 41]
    # both show +2%: listed as 41 then 40 before, they stay so, whatever their hundredths of a percent
    assert table_order(snap, kept=[42, 41, 40]) == [42, 41, 40]
    # a rank whose shown score passes another's moves
    assert table_order(snap, kept=[41, 40, 42]) == [42, 41, 40]


def test_flagged_ranks_that_look_alike_keep_their_order_the_first_of_them_its_place():
    """A slow node: eight ranks at +21%, which the aggregator orders by noise; rank 3 (+30%) is its first."""
    scores = {3: 0.3} | {n: 0.21 for n in range(80, 88)}
    snap = big_job(scores, slow=(3, 85, 80, 81, 82, 83, 84, 86, 87))
    assert table_order(snap) == [3, 85, 80, 81, 82, 83, 84, 86, 87]  # the aggregator's order, first shown
    shown = [3, 83, 80, 86, 85, 81, 82, 84, 87]
    assert table_order(snap, kept=shown) == shown  # the same ranks, looking the same: nothing moves
    snap = big_job(scores | {86: 0.4}, slow=(86, 3, 85, 80, 81, 82, 83, 84, 87))
    assert table_order(snap, kept=shown) == [86, 3, 83, 80, 85, 81, 82, 84, 87]  # one that changed moves


def test_a_rank_listed_stays_while_it_is_among_twice_as_many_costliest():
    snap = big_job({n: 0.01 + 0.001 * n for n in range(100, 140)})  # 40 ranks of 1% to 4.9%: the costliest is 139
    wider = costliest(snap, 20)
    assert wider == list(range(139, 119, -1))
    first = costliest(snap, 10)
    assert first == wider[:10]
    # the 15th costliest, listed before, stays in a list of 10; one that was not listed does not enter past the 10th
    again = costliest(snap, 10, kept=[wider[14]])
    assert wider[14] in again and len(again) == 10 and wider[9] not in again
    widest = costliest(snap, 30)
    assert widest[25] not in costliest(snap, 10, kept=[widest[25]])  # past twice as many: it goes


def test_a_healthy_big_job_lists_no_rank_and_says_they_are_healthy():
    rows, title = shown_table(big_job({}))
    assert rows == [] and title == "Stragglers · none: all 600 ranks healthy (under +1%)"


def test_more_ranks_costing_the_job_than_rows_are_counted():
    scores = {n: 0.3 for n in range(TOP_ROWS + 10)}
    rows, title = shown_table(big_job(scores, slow=tuple(range(TOP_ROWS + 10))))
    assert len(rows) == TOP_ROWS and "10 more flagged or past +1%" in title
