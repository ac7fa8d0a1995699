"""Captures of a real job: the demo under torchrun (DDP, gloo), the installed `ranktop` command, HTA, the pilot."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from support import run_cli, wait_for

from ranktop.tui.app import RanktopApp
from ranktop.watch.session import WatchSession, resolve
from ranktop.tui.screens.capture import CaptureScreen
from ranktop.wire import capture as wire_capture


def profiler_steps(path: Path) -> list[int]:
    trace = json.loads(path.read_text())
    return sorted(int(e["name"].split("#")[1]) for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))


def busy_job(session: WatchSession, seconds: float) -> str:
    """Arm a one-step capture `seconds` ahead of the job (as another TUI would); returns its id."""
    snap = session.snapshot()
    start = snap.global_step + max(20, int((snap.steps_per_s or 10) * seconds))
    capture_id = wire_capture.new_capture_id("trace")
    command = session.controller.send("capture", {"id": capture_id, "start": start, "steps": 1})
    wait_for(lambda: len([r for r in session.replies_to(command) if r.ok]) == 4, 10, "the ranks did not accept the capture")
    return capture_id


@pytest.mark.slow
def test_ranktop_capture_gives_every_rank_of_a_4_rank_job_a_trace_from_the_same_step_that_hta_loads(torchrun, tmp_path):
    torchrun("cap4", 4)
    # Bad requests are refused in one line, before anything is sent.
    out = run_cli("capture", "cap4", "--steps", "0")
    assert out.returncode == 2 and "steps must be a whole number from 1 to 50" in out.stderr.splitlines()[-1]
    out = run_cli("capture", "cap4", "--ranks", "0,9")
    assert out.returncode == 1 and out.stderr == "ranktop: error: no such rank 9 in a job of 4 (ranks 0-3)\n"

    with WatchSession(resolve(["cap4"]), window=4096) as session:  # sees every step record while the capture runs
        wait_for(lambda: session.snapshot().steps_per_s and session.controller.available, 20, "no step rate")
        # One capture at a time: while one is armed, the CLI refuses, and so does every rank.
        busy = busy_job(session, seconds=4)
        out = run_cli("capture", "cap4")
        assert out.returncode == 1
        assert re.fullmatch(rf"ranktop: error: a capture is already running \(id {busy}, ranks 0-3\); one at a time per job\n", out.stderr)
        again = session.controller.send("capture", {"id": "second", "start": session.snapshot().global_step + 1000, "steps": 1})
        wait_for(lambda: len(session.replies_to(again)) == 4, 10, "the ranks did not answer the second capture")
        assert {r.result["error"] for r in session.replies_to(again)} == {f"a capture is already running (id {busy}, waiting)"}
        wait_for(lambda: not session.snapshot().captures_running(), 60, "the first capture never finished")

        out = run_cli("capture", "cap4", "--steps", "3", "--out", str(tmp_path / "out"), timeout=120)
        print(out.stdout)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        start = int(re.match(r"job cap4: trace capture \S+, 3 step\(s\) from step (\d+), ranks 0-3$", lines[0]).group(1))
        folder = Path(next(line for line in lines if line.startswith("files: ")).split()[1])
        for rank in range(4):  # each rank's summary: its shares, then its top operators
            shares = next(line for line in lines if line.startswith(f"rank {rank}: compute "))
            assert f"(steps {start}-{start + 2}, training thread + collectives)" in shares
        assert lines.count("  top operators by self time:") == 4

        # One file per rank in one folder, named as TensorBoard names them, all from the same step, with the rank inside.
        traces = sorted(folder.glob("*.pt.trace.json"))
        assert [re.match(r"rank(\d)\.", p.name).group(1) for p in traces] == ["0", "1", "2", "3"]
        assert sorted(p.name for p in folder.iterdir()) == [p.name for p in traces]  # nothing else (no temporary files)
        for rank, path in enumerate(traces):
            assert profiler_steps(path) == [start, start + 1, start + 2]
            info = json.loads(path.read_text())["distributedInfo"]
            assert (info["rank"], info["world_size"], info["backend"]) == (rank, 4, "gloo")
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [p.name for p in traces]  # --out: copies

        # Training went on through it: every step of every rank arrived, none dropped.
        wait_for(lambda: min(r.step for r in session.snapshot().ranks) > start + 20, 60, "training stopped after the capture")
        for rank in map(session.aggregator.store.record, session.aggregator.store.ranks()):  # the raw step records received
            numbers = [n for n, *_ in rank.steps]
            assert numbers == list(range(numbers[0], numbers[-1] + 1)) and numbers[0] < start
        assert all(r.dropped == 0 for r in session.snapshot().ranks)

    from hta.trace_analysis import TraceAnalysis  # HolisticTraceAnalysis: the copied folder is one 4-rank trace

    analysis = TraceAnalysis(trace_dir=str(tmp_path / "out"))
    assert sorted(analysis.t.traces) == [0, 1, 2, 3]


@pytest.mark.slow
def test_pressing_P_in_the_tui_shows_each_ranks_progress_then_the_files_and_summaries(torchrun):
    torchrun("cap-tui", 4)
    session = WatchSession(resolve(["cap-tui"])).start()

    async def scenario():
        app = RanktopApp(session, session.controller, refresh_hz=5)
        async with app.run_test(size=(150, 45)) as pilot:
            ready = lambda: (snap := app.snapshot).world_size == 4 and len(snap.ranks) == 4 and snap.steps_per_s  # noqa: E731  (what the screen shows)
            for _ in range(200):  # the ranks' hellos and a step rate to aim with
                if ready():
                    break
                await pilot.pause(0.1)
            await pilot.press("P")
            assert isinstance(app.screen, CaptureScreen)
            screen = app.screen
            seen = set()
            for _ in range(600):
                seen.update(row.state for row in screen.rows)
                text = str(screen.query_one("#capture-text").render())
                if "4 of 4 rank(s) done" in text and text.count("top operators by self time:") == 4:
                    break
                await pilot.pause(0.1)
            print(text)
            assert "4 of 4 rank(s) done" in text and "compute " in text, text
            assert seen & {"waiting", "recording", "writing"}  # progress was shown before the outcome
            folder = re.search(r"^files: (\S+)$", text, re.M).group(1)
            traces = sorted(Path(folder).glob("*.pt.trace.json"))
            assert len(traces) == 4 and len({profiler_steps(p)[0] for p in traces}) == 1  # one start step for all
            from hta.trace_analysis import TraceAnalysis

            analysis = TraceAnalysis(trace_dir=folder)
            assert sorted(analysis.t.traces) == [0, 1, 2, 3]
            await pilot.press("escape")
            await pilot.press("P")  # a new capture once the first is done: allowed
            assert isinstance(app.screen, CaptureScreen) and app.screen.request.id != screen.request.id
            await pilot.press("escape")
            await pilot.press("q")

    try:
        asyncio.run(scenario())
    finally:
        session.close()
