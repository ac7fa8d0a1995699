"""The flight recorder's file: what goes in comes out, a crash leaves what was closed, size is capped.

Frames are made with the real wire encoder; the recorder's writer thread is the
real one. Live jobs recorded and replayed are in test_flight_recorder_live.py.
"""

from __future__ import annotations

import time

import pytest

from ranktop.watch.offline import recording
from ranktop.watch.analysis.history import History
from ranktop.watch.offline.recording import FlightRecorder, RecordingError, read, segments_of
from ranktop.watch.offline.replay import Replay, parse_offset, snapshot_at
from ranktop.watch.offline.report import build, text_lines
from ranktop.wire import schema
from ranktop.wire.names import HELLO, STEPS

import messages
from support import wait_for

PHASES = {"data": 0.002, "forward": 0.004, "backward": 0.006, "optimizer": 0.002}


def hello(rank: int, world: int = 3, groups: list | None = None) -> list[bytes]:
    body = {"job": "j", "rank": rank, "ts": time.time(), "host": "h", "pid": 1, "world": world, "local_rank": rank}
    if groups:
        body["groups"] = groups
    return messages.raw(HELLO, body)


def steps(rank: int, first: int, count: int, slow_ms: float = 0.0, ev: dict | None = None) -> list[bytes]:
    recs = []
    for n in range(first, first + count):
        phases = dict(PHASES, forward=PHASES["forward"] + slow_ms / 1000)
        recs.append({"n": n, "t": 1000.0 + n * 0.02, "w": sum(phases.values()), "p": phases})
    body = {"job": "j", "rank": rank, "ts": time.time(), "steps": recs}
    if ev is not None:  # the evidence its state carries (probe/evidence.py)
        body["state"] = {"ev": ev}
    return messages.raw(STEPS, body)


def write(path, messages, **kwargs) -> FlightRecorder:
    rec = FlightRecorder(path, job="j", **kwargs).start()
    rec.endpoint("tcp://h:1", "h")
    for frames in messages:
        rec.tap(frames, "tcp://h:1")
    rec.close()
    return rec


def test_frames_come_back_byte_for_byte_in_arrival_order(tmp_path):
    sent = [hello(r) for r in range(3)] + [steps(r, 0, 5) for r in range(3)]
    rec = write(tmp_path / "a.rec", sent)
    got = read(tmp_path / "a.rec")
    assert got.header["job"] == "j" and got.header["format"] == recording.FORMAT_VERSION
    assert [e.frames for e in got.entries if e.frames] == sent
    assert got.entries[0].frames is None and got.entries[0].host == "h"  # the endpoint, announced first
    assert [e.t for e in got.entries] == sorted(e.t for e in got.entries)
    assert rec.stats.frames == 6 and rec.stats.dropped == 0 and not got.torn


def test_a_crash_mid_chunk_leaves_every_closed_chunk_readable(tmp_path):
    path = tmp_path / "crash.rec"
    first = hello(0)
    rec = FlightRecorder(path, chunk_seconds=0.05).start()
    rec.tap(first, "e")

    def on_disk():
        try:
            return [e.frames for e in read(path).entries] == [first]
        except (OSError, RecordingError):  # not there yet, or its header half-written
            return False

    wait_for(on_disk, 10, "the first chunk was never closed and on disk", seen=lambda: f"{rec.stats}")
    rec.tap(steps(0, 0, 3), "e")
    rec.close()
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])  # the writer died in the middle of the last chunk
    got = read(path)
    assert [e.frames for e in got.entries] == [first]
    assert len(got.torn) == 1 and "incomplete" in got.torn[0]


def test_a_full_queue_drops_and_counts_instead_of_blocking_the_receiver(tmp_path):
    rec = FlightRecorder(tmp_path / "q.rec", queue_frames=3)  # writer not started: nothing drains the queue
    t0 = time.perf_counter()
    for _ in range(10):
        rec.tap(hello(0), "e")
    assert time.perf_counter() - t0 < 0.5
    assert rec.stats.dropped == 7
    rec.start().close()
    assert len(read(tmp_path / "q.rec").entries) == 3


def test_rotation_caps_the_size_and_keeps_the_newest_segments(tmp_path):
    path = tmp_path / "r.rec"
    rec = FlightRecorder(path, max_bytes=2000, keep=2, chunk_seconds=0.0).start()
    for i in range(60):
        rec.tap(steps(i % 3, i * 5, 5), "tcp://h:1")
        time.sleep(0.005)
    rec.close()
    files = segments_of(path)
    assert [f.name for f in files] == ["r.rec.2", "r.rec.1", "r.rec"]
    assert rec.stats.segments > 3  # older ones were deleted
    assert all(f.stat().st_size < 2000 + 4096 for f in files)
    got = read(path)
    steps_seen = [schema.decode(e.frames).steps[0].n for e in got.entries if e.frames]
    assert steps_seen == sorted(steps_seen) and steps_seen[-1] == 59 * 5  # the newest survive, in order


def test_a_file_that_is_not_a_recording_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "x.rec"
    bad.write_bytes(b"hello world")
    with pytest.raises(RecordingError, match="not a ranktop recording"):
        read(bad)
    with pytest.raises(RecordingError, match="no recording"):
        read(tmp_path / "missing.rec")


def test_garbage_frames_in_a_recording_are_dropped_by_the_same_decode_as_live(tmp_path):
    path = tmp_path / "g.rec"
    write(path, [hello(0), [b"steps", b"\xc1not msgpack"], steps(0, 0, 5)])
    snap = snapshot_at(read(path), 1e9)
    assert snap.dropped_messages == 1 and [r.rank for r in snap.ranks] == [0]


def times(*texts):
    return [parse_offset(t, 100.0) for t in texts]


def test_times_in_a_recording():
    assert times("90", "1:30", "0:01:30", "-10", "end", "+5") == [90, 90, 90, 90, 100, 5]
    with pytest.raises(ValueError, match="not a time"):
        parse_offset("soon", 100.0)


def recorded_job(tmp_path, seconds: int = 40, slow_from: int = 10, slow_to: int = 30, groups=lambda rank: None, ev=lambda rank, slow: None):
    """A 3-rank job of ``seconds`` seconds at 10 steps/s, rank 1 slow in forward in [slow_from, slow_to), written by the
    real FlightRecorder; the arrival times are then stretched onto a virtual timeline (no test sleeps for 40 s)."""
    path = tmp_path / "job.rec"
    msgs = [(0.0, hello(r, groups=groups(r))) for r in range(3)]
    for second in range(seconds):
        for r in range(3):
            slow = 30.0 if r == 1 and slow_from <= second < slow_to else 0.0
            msgs.append((second + 0.5, steps(r, second * 10, 10, slow, ev(r, slow))))
            if second % 2 == 0:
                msgs.append((second + 0.6, hello(r, groups=groups(r))))
    rec = FlightRecorder(path, job="j")
    clock = iter([1_000_000.0 + t for t, _ in msgs])
    rec.clock = lambda: next(clock)
    rec.start()
    for _, frames in msgs:
        rec.tap(frames, "tcp://h:1")
    rec.close()
    return read(path)


def test_replay_seeks_back_and_forth_to_the_same_picture(tmp_path):
    rec = recorded_job(tmp_path)
    now = [0.0]
    replay = Replay(rec, clock=lambda: now[0])
    replay.seek_to_offset(20)
    at_20 = replay.snapshot()
    assert at_20.ranks[1].status == "slow" and at_20.ranks[1].culprit_phase == "forward"
    replay.seek_to_offset(38)
    assert replay.snapshot().ranks[1].status == "ok"
    replay.seek(-18)
    again = replay.snapshot()
    assert again.ranks == at_20.ranks and again.global_step == at_20.global_step


def test_paused_replay_stands_still_and_speed_scales_time(tmp_path):
    rec = recorded_job(tmp_path)
    now = [0.0]
    replay = Replay(rec, speed=4.0, clock=lambda: now[0])
    now[0] = 2.0
    assert replay.offset_s == pytest.approx(8.0)
    replay.toggle_pause()
    now[0] = 10.0
    assert replay.offset_s == pytest.approx(8.0)
    replay.toggle_pause()
    replay.set_speed(1.0)
    now[0] = 11.0
    assert replay.offset_s == pytest.approx(9.0)


def test_history_turns_a_slow_spell_into_one_episode_with_its_cost(tmp_path):
    from ranktop.watch.offline.replay import Player

    rec = recorded_job(tmp_path)
    history = History()
    Player(rec, {}).advance(rec.end, history, sample_from=rec.start)  # one sample a second, as live
    (ep,) = history.episodes_since(rec.start)
    assert (ep.kind, ep.rank, ep.phase) == ("straggler", 1, "forward")
    # seen through the 64-step window: a slow spell shows once half the window is slow, and ends likewise
    assert 10 <= ep.start - rec.start <= 16 and 30 <= ep.end - rec.start <= 36
    # 20 s at 10 steps/s, each step 30 ms late (the median of 3 ranks is a healthy one): 6 s of the job's time
    assert 0.8 * 6.0 < ep.cost_s < 1.2 * 6.0


def test_the_report_names_the_straggler_its_phase_and_its_spell(tmp_path):
    rep = build(recorded_job(tmp_path))
    assert rep["job"] == "j" and rep["ranks"] == 3 and rep["world_size"] == 3
    (ep,) = rep["stragglers"]
    assert (ep["who"], ep["phase"]) == ("rank 1", "forward")
    assert 10 <= ep["from_s"] <= 16 and 30 <= ep["to_s"] <= 36
    text = "\n".join(text_lines(rep))
    assert "rank 1 slow in forward from 0:1" in text and "stalls and hangs: none" in text
    assert {p["phase"] for p in rep["median_rank_phases"]} >= set(PHASES)


def test_the_report_says_why_the_straggler_was_slow_as_its_evidence_said(tmp_path):
    # rank 1's slow spell is time in its garbage collector: 60% of its time against its peers' 1%
    rep = build(recorded_job(tmp_path, ev=lambda rank, slow: {"win": 10.0, "gc": 0.6 if slow else 0.01}))
    (cause,) = rep["causes"]
    assert (cause["rank"], cause["kind"]) == (1, "gc_pause") and cause["text"].endswith("(gc pause)")
    assert 10 <= cause["first_s"] <= 16 and 10 <= cause["seconds"] <= 26  # while it was flagged slow
    text = "\n".join(text_lines(rep))
    assert "  because rank 1 (gc_pause, from 0:1" in text and "in Python's garbage collector" in text
    assert build(recorded_job(tmp_path / "plain"))["causes"] == []  # no evidence sent: no cause


def test_the_report_carries_each_rank_s_coordinates(tmp_path):
    from ranktop.probe.process_groups import state_layout

    rep = build(recorded_job(tmp_path, groups=lambda rank: state_layout("tp=3", rank, 3)))
    assert rep["layout_roles"] == ["tp"] and rep["imbalance"] is None
    assert [r["coords"] for r in rep["per_rank"]] == [{"tp": 0}, {"tp": 1}, {"tp": 2}]


def test_history_is_bounded():
    h = History(samples=5)
    assert h.samples.maxlen == 5


def test_two_runs_side_by_side(tmp_path):
    from ranktop.watch.offline.report import compare_lines

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = build(recorded_job(tmp_path / "a"))
    b = build(recorded_job(tmp_path / "b", slow_from=0, slow_to=40))
    lines = compare_lines(a, b)
    assert lines[0].split()[-3:] == ["a/job.rec", "b/job.rec", "B", "vs", "A"][-3:] or "B vs A" in lines[0]
    forward = next(line for line in lines if line.startswith("phase forward"))
    assert forward.split()[-1].startswith("+")  # the second run's median rank is no slower; its straggler costs more
    cost = next(line for line in lines if line.startswith("straggler cost")).split()
    assert float(cost[2]) < float(cost[4])


def test_the_html_report_is_one_self_contained_page_with_its_plots(tmp_path):
    from ranktop.watch.offline.report_html import page

    html = page(build(recorded_job(tmp_path)))
    assert html.count('class="plotly-graph-div"') == 4
    assert "<script src=" not in html.replace('<script src="data:', "")  # plotly.js is inlined, nothing fetched
    assert "rank 1 slow in forward" in html and "Straggler and stall episodes" in html


def without(package: str, tmp_path) -> dict:
    """An environment in which ``import package`` fails, as where the optional extra is not installed."""
    import os

    fake = tmp_path / "without" / package
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"raise ImportError('No module named {package}')\n")
    return dict(os.environ, PYTHONPATH=str(fake.parent))


def test_missing_optional_extras_are_one_line_errors(tmp_path):
    import subprocess

    from support import RANKTOP

    recorded_job(tmp_path)
    out = subprocess.run(
        [RANKTOP, "report", str(tmp_path / "job.rec"), "--html", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        env=without("plotly", tmp_path),
        timeout=60,
    )
    assert out.returncode == 1 and out.stderr.strip() == "ranktop: error: the HTML report needs plotly: pip install 'ranktop[report]'"
    out = subprocess.run(
        [RANKTOP, "export", "tcp://127.0.0.1:1", "--prometheus", "0"],
        capture_output=True,
        text=True,
        env=without("prometheus_client", tmp_path),
        timeout=60,
    )
    assert out.returncode == 1 and out.stderr.strip().endswith("pip install 'ranktop[export]'")
    assert "Traceback" not in out.stderr


def test_the_report_sums_each_culprit_s_episodes_and_their_cost(tmp_path):
    rep = build(recorded_job(tmp_path))
    (ep,) = rep["stragglers"]
    (culprit,) = rep["culprits"]
    assert (culprit["who"], culprit["kind"], culprit["episodes"]) == ("rank 1", "straggler", 1)
    assert culprit["cost_s"] == ep["cost_s"] > 0 and (culprit["from_s"], culprit["to_s"]) == (ep["from_s"], ep["to_s"])
    assert culprit["seconds"] == pytest.approx(ep["duration_s"])
