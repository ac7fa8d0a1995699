"""What every screen looks like, at 80x24, 120x36 and 200x50: SVG snapshots (pytest-textual-snapshot).

A layout that changes (a pane that no longer sizes itself to its rows, a number
written differently, a column cut) fails here with a side-by-side report
(snapshot_report.html). The snapshots in tests/__snapshots__/ were looked at
before they were accepted; after a change to the screen on purpose, look at the
report, then accept the new pictures with ``pytest tests/test_screen_snapshots.py
--snapshot-update`` and look at them again (``rsvg-convert X.svg -o X.png``).

Fed deterministic jobs (tests/screen_jobs.py): the 4-rank demo with rank 2 slow,
and the seeded 4,096-rank simulation through a real aggregator; the stacks, the
capture and the replay from the same hand-built replies and recording their own
tests use. Nothing on screen depends on the clock.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from screen_jobs import demo_job, simulated_job
from test_app_render import FakeController, FakeSource
from test_recording import recorded_job
from test_stacks_screen import RepliesSource, hung_snapshot

from ranktop.tui.app import RanktopApp
from ranktop.tui.replay import ReplayApp
from ranktop.tui.screens.capture import CaptureScreen
from ranktop.tui.screens.drill import NodeScreen, RankScreen
from ranktop.watch.capture import CapturePlan
from ranktop.watch.model.rank_row import CaptureStatus
from ranktop.watch.offline.replay import Replay
from ranktop.watch.model.answers import Answer
from ranktop.wire import capture as wire_capture

SIZES = [(80, 24), (120, 36), (200, 50)]
SIZE_IDS = [f"{w}x{h}" for w, h in SIZES]
sizes = pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)


def app_of(snapshot, controller=None, source=None) -> RanktopApp:
    return RanktopApp(source or FakeSource(snapshot), controller, refresh_hz=2.0, title="ranktop")


async def settle(pilot) -> None:
    """One more draw once the screen has its size: panes that size themselves to their rows know their room then."""
    pilot.app.poll()
    await pilot.pause()
    pilot.app.poll()
    await pilot.pause()


def pressing(*keys: str):
    """A run_before that settles the main screen, presses ``keys`` and lets the screen they open draw."""

    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press(*keys)
        await settle(pilot)
        await pilot.pause(0.3)  # a live screen's first redraw

    return run_before


def pushing(make_screen):
    """A run_before that settles the main screen, then pushes the screen ``make_screen(app)`` returns. The app is
    paused first: a rank's detail adds a point to its history at each refresh, and the picture must not depend
    on how many came."""

    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app.paused = True
        pilot.app.push_screen(make_screen(pilot.app))
        await pilot.pause()
        await pilot.pause(0.3)  # a live screen's first redraw

    return run_before


# -- the main screen: the answer first, the panes sized to what they hold ------------------------


@sizes
def test_main_screen_of_the_4_rank_demo_with_rank_2_slow(snap_compare, size):
    assert snap_compare(app_of(demo_job()), terminal_size=size, run_before=settle)


@sizes
def test_main_screen_of_4096_simulated_ranks_with_rank_3071_slow_in_forward(snap_compare, size):
    assert snap_compare(app_of(simulated_job()), terminal_size=size, run_before=settle)


# -- each pane: in a short terminal, the lower panes are tabs (c, m, g); v switches bars and overview ---


@pytest.mark.parametrize("key", ["m", "g"], ids=["memory", "gpus"])
def test_the_80x24_tab_of_each_lower_pane(snap_compare, key):
    assert snap_compare(app_of(demo_job()), terminal_size=(80, 24), run_before=pressing(key))


@sizes
def test_the_bars_of_4096_ranks_instead_of_the_overview(snap_compare, size):
    assert snap_compare(app_of(simulated_job()), terminal_size=size, run_before=pressing("v"))


# -- pushed screens --------------------------------------------------------------------------------


@sizes
def test_help(snap_compare, size):
    assert snap_compare(app_of(demo_job()), terminal_size=size, run_before=pressing("question_mark"))


@sizes
def test_drill_down_to_the_slow_rank(snap_compare, size):
    assert snap_compare(app_of(demo_job()), terminal_size=size, run_before=pushing(lambda app: RankScreen(2, app.snapshot)))


@sizes
def test_drill_down_to_the_slow_node_of_4096_ranks(snap_compare, size):
    screen = pushing(lambda app: NodeScreen("sim0383", app.snapshot))
    assert snap_compare(app_of(simulated_job()), terminal_size=size, run_before=screen)


@sizes
def test_stacks_of_a_hung_job_grouped(snap_compare, size):
    controller = FakeController()
    source = RepliesSource(hung_snapshot(), controller=controller)
    assert snap_compare(app_of(None, controller, source), terminal_size=size, run_before=pressing("t"))


def capturing_job():
    """The demo job a step into a trace capture: a rank at each state, rank 3 refused (its reply says why)."""
    snap = demo_job()
    states = {0: (wire_capture.RECORDING, 44), 1: (wire_capture.WAITING, None), 2: (wire_capture.WRITING, None)}
    rows = []
    for row in snap.ranks:
        state = states.get(row.rank)
        if state is not None:
            capture = CaptureStatus("t-demo", wire_capture.TRACE, state[0], 43, 3, "/tmp/ranktop-captures/t-demo", at=state[1])
            row = dataclasses.replace(row, capture=capture)
        rows.append(row)
    return dataclasses.replace(snap, ranks=rows)


@sizes
def test_a_trace_capture_in_progress(snap_compare, size):
    snap = capturing_job()
    request = CapturePlan("t-demo", wire_capture.TRACE, 43, 3, (0, 1, 2, 3), True)
    refusal = [Answer("cmd-1", "capture", 3, False, {"error": "torch.profiler is already running"}, 0.01)]
    screen = pushing(lambda app: CaptureScreen(request, "cmd-1", lambda: snap, lambda _: refusal))
    assert snap_compare(app_of(snap, FakeController()), terminal_size=size, run_before=screen)


# -- replay, and the history screen on it ----------------------------------------------------------


def replay_app(tmp_path) -> ReplayApp:
    replay = Replay(recorded_job(tmp_path), start_s=25, clock=lambda: 0.0)
    replay.toggle_pause()  # time stands still: the same picture every run
    return ReplayApp(replay, refresh_hz=2.0, name="job.rec")


@sizes
def test_replay_of_a_recording_paused_in_a_slow_spell(snap_compare, size, tmp_path):
    assert snap_compare(replay_app(tmp_path), terminal_size=size, run_before=settle)


@sizes
def test_history_of_the_recording(snap_compare, size, tmp_path):
    assert snap_compare(replay_app(tmp_path), terminal_size=size, run_before=pressing("H"))


# -- colour is never the only signal -------------------------------------------------------------


def test_without_colour_statuses_still_read_as_words_and_glyphs(snap_compare, monkeypatch):
    """NO_COLOR (no-color.org): Textual draws in monochrome; the verdict's ▲, the table's status words and the
    rank map's glyphs (▲ slow, ◆ stalled, × silent, □ no data) still tell the slow rank apart."""
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(app_of(simulated_job()), terminal_size=(120, 36), run_before=settle)


def test_a_light_terminal_theme(snap_compare):
    async def light(pilot) -> None:
        pilot.app.theme = "textual-light"
        await settle(pilot)

    assert snap_compare(app_of(demo_job()), terminal_size=(120, 36), run_before=light)


# -- the README's pictures are these snapshots -------------------------------------------------------

#: docs/ file -> the snapshot it is a copy of (README.md shows them: real screens, not drawings).
README_PICTURES = {
    "screen-demo-120x36.svg": "test_main_screen_of_the_4_rank_demo_with_rank_2_slow[120x36].svg",
    "screen-4096-200x50.svg": "test_main_screen_of_4096_simulated_ranks_with_rank_3071_slow_in_forward[200x50].svg",
}


@pytest.mark.parametrize("picture", sorted(README_PICTURES))
def test_the_readme_pictures_are_the_accepted_snapshots(picture):
    """After accepting new snapshots: cp "tests/__snapshots__/test_screen_snapshots/<snapshot>" docs/<picture>."""
    root = Path(__file__).resolve().parent.parent
    snapshot = root / "tests" / "__snapshots__" / "test_screen_snapshots" / README_PICTURES[picture]
    assert (root / "docs" / picture).read_bytes() == snapshot.read_bytes(), f"docs/{picture} is not the snapshot {snapshot.name}"
    assert f"docs/{picture}" in (root / "README.md").read_text()
