"""The wire schema: what is accepted, what is dropped, and what a version mismatch says."""

import msgpack
import msgspec
import pytest

from ranktop.wire import schema
from ranktop.wire.names import HELLO, STEPS
from ranktop.wire.messages import PROTOCOL_VERSION

import messages


def hello(**over):
    body = {"job": "j", "rank": 3, "ts": 1.0, "host": "h", "world": 8, "local_rank": 3, "pid": 42}
    body.update(over)
    return body


def test_a_message_round_trips_with_its_kind_as_topic():
    frames = messages.raw(HELLO, hello())
    assert frames[0] == b"hello"
    msg = schema.decode(frames)
    assert msg.rank == 3 and messages.plain(msg)["k"] == "hello" and messages.plain(msg)["v"] == list(PROTOCOL_VERSION)


def test_step_records_round_trip():
    steps = [{"n": 7, "t": 100.0, "w": 0.02, "p": {"forward": 0.01, "mine": 0.001}}]
    msg = schema.decode(messages.raw(STEPS, {"job": "j", "rank": 0, "ts": 1.0, "steps": steps}))
    assert messages.plain(msg)["steps"] == steps


def test_another_major_version_gets_a_clear_error():
    body = dict(hello(), v=[2, 0], k="hello")
    with pytest.raises(schema.VersionMismatch) as err:
        schema.decode([b"hello", msgpack.packb(body)])
    assert "protocol 2.0" in str(err.value) and "%d.%d" % PROTOCOL_VERSION in str(err.value) and "upgrade" in str(err.value)


def test_a_newer_minor_version_is_accepted_and_its_new_fields_left_out():
    """A field this side's types (wire/messages.py) do not list is dropped at decode: nothing downstream
    reads a field no type checked."""
    body = dict(hello(), v=[1, 9], k="hello", new_field="ignored")
    msg = schema.decode([b"hello", msgpack.packb(body)])
    assert msg.rank == 3 and "new_field" not in messages.plain(msg)


@pytest.mark.parametrize(
    "frames",
    [
        [b"hello"],
        [b"hello", b"\xc1not msgpack"],
        [b"hello", msgpack.packb([1, 2, 3])],
        [b"hello", msgpack.packb({"k": "hello"})],  # no version
        [b"steps", msgpack.packb(dict(hello(), v=[1, 0], k="hello"))],  # topic disagrees with kind
        [b"evil", msgpack.packb({"v": [1, 0], "k": "evil", "job": "j", "rank": 0, "ts": 1})],
        [b"hello", msgpack.packb(dict(hello(rank=-1), v=[1, 0], k="hello"))],
        [b"hello", msgpack.packb(dict(hello(rank=True), v=[1, 0], k="hello"))],
        [b"steps", msgpack.packb({"v": [1, 0], "k": "steps", "job": "j", "rank": 0, "ts": 1, "steps": [{"n": 1}]})],
        [
            b"steps",
            msgpack.packb({"v": [1, 0], "k": "steps", "job": "j", "rank": 0, "ts": 1, "steps": [{"n": 1, "t": 1, "w": 1, "p": {"x": -1}}]}),
        ],
        [b"hello", b"\x00" * (schema.MAX_BODY_BYTES + 1)],
        [
            b"steps",
            msgpack.packb(
                {"v": [1, 0], "k": "steps", "job": "j", "rank": 0, "ts": 1, "steps": [{"n": 2**63 + 5, "t": 1, "w": 1, "p": {}}]}
            ),
        ],  # beyond a window's int64 column
    ],
    ids=[
        "one-frame",
        "garbage",
        "not-a-map",
        "no-version",
        "topic-mismatch",
        "unknown-kind",
        "negative-rank",
        "bool-rank",
        "step-without-times",
        "negative-phase",
        "oversized",
        "huge-step-number",
    ],
)
def test_malformed_frames_raise_wire_error(frames):
    with pytest.raises(schema.WireError):
        schema.decode(frames)


def test_msgpack_extension_types_are_not_objects():
    # ext types (msgpack's escape hatch) must never turn into live objects
    body = msgpack.packb({"v": [1, 0], "k": "hello", "x": msgpack.ExtType(1, b"payload")})
    with pytest.raises(schema.WireError):
        schema.decode([b"hello", body])


def test_raw_collective_records_ride_in_a_steps_message_only_as_its_sample():
    calls = [{"op": "all_reduce", "seq": 1, "b": 4000, "dt": "float32", "g": 4, "d": 0.002, "n": 7, "ph": "backward", "t0": 5.0}]
    body = {"job": "j", "rank": 0, "ts": 1.0, "steps": [], "cx": calls, "coll": calls}
    msg = schema.decode(messages.raw(STEPS, body))
    assert messages.plain(msg)["cx"] == calls
    assert "coll" not in messages.plain(msg)  # no kind lists it: dropped unread, as any field the types do not name


def test_a_malformed_collective_record_is_refused():
    calls = [{"op": "all_reduce", "seq": 1, "b": -5, "dt": "float32", "g": 4, "d": 0.002, "n": 7, "ph": None, "t0": 5.0}]
    with pytest.raises(schema.WireError):
        schema.decode(messages.raw(STEPS, {"job": "j", "rank": 0, "ts": 1.0, "steps": [], "cx": calls}))


def test_device_times_ride_in_a_step_record_and_bad_ones_are_refused():
    step = {"n": 1, "t": 1.0, "w": 0.02, "p": {"forward": 0.005}, "g": {"w": 0.019, "p": {"forward": 0.012}}}
    body = {"job": "j", "rank": 0, "ts": 1.0, "steps": [step]}
    assert messages.plain(schema.decode(messages.raw(STEPS, body)))["steps"][0]["g"] == step["g"]
    for bad in ({"w": -1, "p": {}}, {"w": 0.1}, {"w": 0.1, "p": {"forward": "x"}}, [0.1]):
        with pytest.raises(schema.WireError):
            schema.decode(messages.raw(STEPS, dict(body, steps=[dict(step, g=bad)])))


def test_every_setting_is_in_the_readme_and_the_readme_names_no_other():
    """wire/settings.py is the one list of RANKTOP_* variables; the README's table follows it."""
    import re
    from pathlib import Path

    from ranktop.wire import settings

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    table = readme.split("## Environment", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"`(RANKTOP_[A-Z_]+)`", table)) == {s.name for s in settings.ALL}
    assert settings.rate_problem(4.0) is None and settings.rate_problem(0.05) and settings.rate_problem(True)


def test_a_misspelt_gauge_fails_where_it_is_written_and_where_it_is_read():
    """The producers' records are Structs (wire/messages.py): a gauge, a collective's figure or an allocator's
    counter spelt wrong is an error at the producer, and a reader asking for a name that is no field is too,
    rather than a None that reads as "not measured"."""
    import pytest
    from ranktop.wire.messages import CudaMemory, Gpu, LastCollective, Memory, State

    with pytest.raises(TypeError, match="utl"):
        Gpu(seq=1, utl=90)
    with pytest.raises(TypeError, match="sequence"):
        LastCollective(op="all_reduce", sequence=4)
    with pytest.raises(TypeError, match="allocated"):
        CudaMemory(allocated=1)
    gpu = Gpu(seq=1, util=90)
    assert gpu.get("util") == 90 and gpu["util"] == 90 and "util" in gpu and "temp_c" not in gpu and gpu.get("temp_c") is None
    with pytest.raises(KeyError, match="utl"):
        gpu.get("utl")
    # ... and on the wire they are the maps they always were: a peer of protocol 1.6 reads the same keys.
    state = State(gpu=gpu, mem=Memory(rss=1e9, cuda=CudaMemory(alloc=2.0)), collective=LastCollective(op="all_reduce", seq=4, inside=True))
    body = msgspec.msgpack.decode(msgspec.msgpack.encode(state))
    assert body == {"gpu": {"seq": 1, "util": 90}, "mem": {"rss": 1e9, "cuda": {"alloc": 2.0}},
                    "collective": {"op": "all_reduce", "seq": 4, "inside": True}}  # fmt: skip
