"""Nothing a peer sends can break the viewer: property-based fuzzing of everything read from others.

Hypothesis damages real messages (made by the probe's own Sender, tests/messages.py)
and generates new ones from the real keys; whatever comes out, ``schema.decode``
rejects it with a ``WireError`` or the aggregator ingests it, and a snapshot (its
``--json`` document and its verdict line included) is still taken. Signed
commands reach only ``AuthError``/``WireError``; node records only ``ValueError``
(and the folder reader skips them). A short run here (a few seconds);
``benchmarks/fuzz.py`` runs a million inputs with a faster mutator.
"""

from __future__ import annotations

import json
import math
import os

import msgpack
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from messages import collectives, frames, hello, plain
from support import wait_for

from ranktop.watch.model import verdict
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.engine.receiver import Receiver
from ranktop.wire import auth, schema
from ranktop.wire.names import HEARTBEAT, HELLO, REPLY, STEPS, TELEMETRY_KINDS
from ranktop.transport import rendezvous
from ranktop.relay.digest_fold import NodeDigest
from ranktop.watch.model.json_doc import document

FUZZ = settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

JOB = "j"
STATE = {
    "step": 12, "last": 11, "in_step": True, "phase": "backward", "step_age": 0.25, "dropped": 3, "rejected": {"forged": 2},
    "rate_hz": 4.0, "median_step_s": 0.2, "collective": {"op": "all_reduce", "seq": 40, "b": 4 << 20, "dt": "float32", "inside": True},
    "mem": {"rss": 1 << 30, "cuda": {"dev": 0, "alloc": 1 << 30, "resv": 2 << 30, "peak": 3 << 30, "cap": 80 << 30}},
    "gpu": {"seq": 5, "t": 1.0e9, "name": "H100", "util": 87, "mem_used": 1 << 30, "power_w": 500.0, "throttle": ["power"]},
    "cap": {"id": "c1", "kind": "trace", "st": "done", "start": 20, "steps": 3, "dir": "/tmp/c", "path": "/tmp/c/r1.json",
            "sum": {"steps": [20, 22], "ops": [["aten::mm", 900.0, 4]], "wall_us": 1000, "compute": 0.5, "comm": 0.3, "idle": 0.2}},
}  # fmt: skip
CALL = {"op": "all_reduce", "seq": 1, "b": 1024, "dt": "float32", "g": 4, "d": 0.01, "n": 10, "ph": "backward", "t0": 5.0}
RECORDS = [{"n": n, "t": 1.0e9 + n * 0.2, "w": 0.2, "p": {"forward": 0.05, "backward": 0.1}, "g": {"w": 0.18, "p": {"forward": 0.04}}}
           for n in range(8, 12)]  # fmt: skip
SUMMARY = {"n": 10, "ph": "backward", "w": 0.02, "ops": {"all_reduce": [2, 2048, 0.02, 0.02, 0.01, 4, "float32"]}}

#: Real messages, as the probe's Sender encodes them.
REAL = [
    frames(
        HELLO,
        1,
        dict(
            plain(hello(1)),
            work={"dtype": "bf16", "batch": 32, "flops": 1.2e12, "peak_tflops": 989.0},
            relay={"telemetry": "tcp://node0:5555", "control": "tcp://node0:5556"},
            groups=[
                {"id": "1", "size": 4, "ranks": [0, 4, 1], "role": "dp", "compact": True},
                {"id": "2", "desc": "mesh_tp", "size": 2, "ranks": [0, 1]},
                {"id": "3", "size": 2, "ranks": [1, 3], "role": "pp", "p2p": True},
            ],
        ),
    ),  # fmt: skip
    frames(STEPS, 1, {"steps": RECORDS, "state": STATE, **collectives([dict(CALL, seq=i, b=1024 << i) for i in range(4)])}),
    frames(STEPS, 2, {"steps": RECORDS, "state": STATE, "cs": [SUMMARY], "cx": [CALL]}),
    frames(HEARTBEAT, 1, {"state": dict(STATE, gpu={"na": "rank uses no GPU"})}),
    frames(REPLY, 1, {"id": "abc", "cmd": "stacks", "ok": False, "result": {"error": "no\nmore", "threads": []}}),
]


def _digest() -> list[bytes]:
    """A node's digest of ranks 1 and 2 (relay/digest_fold.py), from the messages above."""
    fold = NodeDigest(JOB, "node0")
    for message in REAL[:4]:
        fold.add(schema.decode(message))
    fold.add(schema.decode(frames(STEPS, 2, {"steps": RECORDS[:2], "state": STATE, "cs": [SUMMARY]})))
    return schema.encode(fold.body(0.0, 1.0e9))


REAL.append(_digest())


def _keys(obj, out=None):
    out = set() if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(k)
            _keys(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _keys(v, out)
    return out


KEYS = sorted(set().union(*(_keys(msgpack.unpackb(f[1])) for f in REAL)))

scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=6) | st.binary(max_size=3)
    | st.sampled_from([0, -1, 2**63 - 1, math.inf, -math.inf, math.nan, 1e300, "backward", "all_reduce", "done"])
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), children, max_size=3),
    max_leaves=8,
)  # fmt: skip


@st.composite
def damaged(draw) -> tuple[bytes, dict]:
    """A real message with one to three places changed: a key dropped, a value replaced, a key added."""
    msg = msgpack.unpackb(draw(st.sampled_from(REAL))[1], raw=False)
    for _ in range(draw(st.integers(1, 3))):
        target = msg
        while True:  # walk down to a map or list
            inner = [v for v in (target.values() if isinstance(target, dict) else target) if isinstance(v, (dict, list))]
            if not inner or draw(st.integers(0, 2)) == 0:
                break
            target = inner[draw(st.integers(0, len(inner) - 1))]
        op = draw(st.sampled_from(("drop", "replace", "add")))
        if isinstance(target, dict):
            if op != "add" and target:
                key = draw(st.sampled_from(sorted(target)))
                if op == "drop":
                    del target[key]
                else:
                    target[key] = draw(values)
            else:
                target[draw(st.sampled_from(KEYS))] = draw(values)
        elif op == "drop" and target:
            del target[draw(st.integers(0, len(target) - 1))]
        elif op == "replace" and target:
            target[draw(st.integers(0, len(target) - 1))] = draw(values)
        else:
            target.append(draw(values))
    return msg.get("k", "steps") if isinstance(msg.get("k"), str) else "steps", msg


@st.composite
def generated(draw) -> tuple[str, dict]:
    """A message of a telemetry kind with the envelope right and the rest drawn from the real keys."""
    kind = draw(st.sampled_from(TELEMETRY_KINDS))
    msg = {"v": [1, 4], "k": kind, "job": JOB, "rank": draw(st.integers(0, 7)), "ts": 1.0e9}
    msg.update(draw(st.dictionaries(st.sampled_from(KEYS), values, max_size=6)))
    return kind, msg


def _fed() -> Aggregator:
    """An aggregator that already knows ranks 1 and 2 (the damaged message meets real state)."""
    agg = Aggregator(JOB)
    for f in REAL:
        agg.ingest_frames(f)
    return agg


def _must_survive(kind: str, msg: dict) -> None:
    try:
        body = msgpack.packb(msg, use_bin_type=True)
    except (ValueError, TypeError, OverflowError):
        return  # not something the wire can carry
    agg = _fed()
    try:
        decoded = schema.decode([kind.encode(), body])
    except schema.WireError:
        decoded = None
    if decoded is not None and decoded.KIND in TELEMETRY_KINDS:
        agg.ingest(decoded)  # not ingest_frames: its safety net would hide a check decode lacks
    snap = agg.snapshot()
    json.dumps(document(snap))
    verdict.verdict(snap)
    agg.ingest_frames(REAL[1])  # and it goes on
    assert agg.snapshot().ranks


@FUZZ
@given(damaged())
def test_a_damaged_real_message_is_refused_or_read_and_the_snapshot_still_works(case):
    _must_survive(*case)


@FUZZ
@given(generated())
def test_a_generated_message_is_refused_or_read_and_the_snapshot_still_works(case):
    _must_survive(*case)


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=4), st.integers(0, len(REAL) - 1), st.binary(max_size=8), st.integers(0, 200))
def test_damaged_bytes_are_refused_with_a_wire_error(parts, which, noise, at):
    topic, body = REAL[which]
    for frames_ in (parts, [topic, body[:at] + noise + body[at + len(noise) :]]):
        try:
            schema.decode(frames_)
        except schema.WireError:
            pass


SECRET = b"k" * 32
COMMAND = {"v": [1, 4], "k": "command", "job": JOB, "id": "c1", "cmd": "stacks", "args": {}, "ranks": [0], "ts": 1.0e9}


@FUZZ
@given(
    st.dictionaries(st.sampled_from(sorted(COMMAND)) | st.sampled_from(KEYS), values, max_size=4),
    st.sampled_from([b"command", b"steps", b""]),
)
def test_the_command_verifier_raises_only_its_documented_errors(changes, topic):
    body = msgpack.packb(dict(COMMAND, **changes), use_bin_type=True)
    verifier = auth.CommandVerifier(SECRET, JOB)
    for frames_ in ([topic, body, auth._mac(SECRET, topic, body)], [topic, body, b"forged"], [topic, body]):
        try:
            verifier.verify(frames_, now=1.0e9)
        except schema.WireError:  # AuthError is one
            pass


NODE = {"job": JOB, "host": "node0", "telemetry": "tcp://node0:5555", "control": "tcp://node0:5556", "pid": 4242, "started": 1.0e9}


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(NODE) + ["machine", "slurm_job", "curve"]), values, max_size=4), st.binary(max_size=40))
def test_a_node_record_parses_or_is_a_value_error(changes, garbage):
    for text in (json.dumps(dict(NODE, **changes), default=repr).encode(), garbage):
        try:
            record = rendezvous.parse_node(text)
        except ValueError:
            continue
        assert isinstance(record.pid, int) and record.pid > 0 and math.isfinite(record.started)
        assert record.encrypted in (None, True, False)
        record.is_stale()


def test_a_node_record_says_whether_its_relay_encrypts_and_an_older_one_does_not_say(tmp_path):
    for encrypted in (True, False, None):
        path = rendezvous.write_node(rendezvous.NodeRecord(**NODE, encrypted=encrypted), tmp_path)
        assert rendezvous.parse_node(path.read_bytes()).encrypted is encrypted


def test_the_folder_reader_skips_whatever_is_not_a_node_record(tmp_path):
    folder = rendezvous.job_dir(JOB, tmp_path)
    folder.mkdir(parents=True)
    good = rendezvous.write_node(rendezvous.NodeRecord(**NODE), tmp_path)
    (folder / "node-nan.json").write_text(json.dumps(dict(NODE, started=float("nan"))))
    (folder / "node-deep.json").write_text("[" * 100_000)
    (folder / "node-big.json").write_bytes(b" " * (rendezvous.MAX_RECORD_BYTES + 10))
    (folder / "node-dir.json").mkdir()
    os.mkfifo(folder / "node-fifo.json")  # would block a plain open() for ever
    assert [r.path for r in rendezvous.read_nodes(JOB, tmp_path)] == [good]


def test_the_receiver_thread_survives_a_message_that_breaks_ingest():
    """A check decode might lack one day: the message is dropped, counted and named once; the thread goes on."""

    class Fragile(Aggregator):
        def _ingest_locked(self, msg, endpoint, now, wall):  # (what ingest_batch calls for each decoded message)
            if getattr(msg, "rank", None) == 13:
                raise KeyError("ph")
            super()._ingest_locked(msg, endpoint, now, wall)

    class BrokenTap:
        def tap(self, frames_, endpoint):
            if frames_[0] == HEARTBEAT.encode():
                raise RuntimeError("the recorder broke")

        def endpoint(self, url, host=None):
            pass

    context = zmq.Context.instance()
    pub = context.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    url = f"tcp://127.0.0.1:{port}"
    agg = Fragile(JOB)
    receiver = Receiver(agg, [url], recorder=BrokenTap())
    receiver.start()
    try:
        poison = [frames(STEPS, 13, {"steps": RECORDS}), frames(HEARTBEAT, 3, {"state": STATE})]

        def delivered():
            for f in poison * 2 + [REAL[0]]:
                pub.send_multipart(f)
            return 1 in {r.rank for r in agg.snapshot().ranks}

        wait_for(delivered, 10, "the receiver took nothing after the poison")
        assert receiver.is_alive()
        errors = agg.snapshot().errors
        assert errors.count("dropped steps messages the viewer could not read: KeyError") == 1
        assert errors.count("dropped messages the receiver could not handle: RuntimeError") == 1
        assert agg.snapshot().dropped_messages >= 4
    finally:
        receiver.stop()
        pub.close(linger=0)
