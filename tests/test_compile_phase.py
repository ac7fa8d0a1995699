"""The probe's side of recompilations (probe/compile_phase.py): dynamo's compile callbacks open and close the phase
``compile`` around a real torch.compile compilation inside a step, on the training thread only, and a fault of
ours switches them off without touching the compilation. One process, a real dynamo, a backend that runs the
graph eagerly (no C++ compiler needed)."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from ranktop.probe import compile_phase  # noqa: E402
from ranktop.probe.recorder import Recorder  # noqa: E402


@pytest.fixture
def watched():
    """(recorder, watch, compiled model, what the backend saw open when it compiled): a fresh dynamo each time."""
    torch._dynamo.reset()
    rec = Recorder()
    seen: list[str | None] = []

    def backend(gm, inputs):
        seen.append(rec.current_phase)  # what the probe says while the compiler works
        return gm.forward

    model = torch.compile(torch.nn.Linear(4, 4), backend=backend, dynamic=False)
    watch = compile_phase.start(rec, threading.get_ident())
    yield rec, watch, model, seen
    compile_phase.stop()
    torch._dynamo.reset()


def step(rec, model, rows):
    rec.begin_step()
    rec.begin_phase("forward")
    model(torch.randn(rows, 4))
    rec.end_phase()
    rec.end_step()


def test_a_recompilation_inside_a_step_is_its_compile_phase_taken_out_of_forward(watched):
    rec, watch, model, seen = watched
    assert watch.registered()
    model(torch.randn(2, 4))  # compiled before any step: start-up, not marked
    step(rec, model, 2)  # cached: no compilation
    step(rec, model, 3)  # a new shape: a recompilation
    step(rec, model, 3)
    records = rec.drain()
    assert [sorted(r["p"]) for r in records] == [["forward"], ["compile", "forward"], ["forward"]], records
    assert seen == [None, "compile"] and watch.compiles == 1 and not watch.open
    assert rec.current_phase is None  # closed: nothing left open on the stack


def test_a_compilation_on_another_thread_is_not_this_rank_s_training(watched):
    rec, watch, model, seen = watched
    rec.begin_step()
    other = threading.Thread(target=model, args=(torch.randn(5, 4),))
    other.start()
    other.join()
    rec.end_step()
    assert seen == [None] and watch.compiles == 0 and "compile" not in rec.drain()[0]["p"]


def test_a_fault_of_the_probe_s_switches_its_callbacks_off_and_the_compilation_goes_on(watched):
    rec, watch, model, seen = watched
    faults: list[BaseException] = []
    watch.on_fault = faults.append
    rec.begin_step()

    def broken(name):
        raise RuntimeError("ours")

    rec.begin_phase = broken  # (the recorder's own guard is bypassed: an error escapes into our callback)
    out = model(torch.randn(6, 4))
    assert out.shape == (6, 4) and len(faults) == 1 and watch.off
    del rec.begin_phase
    model(torch.randn(7, 4))  # off: no phase, no call
    assert watch.compiles == 0 and len(faults) == 1 and len(seen) == 2


def test_dynamo_reset_clears_the_callbacks_and_the_next_settle_registers_them_again(watched):
    rec, watch, model, seen = watched
    torch._dynamo.reset()
    assert not watch.registered()
    compile_phase.settle()  # what the sender thread does at each flush
    assert watch.registered()
    step(rec, model, 3)
    assert watch.compiles == 1 and "compile" in rec.drain()[0]["p"]


def test_the_compilation_is_no_graph_break_and_no_recompile_of_the_probe_s_making(watched):
    from torch._dynamo.utils import counters

    rec, watch, model, seen = watched
    counters.clear()
    step(rec, model, 2)
    step(rec, model, 2)
    step(rec, model, 3)
    assert watch.compiles == 2  # the first step's warm-up and the new shape's
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 2, dict(counters)


EXPLICIT = """
import sys, time, torch
from ranktop import probe
from ranktop.probe import compile_phase

seen = []
p = probe.init(job="explicit-compile", rendezvous_dir=sys.argv[1])
model = torch.compile(torch.nn.Linear(4, 4), backend=lambda gm, inputs: seen.append(p.recorder.current_phase) or gm.forward, dynamic=False)
watch = compile_phase._watch
deadline = time.monotonic() + 60
while not watch.registered() and time.monotonic() < deadline:  # dynamo is loaded: the sender's next flush registers
    time.sleep(0.05)
for rows in (2, 2, 3, 3):
    with p.step():
        with p.phase("forward"):
            model(torch.randn(rows, 4))
print(watch.registered(), watch.compiles, seen)
probe.shutdown()
"""


def test_the_explicit_probe_times_a_recompilation_too_once_its_sender_has_seen_dynamo(tmp_path):
    """No automatic mode: ``probe.init`` and the script's own steps and phases. The script's ``torch.compile`` loads
    dynamo after init; the sender thread registers the callbacks at its next flush."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RANKTOP_AUTO"}
    out = subprocess.run([sys.executable, "-c", EXPLICIT, str(tmp_path / "rdv")], capture_output=True, text=True, timeout=180,
                         cwd=tmp_path, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    # the first step's compilation (warm-up) and the new shape's, each seen by the compiler inside ``compile``
    assert out.stdout.strip().splitlines()[-1] == "True 2 ['compile', 'compile']", out.stdout + out.stderr[-2000:]


def test_a_fault_that_switches_the_probe_off_inside_a_callback_leaves_dynamo_s_lists_as_they_are(watched):
    """The probe's fault handler stops the watch from inside dynamo's loop over the callbacks: removing ours then
    would skip the next one in the list (another library's). It stays, inert."""
    rec, watch, model, seen = watched
    handler = torch._dynamo.callback.callback_handler
    others: list[str] = []
    handler.register_start_callback(lambda args: others.append("start"))
    watch.on_fault = lambda exc: compile_phase.stop()  # what the probe's _deactivate does on the training thread
    rec.begin_step()

    def broken(name):
        raise RuntimeError("ours")

    rec.begin_phase = broken
    model(torch.randn(6, 4))
    assert watch.off and others == ["start"] and watch.started in handler.start_callbacks
