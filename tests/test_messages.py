"""The types in wire/messages.py are the contract: everything the probe's own code sends is listed there.

A field the types do not list is dropped at decode (a newer peer's additions must not reach code that never
checked them), so a field the probe sends but the types forget would vanish without a word. These tests build
the messages with the probe's real code (a Sender that is never started, its real resource samplers, its real
collective tracker) and hold every field to come back through ``schema.decode``.
"""

import msgspec
import pytest

import messages
from ranktop.probe.collective_tracker import CollectiveTracker
from ranktop.probe.recorder import PhaseScope, Recorder, StepScope
from ranktop.probe.resources import RankResources
from ranktop.probe.sender import Sender
from ranktop.transport.identity import Identity
from ranktop.probe import collective_summary
from ranktop.wire import capture, messages as types, schema
from ranktop.wire.names import HEARTBEAT, KINDS


def _same_keys(sent, got, where="$"):
    """Every key sent is read back, at every depth (values may change type: 1 -> 1.0, a list -> a tuple)."""
    if isinstance(sent, dict):
        assert isinstance(got, dict), where
        missing = set(sent) - set(got)
        assert not missing, f"{where}: {sorted(missing)} dropped at decode: list them in wire/messages.py"
        for key in sent:
            _same_keys(sent[key], got[key], f"{where}.{key}")
    elif isinstance(sent, (list, tuple)):
        assert len(sent) == len(got), where
        for i, (s, g) in enumerate(zip(sent, got)):
            _same_keys(s, g, f"{where}[{i}]")


@pytest.fixture
def probe_sender():
    identity = Identity(job="j", rank=1, local_rank=1, world=4, local_world=2, host="n0", pid=4242, launcher="torchrun")
    recorder = Recorder()
    tracker = CollectiveTracker(recorder)
    sender = Sender(identity, recorder, rate_hz=4.0, directory=None, on_fault=messages._raise, collectives=tracker)
    resources = RankResources(identity, sender, {"dtype": "bf16", "batch": 8})
    resources.set_work(tokens=4096, flops=1.5e12)
    for n in range(3):
        with StepScope(recorder):
            with PhaseScope(recorder, "forward"):
                token = tracker.begin("all_reduce", 4096, "float32", 4)
                tracker.end(token)
            with PhaseScope(recorder, "backward"):
                pass
    return sender, recorder, tracker


def test_the_hello_the_probe_sends_comes_back_whole(probe_sender):
    sender, _, _ = probe_sender
    hello = sender.hello()
    assert {"host", "pid", "world", "local_rank", "work", "argv", "cwd", "python"} <= set(hello)
    _same_keys(hello, messages.fields(schema.decode(sender.message(sender.wire_hello()))))


def test_the_groups_of_a_hello_come_back_whole(probe_sender):
    from ranktop.probe.process_groups import state_layout

    sender, _, _ = probe_sender
    groups = state_layout("pp=2,dp=2", 1, 4)
    groups.append({"id": "p2p:1,3", "desc": "p2p peers", "size": 2, "ranks": [1, 3], "role": "pp", "p2p": True})
    sender.add_hello("groups", lambda: groups)
    hello = sender.hello()
    _same_keys(hello, messages.fields(schema.decode(sender.message(sender.wire_hello()))))


def test_a_steps_message_with_its_state_and_collectives_comes_back_whole(probe_sender):
    sender, recorder, tracker = probe_sender
    records = recorder.drain()
    summaries, sample = collective_summary.summarise(tracker.drain())
    state = sender.state()
    assert {"step", "last", "phase", "mem", "gpu", "collective", "rejected"} <= set(state)
    body = {"steps": records, "state": state, "cs": messages.plain(summaries), "cx": messages.plain(sample)}
    sent = sender.message(sender.steps_message(records, summaries, sample))
    _same_keys(body, messages.fields(schema.decode(sent)))


def test_a_capture_in_the_state_comes_back_whole():
    cap = {
        "id": "c1",
        "kind": capture.TRACE,
        "st": capture.DONE,
        "start": 10,
        "steps": 3,
        "dir": "/x",
        "at": 12,
        "path": "/x/r0.json",
        "err": None,
        "sum": {
            "steps": [10, 12],
            "ops": [["aten::mm", 1500.0, 9]],
            "kernels": [["gemm", 900, 9]],
            "compute": 0.5,
            "comm": 0.3,
            "idle": 0.2,
            "wall_us": 1e5,
            "basis": "device",
            "train_ms": [1.0, 2.0],
        },
    }
    got = schema.decode(messages.frames(HEARTBEAT, 0, {"state": {"step": 1, "cap": cap}}))
    _same_keys(cap, messages.fields(got)["state"]["cap"])
    assert messages.plain(got)["state"]["cap"]["sum"]["ops"] == [["aten::mm", 1500.0, 9]]


@pytest.mark.parametrize("kind", sorted(types.BY_KIND))
def test_every_kind_has_a_type_and_a_decoder(kind):
    assert kind in KINDS
    msgspec.msgpack.Decoder(types.BY_KIND[kind])  # a type msgspec cannot use fails here, not on the first message
