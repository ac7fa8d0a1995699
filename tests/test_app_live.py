"""The Textual app against a live stream: real rank processes, real sockets, the pilot at the keys."""

import asyncio

from ranktop.tui.app import RanktopApp
from ranktop.watch.session import WatchSession, resolve
from ranktop.tui.panes import StragglerTable


async def wait_until(pilot, predicate, timeout=15.0):
    for _ in range(int(timeout / 0.1)):
        if predicate():
            return True
        await pilot.pause(0.1)
    return predicate()


def test_the_app_names_the_slow_rank_of_a_live_job_and_pings_it(launch_ranks):
    launch_ranks("job-app", 4, "--slow-rank", "3", "--slow-ms", "15", "--slow-phase", "data")
    session = WatchSession(resolve(["job-app"])).start()

    async def scenario():
        app = RanktopApp(session, session.controller, refresh_hz=5)
        async with app.run_test(size=(110, 32)) as pilot:
            table = app.query_one(StragglerTable)

            def top_row():
                if table.row_count < 4:
                    return None
                return [str(cell) for cell in table.get_row_at(0)]

            assert await wait_until(pilot, lambda: (row := top_row()) and row[0].strip() == "3" and "slow" in row)
            assert "data" in top_row()
            await pilot.press("p")
            assert await wait_until(pilot, lambda: len({r.rank for r in session.snapshot().replies}) == 4)
            await pilot.press("q")

    try:
        asyncio.run(scenario())
    finally:
        session.close()
