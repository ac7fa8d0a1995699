"""A node's digest (wire/node_digest.py): what its ranks said in one interval, folded into one message.

The relay of every node builds one (relay/digest.py) and viewers of big jobs take
them instead of every rank's own messages (watch/receiver.py). These tests feed
the digest real rank messages (tests/messages.py), send it through the wire's
encoder and decoder, and read what an aggregator makes of it.
"""

import pytest

from ranktop.watch.aggregator import Aggregator
from ranktop.wire import collective_summary, schema
from ranktop.wire.node_digest import HELLO_EVERY_S, SAMPLE_EVERY_S, SLOW_EVERY_S, NodeDigest

from .messages import hello, steps


def record(n, wall, **phases):
    return {"n": n, "t": 100.0 + n * wall, "w": wall, "p": phases}


def call(n, ph, t0, d, op="all_reduce", b=1024):
    return {"op": op, "seq": n * 10, "b": b, "dt": "float32", "g": 4, "d": d, "n": n, "ph": ph, "t0": t0}


def wired(body):
    """The digest as a viewer receives it."""
    return schema.decode(schema.encode(schema.NODE, body))


def test_a_ranks_steps_of_an_interval_become_one_record_of_their_mean_own_times():
    digest = NodeDigest("j", "node0")
    digest.add(schema.STEPS, steps(0, [record(1, 0.10, forward=0.04, backward=0.05), record(2, 0.12, forward=0.06, backward=0.05)],
                                   calls=[call(1, "backward", 5.0, 0.02), call(2, "backward", 6.0, 0.02)]))  # fmt: skip
    msg = wired(digest.body(now=0.0, wall=1.0))
    (entry,) = msg["ranks"]
    last, count, start, wall, own = entry["s"]
    assert (entry["r"], last, count) == (0, 2, 2)
    assert wall == pytest.approx(0.11) and start + wall == pytest.approx(100.0 + 2 * 0.12 + 0.12)  # ends with step 2
    assert own["forward"] == pytest.approx(0.05) and own["backward"] == pytest.approx(0.03)  # the 20 ms wait taken out
    assert own["comm"] == pytest.approx(0.02) and own["other"] == pytest.approx(0.01)
    ops = entry["ops"]["all_reduce"]
    assert ops[collective_summary.CALLS] == 2 and ops[collective_summary.BYTES] == 2048
    assert len(entry["cx"]) == 2  # the raw calls' sample, for the fit


def test_a_ranks_gpu_times_are_what_its_digest_sums():
    """On a GPU the host only launches: the digest sums the device times (``g``), as the viewer would."""
    digest = NodeDigest("j", "node0")
    launched = [record(n, 0.003, forward=0.001, backward=0.001) for n in (1, 2)]
    for rec in launched:
        rec["g"] = {"w": 0.10, "p": {"forward": 0.04, "backward": 0.05}}
    digest.add(schema.STEPS, steps(0, launched, calls=[call(1, "backward", 5.0, 0.02), call(2, "backward", 6.0, 0.02)]))
    (entry,) = wired(digest.body(now=0.0, wall=1.0))["ranks"]
    _, _, _, wall, own = entry["s"]
    assert wall == pytest.approx(0.10) and own["forward"] == pytest.approx(0.04) and own["backward"] == pytest.approx(0.03)
    assert entry["dev"] is True


def test_a_node_sends_one_ranks_raw_calls_at_a_time_its_ranks_in_turn():
    digest = NodeDigest("j", "node0")
    sampled = []
    for i in range(int(SAMPLE_EVERY_S / 0.25)):  # digests at 4 Hz, every rank sampling its calls each time
        now = i * 0.25
        for rank in range(2):
            digest.add(schema.STEPS, steps(rank, [record(i, 0.1, backward=0.05)], calls=[call(i, "backward", now, 0.02)]))
        sampled += [(now, e["r"]) for e in wired(digest.body(now, 100.0 + now))["ranks"] if "cx" in e]
    assert sampled == [(0.0, 0)]  # one rank's, once in the period: the viewer decodes every sample of 512 nodes
    digest.add(schema.STEPS, steps(0, [record(9, 0.1, backward=0.05)], calls=[call(9, "backward", 2.0, 0.02)]))
    digest.add(schema.STEPS, steps(1, [record(9, 0.1, backward=0.05)], calls=[call(9, "backward", 2.0, 0.02)]))
    assert [e["r"] for e in wired(digest.body(SAMPLE_EVERY_S, 102.0))["ranks"] if "cx" in e] == [1]  # the other's turn


def test_nothing_said_means_no_digest_and_a_quiet_rank_is_left_out():
    digest = NodeDigest("j", "node0")
    assert digest.body(0.0, 1.0) is None
    digest.add(schema.STEPS, steps(0, [record(1, 0.1, forward=0.05)]))
    digest.add(schema.STEPS, steps(1, [record(1, 0.1, forward=0.05)], host="node0"))
    assert [e["r"] for e in wired(digest.body(0.0, 1.0))["ranks"]] == [0, 1]
    digest.add(schema.STEPS, steps(1, [record(2, 0.1, forward=0.05)]))
    assert [e["r"] for e in wired(digest.body(0.25, 1.25))["ranks"]] == [1]


def test_state_and_collectives_ride_once_a_second_but_a_rank_that_made_no_step_sends_its_state_at_once():
    digest = NodeDigest("j", "node0")
    state = {"step": 3, "last": 2, "in_step": True, "phase": "forward", "step_age": 0.01}
    digest.add(schema.STEPS, steps(0, [record(2, 0.1, forward=0.05)], state=state, calls=[call(2, "forward", 1.0, 0.01)]))
    first = digest.body(0.0, 1.0)["ranks"][0]
    assert "state" in first and "ops" in first
    digest.add(schema.STEPS, steps(0, [record(3, 0.1, forward=0.05)], state=state, calls=[call(3, "forward", 2.0, 0.01)]))
    second = digest.body(0.25, 1.25)["ranks"][0]
    assert "state" not in second and "ops" not in second and second["s"][0] == 3
    digest.add(schema.HEARTBEAT, {"k": "heartbeat", "job": "j", "rank": 0, "ts": 2.0, "state": dict(state, step_age=0.5)})
    stuck = digest.body(0.5, 1.5)["ranks"][0]
    assert stuck["state"]["step_age"] == 0.5 and "s" not in stuck
    digest.add(schema.STEPS, steps(0, [record(4, 0.1, forward=0.05)], state=state))
    later = digest.body(0.5 + SLOW_EVERY_S, 2.5)["ranks"][0]
    assert later["ops"]["all_reduce"][collective_summary.CALLS] == 1  # the call held back since, not lost


def test_hellos_ride_when_they_change_and_every_two_seconds_for_late_viewers():
    digest = NodeDigest("j", "node0")
    digest.add(schema.HELLO, hello(0))
    assert wired(digest.body(0.0, 1.0))["ranks"][0]["hello"]["host"] == "node0"
    digest.add(schema.HELLO, hello(0))
    assert "hello" not in digest.body(1.0, 2.0)["ranks"][0]
    digest.add(schema.HELLO, hello(0))
    assert "hello" in digest.body(HELLO_EVERY_S, 11.0)["ranks"][0]


def test_an_aggregator_reads_a_digest_as_the_steps_it_stands_for():
    digest = NodeDigest("j", "node0")
    for rank in range(4):
        digest.add(schema.HELLO, hello(rank))
    clock = [0.0]
    agg = Aggregator("j", clock=lambda: clock[0])
    n = 0
    for interval in range(8):
        for _ in range(4):
            n += 1
            for rank in range(4):
                data = 0.05 if rank == 2 else 0.01  # rank 2 is slow in data
                digest.add(schema.STEPS, steps(rank, [record(n, 0.1 + data, data=data, forward=0.04, backward=0.05)]))
        clock[0] = interval * 0.25
        agg.ingest(wired(digest.body(clock[0], 1000.0 + clock[0])), "tcp://node0:1")
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
        digest.add(schema.STEPS, msg)
    agg.ingest(wired(digest.body(0.0, 1.0)))
    assert agg.snapshot().ranks[0].steps_seen == 4


@pytest.mark.parametrize(
    "entry",
    [
        {"r": -1, "ts": 1.0},
        {"r": 0},
        {"r": 0, "ts": 1.0, "s": [1, 0, 1.0, 0.1, {}]},  # a record standing for no step
        {"r": 0, "ts": 1.0, "s": [1, 1, 1.0, -0.1, {}]},
        {"r": 0, "ts": 1.0, "s": [1, 1, 1.0, 0.1, {"forward": "slow"}]},
        {"r": 0, "ts": 1.0, "ops": {"all_reduce": [1, 2]}},
        {"r": 0, "ts": 1.0, "hello": {"host": "h"}},
        {"r": 0, "ts": 1.0, "state": []},
    ],
)
def test_a_malformed_digest_is_refused_where_it_is_decoded(entry):
    with pytest.raises(schema.WireError):
        wired({"job": "j", "host": "node0", "ts": 1.0, "ranks": [entry]})
