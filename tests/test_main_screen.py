"""The answer first, at every size: the verdict line, the top stragglers, the overview and drill-down.

Driven headless at 80x24 (a plain SSH session) and at 200x60, with 4 and
4,096 ranks built by hand (test_verdict.py), through the keys a user presses.
"""

from __future__ import annotations

import dataclasses
import re

from test_app_render import drive, eight_ranks, table_ranks, text_of
from test_collectives_panel import stat
from test_memory_panel import cpu_job, gpu_job
from test_verdict import big_job, healthy_rows, slow

from ranktop.tui.app import RanktopApp
from ranktop.tui.panes import CollectiveTable, StragglerTable
from ranktop.tui.panes.gpus import GpuPanel
from ranktop.tui.panes.memory import BLOCK, RELATIVE_STYLE, MemoryPanel, panel_text
from ranktop.tui.panes.overview import Overview
from ranktop.tui.panes.rankmap import RankMap
from ranktop.tui.panes.stragglers import TOP_ROWS
from ranktop.tui.render.histogram import histogram_lines
from ranktop.tui.render.rankmap_layout import NODES, RANKS, layout, nodes_of
from ranktop.tui.screens.drill import NodeScreen, RankScreen
from ranktop.watch.statuses import SLOW, STALLED

SMALL, BIG = (80, 24), (200, 60)


def demo_job():
    """What `make demo ARGS="--slow-rank 2 --slow-ms 40"` shows: 4 CPU ranks on one host, rank 2 slow in data,
    with collectives, RSS memory and "no GPU" lines that used to push the straggler rows off an 80x24 screen."""
    base = cpu_job()
    rows = [dataclasses.replace(r, host="vm") for r in healthy_rows(4)]
    rows[2] = slow(rows[2], excess_ms=40.0, phase="data")
    extra = {r.rank: r for r in base.ranks}
    rows = [dataclasses.replace(r, memory=extra.get(r.rank, base.ranks[0]).memory, gpu=base.ranks[0].gpu,
                                throughput=base.ranks[0].throughput) for r in rows]  # fmt: skip
    return dataclasses.replace(base, ranks=rows, world_size=4, stragglers=[2, 0, 1, 3],
                               collectives=[stat(-1, calls=480)] + [stat(n) for n in range(4)])  # fmt: skip


def visible_rows(table: StragglerTable) -> list[str]:
    """The rank column of the table rows actually on screen (not scrolled away, not cut by the pane)."""
    lines = [line.strip("│ ") for line in text_of(table).splitlines()[2:]]  # border title, column headings
    return [line.split()[0] for line in lines if line.split()]


async def settle(app, pilot):
    """One more refresh: panes that size themselves to their rows (the bars) know their room from the second on."""
    app.poll()
    await pilot.pause()


def verdict_of(app: RanktopApp) -> str:
    return text_of(app.query_one("#verdict"))


# -- the verdict line and the top stragglers, at every size ---------------------------------


def test_at_80x24_the_demo_s_slow_rank_and_its_phase_show_without_scrolling():
    async def scenario(app, pilot):
        await settle(app, pilot)
        assert "rank 2 slow in data: +40 ms per step" in verdict_of(app)
        table = app.query_one(StragglerTable)
        assert visible_rows(table)[0] == "2" and table.get_row("2")[5].plain == "data"
        assert table.region.bottom <= 24 and len(visible_rows(table)) >= 3
        # collectives, memory and GPUs are tabs here: one of them, under the table
        shown = [w for w in (app.query_one(CollectiveTable), app.query_one(MemoryPanel), app.query_one(GpuPanel)) if w.display]
        assert len(shown) == 1 and app.query_one("#tabs").display

    drive(demo_job(), scenario, size=SMALL)


def test_with_4096_ranks_the_slow_rank_and_its_phase_are_on_screen_at_80x24_and_200x60():
    snap = big_job(slow_rank=3071)
    for size in (SMALL, BIG):

        async def scenario(app, pilot):
            await settle(app, pilot)
            assert "rank 3071 slow in forward: +38 ms per step, the job loses 41%" in verdict_of(app)
            table = app.query_one(StragglerTable)
            assert visible_rows(table)[0] == "3071" and "forward" in text_of(table)
            assert table.row_count <= TOP_ROWS  # a refresh costs the rows kept, not the job's size
            overview = app.query_one(Overview)
            assert overview.display and not app.query_one("#breakdown").display
            cell = text_of(app.query_one("#map-cell"))  # the map's cursor starts on the worst cell
            assert "rank 3071" in cell and "slow +41% in forward" in cell
            assert "rank 3071" in text_of(app.query_one("#distribution"))
            for widget in (table, overview, app.query_one("#verdict")):
                assert widget.region.height > 0 and widget.region.bottom <= size[1]

        drive(snap, scenario, size=size)


def test_a_healthy_job_of_4096_ranks_shows_the_healthy_verdict():
    async def scenario(app, pilot):
        assert "healthy: no straggler among 4,096 ranks" in verdict_of(app)
        assert all(r.status != SLOW for r in app.snapshot.ranks)

    drive(big_job(), scenario, size=SMALL)


def test_four_ranks_show_every_bar_and_the_healthy_verdict_at_200x60():
    async def scenario(app, pilot):
        assert "healthy" in verdict_of(app)
        assert app.query_one("#breakdown").display and not app.query_one(Overview).display
        assert sorted(table_ranks(app)) == [0, 1, 2, 3]

    snap = dataclasses.replace(big_job(4))
    drive(snap, scenario, size=BIG)


# -- drill-down by keys ----------------------------------------------------------------------


async def focus_map(pilot, app):
    for _ in range(8):
        if isinstance(app.focused, RankMap):
            return
        await pilot.press("tab")
    raise AssertionError(f"tab never reached the rank map (focus: {app.focused})")


def test_the_rank_map_drills_down_from_node_to_rank_by_keys():
    async def scenario(app, pilot):
        await focus_map(pilot, app)
        rankmap = app.query_one(RankMap)
        assert rankmap.mode == NODES and rankmap.cell.host == "node-383"  # the cursor starts on the worst
        await pilot.press("enter")
        assert isinstance(app.screen, NodeScreen) and app.screen.host == "node-383"
        assert "node node-383" in text_of(app.screen.query_one("#drill-title"))
        await pilot.press("enter")  # the node's ranks open on its worst: 3071
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 3071
        title = text_of(app.screen.query_one("#drill-title"))
        assert "rank 3071" in title and "slow" in title and "forward" in title
        body = str(app.screen.query_one("#rank-body").render())
        for part in ("Phases", "History", "Collectives", "Memory and GPU", "median"):
            assert part in body, part
        await pilot.press("escape")
        assert isinstance(app.screen, NodeScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, (NodeScreen, RankScreen))

    drive(big_job(slow_rank=3071), scenario, size=SMALL)


def test_S_groups_the_rank_map_by_pipeline_stage_and_a_stage_opens_on_its_ranks():
    snap = big_job(slow_rank=3071)  # laid out pp 8 x dp 512: 3071 is at stage 5
    rows = [dataclasses.replace(r, coords={"pp": r.rank // 512, "dp": r.rank % 512}) for r in snap.ranks]
    snap = dataclasses.replace(snap, ranks=rows, layout_roles=["pp", "dp"])

    async def scenario(app, pilot):
        await focus_map(pilot, app)
        await pilot.press("S")
        await settle(app, pilot)
        rankmap = app.query_one(RankMap)
        assert rankmap.mode == NODES and rankmap.cell.host == "stage 5"  # a cell per stage, the cursor on the worst
        assert "grouped by pipeline stage" in text_of(app.query_one("#status"))
        await pilot.press("enter")
        assert isinstance(app.screen, NodeScreen) and app.screen.host == "stage 5"
        title = text_of(app.screen.query_one("#drill-title"))
        assert title.strip().startswith("stage 5  ranks 2560-3071") and "1 slow" in title and "other stages" in title
        await pilot.press("enter")  # the stage's ranks open on its worst: 3071
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 3071
        assert "rank 3071 (pp 5, dp 511)" in text_of(app.screen.query_one("#drill-title"))

    drive(snap, scenario, size=SMALL)


def test_arrows_move_the_map_cursor_and_w_brings_it_back_to_the_worst():
    async def scenario(app, pilot):
        await focus_map(pilot, app)
        rankmap = app.query_one(RankMap)
        assert rankmap.mode == RANKS and rankmap.cell.key == ("rank", 37)
        await pilot.press("right")
        assert rankmap.cell.key == ("rank", 38)
        app.poll()  # a refresh does not take the cursor back once the user moved it
        await pilot.pause()
        assert rankmap.cell.key == ("rank", 38)
        await pilot.press("w")
        assert rankmap.cell.key == ("rank", 37)
        await pilot.press("enter")
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 37
        await pilot.press("right_square_bracket")
        assert app.screen.rank == 38

    drive(big_job(64, slow_rank=37), scenario, size=(120, 40))


def test_a_rank_s_detail_shows_its_memory_and_gpu_or_why_it_has_none():
    for snap, expected in ((demo_job(), "none (no NVML binding"), (gpu_job(), "70/80 GB")):

        async def scenario(app, pilot):
            app.push_screen(RankScreen(1, app.snapshot))
            await pilot.pause()
            app.poll()
            await pilot.pause()
            body = str(app.screen.query_one("#rank-body").render())
            assert expected in body and "memory" in body

        drive(snap, scenario, size=(160, 50))


def test_enter_on_the_straggler_table_opens_the_rank_s_detail_and_it_follows_the_refresh():
    async def scenario(app, pilot):
        app.query_one(StragglerTable).focus()
        await pilot.press("down", "enter")  # the top row is rank 2 (silent), then rank 5 (slow)
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 5
        app.poll()
        await pilot.pause()
        assert "130" in str(app.screen.query_one("#rank-body").render())  # its history: the step time, refreshed

    drive(eight_ranks(), scenario, size=SMALL)


# -- views, tabs, the memory bar ---------------------------------------------------------------


def test_v_switches_between_bars_and_the_overview():
    async def scenario(app, pilot):
        assert app.query_one(Overview).display
        await pilot.press("v")
        assert app.view == "bars" and app.query_one("#breakdown").display and not app.query_one(Overview).display
        await pilot.press("v")
        assert app.view == "overview" and app.query_one(Overview).display
        await pilot.press("v")
        assert app.view == "auto" and app.query_one(Overview).display

    drive(big_job(64, slow_rank=3), scenario, size=(120, 40))


def test_in_a_short_terminal_c_m_g_bring_their_pane_to_the_top_and_hide_it_when_on_top():
    snap = dataclasses.replace(gpu_job(), collectives=[stat(-1, calls=960), stat(0)])

    async def scenario(app, pilot):
        coll, mem, gpu = app.query_one(CollectiveTable), app.query_one(MemoryPanel), app.query_one(GpuPanel)
        assert coll.display and not mem.display and not gpu.display
        assert "Collectives" in text_of(app.query_one("#tabs"))
        await pilot.press("m")
        assert mem.display and not coll.display
        await pilot.press("g")
        assert gpu.display and not mem.display
        await pilot.press("g")  # on top: hidden, the next tab comes up
        assert not gpu.display and coll.display and not app.show_gpus

    drive(snap, scenario, size=SMALL)


def test_big_jobs_keep_the_job_collective_rows_and_the_top_stragglers_only():
    snap = big_job(64, slow_rank=9)
    snap = dataclasses.replace(snap, collectives=[stat(-1, calls=64 * 120)] + [stat(n) for n in range(64)])

    async def scenario(app, pilot):
        table = app.query_one(CollectiveTable)
        keys = [row.key.value for row in table.ordered_rows]
        assert keys[0] == "-1:ddp_allreduce" and "9:ddp_allreduce" in keys and len(keys) <= 9

    drive(snap, scenario, size=(120, 40))


def test_a_memory_bar_without_a_known_capacity_is_not_drawn_as_an_alarm():
    text = panel_text(cpu_job(), 120)
    bar_styles = {str(span.style) for span in text.spans if BLOCK in text.plain[span.start : span.end]}
    assert bar_styles == {RELATIVE_STYLE}
    assert "vs largest" in text.plain and "vs capacity" not in text.plain


# -- drawing helpers ----------------------------------------------------------------------------


def test_one_straggler_among_4096_still_gets_a_column_of_its_own_colour():
    values = [0.1] * 4095 + [38.0]
    lines = histogram_lines(values, 60, 2, unit="ms", label="rank 3071", marks=[(38.0, "bold dark_orange")])
    assert lines[-1].plain.endswith("38.0 ms (rank 3071)")
    last = [line[-1:] for line in lines[:-1]]
    assert last[-1].plain.strip() and any(str(s.style) == "bold dark_orange" for s in last[-1].spans)


def test_the_map_has_a_cell_per_rank_when_they_fit_else_a_cell_per_node():
    nodes = nodes_of(big_job(4096).ranks)
    roomy = layout(nodes, 200, 60)
    assert roomy.mode == RANKS and len(roomy.cells) == 4096
    tight = layout(nodes, 80, 10)
    assert tight.mode == NODES and len(tight.cells) == 512 and len(tight.lines) <= 10
    assert all(len(line) <= 80 for line in tight.lines)


def test_the_help_screen_lists_the_map_and_drill_keys():
    from ranktop.tui import bindings

    async def scenario(app, pilot):
        await pilot.press("question_mark")
        listed = text_of(app.screen.query_one("#help-keys"))
        for binding in bindings.MAP_KEYS + bindings.DRILL_KEYS:
            assert binding.description in listed

    drive(eight_ranks(), scenario, size=(120, 60))


# -- the real engine under the screen: wire-shaped messages into an Aggregator, 4,096 ranks -------


def test_4096_ranks_through_the_real_aggregator_name_the_slow_rank_and_drill_to_it():
    import asyncio

    from test_aggregator import Clock, feed
    from test_verdict import host_of

    from ranktop.watch.aggregator import Aggregator

    agg = Aggregator("j", clock=Clock(), window=16)
    feed(agg, 4096, 12, slow_rank=3071, slow_s=0.030, phase="forward", hosts=[host_of(r) for r in range(4096)])

    async def main():
        app = RanktopApp(agg, refresh_hz=0.2)
        async with app.run_test(size=SMALL) as pilot:
            await pilot.pause()
            assert "rank 3071 slow in forward: +30 ms per step" in verdict_of(app)
            assert visible_rows(app.query_one(StragglerTable))[0] == "3071"
            await focus_map(pilot, app)
            await pilot.press("enter")
            assert isinstance(app.screen, NodeScreen) and app.screen.host == "node-383"
            await pilot.press("enter")  # on the node's worst rank
            assert isinstance(app.screen, RankScreen) and app.screen.rank == 3071
            assert "forward" in text_of(app.screen.query_one("#drill-title"))

    asyncio.run(main())


def test_the_verdict_names_the_cause_at_80_columns_and_gives_its_figures_where_they_fit():
    from ranktop.watch.model.rank_row import Cause

    gc = Cause(kind="gc_pause", text="it spends 175 ms per step in Python's garbage collector, 58x its peers' 3.0 ms (gc pause)",
               value=1.75, peers=0.03, ratio=58.0, extra_s=0.17)  # fmt: skip
    job = demo_job()
    rows = list(job.ranks)
    rows[2] = dataclasses.replace(rows[2], causes=[gc], last_arrivals=0.92)
    job = dataclasses.replace(job, ranks=rows)
    wide = (260, 40)
    for size, expected in ((SMALL, "rank 2 slow in data: +40 ms per step, the job loses"), (wide, "because it spends 175 ms per step")):

        async def scenario(app, pilot):
            await settle(app, pilot)
            line = verdict_of(app)
            assert expected in line and len(line.rstrip()) <= size[0]
            if size == SMALL:  # the cause by its name; the arrivals are the rank detail's
                assert re.search(r"the job loses \d+%, because: gc pause$", line.rstrip()), line
            else:
                assert "and arrives last at 92% of its steps' collectives, because" in line
                assert line.rstrip().endswith("(gc pause)"), line

        drive(job, scenario, size=size)


def test_at_80_columns_the_longest_cause_name_shows_whole_and_the_line_is_never_cut():
    """The demo's own verdict (rank 2 slow in data, data loader workers the cause) on an 80x24 screen: the line
    is shortened word by word (the cause's figures, then "per step"), never cut with an ellipsis."""
    from ranktop.watch.model.rank_row import Cause

    loader = Cause(kind="data_loader", text="its data phase takes 42 ms per step against its peers' 2.2 ms (data loader)",
                   value=0.042, peers=0.0022, ratio=19.0, extra_s=0.04)  # fmt: skip
    job = demo_job()
    rows = list(job.ranks)
    rows[2] = dataclasses.replace(rows[2], causes=[loader], last_arrivals=0.92, score=0.59)
    job = dataclasses.replace(job, ranks=rows)

    async def scenario(app, pilot):
        await settle(app, pilot)
        line = verdict_of(app).rstrip()
        assert "…" not in line and line.endswith("because: data loader"), line
        assert line.lstrip("▲ ").startswith("rank 2 slow in data: +40 ms"), line
        assert "loses 59%" in line, line
        widget = app.query_one("#verdict")
        assert widget.region.right <= SMALL[0]

    drive(job, scenario, size=SMALL)


def test_at_80x24_a_hung_demo_keeps_both_header_lines_one_line_each():
    """The demo hung (`--hang-rank 1`): the first header line grows a stalled count; it is cut at the edge, never
    wrapped over the step line, and the stalled count comes before the connected and silent ones."""
    job = demo_job()
    rows = [dataclasses.replace(r, status=STALLED, stalled_s=34.0, stalled_phase="backward", stalled_step=40) for r in job.ranks]
    job = dataclasses.replace(job, ranks=rows, job="demo-2238")

    async def scenario(app, pilot):
        await settle(app, pilot)
        lines = text_of(app.query_one("#header")).splitlines()
        assert len(lines) == 2 and lines[1].lstrip().startswith("step "), lines
        assert "4 stalled" in lines[0] and lines[0].index("4 stalled") < lines[0].index("connected"), lines

    drive(job, scenario, size=SMALL, title="ranktop demo (4 ranks)")


def test_a_slow_rank_s_detail_says_first_why_it_is_slow():
    from ranktop.watch.model.rank_row import Cause

    snap = eight_ranks()
    rows = list(snap.ranks)
    hot = Cause(kind="expert_load", text="it receives 3.1x the all-to-all rows of its peers, 3,100 a step against 1,000 (expert load)",
                value=31_000.0, peers=10_000.0, ratio=3.1, extra_s=0.03, explains=0.6, basis="estimated")  # fmt: skip
    gc = Cause(kind="gc_pause", text="it spends 4.0 ms per step in Python's garbage collector, 2.7x its peers' 1.5 ms (gc pause)",
               value=0.04, peers=0.015, ratio=2.7, extra_s=0.0025, explains=0.05)  # fmt: skip
    rows[5] = dataclasses.replace(rows[5], causes=[hot, gc])
    snap = dataclasses.replace(snap, ranks=rows)

    async def scenario(app, pilot):
        app.push_screen(RankScreen(5, app.snapshot))
        await pilot.pause()
        body = str(app.screen.query_one("#rank-body").render())
        assert body.startswith("Why · its evidence against its peers'\n"
                               "expert load: explains 60% (estimated) · it receives 3.1x the all-to-all rows")  # fmt: skip
        assert "\ngc pause: explains 5% (measured) · it spends 4.0 ms per step" in body  # each with its share
        assert "(expert load)" not in body  # said once, by the kind in front
        app.push_screen(RankScreen(1, app.snapshot))  # a healthy rank: no such section
        await pilot.pause()
        assert "Why" not in str(app.screen.query_one("#rank-body").render())

    drive(snap, scenario, size=SMALL)
