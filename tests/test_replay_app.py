"""``ranktop replay``'s screen: the live App on a recording, with seek, pause, speed, history; commands refused.

The recording is written by the real Recorder (tests/test_recording.py's
3-rank job, rank 1 slow in forward from 10 s to 30 s); the App runs headless.
"""

from __future__ import annotations

import asyncio

from test_recording import recorded_job

from ranktop.tui.panes.status import StatusLine
from ranktop.tui.replay import NO_COMMANDS, ReplayApp
from ranktop.tui.screens.history import HistoryScreen, history_text
from ranktop.watch.offline.replay import Replay


def text_of(widget) -> str:
    return str(widget.render())


def run(replay: Replay, scenario, size=(120, 40)):
    async def main():
        app = ReplayApp(replay, refresh_hz=10, name="job.rec")
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await scenario(app, pilot)

    asyncio.run(main())


def test_keys_seek_pause_and_change_speed(tmp_path):
    now = [0.0]
    replay = Replay(recorded_job(tmp_path), start_s=15, clock=lambda: now[0])

    async def scenario(app, pilot):
        assert "0:15/0:39 x1" in app.title
        assert app.snapshot.ranks[1].status == "slow"
        await pilot.press("full_stop")
        assert "0:25/" in app.title
        await pilot.press("comma", "comma")
        assert "0:05/" in app.title and app.snapshot.ranks[1].status == "ok"
        await pilot.press("greater_than_sign")
        assert "0:39/0:39 end" in app.title
        await pilot.press("space")
        now[0] += 100
        await pilot.press("less_than_sign")
        assert "0:00/0:39 paused" in app.title  # -1 min: the start; paused, time stands still
        await pilot.press("plus", "plus")
        assert replay.speed == 4.0

    run(replay, scenario)


def test_commands_are_refused_with_a_note(tmp_path):
    replay = Replay(recorded_job(tmp_path), start_s=20, clock=lambda: 0.0)

    async def scenario(app, pilot):
        await pilot.press("p")
        assert NO_COMMANDS in text_of(app.query_one(StatusLine))

    run(replay, scenario)


def test_goto_jumps_to_a_typed_time(tmp_path):
    replay = Replay(recorded_job(tmp_path), clock=lambda: 0.0)
    replay.toggle_pause()

    async def scenario(app, pilot):
        await pilot.press("G")
        await pilot.press(*"0:2", "left", "1", "enter")  # the arrows edit the typed time: 0:12
        await pilot.pause()
        assert "0:12/" in app.title

    run(replay, scenario)


def test_the_history_screen_marks_the_slow_spell_and_draws_the_rank_phases(tmp_path):
    replay = Replay(recorded_job(tmp_path), start_s=25, clock=lambda: 0.0)
    replay.toggle_pause()

    async def scenario(app, pilot):
        await pilot.press("H")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        assert app.screen.rank == 1  # the top straggler when no rank is selected
        await pilot.press("escape")
        assert not isinstance(app.screen, HistoryScreen)

    run(replay, scenario)
    text = history_text(replay.history, 1, 300, 100).plain
    assert "rank 1 slow in forward from -0:" in text and "ms/step, cost " in text
    assert "rank 1 phases" in text and "forward" in text
    assert "━" in text


def test_at_80x24_the_history_screen_says_first_who_cost_the_job_what_and_when(tmp_path):
    """Opened after the slow spell ended (10 s to 30 s of the recording, played to 39 s): the first lines of the
    box are the timeline, a strip for rank 1 drawn where its spell was, and what it cost the job."""
    replay = Replay(recorded_job(tmp_path), start_s=39, clock=lambda: 0.0)
    replay.toggle_pause()
    seen = {}

    async def scenario(app, pilot):
        await pilot.press("H")
        await pilot.pause()
        body = app.screen.query_one("#history-text")
        seen["lines"] = str(body.render()).splitlines()
        seen["height"] = app.screen.query_one("#history").content_region.height

    run(replay, scenario, size=(80, 24))
    (ep,) = replay.history.episodes_since(0)
    lines = seen["lines"]
    assert lines[0].startswith("who cost the job")
    label, strip, cost = lines[1][:12].strip(), lines[1][13:].split(" ")[0], lines[1].split()[-2:]
    assert label == "rank 1" and cost == [f"{ep.cost_s:.1f}", "s"] and ep.cost_s > 0
    # the strip: drawn over the spell only, a minute of history across it (ended ~9-15 s before the end)
    drawn = [i for i, ch in enumerate(strip) if ch == "━"]
    assert drawn and set(strip) == {"━", "·"} and drawn == list(range(drawn[0], drawn[-1] + 1))
    assert 0.5 < drawn[0] / len(strip) < 0.85 and 0.75 < drawn[-1] / len(strip) < 0.95
    assert lines[2].split() == ["-1:00", "now"]
    assert all(len(line) <= 80 for line in lines[:3]) and seen["height"] >= 3  # the answer fits the box, unwrapped
