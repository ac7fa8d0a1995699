"""A node's digest (relay/digest_fold.py): what its ranks said in one interval, folded into one message.

The relay of every node builds one (relay/digest.py) and viewers of big jobs take
them instead of every rank's own messages (watch/engine/receiver.py). These tests feed
the digest real rank messages (tests/messages.py), send it through the wire's
encoder and decoder, and read what an aggregator makes of it.
"""

import struct

import msgspec
import pytest

from ranktop.watch.aggregator import Aggregator
from ranktop.wire import schema, step_block
from ranktop.wire.names import HEARTBEAT, NODE
from ranktop.wire.messages import MAX_RANKS
from ranktop.wire.messages import NodeSteps, OpSummary, State
from ranktop.relay.digest_fold import NodeDigest
from ranktop.wire.pacing import HELLO_EVERY_S, OPS_EVERY_S, SAMPLE_EVERY_S, SLOW_EVERY_S

from .messages import heartbeat, hello, plain, raw, steps


def record(n, wall, **phases):
    return {"n": n, "t": 100.0 + n * wall, "w": wall, "p": phases}


def call(n, ph, t0, d, op="all_reduce", b=1024):
    return {"op": op, "seq": n * 10, "b": b, "dt": "float32", "g": 4, "d": d, "n": n, "ph": ph, "t0": t0}


def wired(body):
    """The digest as a viewer receives it, as plain maps and lists (messages.plain); ``body``: a digest as the
    relay builds it, or a body written as a plain map (as any peer might send it)."""
    frames = schema.encode(body) if isinstance(body, msgspec.Struct) else raw(NODE, body)
    return plain(schema.decode(frames))


def packed(*columns):
    """wire/step_block.py's block of ``columns``, as a plain map (for a test to damage)."""
    return {k: v for k, v in msgspec.structs.asdict(step_block.pack(*columns)).items() if v is not None}


def decoded(body):
    """The digest as the viewer's decoder hands it on."""
    return schema.decode(schema.encode(body))


def summary(fields):
    """An op's summary, read by name (a list on the wire: wire/messages.py's OpSummary)."""
    return msgspec.convert(fields, OpSummary)


def columns(msg):
    """A digest's packed step columns as lists (wire/step_block.py)."""
    return step_block.read(msgspec.convert(msg["steps"], NodeSteps))


def interval(msg, rank):
    """A rank's steps in a digest's columns: (last step, how many, start, mean wall, {phase: mean own time})."""
    steps = columns(msg)
    i = steps["r"].index(rank)
    return steps["n"][i], steps["c"][i], steps["t"][i], steps["w"][i], {name: own[i] for name, own in steps["p"].items()}


def ranks_in(msg):
    """The ranks a digest says anything of: in its step columns, in its entries, or both."""
    return sorted({*(columns(msg)["r"] if "steps" in msg else ()), *(e["r"] for e in msg["ranks"])})


def test_a_ranks_steps_of_an_interval_become_one_record_of_their_mean_own_times():
    digest = NodeDigest("j", "node0")
    digest.add(steps(0, [record(1, 0.10, forward=0.04, backward=0.05), record(2, 0.12, forward=0.06, backward=0.05)],
                                   calls=[call(1, "backward", 5.0, 0.02), call(2, "backward", 6.0, 0.02)]))  # fmt: skip
    msg = wired(digest.body(now=0.0, wall=1.0))
    (entry,) = msg["ranks"]
    last, count, start, wall, own = interval(msg, 0)
    assert (entry["r"], last, count) == (0, 2, 2)
    assert wall == pytest.approx(0.11) and start + wall == pytest.approx(100.0 + 2 * 0.12 + 0.12)  # ends with step 2
    assert own["forward"] == pytest.approx(0.05) and own["backward"] == pytest.approx(0.03)  # the 20 ms wait taken out
    assert own["comm"] == pytest.approx(0.02) and own["other"] == pytest.approx(0.01)
    ops = entry["ops"]["all_reduce"]
    assert summary(ops).calls == 2 and summary(ops).bytes == 2048
    assert len(entry["cx"]) == 2  # the raw calls' sample, for the fit


def test_a_ranks_gpu_times_are_what_its_digest_sums():
    """On a GPU the host only launches: the digest sums the device times (``g``), as the viewer would."""
    digest = NodeDigest("j", "node0")
    launched = [record(n, 0.003, forward=0.001, backward=0.001) for n in (1, 2)]
    for rec in launched:
        rec["g"] = {"w": 0.10, "p": {"forward": 0.04, "backward": 0.05}}
    digest.add(steps(0, launched, calls=[call(1, "backward", 5.0, 0.02), call(2, "backward", 6.0, 0.02)]))
    msg = wired(digest.body(now=0.0, wall=1.0))
    _, _, _, wall, own = interval(msg, 0)
    assert wall == pytest.approx(0.10) and own["forward"] == pytest.approx(0.04) and own["backward"] == pytest.approx(0.03)
    assert columns(msg)["g"] == [True]


def test_a_node_sends_one_ranks_raw_calls_at_a_time_its_ranks_in_turn():
    digest = NodeDigest("j", "node0")
    sampled = []
    for i in range(int(SAMPLE_EVERY_S / 0.25)):  # digests at 4 Hz, every rank sampling its calls each time
        now = i * 0.25
        for rank in range(2):
            digest.add(steps(rank, [record(i, 0.1, backward=0.05)], calls=[call(i, "backward", now, 0.02)]))
        sampled += [(now, e["r"]) for e in wired(digest.body(now, 100.0 + now))["ranks"] if "cx" in e]
    assert sampled == [(0.0, 0)]  # one rank's, once in the period: the viewer decodes every sample of 512 nodes
    digest.add(steps(0, [record(9, 0.1, backward=0.05)], calls=[call(9, "backward", 2.0, 0.02)]))
    digest.add(steps(1, [record(9, 0.1, backward=0.05)], calls=[call(9, "backward", 2.0, 0.02)]))
    assert [e["r"] for e in wired(digest.body(SAMPLE_EVERY_S, 102.0))["ranks"] if "cx" in e] == [1]  # the other's turn


def test_nothing_said_means_no_digest_and_a_quiet_rank_is_left_out():
    digest = NodeDigest("j", "node0")
    assert digest.body(0.0, 1.0) is None
    digest.add(steps(0, [record(1, 0.1, forward=0.05)]))
    digest.add(steps(1, [record(1, 0.1, forward=0.05)], host="node0"))
    assert ranks_in(wired(digest.body(0.0, 1.0))) == [0, 1]
    digest.add(steps(1, [record(2, 0.1, forward=0.05)]))
    assert ranks_in(wired(digest.body(0.25, 1.25))) == [1]


def test_state_and_collectives_ride_every_second_or_two_but_a_rank_that_made_no_step_sends_its_state_at_once():
    digest = NodeDigest("j", "node0")
    state = {"step": 3, "last": 2, "in_step": True, "phase": "forward", "step_age": 0.01}
    digest.add(steps(0, [record(2, 0.1, forward=0.05)], state=state, calls=[call(2, "forward", 1.0, 0.01)]))
    first = wired(digest.body(0.0, 1.0))["ranks"][0]
    assert "state" in first and "ops" in first
    digest.add(steps(0, [record(3, 0.1, forward=0.05)], state=state, calls=[call(3, "forward", 2.0, 0.01)]))
    second = wired(digest.body(0.25, 1.25))
    assert second["ranks"] == [] and columns(second)["n"] == [3]  # no state, no ops: its steps alone, no entry
    digest.add(heartbeat(0, dict(state, step_age=0.5)))
    stuck = wired(digest.body(0.5, 1.5))
    assert stuck["ranks"][0]["state"]["step_age"] == 0.5 and "steps" not in stuck
    digest.add(steps(0, [record(4, 0.1, forward=0.05)], state=state))
    ops_due = wired(digest.body(OPS_EVERY_S + 0.125, 1.75))["ranks"][0]  # its collectives due, its state not yet
    assert "state" not in ops_due and summary(ops_due["ops"]["all_reduce"]).calls == 1  # held back, not lost
    digest.add(steps(0, [record(5, 0.1, forward=0.05)], state=state))
    later = wired(digest.body(0.5 + SLOW_EVERY_S, 2.5))["ranks"][0]  # its state, SLOW_EVERY_S after it last rode
    assert later["state"] == state and "ops" not in later


def test_hellos_ride_when_they_change_and_every_two_seconds_for_late_viewers():
    digest = NodeDigest("j", "node0")
    digest.add(hello(0))
    assert wired(digest.body(0.0, 1.0))["ranks"][0]["hello"]["host"] == "node0"
    digest.add(hello(0))
    assert "hello" not in wired(digest.body(1.0, 2.0))["ranks"][0]
    digest.add(hello(0))
    assert "hello" in wired(digest.body(HELLO_EVERY_S, 11.0))["ranks"][0]


def test_an_aggregator_reads_a_digest_as_the_steps_it_stands_for():
    digest = NodeDigest("j", "node0")
    for rank in range(4):
        digest.add(hello(rank))
    clock = [0.0]
    agg = Aggregator("j", clock=lambda: clock[0])
    n = 0
    for interval in range(8):
        for _ in range(4):
            n += 1
            for rank in range(4):
                data = 0.05 if rank == 2 else 0.01  # rank 2 is slow in data
                digest.add(steps(rank, [record(n, 0.1 + data, data=data, forward=0.04, backward=0.05)]))
        clock[0] = interval * 0.25
        agg.ingest(decoded(digest.body(clock[0], 1000.0 + clock[0])), "tcp://node0:1")
    snap = agg.snapshot()
    assert [r.steps_seen for r in snap.ranks] == [32] * 4 and [r.step for r in snap.ranks] == [32] * 4
    assert snap.stragglers[0] == 2 and snap.ranks[2].culprit_phase == "data" and snap.ranks[2].status == "slow"
    assert snap.ranks[0].host == "node0" and snap.world_size == 4


def test_a_rank_heard_step_by_step_is_not_counted_twice_when_digests_arrive_too():
    digest = NodeDigest("j", "node0")
    agg = Aggregator("j")
    for n in range(1, 5):
        msg = steps(0, [record(n, 0.1, forward=0.05)])
        agg.ingest(msg)
        digest.add(msg)
    agg.ingest(decoded(digest.body(0.0, 1.0)))
    assert agg.snapshot().ranks[0].steps_seen == 4


def test_a_rank_heard_step_by_step_is_left_out_of_its_nodes_columns_and_the_others_are_taken():
    digest = NodeDigest("j", "node0")
    agg = Aggregator("j")
    for n in range(1, 5):
        for rank in range(3):
            msg = steps(rank, [record(n, 0.1 + 0.01 * rank, forward=0.05 + 0.01 * rank)])
            if rank == 1:
                agg.ingest(msg)  # rank 1 is heard step by step too
            digest.add(msg)
    agg.ingest(decoded(digest.body(0.0, 1.0)))
    by_rank = {r: agg.store.record(r) for r in agg.store.ranks()}
    assert [by_rank[r].steps_seen for r in range(3)] == [4, 4, 4] and [by_rank[r].last_step for r in range(3)] == [4, 4, 4]
    assert [len(by_rank[r].steps) for r in range(3)] == [1, 4, 1]  # one interval each, rank 1's own four steps
    assert by_rank[2].steps[0][2] == pytest.approx(0.12) and by_rank[2].last_step_end == pytest.approx(100.0 + 4 * 0.12 + 0.12)


def test_a_go_of_digests_where_a_rank_moved_nodes_counts_its_steps_as_one_by_one():
    """The receiver hands over a poll's digests in one go, written together (watch/engine/rank_store.py: settle). A rank
    in two nodes' digests of one go (it moved between them) must not be written twice in one numpy go: its
    steps count as they would one digest at a time."""
    first, second = NodeDigest("j", "node0"), NodeDigest("j", "node1")
    for n in (1, 2):
        first.add(steps(4, [record(n, 0.1, forward=0.05)]))
        first.add(steps(5, [record(n, 0.1, forward=0.05)]))
    for n in (3, 4, 5):
        second.add(steps(5, [record(n, 0.2, forward=0.15)]))
        second.add(steps(6, [record(n, 0.1, forward=0.05)]))
    frames = [schema.encode(d.body(0.0, 1.0)) for d in (first, second)]
    one, go = Aggregator("j"), Aggregator("j")
    for message in frames:
        one.ingest_frames(message, "tcp://relay:1")
    go.ingest_batch([(message, "tcp://relay:1") for message in frames])
    a, b = one.snapshot(), go.snapshot()
    assert [(r.rank, r.step, r.steps_seen) for r in a.ranks] == [(r.rank, r.step, r.steps_seen) for r in b.ranks]
    assert [(r.rank, r.step, r.steps_seen) for r in b.ranks] == [(4, 2, 2), (5, 5, 5), (6, 5, 3)]


def test_a_ranks_steps_are_columns_and_only_a_rank_with_more_to_say_gets_an_entry():
    """Most intervals most ranks have nothing but steps to say: the digest then carries its ranks' steps as
    columns, one list per figure, and no entry; a phase a rank spent nothing in is 0.0 in its column."""
    digest = NodeDigest("j", "node0")
    digest.add(steps(0, [record(1, 0.1, forward=0.05)]))
    digest.add(steps(1, [record(1, 0.1, forward=0.04, data=0.02)]))
    msg = wired(digest.body(1.0, 1.0))
    assert msg["ranks"] == [] and columns(msg)["r"] == [0, 1] and "g" not in msg["steps"]
    assert columns(msg)["p"]["data"] == [0.0, pytest.approx(0.02)]
    lists = [column for name, column in columns(msg).items() if name != "p"] + list(columns(msg)["p"].values())
    assert {len(column) for column in lists} == {2}
    digest.add(schema.decode(raw(HEARTBEAT, {"job": "j", "rank": 1, "ts": 2.0})))  # alive, with nothing to say
    alive = wired(digest.body(1.25, 1.25))
    assert alive["ranks"] == [{"r": 1}] and "steps" not in alive


@pytest.mark.parametrize(
    "body",
    [
        {"ranks": [{"r": -1}]},
        {"ranks": [{"state": {}}]},  # an entry without its rank
        {"ranks": [{"r": 0, "ops": {"all_reduce": [1, 2]}}]},
        {"ranks": [{"r": 0, "hello": {"host": "h"}}]},
        {"ranks": [{"r": 0, "state": []}]},
        {"steps": packed([0], [1], [0], [1.0], [0.1], {})},  # a record standing for no step
        {"steps": packed([0, 1], [1, 1], [256, 0], [1.0, 1.0], [0.1, 0.1], {})},  # ... after one of 256
        {"steps": packed([0], [1], [2**60], [1.0], [0.1], {})},  # more steps than MAX_FIGURE
        {"steps": packed([0], [1], [1], [1.0], [-0.1], {})},
        {"steps": packed([0], [1], [1], [1.0], [0.1], {"forward": [float("nan")]})},
        {"steps": packed([0], [1], [1], [1.0], [0.1], {"forward": [float("inf")]})},
        {"steps": packed([0], [1], [1], [1.0], [2e18], {})},
        {"steps": packed([0], [2**62], [1], [1.0], [0.1], {})},
        {"steps": packed([MAX_RANKS], [1], [1], [1.0], [0.1], {})},
        {"steps": packed([0], [1], [1], [1.0], [0.1], {"forward": [0.1]}) | {"p": ["forward", "forward"]}},
        {"steps": packed([0], [1], [1], [1.0], [0.1], {}) | {"g": b"\x02"}},
        {"steps": packed([0], [1], [1], [1.0], [0.1], {}) | {"r": [0]}},  # a list where bytes are packed
        {"steps": {k: v for k, v in packed([0], [1], [1], [1.0], [0.1], {}).items() if k != "n"}},  # a column missing
    ],
)
def test_a_malformed_digest_is_refused_where_it_is_decoded(body):
    with pytest.raises(schema.WireError):
        wired({"job": "j", "host": "node0", "ts": 1.0, "ranks": [], **body})


@pytest.mark.parametrize(
    "changed, fault",
    [
        ({"n": struct.pack("<q", 1)}, "node: step columns of unequal length"),
        ({"p": ["forward", "backward"]}, "node: step columns of unequal length"),
        ({"g": b"\x01"}, "node: step columns of unequal length"),
        ({"r": b"\x00\x00"}, "node: step columns of unequal length"),
        ({"r": struct.pack("<2i", 3, 3)}, "node: a rank twice in the step columns"),
    ],
)
def test_step_columns_that_do_not_line_up_are_refused_with_one_fault_text(changed, fault):
    steps = packed([0, 1], [1, 1], [1, 1], [1.0, 1.0], [0.1, 0.1], {"forward": [0.01, 0.02]})
    with pytest.raises(schema.WireError, match=f"^{fault}$"):
        wired({"job": "j", "host": "node0", "ts": 1.0, "ranks": [], "steps": {**steps, **changed}})


def test_a_node_s_rank_column_checked_once_still_gets_every_other_column_checked():
    """wire/step_block.py reads a node's rank column once (it comes again every interval); what comes with it is
    checked every time, and a column of ranks refused is refused every time."""
    sound = packed([7, 8], [1, 1], [1, 256], [1.0, 1.0], [0.1, 0.1], {})  # (256 after 1: eight zero bytes in a row)
    for _ in range(2):
        assert columns(wired({"job": "j", "host": "node0", "ts": 1.0, "ranks": [], "steps": sound}))["c"] == [1, 256]
    with pytest.raises(schema.WireError, match="^node: a step count out of range in the step columns$"):
        wired({"job": "j", "host": "node0", "ts": 1.0, "ranks": [], "steps": {**sound, "c": struct.pack("<2q", 1, 0)}})
    for _ in range(2):
        with pytest.raises(schema.WireError, match="^node: a rank twice in the step columns$"):
            wired({"job": "j", "host": "node0", "ts": 1.0, "ranks": [], "steps": {**sound, "r": struct.pack("<2i", 7, 7)}})


def test_the_rank_columns_remembered_stay_within_their_bytes_however_big_the_columns_sent(monkeypatch):
    """A rank column comes from the network and may be megabytes: the columns remembered as sound are bounded by
    their bytes (wire/step_block.py SOUND_RANKS_BYTES), not by their number; one bigger than that is checked
    every time and never kept."""
    monkeypatch.setattr(step_block, "SOUND_RANKS_BYTES", 64)
    monkeypatch.setattr(step_block, "_SOUND_RANKS", set())
    monkeypatch.setattr(step_block, "_sound_bytes", 0)
    for first in range(0, 40, 2):  # twenty nodes of two ranks: 8 bytes each
        step_block.check(step_block.pack([first, first + 1], [1, 1], [1, 1], [1.0, 1.0], [0.1, 0.1], {}))
        assert step_block._sound_bytes == sum(map(len, step_block._SOUND_RANKS)) <= 64
    big = step_block.pack(list(range(100)), [1] * 100, [1] * 100, [1.0] * 100, [0.1] * 100, {})  # 400 bytes
    step_block.check(big)
    assert big.r not in step_block._SOUND_RANKS and step_block._sound_bytes <= 64
    with pytest.raises(ValueError, match="a rank twice"):
        step_block.check(NodeSteps(r=struct.pack("<100i", *range(99), 0), n=big.n, c=big.c, f=big.f, p=big.p))


def test_packed_step_columns_read_back_as_they_were_built_and_a_negative_zero_passes():
    """The block packs each column as little-endian numbers (wire/step_block.py) and reads back the same lists;
    -0.0, which a subtraction can make, is a time of nothing, not a negative one."""
    own = {"forward": [0.04, -0.0], "comm": [0.0, 0.01]}
    block = step_block.pack([5, 2], [9, 2**40], [3, 1], [1.7e9, 0.0], [0.1, 1e18], own, [False, True])
    msg = wired({"job": "j", "host": "node0", "ts": 1.0, "ranks": [], "steps": block})
    assert columns(msg) == {"r": [5, 2], "n": [9, 2**40], "c": [3, 1], "t": [1.7e9, 0.0], "w": [0.1, 1e18], "p": own, "g": [False, True]}
    assert block.r == struct.pack("<2i", 5, 2) and block.n == struct.pack("<2q", 9, 2**40)


def test_an_older_relay_s_digest_is_named_as_such():
    """Node digests' steps were lists before protocol 1.6: a viewer tells such a relay to upgrade, in one line."""
    old = {"job": "j", "host": "node0", "ts": 1.0, "ranks": [],
           "steps": {"r": [0], "n": [1], "c": [1], "t": [1.0], "w": [0.1], "p": {"forward": [0.05]}}}  # fmt: skip
    with pytest.raises(schema.VersionMismatch, match="protocol 1.5, this side speaks 1.6: upgrade ranktop on both sides to 1.6"):
        schema.decode([b"node", msgspec.msgpack.encode(dict(old, v=[1, 5], k="node"))])


def test_a_hello_given_as_its_fields_is_the_hello_a_message_gives():
    """The simulator keeps each rank's hello fields and hands them over as they are (NodeDigest.add_hello): the
    digest is the one its ranks' hello messages make, and a hello unchanged is not sent again before its time."""
    by_message, by_fields = NodeDigest("j", "node0"), NodeDigest("j", "node0")
    for digest in (by_message, by_fields):
        for rank in (0, 1):
            msg = hello(rank)
            digest.add(msg) if digest is by_message else digest.add_hello(rank, msg.info(), msg.state)
    assert wired(by_fields.body(0.0, 1.0)) == wired(by_message.body(0.0, 1.0))
    by_fields.add_hello(0, hello(0).info(), None)
    assert "hello" not in wired(by_fields.body(1.0, 2.0))["ranks"][0]


def test_steps_given_as_columns_go_out_as_the_digest_s_columns_with_each_rank_s_entry_at_its_time():
    """Ranks whose steps come as ready columns (NodeDigest.add_columns) are in the digest's step columns, beside a
    rank that sent its records; their states ride every SLOW_EVERY_S and their collectives when given (add_ops)."""
    digest = NodeDigest("j", "node0")
    digest.add(steps(0, [record(7, 0.1, forward=0.06)]))
    state = State(step=8, last=7, in_step=True, phase="forward")
    own = {"forward": [0.05, 0.07], "other": [0.02, 0.01]}
    digest.add_columns([1, 2], [state, state], last=[7, 7], count=[2, 2], start=[99.0, 99.5], wall=[0.08, 0.09], own=own)
    op = OpSummary(calls=4, bytes=4096, waited=0.01, total=0.01, longest=0.004, group=4, dtype="float32")
    digest.add_ops(1, {"all_reduce": op})
    msg = wired(digest.body(0.0, 1.0))
    assert ranks_in(msg) == [0, 1, 2]
    assert interval(msg, 1) == (7, 2, 99.0, 0.08, {"forward": 0.05, "other": 0.02})
    assert interval(msg, 2)[4] == {"forward": 0.07, "other": 0.01}
    entries = {e["r"]: e for e in msg["ranks"]}
    assert summary(entries[1]["ops"]["all_reduce"]) == op and "state" in entries[2]
    digest.add_columns([1, 2], [state, state], last=[8, 8], count=[1, 1], start=[100.0, 100.0], wall=[0.1, 0.1], own=own)
    later = wired(digest.body(1.0, 2.0))
    assert later["ranks"] == [] and columns(later)["r"] == [1, 2]  # steps alone: no entry until the state is due
    digest.add_columns([1], [state], last=[9], count=[1], start=[100.0], wall=[0.1], own={"forward": [0.05]})
    assert [e["r"] for e in wired(digest.body(SLOW_EVERY_S, 3.0))["ranks"]] == [1]
