"""The issue's "done when", read off the screen as a user sees it (the characters of every row, headless):
panes sized to what they hold, and numbers written for people, for the 4-rank demo and 4,096 simulated ranks."""

from __future__ import annotations

import asyncio
import re

from screen_jobs import demo_job, simulated_job
from test_app_render import FakeSource

from ranktop.tui.app import RanktopApp
from ranktop.tui.panes import CollectiveTable
from ranktop.tui.panes.memory import MemoryPanel


def screen_rows(snapshot, size) -> tuple[list[str], dict]:
    """Every row of the screen as text, and the region of each pane, once the panes know their room."""

    async def main():
        app = RanktopApp(FakeSource(snapshot), None, refresh_hz=2.0)
        async with app.run_test(size=size) as pilot:
            for _ in range(2):
                app.poll()
                await pilot.pause()
            rows = [strip.text for strip in app.screen._compositor.render_strips()]
            panes = {name: app.query_one(kind) for name, kind in (("memory", MemoryPanel), ("collectives", CollectiveTable))}
            return rows, {name: (w.display, w.region, w) for name, w in panes.items()}

    return asyncio.run(main())


def longest_blank_run(rows: list[str]) -> int:
    run = best = 0
    for row in rows:
        run = run + 1 if not row.strip() else 0
        best = max(best, run)
    return best


def test_at_120x36_the_demo_shows_every_rank_in_the_memory_pane_and_no_long_blank_run():
    rows, panes = screen_rows(demo_job(), (120, 36))
    shown, region, _ = panes["memory"]
    assert shown
    pane = rows[region.y : region.bottom]
    assert [line.split()[0] for line in pane if re.match(r"^\s*\d+\s+vm\s", line)] == ["0", "1", "2", "3"]
    assert longest_blank_run(rows) <= 3, "\n".join(rows)


def test_at_200x50_the_4096_rank_collectives_pane_writes_numbers_for_people_and_keeps_every_op_s_role():
    rows, panes = screen_rows(simulated_job(), (200, 50))
    shown, region, table = panes["collectives"]
    assert shown
    pane = rows[region.y : region.bottom]
    assert not [line for line in pane if re.search(r"\d{5,}\.", line)], "\n".join(pane)
    ops = [table.get_row(row.key)[1].plain for row in table.ordered_rows]
    assert ops and all(re.search(r"@(pp|dp|tp) ×\d+$", op) for op in ops), ops
    assert any("3071" in line and "slow" in line for line in pane)  # the slow rank's own rows, and why
