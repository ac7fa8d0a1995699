"""What the ranktop screen shows for a given Snapshot, and what its keys do.

Snapshots are built by hand, so every test knows exactly what should be on
screen; the App is driven headless with ``run_test`` and ``pilot.press``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from rich.text import Text
from textual.geometry import Region
from textual.widget import Widget

from ranktop.tui import bindings
from ranktop.tui.app import READ_ONLY, RanktopApp
from ranktop.watch.analysis.collectives import rows_shown
from ranktop.watch.model.answers import Answer
from ranktop.watch.model.endpoint import Endpoint
from ranktop.watch.model.rank_row import RankRow
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.statuses import OK, SILENT, SLOW
from ranktop.tui.render import palette
from ranktop.tui.panes.breakdown import BLOCK, RankBars, bar, sort_rows
from ranktop.tui.screens.help import HelpScreen, key_names
from ranktop.tui.panes.status import SentCommand, command_text, status_text
from ranktop.tui.panes.stragglers import StragglerTable

PHASES = ["data", "forward", "backward", "optimizer", "other"]


# -- deterministic snapshots -----------------------------------------------------


def rank_row(
    rank: int,
    *,
    step_ms: float | None = 100.0,
    status: str = OK,
    score: float = 0.0,
    culprit: str | None = None,
    host: str | None = None,
    last_seen_s: float = 0.1,
) -> RankRow:
    step_s = None if step_ms is None else step_ms / 1000
    phases = (
        {}
        if step_s is None
        else {"data": 0.1 * step_s, "forward": 0.3 * step_s, "backward": 0.5 * step_s, "optimizer": 0.05 * step_s, "other": 0.05 * step_s}
    )
    return RankRow(
        rank=rank,
        host=host or f"node-{rank // 8:02d}",
        local_rank=rank % 8,
        pid=1000 + rank,
        step=41,
        steps_seen=42,
        step_s=step_s,
        phases=phases,
        score=score,
        excess_s=score * 0.1,
        culprit_phase=culprit,
        status=status,
        last_seen_s=last_seen_s,
        dropped=0,
    )


def job_snapshot(rows: list[RankRow], *, stragglers: list[int] | None = None, **extra) -> Snapshot:
    fields = dict(
        job="llama",
        world_size=len(rows) or None,
        elapsed_s=3723.0,
        global_step=41 if rows else -1,
        steps_per_s=9.5 if rows else None,
        phase_names=PHASES if rows else [],
        ranks=rows,
        stragglers=[r.rank for r in rows] if stragglers is None else stragglers,
    )
    fields.update(extra)
    return as_judged(Snapshot(**fields))


def eight_ranks() -> Snapshot:
    """Rank 5 is slow in forward, rank 2 is silent; the aggregator ranks them first."""
    rows = [rank_row(n) for n in range(8)]
    rows[5] = rank_row(5, step_ms=130.0, status=SLOW, score=0.3, culprit="forward")
    rows[2] = rank_row(2, status=SILENT, last_seen_s=12.0)
    return job_snapshot(rows, stragglers=[2, 5, 0, 1, 3, 4, 6, 7])


def as_judged(snapshot: Snapshot) -> Snapshot:
    """A snapshot made by hand, its collective rows chosen, ordered and given their why as the judge hands a
    snapshot over (watch/analysis/collectives.py rows_shown): the screen renders what it is given."""
    return dataclasses.replace(snapshot, collectives=rows_shown(snapshot.collectives, snapshot.ranks.table, snapshot.waiting_for))


class FakeSource:
    def __init__(self, snapshot: Snapshot):
        self.current = snapshot

    def snapshot(self) -> Snapshot:
        return as_judged(self.current)


class FakeController:
    available = True

    def __init__(self):
        self.sent: list[tuple[str, dict | None, list[int] | None]] = []

    def send(self, cmd: str, args: dict | None = None, ranks: list[int] | None = None) -> str:
        self.sent.append((cmd, args, ranks))
        return f"cmd-{len(self.sent)}"


class BrokenController:
    available = True

    def send(self, cmd, args=None, ranks=None):
        raise ConnectionError("relay control socket refused\nsecond line never shown")


def drive(snapshot: Snapshot, scenario, *, controller=None, size=(100, 30), title="ranktop"):
    """Run ``await scenario(app, pilot)`` against a headless app showing ``snapshot``."""

    async def main():
        app = RanktopApp(FakeSource(snapshot), controller, refresh_hz=2.0, title=title)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await scenario(app, pilot)

    asyncio.run(main())


def text_of(widget: Widget) -> str:
    """The characters a widget puts on screen, border included."""
    return "\n".join(strip.text for strip in widget.render_lines(Region(0, 0, *widget.region.size)))


def table_ranks(app: RanktopApp) -> list[int]:
    return [int(row.key.value) for row in app.query_one(StragglerTable).ordered_rows]


async def shown(pilot, condition, timeout: float = 5.0) -> bool:
    """Whether the screen comes to show what ``condition`` looks for within ``timeout`` seconds. A test that changes
    the source and polls races the refresher's thread: a snapshot it took of the job before the change may be drawn
    after the test's own poll; its next one (every 0.5 s here) shows the change."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return condition()


# -- the breakdown bars ------------------------------------------------------------


def test_every_rank_gets_a_bar_row_with_its_host_step_time_and_score():
    async def scenario(app, pilot):
        bars = text_of(app.query_one(RankBars)).splitlines()
        for n in range(8):
            assert any(line.split()[:2] == [str(n), "node-00"] for line in bars), n
        slow = next(line for line in bars if line.split()[0] == "5")
        assert "130" in slow and "+30%" in slow and BLOCK in slow

    drive(eight_ranks(), scenario)


def test_silent_ranks_are_marked_silent_instead_of_a_bar():
    async def scenario(app, pilot):
        silent = next(line for line in text_of(app.query_one(RankBars)).splitlines() if line.split()[0] == "2")
        assert "silent 12s" in silent and BLOCK not in silent

    drive(eight_ranks(), scenario)


def test_the_legend_names_every_phase_and_the_clock_is_stated():
    async def scenario(app, pilot):
        legend = text_of(app.query_one("#legend"))
        assert all(name in legend for name in PHASES)
        assert "CPU wall time" in text_of(app.query_one("#header"))

    drive(eight_ranks(), scenario)


def test_bars_stack_phases_in_order_and_the_longest_step_fills_the_width():
    colours = palette.phase_colours(PHASES)
    phases = {"data": 0.01, "forward": 0.03, "backward": 0.05, "optimizer": 0.005, "other": 0.005}
    full = bar(phases, PHASES, colours, scale=0.1, width=40)
    half = bar(phases, PHASES, colours, scale=0.2, width=40)
    assert full.plain == BLOCK * 40 and half.cell_len == 20
    drawn = [str(span.style) for span in full.spans]
    assert drawn == [colours[p] for p in PHASES]


def test_s_cycles_the_bar_sort_through_rank_score_and_step_time():
    async def scenario(app, pilot):
        def first_ranks():
            return [int(line.split()[0]) for line in text_of(app.query_one(RankBars)).splitlines()[:3]]

        assert app.sort == "rank" and first_ranks() == [0, 1, 2]
        await pilot.press("s")
        assert app.sort == "score" and first_ranks() == [2, 5, 0]
        assert "sort: score" in app.query_one("#breakdown").border_title
        await pilot.press("s")
        assert app.sort == "step" and first_ranks()[0] == 5
        await pilot.press("s")
        assert app.sort == "rank"

    drive(eight_ranks(), scenario)


def test_sorting_by_step_time_puts_silent_and_warming_up_ranks_last():
    rows = [rank_row(0, step_ms=None), rank_row(1, status=SILENT), rank_row(2, step_ms=90.0), rank_row(3)]
    assert [r.rank for r in sort_rows(job_snapshot(rows), "step")] == [3, 2, 0, 1]


# -- the straggler table -----------------------------------------------------------


def test_straggler_table_lists_flagged_stragglers_first_in_snapshot_order_then_the_rest_by_rank():
    rows = [rank_row(n) for n in range(6)]
    rows[4] = rank_row(4, step_ms=150.0, status=SLOW, score=0.5, culprit="data")
    rows[1] = rank_row(1, status=SILENT, last_seen_s=9.0)
    # The aggregator ranks healthy ranks too (by noise); they stay in rank order so rows do not shuffle.
    snap = job_snapshot(rows, stragglers=[4, 1, 5, 0, 3, 2])

    async def scenario(app, pilot):
        assert table_ranks(app) == [4, 1, 0, 2, 3, 5]
        table = text_of(app.query_one(StragglerTable))
        assert "culprit" in table and "status" in table

    drive(snap, scenario)


def test_straggler_table_shows_score_culprit_and_status_of_each_rank():
    async def scenario(app, pilot):
        table = app.query_one(StragglerTable)
        row = [cell.plain for cell in table.get_row("5")]
        assert row == [
            "5",
            "node-00",
            "41",
            "130",
            "+30%",
            "forward",
            "slow",
            "–",
            "–",
            "",
        ]  # no collectives: no own/comm split; no layout: no coordinates
        assert table.get_cell("2", "status").plain == "silent 12s"

    drive(eight_ranks(), scenario)


def test_straggler_table_shows_each_rank_s_coordinates_once_the_layout_is_known():
    import dataclasses

    rows = [dataclasses.replace(rank_row(n), coords={"pp": n // 2, "dp": n % 2}) for n in range(4)]
    rows[3] = dataclasses.replace(rows[3], status=SLOW, score=0.3, culprit_phase="forward")
    snap = job_snapshot(rows, stragglers=[3, 0, 1, 2], layout_roles=["pp", "dp"])

    async def scenario(app, pilot):
        table = app.query_one(StragglerTable)
        assert table.get_cell("3", "where").plain == "1·1" and table.get_cell("2", "where").plain == "1·0"
        assert table.columns["where"].label.plain == "pp·dp"  # the heading names the roles (off-screen at 80 columns)

    drive(snap, scenario)


def test_straggler_table_reorders_in_place_and_keeps_its_scroll_position():
    rows = [rank_row(n) for n in range(64)]

    async def scenario(app, pilot):
        table = app.query_one(StragglerTable)
        table.focus()
        await pilot.press("pagedown")
        offset, selected = table.scroll_offset, table.selected_rank()
        assert offset.y > 0
        # Next refresh: rank 63 turns slow and jumps to the top; values change, no rows are rebuilt.
        app.source.current = job_snapshot(
            rows[:63] + [rank_row(63, step_ms=140.0, status=SLOW, score=0.4, culprit="data")],
            stragglers=[63] + list(range(63)),
        )
        assert selected not in (0, 63)
        app.poll()
        assert await shown(pilot, lambda: table_ranks(app)[0] == 63), table_ranks(app)[:4]
        assert table.selected_rank() == selected and table.scroll_offset.y >= offset.y - 1

    drive(job_snapshot(rows), scenario)


# -- keys --------------------------------------------------------------------------


def test_question_mark_opens_help_listing_every_binding_and_escape_closes_it():
    async def scenario(app, pilot):
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        listed = text_of(app.screen.query_one("#help-keys"))
        for binding in bindings.KEYS + bindings.HELP_KEYS:
            assert key_names(binding) in listed and binding.description in listed
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)

    drive(eight_ranks(), scenario)


def test_f1_opens_help_and_question_mark_closes_it():
    async def scenario(app, pilot):
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        assert not isinstance(app.screen, HelpScreen)

    drive(eight_ranks(), scenario)


def test_the_app_binds_exactly_the_keys_of_the_bindings_table():
    assert RanktopApp.BINDINGS == list(bindings.KEYS)
    assert {b.id for b in bindings.KEYS} >= {"quit", "sort", "ping", "help", "pause"}


def test_p_pings_every_rank_through_the_controller_and_reports_the_answers():
    controller = FakeController()

    async def scenario(app, pilot):
        await pilot.press("p")
        assert [cmd for cmd, _, _ in controller.sent] == ["ping"]
        status = app.query_one("#status")
        assert "ping: sent to 8 ranks" in text_of(status)
        replies = [Answer("cmd-1", "ping", n, True, {"pong": 1.0}, 0.001 + n / 10000) for n in range(8) if n != 2]
        app.source.current = job_snapshot(eight_ranks().ranks, stragglers=eight_ranks().stragglers, replies=replies)
        app.poll()
        assert await shown(pilot, lambda: "ping: 7/8 ranks answered, max rtt 1.7 ms" in text_of(status)), text_of(status)

    drive(eight_ranks(), scenario, controller=controller)


def test_p_without_a_job_secret_says_commands_are_disabled():
    class Unavailable(FakeController):
        available = False

    for controller in (None, Unavailable()):

        async def scenario(app, pilot):
            await pilot.press("p")
            assert READ_ONLY in text_of(app.query_one("#status"))

        drive(eight_ranks(), scenario, controller=controller)
        assert controller is None or controller.sent == []


def test_a_controller_that_raises_shows_one_line_in_the_status_line():
    async def scenario(app, pilot):
        await pilot.press("p")
        status = text_of(app.query_one("#status"))
        assert "ping failed: relay control socket refused" in status and "second line" not in status

    drive(eight_ranks(), scenario, controller=BrokenController())


def test_space_freezes_the_screen_until_pressed_again():
    async def scenario(app, pilot):
        await pilot.press("space")
        assert app.paused and "PAUSED" in text_of(app.query_one("#header"))
        app.source.current = job_snapshot([rank_row(n) for n in range(3)])
        app.poll()
        assert len(app.snapshot.ranks) == 8
        await pilot.press("space")
        assert not app.paused and len(app.snapshot.ranks) == 3

    drive(eight_ranks(), scenario)


# -- header, status line, empty state ------------------------------------------------


def test_header_shows_job_world_connected_silent_step_rate_and_elapsed():
    async def scenario(app, pilot):
        header = text_of(app.query_one("#header"))
        for part in ("job llama", "world 8", "7 connected", "1 silent", "step 41", "9.50 steps/s", "01:02:03"):
            assert part in header, part

    drive(eight_ranks(), scenario)


def test_before_any_rank_reports_the_screen_says_it_is_waiting_for_the_job():
    waiting = job_snapshot([], endpoints=[Endpoint("tcp://node-00:5555", "node-00", "waiting", 12.0)])

    async def scenario(app, pilot):
        assert "waiting for ranks of job llama…" in text_of(app.query_one("#waiting"))
        assert not app.query_one("#panes").display
        assert "waiting for tcp://node-00:5555 (12s)" in text_of(app.query_one("#status"))
        app.source.current = eight_ranks()
        app.poll()
        assert await shown(pilot, lambda: app.query_one("#panes").display and not app.query_one("#waiting").display)

    drive(waiting, scenario)


def test_status_line_shows_lost_endpoints_errors_and_dropped_messages():
    snap = job_snapshot(
        [rank_row(0)],
        endpoints=[Endpoint("tcp://a:1", "a", "lost", 7.0, (0, 1, 3)), Endpoint("tcp://b:1", "b", "connected", 0.1)],
        errors=["peer speaks ranktop protocol 2.0\nmore detail"],
        dropped_messages=3,
    )
    lines = status_text(snap).plain.splitlines()
    assert lines[0] == "peer speaks ranktop protocol 2.0"
    assert "lost a (ranks 0-1,3) tcp://a:1, quiet 7s" in lines[1] and "dropped 3" in lines[1]
    assert [span.style for span in status_text(snap).spans][0] == palette.ERROR


def test_a_command_nobody_answers_names_the_silent_ranks_after_a_grace_period():
    snap = eight_ranks()
    sent = SentCommand("c1", "ping", tuple(range(8)), sent_at_s=snap.elapsed_s - 10)
    answered = job_snapshot(snap.ranks, replies=[Answer("c1", "ping", n, True, {}, None) for n in range(8) if n != 2])
    assert command_text(sent, answered).plain == "ping: 7/8 ranks answered, no answer from rank 2"
    assert "no answer from any of 8 ranks" in command_text(sent, snap).plain


def test_a_source_that_raises_keeps_the_last_snapshot_on_screen_and_says_why():
    class Flaky(FakeSource):
        broken = False

        def snapshot(self):
            if self.broken:
                raise RuntimeError("aggregator exploded")
            return super().snapshot()

    async def scenario(app, pilot):
        app.source.__class__ = Flaky
        app.source.broken = True
        app.poll()
        assert await shown(pilot, lambda: "cannot read telemetry: aggregator exploded" in text_of(app.query_one("#status")))
        assert len(app.snapshot.ranks) == 8
        app.source.broken = False
        app.poll()
        assert await shown(pilot, lambda: "cannot read telemetry" not in text_of(app.query_one("#status")))

    drive(eight_ranks(), scenario)


# -- sizes -------------------------------------------------------------------------


def test_512_ranks_render_quickly_with_a_summary_row_and_scroll():
    rows = [rank_row(n, step_ms=100.0 + n % 7) for n in range(512)]
    rows[300] = rank_row(300, step_ms=180.0, status=SLOW, score=0.8, culprit="data")
    snap = job_snapshot(rows, stragglers=[300] + [n for n in range(512) if n != 300])

    async def scenario(app, pilot):
        # 512 ranks do not fit as bars: the overview (test_main_screen.py) comes first; v shows the bars.
        await pilot.press("v")
        assert app.view == "bars"
        summary = text_of(app.query_one("#summary"))
        assert app.query_one("#summary").display
        assert "512 ranks" in summary and "max 180 (rank 300)" in summary and "1 slow" in summary
        started = time.perf_counter()
        for _ in range(10):
            app.poll()
            await pilot.pause()
        per_refresh = (time.perf_counter() - started) / 10
        assert per_refresh < 0.5, f"{per_refresh:.3f}s per refresh cannot keep up with the default 2 Hz"
        bars = app.query_one(RankBars)
        bars.focus()
        await pilot.press("end")
        assert text_of(bars).splitlines()[-1].split()[0] == "511"
        assert len(table_ranks(app)) == 512 and table_ranks(app)[0] == 300

    drive(snap, scenario, size=(100, 30))


def test_an_80x24_terminal_shows_header_bars_table_status_and_footer():
    async def scenario(app, pilot):
        for selector in ("#header", "#breakdown", "#stragglers", "#status", "Footer"):
            assert app.query_one(selector).region.height > 0, selector
        assert "node-00" in text_of(app.query_one(RankBars))
        await pilot.press("question_mark")
        assert "Quit" in text_of(app.screen.query_one("#help-keys"))

    drive(eight_ranks(), scenario, size=(80, 24))


def test_a_wide_terminal_puts_the_table_beside_the_bars():
    async def scenario(app, pilot):
        bars, table = app.query_one("#breakdown").region, app.query_one("#stragglers").region
        assert table.x >= bars.right and table.y == bars.y

    drive(eight_ranks(), scenario, size=(200, 50))


def test_at_160_columns_the_bars_get_the_full_width_above_the_table():
    async def scenario(app, pilot):
        bars, table = app.query_one("#breakdown").region, app.query_one("#stragglers").region
        assert bars.width == table.width == 160 and table.y >= bars.bottom

    drive(eight_ranks(), scenario, size=(160, 45))


def test_tiny_terminals_do_not_crash():
    for size in ((40, 10), (20, 5)):
        drive(eight_ranks(), lambda app, pilot: pilot.pause(), size=size)


def test_status_styles_cover_every_status():
    from ranktop.watch.statuses import STATUSES

    assert set(palette.STATUS_STYLES) == set(STATUSES)
    assert isinstance(status_text(eight_ranks()), Text)


def test_q_quits():
    async def scenario(app, pilot):
        await pilot.press("q")
        assert app.return_code == 0

    drive(eight_ranks(), scenario)


def test_a_long_status_line_ends_in_an_ellipsis_instead_of_wrapping():
    snap = job_snapshot(
        [rank_row(0)],
        endpoints=[
            Endpoint("tcp://127.0.0.1:36689", "node-1", "lost", 4.0, (2, 3)),
            Endpoint("tcp://127.0.0.1:40045", "node-0", "connected", 0.1),
        ],
    )

    async def scenario(app, pilot):
        assert app.query_one("#status").region.height == 1
        assert "lost node-1 (ranks 2-3)" in text_of(app.query_one("#status"))

    drive(snap, scenario, size=(60, 24))
