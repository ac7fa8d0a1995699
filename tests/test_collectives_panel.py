"""The collectives panel renders the snapshot's per-op rows, and `c` hides it."""

import dataclasses

from test_app_render import drive, eight_ranks

from ranktop.watch.model.snapshot import CollectiveStat
from ranktop.tui.panes import CollectiveTable


def stat(rank, op="ddp_allreduce", calls=120, mean=0.004):
    return CollectiveStat(
        rank=rank,
        op=op,
        group_size=8,
        dtype="float32",
        calls=calls,
        bytes=calls * (4 << 20),
        calls_per_s=30.0,
        bytes_per_s=30.0 * (4 << 20),
        mean_s=mean,
        p95_s=mean * 1.5,
        algbw_bps=(4 << 20) / mean,
        busbw_bps=(4 << 20) / mean * 1.75,
        alpha_s=25e-6,
        beta_bps=1.2e9,
        fit_dev=0.8,
    )


def with_collectives():
    return dataclasses.replace(eight_ranks(), collectives=[stat(-1, calls=960), stat(0), stat(1, mean=0.009)])


def test_the_collectives_panel_lists_the_job_row_then_each_rank():
    async def scenario(app, pilot):
        table = app.query_one(CollectiveTable)
        assert table.display and table.row_count == 3
        job = [cell.plain for cell in table.get_row("-1:ddp_allreduce")]
        assert job[:3] == ["all", "ddp_allreduce ×8", "960"]
        assert job[5] == "4.00" and job[9] == "25" and job[11] == "+80%"  # mean ms, alpha µs, fit deviation
        await pilot.press("c")
        assert not table.display
        await pilot.press("c")
        assert table.display

    drive(with_collectives(), scenario, size=(120, 40))


def test_no_collectives_no_panel():
    async def scenario(app, pilot):
        assert not app.query_one(CollectiveTable).display

    drive(eight_ranks(), scenario)


def test_a_row_with_no_sampled_call_shows_no_p95_rather_than_zero():
    from ranktop.tui.panes.collectives import cells

    unsampled = dataclasses.replace(stat(3), p95_s=None)
    assert cells(unsampled)[6].plain == "–"
    assert cells(stat(3))[6].plain == "6.00"
