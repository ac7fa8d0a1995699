"""The straggler table of a big job: the flagged ranks, then the ranks that cost the job most, not rank 0, 1, 2...

The job is the simulator's (demo/simulate.py: its ranks' messages summed by their nodes' relays into digests, as a
big job's viewer receives them), replayed into the real engine on a clock of its own.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ranktop.tui.app import RanktopApp
from ranktop.tui.panes import StragglerTable
from ranktop.tui.panes.stragglers import ALL_RANKS_UP_TO, TOP_ROWS, costliest, table_order
from ranktop.watch.statuses import SLOW


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


def test_the_flagged_ranks_come_first_then_the_costliest(big):
    order = table_order(big)
    assert order[0] == 700 and big.row(700).status == SLOW
    assert len(order) <= TOP_ROWS and len(set(order)) == len(order)
    rest = [big.row(r).excess_s for r in order[1:]]
    assert rest and all(x > 0 for x in rest) and rest == sorted(rest, reverse=True)
    # they are the costliest of the job: none left out costs more than the least listed
    table = big.ranks.table
    left = np.isin(table.rank, order, invert=True)
    assert np.nanmax(table.excess_s[left]) <= min(rest)
    assert order[1:] != sorted(order[1:])  # (not the ranks by number)


def test_a_rank_listed_stays_while_it_is_among_twice_as_many_costliest(big):
    first = costliest(big, 10, skip=[700])
    wider = costliest(big, 20, skip=[700])
    assert first == wider[:10]
    # the 15th costliest, listed before, stays in a list of 10; one that was not listed does not enter past the 10th
    again = costliest(big, 10, skip=[700], kept={wider[14]})
    assert wider[14] in again and len(again) == 10 and wider[9] not in again
    widest = costliest(big, 30, skip=[700])
    assert widest[25] not in costliest(big, 10, skip=[700], kept={widest[25]})  # past twice as many: it goes


def test_at_80x24_the_table_shows_the_slow_rank_then_the_costliest(big):
    class Source:
        def snapshot(self):
            return big

    async def main():
        app = RanktopApp(Source(), refresh_hz=2.0)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            table = app.query_one(StragglerTable)
            rows = [int(row.key.value) for row in table.ordered_rows]
            assert rows == table_order(big, rows)
            assert rows[0] == 700 and "the costliest" in str(table.border_title)

    asyncio.run(main())
