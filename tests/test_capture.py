"""Captures, in this process: the start step the requester picks, what a rank accepts, the capture's life on
the training thread (a real torch.profiler, a thin fake of the CUDA allocator), the summary, and the TUI's
reading of it all (pure logic)."""

from __future__ import annotations

import json
import pickle
import threading
import time
import types
from pathlib import Path

import pytest
import torch

import messages
from fake_cuda import allocator_snapshot

from ranktop.probe import commands, trace_summary
from ranktop.probe.capture import Capture
from ranktop.probe.recorder import Recorder
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.capture import CaptureRefused, plan, progress, summary_lines, table_lines
from ranktop.watch.model.answers import Answer
from ranktop.watch.model.rank_row import CaptureStatus
from ranktop.tui.screens.capture import capture_text
from ranktop.transport import captures
from ranktop.wire import capture as wire_capture
from ranktop.wire import schema
from ranktop.wire.names import HEARTBEAT
from ranktop.wire.messages import PROTOCOL_VERSION


# -- the start step and the limits (wire/capture.py) ----------------------------------


def test_the_start_step_lies_a_margin_ahead_of_the_furthest_rank():
    assert wire_capture.start_step([10, 12, 11], None) == 12 + wire_capture.MIN_MARGIN_STEPS
    assert wire_capture.start_step([10, 12, 11], 2.0) == 12 + wire_capture.MIN_MARGIN_STEPS  # slow job: the minimum
    assert wire_capture.start_step([100], 100.0) == 100 + 150  # fast job: 1.5 s worth of steps
    assert wire_capture.start_step([], None) == -1 + wire_capture.MIN_MARGIN_STEPS


def test_a_start_step_planned_from_a_screen_s_snapshot_allows_for_its_age():
    """The TUI plans from the snapshot on screen (never one built on its event loop): the ranks went on since."""
    assert wire_capture.start_step([100], 100.0, age_s=0.5) == 100 + 150 + 50
    assert wire_capture.start_step([10], None, age_s=3.0) == 10 + wire_capture.MIN_MARGIN_STEPS  # no rate: the minimum


@pytest.mark.parametrize("steps", [0, -1, wire_capture.MAX_STEPS + 1, 2.5, True, "3", None])
def test_a_bad_number_of_steps_is_refused(steps):
    assert "steps must be a whole number" in wire_capture.check_steps(steps)


def test_captures_go_under_the_jobs_folder_unless_the_job_configured_one(tmp_path, monkeypatch):
    monkeypatch.delenv(captures.CAPTURE_DIR_ENV, raising=False)
    assert captures.capture_folder("job", "../../etc", tmp_path) == tmp_path / "jobs" / "job" / "captures" / "_.._etc"
    monkeypatch.setenv(captures.CAPTURE_DIR_ENV, str(tmp_path / "scratch"))
    assert captures.capture_folder("job", "c1", tmp_path) == tmp_path / "scratch" / "c1"


# -- what a rank accepts (probe/commands.py) ------------------------------------------


class FakeSender:
    """The sender as the capture command sees it: a recorder, an identity, a capture slot, a folder."""

    def __init__(self, folder: Path, step: int = 10):
        self.recorder = Recorder()
        self.recorder.current_step = step
        self.identity = types.SimpleNamespace(rank=3, host="node7", job="job")
        self.capture = None
        self.rate_hz = 4.0
        self._folder = folder

    def state(self):
        return {}

    def capture_folder(self, capture_id):
        return self._folder / capture_id


def ask(sender, **args):
    return commands.run(sender, "capture", dict({"id": "c1", "start": 20, "steps": 3}, **args))


@pytest.mark.parametrize(
    "args, error",
    [
        ({"steps": 0}, "steps must be a whole number from 1 to 50"),
        ({"steps": 51}, "steps must be a whole number from 1 to 50"),
        ({"start": -1}, "start must be a step number"),
        ({"start": "20"}, "start must be a step number"),
        ({"start": 5}, "missed the start step 5: this rank is already at step 10"),
        ({"start": 10 + wire_capture.MAX_LEAD_STEPS + 1}, "steps ahead of this rank"),
        ({"id": ""}, "id must be a string"),
        ({"id": 7}, "id must be a string"),
        ({"kind": "video"}, "kind must be one of trace, memory"),
        ({"shapes": "yes"}, "shapes must be true or false"),
    ],
)
def test_a_rank_refuses_bad_arguments(tmp_path, args, error):
    sender = FakeSender(tmp_path)
    ok, result = ask(sender, **args)
    assert not ok and error in result["error"]
    assert sender.capture is None and sender.recorder.capture is None


def test_a_rank_arms_a_capture_in_its_own_folder_whatever_the_id_says(tmp_path):
    sender = FakeSender(tmp_path)
    ok, result = ask(sender, id="../../../home/x")
    assert ok and result["capture"] == "_.._.._home_x" and result["start"] == 20
    assert Path(result["dir"]).parent == tmp_path
    assert sender.recorder.capture is sender.capture and sender.capture.state == wire_capture.WAITING


def test_a_second_capture_while_one_runs_is_refused_by_the_rank(tmp_path):
    sender = FakeSender(tmp_path)
    assert ask(sender)[0]
    ok, result = ask(sender, id="c2")
    assert not ok and result["error"] == "a capture is already running (id c1, waiting)"


def test_a_capture_whose_start_step_never_comes_gives_up_and_frees_the_slot(tmp_path):
    sender = FakeSender(tmp_path)  # a stalled job: its step never moves
    assert ask(sender)[0]
    first = sender.capture
    first.give_up_if_late(time.monotonic() + 30)
    assert first.state == wire_capture.WAITING  # a minute at least, for slow steps more
    first.give_up_if_late(time.monotonic() + 61)
    assert first.state == wire_capture.FAILED and "step 20 did not begin within 60s" in first.error
    assert sender.recorder.capture is None  # off the training thread's path
    ok, result = ask(sender, id="c2")
    assert ok and sender.capture.id == "c2" and sender.recorder.capture is sender.capture


def test_the_start_timeout_grows_with_slow_steps():
    from ranktop.probe.capture import start_timeout

    assert start_timeout(5, None) == 60.0 and start_timeout(5, 0.05) == 60.0
    assert start_timeout(5, 10.0) == 200.0  # 5 steps of 10 s, four times over


def test_giving_up_and_starting_exclude_each_other(tmp_path):
    # The sender gave up first: the start step, when it comes at last, starts no profiler.
    recorder = Recorder()
    late = Capture("c1", wire_capture.TRACE, 5, 3, tmp_path / "c1", rank=0, host="vm", torch=torch)
    late.attach(recorder)
    late.give_up_if_late(time.monotonic() + 3600)
    late.step_begins(5)  # as if the training thread had read recorder.capture just before it was detached
    assert late.state == wire_capture.FAILED and "gave up" in late.error
    assert not torch._C._autograd._profiler_enabled()  # nothing started that nobody would stop

    # The training thread started it first: giving up leaves it alone, and it runs its course.
    started = Capture("c2", wire_capture.TRACE, 5, 2, tmp_path / "c2", rank=0, host="vm", torch=torch)
    started.attach(recorder)
    train(recorder, range(4, 6))
    started.give_up_if_late(time.monotonic() + 3600)
    assert started.state == wire_capture.RECORDING and started.error is None
    train(recorder, range(6, 8))
    assert wait_final(started).state == wire_capture.DONE, started.error


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer of a rank without CUDA")
def test_a_memory_snapshot_without_cuda_is_refused_with_a_clear_reason(tmp_path):
    ok, result = ask(FakeSender(tmp_path), kind="memory")
    assert not ok and result["error"] == "memory snapshots need a GPU (no CUDA on this rank)"


# -- a capture's life: training thread, writer thread (probe/capture.py) --------------


def train(recorder: Recorder, steps: range):
    """Steps through the recorder, as probe.step() or automatic mode drive it."""
    x = torch.randn(64, 64)
    for n in steps:
        recorder.begin_step(n)
        (x @ x).relu().sum()
        recorder.end_step()


def wait_final(cap: Capture, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while cap.running and time.monotonic() < deadline:
        time.sleep(0.02)
    return cap


def test_a_trace_covers_the_requested_steps_with_their_own_numbers_and_is_summarised(tmp_path):
    recorder = Recorder()
    cap = Capture("c1", wire_capture.TRACE, 5, 3, tmp_path / "c1", rank=0, host="vm", torch=torch)
    cap.attach(recorder)
    train(recorder, range(0, 12))
    assert recorder.capture is None  # off the hot path as soon as the last step ended
    assert wait_final(cap).state == wire_capture.DONE, cap.error
    path = Path(cap.path)
    assert path.parent == tmp_path / "c1" and path.name.startswith("rank0.vm_") and path.name.endswith(".pt.trace.json")
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    trace = json.loads(path.read_text())
    steps = sorted(e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7"]
    assert trace["ranktop"] == {"capture": "c1", "start_step": 5, "steps": 3, "rank": 0, "host": "vm"}
    summary = cap.progress()["sum"]
    assert summary["steps"] == [5, 7] and summary["basis"] == "cpu" and len(summary["train_ms"]) == 3  # start, stop, export
    assert any(name == "aten::mm" for name, _, _ in summary["ops"])
    assert abs(summary["compute"] + summary["comm"] + summary["idle"] - 1) < 0.01


def test_a_rank_already_past_the_start_step_fails_with_the_reason(tmp_path):
    recorder = Recorder()
    cap = Capture("c1", wire_capture.TRACE, 5, 3, tmp_path, rank=0, host="vm", torch=torch)
    cap.attach(recorder)
    train(recorder, range(7, 9))  # explicit step numbers that jump over 5
    assert cap.state == wire_capture.FAILED and "missed the start step 5" in cap.error
    assert recorder.capture is None


class FakeCudaMemory:
    """The few calls of torch.cuda.memory a memory capture makes, recorded (no GPU on the test machine).

    As torch's own: history on registers a RecordFunction callback for annotations, on the calling thread unless
    ``global_record_annotations``; history off removes it, and from another thread a thread-local one is not
    found (torch warns "Requested callback is not found" and the callback stays on its thread)."""

    def __init__(self):
        self.calls = []
        self.stacks = []
        self.threads = []
        self.callback = None  # (thread it is registered on, or "global")
        self.left_on = []  # callbacks torch could not remove
        self.warnings = []

    def _record_memory_history(self, enabled="all", context="all", stacks="all", max_entries=0, device=None,
                               clear_history=False, compile_context=False, global_record_annotations=False):  # fmt: skip
        self.calls.append(("record", enabled))
        here = threading.current_thread().name
        if enabled is not None:
            self.stacks.append(stacks)
            if self.callback is None:
                self.callback = "global" if global_record_annotations else here
        elif self.callback is not None:
            if self.callback not in ("global", here):
                self.warnings.append("Requested callback is not found")
                self.left_on.append(self.callback)
            self.callback = None

    def _snapshot(self):
        self.calls.append(("snapshot",))
        self.threads.append(threading.current_thread().name)
        return {"segments": [{"total_size": 4 << 20, "allocated_size": 1 << 20}], "device_traces": [[{"action": "alloc"}] * 7]}


def test_a_memory_capture_records_the_allocator_history_over_the_steps_and_dumps_a_snapshot(tmp_path):
    memory = FakeCudaMemory()
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory))
    recorder = Recorder()
    cap = Capture("m1", wire_capture.MEMORY, 2, 2, tmp_path, rank=1, host="gpu-node", torch=fake_torch)
    cap.attach(recorder)
    for n in range(6):
        recorder.begin_step(n)
        if n == 2:
            assert memory.calls == [("record", "all")]
        recorder.end_step()
    assert wait_final(cap).state == wire_capture.DONE, cap.error
    assert memory.calls == [("record", "all"), ("snapshot",), ("record", None)]  # history off after step 3
    assert memory.stacks == ["python"]  # no C++ unwinding on every allocation of the training thread
    assert memory.threads == ["ranktop-capture-writer"]  # the snapshot is taken (and symbolised) off the training thread
    assert cap.path.endswith(".memory.pickle") and "rank1.gpu-node_" in cap.path
    with open(cap.path, "rb") as f:
        assert pickle.load(f)["segments"][0]["total_size"] == 4 << 20
    timings = ("train_ms", "cost_s", "snapshot_s")
    assert {k: v for k, v in cap.summary.items() if k not in timings} == {
        "segments": 1,
        "reserved": 4 << 20,
        "allocated": 1 << 20,
        "events": 7,
    }
    assert all(k in cap.summary for k in timings)


def test_a_memory_capture_reports_what_writing_it_cost_the_training_thread(tmp_path):
    """The snapshot and its pickle hold the GIL on the writer thread: every other thread, the training thread
    among them, waits. The capture reported its cost as 0 before; now ``cost_s`` is the longest any thread waited
    for the GIL while it was written, measured, and ``snapshot_s`` torch's own call (one C call that holds the GIL:
    here an unpickling of a realistic snapshot, one C call as well)."""
    snapshot = allocator_snapshot(events=10_000)
    memory = FakeCudaMemory()
    blob = pickle.dumps(snapshot)
    memory._snapshot = lambda: pickle.loads(blob)  # one C call that builds the objects: the GIL held throughout
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory))
    recorder = Recorder()
    cap = Capture("m2", wire_capture.MEMORY, 1, 1, tmp_path, rank=0, host="gpu-node", torch=fake_torch)
    cap.attach(recorder)
    train(recorder, range(3))
    assert wait_final(cap, timeout=120).state == wire_capture.DONE, cap.error
    assert cap.summary["events"] == 10_000 and cap.summary["snapshot_s"] > 0
    assert cap.summary["cost_s"] >= 0.5 * cap.summary["snapshot_s"]  # the meter saw the snapshot's hold
    with open(cap.path, "rb") as f:
        assert pickle.load(f) == snapshot  # what memory_viz reads: the same object
    status = CaptureStatus(
        "m2", wire_capture.MEMORY, "done", 1, 1, str(tmp_path), summary=dict(cap.summary, cost_s=0.0174, snapshot_s=0.0121)
    )
    assert summary_lines(status)[1] == "cost to the training thread: stalled 17 ms at most while written (torch's snapshot call 12 ms)"


def test_the_snapshot_is_pickled_a_piece_at_a_time_letting_the_gil_go_between_pieces():
    """``pickle.dump`` of a 10k-event history is one C call of a few hundred milliseconds: the training thread
    could not run meanwhile. Written a piece at a time, the same stream (pickle.load gives an equal object, the
    frames torch shares stay shared within a piece), with a pause that lets the GIL go between pieces."""
    import io

    from ranktop.probe import memory_dump

    snapshot = allocator_snapshot(events=2_000)
    pauses = []
    out = io.BytesIO()
    memory_dump.dump(snapshot, out, pause=pauses.append)
    assert pickle.loads(out.getvalue()) == snapshot
    assert len(pauses) >= 2_000 // memory_dump.PIECE
    assert len(out.getvalue()) < 2 * len(pickle.dumps(snapshot, 2))  # shared frames are not written per entry
    for plain in ({}, {"a": []}, {"a": [[]], "b": [1, 2], "c": (1, 2)}, [{"x": 1}] * 3):
        out = io.BytesIO()
        memory_dump.dump(plain, out, pause=pauses.append)
        assert pickle.loads(out.getvalue()) == plain


def test_a_memory_capture_leaves_no_annotation_callback_on_the_training_thread_and_no_warning_in_the_log(tmp_path):
    """History is switched off by the writer thread: torch's annotation callback must be one it can remove there
    (before: "Requested callback is not found" in the job's log after each capture on an H100, and one more
    callback left on the training thread)."""
    memory = FakeCudaMemory()
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory))
    recorder = Recorder()
    for first in (0, 10):  # two captures in a row
        cap = Capture(f"m{first}", wire_capture.MEMORY, first + 2, 2, tmp_path, rank=0, host="gpu-node", torch=fake_torch)
        cap.attach(recorder)
        train(recorder, range(first, first + 6))
        assert wait_final(cap).state == wire_capture.DONE, cap.error
    assert memory.warnings == [] and memory.left_on == [] and memory.callback is None


def test_on_a_torch_without_global_annotations_the_memory_capture_still_runs(tmp_path):
    calls = []

    def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=0):  # torch before 2.6
        calls.append(enabled)

    memory = types.SimpleNamespace(_record_memory_history=_record_memory_history, _snapshot=FakeCudaMemory()._snapshot)
    recorder = Recorder()
    cap = Capture(
        "old",
        wire_capture.MEMORY,
        2,
        2,
        tmp_path,
        rank=0,
        host="vm",
        torch=types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory)),
    )
    cap.attach(recorder)
    train(recorder, range(6))
    assert wait_final(cap).state == wire_capture.DONE, cap.error
    assert calls == ["all", None]


# -- the summary (probe/trace_summary.py) ----------------------------------------------


def x(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "cat": cat}


def test_the_summary_ranks_ops_by_self_time_and_splits_the_steps_into_compute_comm_and_idle():
    trace = {
        "traceEvents": [
            x("ProfilerStep#7", 0, 100, cat="user_annotation"),
            x("aten::linear", 0, 40),
            x("aten::mm", 5, 30),  # linear's self time: 10
            x("c10d::allreduce_", 50, 10),
            x("gloo:all_reduce", 55, 25, tid=2, cat="user_annotation"),  # on gloo's own thread
            x("aten::add", 200, 50),  # after the last step: outside the window
        ]
    }
    s = trace_summary.summarize(trace)
    assert s["steps"] == [7, 7] and s["basis"] == "cpu" and s["wall_us"] == 100
    assert s["ops"][:3] == [["aten::add", 50.0, 1], ["aten::mm", 30.0, 1], ["aten::linear", 10.0, 1]]
    assert (s["compute"], s["comm"], s["idle"]) == (0.4, 0.3, 0.3)  # comm: 50-80, busy: 0-40 and 50-80


def test_with_kernels_the_shares_are_of_the_device_timeline():
    trace = {
        "traceEvents": [
            x("ProfilerStep#1", 0, 100, cat="user_annotation"),
            x("sm90_gemm", 0, 50, tid=7, cat="kernel"),
            x("ncclDevKernel_AllReduce_Sum_f32", 40, 30, tid=8, cat="kernel"),
        ]
    }
    s = trace_summary.summarize(trace)
    assert s["basis"] == "device" and (s["compute"], s["comm"], s["idle"]) == (0.4, 0.3, 0.3)
    assert [k[0] for k in s["kernels"]] == ["sm90_gemm", "ncclDevKernel_AllReduce_Sum_f32"]


# -- on the wire and in the TUI ---------------------------------------------------------


def progress_state(**cap):
    return dict({"id": "c1", "kind": "trace", "st": "waiting", "start": 20, "steps": 3, "dir": "/d"}, **cap)


def test_capture_progress_rides_in_the_state_and_a_malformed_one_is_dropped():
    frames = messages.raw(HEARTBEAT, {"job": "j", "rank": 0, "ts": 1.0, "state": {"cap": progress_state()}})
    assert schema.decode(frames).state.cap.st == "waiting"
    for bad in ({"id": "c1", "st": "exploded"}, progress_state(start="20"), progress_state(path=7), "c1"):
        with pytest.raises(schema.WireError):
            schema.decode(messages.raw(HEARTBEAT, {"job": "j", "rank": 0, "ts": 1.0, "state": {"cap": bad}}))
    assert PROTOCOL_VERSION >= (1, 3)  # the capture state came with 1.3


def feed(agg, rank, **cap):
    state = {"step": 12, "cap": progress_state(**cap) if cap else None}
    agg.ingest(messages.steps(rank, [{"n": 12, "t": 1.0, "w": 0.1, "p": {}}], state=state, world=2))
    agg.ingest(messages.hello(rank, 2, "vm", pid=1))


SUMMARY = {
    "steps": [20, 22],
    "ops": [["aten::mm", 1500.0, 9]],
    "kernels": [],
    "basis": "cpu",
    "wall_us": 3000.0,
    "compute": 0.5,
    "comm": 0.25,
    "idle": 0.25,
    "train_ms": [2.0, 40.0],
}


def test_the_tui_follows_each_rank_and_keeps_its_summary_after_the_rank_stops_sending_it():
    agg = Aggregator("j")
    feed(agg, 0, st="done", path="/d/rank0.json", sum=SUMMARY, at=22)
    feed(agg, 0, st="done", path="/d/rank0.json", at=22)  # the summary no longer rides in the state
    feed(agg, 1, st="recording", at=21)
    request = plan_for(agg)
    rows = progress(agg.snapshot(), request, [])
    assert [(r.rank, r.state, r.text) for r in rows] == [(0, "done", "done: rank0.json"), (1, "recording", "recording step 21 (2/3)")]
    assert rows[0].status.summary == SUMMARY
    assert summary_lines(rows[0].status) == [
        "compute 50% · comm 25% · idle 25% of 3.0 ms (steps 20-22, training thread + collectives)",
        "cost to the training thread: profiler start 2 ms, stop 40 ms",
        "top operators by self time:",
        "      1.50 ms  ×9     aten::mm",
    ]
    assert table_lines(rows) == [
        "rank  compute   comm   idle    wall ms  top operator (self)",
        "   0      50%    25%    25%        3.0  aten::mm 1.5 ms",
    ]
    text = capture_text(request, rows).plain
    assert "rank 1: recording step 21 (2/3)" in text and "files: /d" in text and "aten::mm" in text


def plan_for(agg):
    from ranktop.watch.capture import CapturePlan

    return CapturePlan("c1", "trace", 20, 3, (0, 1), True)


def test_a_capture_is_not_requested_while_one_runs_for_an_unknown_rank_or_a_bad_number_of_steps():
    agg = Aggregator("j")
    feed(agg, 0, st="recording", at=21)
    feed(agg, 1)
    with pytest.raises(CaptureRefused, match=r"a capture is already running \(id c1, rank 0\)"):
        plan(agg.snapshot(), "trace", 3)
    agg = Aggregator("j")
    feed(agg, 0, st="done")
    feed(agg, 1)
    with pytest.raises(CaptureRefused, match=r"no such rank 5 in a job of 2"):
        plan(agg.snapshot(), "trace", 3, [1, 5])
    with pytest.raises(CaptureRefused, match="steps must be"):
        plan(agg.snapshot(), "trace", 0)
    request = plan(agg.snapshot(), "trace", 3, [1])
    assert request.ranks == (1,) and request.start == 12 + wire_capture.MIN_MARGIN_STEPS and not request.all_ranks


def test_a_refusal_shows_as_the_ranks_answer():
    agg = Aggregator("j")
    feed(agg, 0)
    feed(agg, 1)
    request = plan(agg.snapshot(), "memory", 3)
    refusal = Answer("cmd", "capture", 1, False, {"error": "memory snapshots need a GPU (no CUDA on this rank)"}, 0.01)
    rows = progress(agg.snapshot(), request, [refusal])
    assert [r.text for r in rows] == ["asked, no answer yet", "refused: memory snapshots need a GPU (no CUDA on this rank)"]


def test_a_capture_leaves_the_scripts_own_profiler_alone(tmp_path):
    recorder = Recorder()
    cap = Capture("c1", wire_capture.TRACE, 2, 2, tmp_path, rank=0, host="vm", torch=torch)
    cap.attach(recorder)
    with torch.profiler.profile() as own:
        train(recorder, range(0, 6))
    assert (
        cap.state == wire_capture.FAILED
        and cap.error == "RuntimeError: torch.profiler is already running in this process (the script's own?)"
    )
    assert any(e.name == "aten::mm" for e in own.events())  # the script's trace is whole


def test_a_capture_cut_short_by_shutdown_stops_the_profiler_and_says_so(tmp_path):
    recorder = Recorder()
    cap = Capture("c1", wire_capture.TRACE, 1, 10, tmp_path, rank=0, host="vm", torch=torch)
    cap.attach(recorder)
    train(recorder, range(0, 3))
    assert cap.state == wire_capture.RECORDING and torch.autograd.profiler._is_profiler_enabled
    cap.abandon("the probe shut down during the capture")
    assert cap.state == wire_capture.FAILED and cap.error == "the probe shut down during the capture"
    assert not torch.autograd.profiler._is_profiler_enabled and recorder.capture is None


def test_a_capture_that_cannot_be_written_fails_with_the_reason(tmp_path):
    (tmp_path / "taken").write_text("a file where the capture folder should be")
    recorder = Recorder()
    cap = Capture("c1", wire_capture.TRACE, 0, 1, tmp_path / "taken", rank=0, host="vm", torch=torch)
    cap.attach(recorder)
    train(recorder, range(0, 2))
    assert wait_final(cap).state == wire_capture.FAILED and cap.error.startswith("writing failed: FileExistsError")
    assert cap.progress()["err"] == cap.error and "path" not in cap.progress()


def test_automatic_mode_captures_the_same_steps_as_explicit_steps(tmp_path):
    """ranktop launch: the optimizer step ends a step (probe/auto.py), through the same recorder boundaries."""
    from ranktop.probe.auto import AutoTimer

    recorder = Recorder()
    timer = AutoTimer(recorder)
    cap = Capture("auto", wire_capture.TRACE, 2, 2, tmp_path, rank=0, host="vm", torch=torch)
    cap.attach(recorder)
    x = torch.randn(32, 32)
    for _ in range(6):
        timer.data_begin(), timer.data_end()
        assert timer.forward_begin(True)
        (x @ x).sum()
        timer.forward_end()
        timer.backward_begin(), timer.backward_end()
        timer.optimizer_begin(), timer.optimizer_end()
    assert wait_final(cap).state == wire_capture.DONE, cap.error
    assert profiler_steps(Path(cap.path)) == [2, 3]


def profiler_steps(path: Path) -> list[int]:
    events = json.loads(path.read_text())["traceEvents"]
    return sorted(int(e["name"].split("#")[1]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
