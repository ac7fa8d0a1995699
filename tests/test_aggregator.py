"""The aggregator, fed synthetic streams: straggler ranking, silence, drops. No sockets, no terminal."""

import random

import msgpack
import pytest

from ranktop.watch.aggregator import Aggregator
from ranktop.wire import schema
from ranktop.wire.names import HEARTBEAT
from ranktop.watch.model.json_doc import document
import messages


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def hello(rank, world=4, host="node0"):
    return messages.hello(rank, world, host)


def steps(rank, records):
    return messages.steps(rank, records)


def ddp_step(n, slow_rank, rank, slow_s, phase, noise=0.0):
    """One step of synchronous training: the slow rank computes longer, every other rank waits in backward."""
    base = {"data": 0.002, "forward": 0.010, "backward": 0.015, "optimizer": 0.003}
    p = {k: v + random.uniform(0, noise) for k, v in base.items()}
    if rank == slow_rank:
        p[phase] += slow_s
    else:
        p["backward"] += slow_s  # waiting in the gradient all-reduce for the slow rank
    return {"n": n, "t": 100.0 + n * 0.05, "w": sum(p.values()) + 0.001, "p": p}


def feed(agg, world, n_steps, slow_rank=-1, slow_s=0.0, phase="forward", noise=0.0005, hosts=None):
    for r in range(world):
        agg.ingest(hello(r, world, host=hosts[r] if hosts else "node0"))
    for n in range(n_steps):
        for r in range(world):
            agg.ingest(steps(r, [ddp_step(n, slow_rank, r, slow_s, phase, noise)]))


def test_every_rank_appears_with_its_phase_medians():
    agg = Aggregator("j", clock=Clock())
    feed(agg, 4, 20)
    snap = agg.snapshot()
    assert [r.rank for r in snap.ranks] == [0, 1, 2, 3]
    assert snap.world_size == 4 and snap.global_step == 19
    assert snap.phase_names == ["data", "forward", "backward", "optimizer", "other"]
    row = snap.ranks[0]
    assert row.host == "node0" and abs(row.phases["forward"] - 0.010) < 0.001 and row.steps_seen == 20


def test_a_slow_rank_ranks_first_in_whichever_phase_it_is_slow():
    # Backward is left out on purpose: under DDP a slow backward and the others' wait
    # in the gradient all-reduce land in the same phase, and phase timings alone
    # cannot tell them apart; that needs the collective wait time of each rank.
    for phase in ("data", "forward", "optimizer"):
        agg = Aggregator("j", clock=Clock())
        feed(agg, 8, 30, slow_rank=5, slow_s=0.040, phase=phase)
        snap = agg.snapshot()
        top = snap.ranks[snap.stragglers[0]]
        assert top.rank == 5, phase
        assert top.status == "slow" and top.culprit_phase == phase
        assert 0.035 < top.excess_s < 0.045
        assert [r.rank for r in snap.ranks if r.status == "slow"] == [5]


def test_a_healthy_noisy_job_flags_nobody():
    random.seed(1)
    agg = Aggregator("j", clock=Clock())
    feed(agg, 16, 64, noise=0.002)
    assert all(r.status == "ok" for r in agg.snapshot().ranks)


def test_one_slow_step_is_not_a_straggler():
    agg = Aggregator("j", clock=Clock())
    feed(agg, 4, 30)
    agg.ingest(steps(2, [ddp_step(30, 2, 2, 0.5, "forward")]))
    assert agg.snapshot().ranks[2].status == "ok"


def test_a_rank_that_stops_talking_is_marked_silent_not_removed():
    clock = Clock()
    agg = Aggregator("j", clock=clock, silent_after_s=3.0)
    feed(agg, 4, 10)
    clock.now += 5
    for r in (0, 1, 3):
        agg.ingest(messages.decoded("heartbeat", r, {}))
    snap = agg.snapshot()
    assert [r.status for r in snap.ranks] == ["ok", "ok", "silent", "ok"]
    assert snap.stragglers[0] == 2 and snap.silent == 1 and snap.connected == 3


def test_malformed_foreign_and_other_version_frames_are_dropped_and_counted():
    agg = Aggregator("j", clock=Clock())
    agg.ingest_frames([b"hello", b"garbage"])
    agg.ingest_frames(messages.raw("hello", dict(messages.plain(hello(0)), job="another-job")))
    agg.ingest_frames([b"hello", msgpack.packb(dict(messages.plain(hello(0)), v=[9, 0]))], "tcp://node7:5555")
    snap = agg.snapshot()
    assert snap.dropped_messages == 3 and snap.ranks == []
    garbage, version = snap.errors  # another job's traffic is only counted
    assert garbage == "dropped malformed hello messages: body is not msgpack"
    assert "tcp://node7:5555" in version and "protocol 9.0" in version


def test_each_kind_of_malformed_message_is_named_once_however_often_it_comes():
    agg = Aggregator("j", clock=Clock())
    call = {"op": "all_reduce", "seq": 1, "b": 1024, "dt": "float32", "g": 4, "d": 0.01, "n": 1, "t0": 5.0}  # no "ph"
    for _ in range(5):
        agg.ingest_frames(messages.raw("steps", {"job": "j", "rank": 0, "ts": 1.0, "steps": [], "cx": [call]}))
        agg.ingest_frames(messages.raw("heartbeat", {"job": "j", "rank": 0, "ts": 1.0, "state": {"dropped": "many"}}))
    agg.ingest(hello(0))
    snap = agg.snapshot()
    assert snap.dropped_messages == 10 and [r.rank for r in snap.ranks] == [0]
    assert snap.errors == [
        "dropped malformed steps messages: Object missing required field `ph` - at `$.cx[]`",
        "dropped malformed heartbeat messages: Expected `int | null`, got `str` - at `$.state.dropped`",
    ]


def test_an_endpoint_that_never_answers_is_shown_waiting():
    clock = Clock()
    agg = Aggregator("j", clock=clock, silent_after_s=3.0)
    agg.add_endpoint("tcp://a:1", "a")
    agg.add_endpoint("tcp://b:2", "b")
    clock.now += 4
    agg.ingest(hello(0), "tcp://a:1")
    states = {e.url: (e.state, round(e.quiet_s)) for e in agg.snapshot().endpoints}
    assert states == {"tcp://a:1": ("connected", 0), "tcp://b:2": ("waiting", 4)}
    clock.now += 10
    assert {e.url: e.state for e in agg.snapshot().endpoints}["tcp://a:1"] == "lost"


def test_replies_carry_the_round_trip_of_commands_this_tui_sent():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    agg.note_sent("c1")
    clock.now += 0.004
    agg.ingest(messages.reply(1, "c1", "ping"))
    (reply,) = agg.snapshot().replies
    assert (reply.rank, reply.ok) == (1, True) and abs(reply.rtt_s - 0.004) < 1e-9


def test_512_ranks_make_a_snapshot():
    agg = Aggregator("j", clock=Clock(), window=16)
    feed(agg, 512, 16, slow_rank=300, slow_s=0.030, phase="data")
    snap = agg.snapshot()
    assert len(snap.ranks) == 512 and snap.stragglers[0] == 300


def test_the_json_document_has_the_documented_keys():
    agg = Aggregator("j", clock=Clock())
    feed(agg, 2, 5)
    doc = document(agg.snapshot())
    assert {"job", "world_size", "global_step", "steps_per_s", "ranks", "stragglers", "connected", "silent"} <= set(doc)
    assert {"rank", "host", "step", "step_s", "phases", "status", "score", "culprit_phase"} <= set(doc["ranks"][0])


def test_when_every_rank_of_one_node_is_slow_the_node_is_named():
    agg = Aggregator("j", clock=Clock())
    hosts = ["a", "a", "b", "b", "c", "c"]
    for r, host in enumerate(hosts):
        agg.ingest(hello(r, 6, host=host))
    for n in range(20):
        for r, host in enumerate(hosts):
            slow = 0.030 if host == "b" else 0.0
            agg.ingest(steps(r, [{"n": n, "t": 100.0 + n, "w": 0.05, "p": {"forward": 0.01 + slow, "backward": 0.03 - slow}}]))
    snap = agg.snapshot()
    assert snap.slow_hosts == ["b"]
    assert sorted(snap.stragglers[:2]) == [2, 3]


def test_one_slow_rank_does_not_make_its_node_slow():
    agg = Aggregator("j", clock=Clock())
    feed(agg, 4, 20, slow_rank=2, slow_s=0.030, phase="forward", hosts=["a", "a", "b", "b"])
    snap = agg.snapshot()
    assert snap.ranks[2].status == "slow" and snap.ranks[2].host == "b"
    assert snap.slow_hosts == []


def test_ranks_that_send_gpu_times_are_listed():
    agg = Aggregator("j", clock=Clock())
    feed(agg, 2, 3)
    agg.ingest(steps(1, [{"n": 9, "t": 1.0, "w": 0.05, "p": {"forward": 0.01}, "g": {"w": 0.04, "p": {"forward": 0.02}}}]))
    assert agg.snapshot().device_time_ranks == [1]


def test_a_quiet_endpoint_is_lost_with_the_ranks_heard_through_it_and_a_replacement_brings_them_back():
    clock = Clock()
    agg = Aggregator("j", clock=clock, silent_after_s=3.0)
    agg.add_endpoint("tcp://a:1", "a")
    agg.add_endpoint("tcp://b:1", "b")
    for r in range(4):
        agg.ingest(hello(r, host="a" if r < 2 else "b"), "tcp://a:1" if r < 2 else "tcp://b:1")
    clock.now += 5
    for r in (0, 1):
        agg.ingest(hello(r, host="a"), "tcp://a:1")
    by_host = {e.host: e for e in agg.snapshot().endpoints}
    assert (by_host["a"].state, by_host["a"].ranks) == ("connected", (0, 1))
    assert (by_host["b"].state, by_host["b"].ranks) == ("lost", (2, 3))

    agg.replace_endpoint("tcp://b:1", "tcp://b:2", "b")  # node b's relay is back on another port
    for r in (2, 3):
        agg.ingest(hello(r, host="b"), "tcp://b:2")
    assert [(e.url, e.state, e.ranks) for e in agg.snapshot().endpoints] == [
        ("tcp://a:1", "connected", (0, 1)),
        ("tcp://b:2", "connected", (2, 3)),
    ]


def test_a_rank_heard_through_another_relay_moves_to_its_row_at_the_next_snapshot():
    """The ranks by relay are kept from one snapshot to the next while no rank moves (RankStore._ranks_by_endpoint)."""
    agg = Aggregator("j")
    agg.add_endpoint("tcp://a:1", "a")
    agg.add_endpoint("tcp://b:1", "b")
    for r in range(4):
        agg.ingest(hello(r, host="a"), "tcp://a:1")
    assert [(e.url, e.ranks) for e in agg.snapshot().endpoints] == [("tcp://a:1", (0, 1, 2, 3)), ("tcp://b:1", ())]
    assert [(e.url, e.ranks) for e in agg.snapshot().endpoints] == [("tcp://a:1", (0, 1, 2, 3)), ("tcp://b:1", ())]
    agg.ingest(hello(3, host="a"), "tcp://b:1")
    assert [(e.url, e.ranks) for e in agg.snapshot().endpoints] == [("tcp://a:1", (0, 1, 2)), ("tcp://b:1", (3,))]


def test_a_rank_heard_before_its_hello_goes_by_the_host_of_its_nodes_relay():
    agg = Aggregator("j")
    agg.add_endpoint("tcp://node-b:24004", "node-b")
    agg.ingest(steps(2, [{"n": 1, "t": 100.0, "w": 0.03, "p": {"data": 0.01}}]), "tcp://node-b:24004")
    assert [(r.rank, r.host) for r in agg.snapshot().ranks] == [(2, "node-b")]
    agg.ingest(steps(3, [{"n": 1, "t": 100.0, "w": 0.03, "p": {"data": 0.01}}]))  # heard through no known relay
    assert [(r.rank, r.host) for r in agg.snapshot().ranks] == [(2, "node-b"), (3, "?")]


def test_a_rank_s_host_is_its_hello_s_and_a_restart_on_another_host_moves_it():
    agg = Aggregator("j")
    agg.add_endpoint("tcp://node-b:24004", "node-b")
    agg.ingest(steps(0, [{"n": 1, "t": 100.0, "w": 0.03, "p": {"data": 0.01}}]), "tcp://node-b:24004")
    agg.ingest(hello(1, host="node-c"), "tcp://node-b:24004")
    snap = agg.snapshot()
    assert [(r.rank, r.host) for r in snap.ranks] == [(0, "node-b"), (1, "node-c")]
    assert snap.ranks.table.host_id[0] != snap.ranks.table.host_id[1]
    agg.ingest(hello(0, host="node-c"), "tcp://node-b:24004")  # its hello names a host other than its relay's
    agg.ingest(messages.hello(1, 4, "node-d", pid=999), "tcp://node-b:24004")  # a new process, on another host
    snap = agg.snapshot()
    assert [(r.rank, r.host) for r in snap.ranks] == [(0, "node-c"), (1, "node-d")]
    assert snap.ranks.table.host_id[0] != snap.ranks.table.host_id[1]


def test_a_table_of_hosts_full_of_made_up_names_starts_again_from_the_ranks_hellos(monkeypatch):
    from ranktop.watch.engine import rank_scalars

    monkeypatch.setattr(rank_scalars, "MAX_NAMES", 4)
    agg = Aggregator("j", clock=Clock())
    for n in range(10):  # rank 3 sends a new host with every hello: a bounded table, not one that grows
        agg.ingest(hello(3, 4, host=f"made-up-{n}"))
    hosts = ["a", "a", "b"]
    for r, host in enumerate(hosts):
        agg.ingest(hello(r, 4, host=host))
    for n in range(20):
        for r in range(4):
            slow = 0.030 if r == 2 else 0.0
            agg.ingest(steps(r, [{"n": n, "t": 100.0 + n, "w": 0.05, "p": {"forward": 0.01 + slow, "backward": 0.03 - slow}}]))
    snap = agg.snapshot()
    assert [r.host for r in snap.ranks] == ["a", "a", "b", "made-up-9"]
    assert len(agg.store.scalars.hosts) <= 4
    assert snap.slow_hosts == ["b"]  # the ids still tell the hosts apart


def test_a_dropped_connection_loses_its_node_at_once_and_its_ranks_stay_cut_off_until_heard_again():
    clock = Clock()
    agg = Aggregator("j", clock=clock, silent_after_s=3.0)
    agg.add_endpoint("tcp://a:1", "a")
    for r in (0, 1):
        agg.ingest(hello(r, host="a"), "tcp://a:1")
    clock.now += 0.5
    agg.note_link("tcp://a:1", up=False)  # the relay was killed: the receiver saw its connection drop
    snap = agg.snapshot()
    assert [e.state for e in snap.endpoints] == ["lost"] and [r.status for r in snap.ranks] == ["silent"] * 2

    agg.replace_endpoint("tcp://a:1", "tcp://a:2", "a")  # a new relay, on another port
    agg.note_link("tcp://a:2", up=True)
    clock.now += 0.5
    agg.ingest(hello(0, host="a"), "tcp://a:2")
    snap = agg.snapshot()  # rank 1, not heard through the new relay yet, is not taken for a stalled rank
    assert [e.state for e in snap.endpoints] == ["connected"] and [r.status for r in snap.ranks] == ["ok", "silent"]
    agg.ingest(hello(1, host="a"), "tcp://a:2")
    assert [r.status for r in agg.snapshot().ranks] == ["ok", "ok"]


def test_step_records_that_never_arrived_are_counted_as_missed():
    agg = Aggregator("j")
    agg.ingest(steps(0, [{"n": n, "t": 100.0 + n, "w": 0.03, "p": {"data": 0.01}} for n in (5, 6, 9, 10, 12)]))
    (row,) = agg.snapshot().ranks
    assert (row.step, row.steps_seen, row.missed) == (12, 5, 3)  # 7, 8 and 11: lost on the way, not by the probe


def test_a_viewer_behind_on_a_nodes_messages_says_so_and_calls_no_rank_silent_for_it():
    clock, wall = [0.0], [1000.0]
    agg = Aggregator("j", clock=lambda: clock[0], wall_clock=lambda: wall[0])
    agg.add_endpoint("tcp://n0:1", "n0")

    def heard(sent_at: float, now: float) -> None:
        clock[0], wall[0] = now, 1000.0 + now
        body = {
            "job": "j",
            "rank": 0,
            "ts": sent_at,
            "state": {"last": 1, "step": 2, "in_step": True, "step_age": 0.1, "median_step_s": 0.1},
        }
        agg.ingest(schema.decode(messages.raw(HEARTBEAT, body)), "tcp://n0:1")

    heard(1000.0, 0.0)  # on time: the least age seen, whatever the hosts' clocks
    assert agg.snapshot().behind_s is None
    heard(1000.5, 5.0)  # sent 4.5 s before we got to it: we are behind
    clock[0] = 9.0  # nothing from it for 4 s, but what it sent since is still in our queue
    snap = agg.snapshot()
    assert snap.behind_s == pytest.approx(4.5) and snap.ranks[0].status == "ok"  # neither silent nor stalled
    assert snap.endpoints[0].state == "connected"
    clock[0] = 13.0  # longer than being behind explains: silent
    assert agg.snapshot().ranks[0].status == "silent"


def test_rows_built_the_fast_way_are_the_same_frozen_rows():
    import dataclasses

    from ranktop.watch.model.snapshot import RankRow, build_rank_row

    values = dict(rank=1, host="h", local_rank=0, pid=9, step=3, steps_seen=4, step_s=0.1, phases={"data": 0.01},
                  score=0.0, excess_s=0.0, culprit_phase=None, status="ok", last_seen_s=0.2, dropped=0)  # fmt: skip
    fast, slow = build_rank_row(**values), RankRow(**values)
    assert fast == slow and fast.rejected == {} and fast.rejected is not build_rank_row(**values).rejected
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.step = 4
    with pytest.raises(TypeError):
        build_rank_row(**dict(values, colour="red"))
    with pytest.raises(TypeError):
        build_rank_row(rank=1)


def test_the_receiver_s_messages_wait_while_a_snapshot_is_built():
    """The interpreter runs one thread at a time: messages that arrive while a snapshot is being built are
    taken once it is done (the screen first), then all of them, nothing lost."""
    import threading

    agg = Aggregator("j")
    agg.ingest(hello(0))
    building, release = threading.Event(), threading.Event()
    build = agg._snapshot

    def slow_snapshot():
        building.set()
        release.wait(5)
        return build()

    agg._snapshot = slow_snapshot
    shown = []
    snapshotter = threading.Thread(target=lambda: shown.append(agg.snapshot()))
    snapshotter.start()
    assert building.wait(5)
    taken = []
    rank1 = messages.sender(1)
    receiver = threading.Thread(target=lambda: taken.extend(agg.ingest_batch([(rank1.message(rank1.wire_hello()), None)])))
    receiver.start()
    receiver.join(0.1)
    assert receiver.is_alive() and agg.ranks_heard == 1  # held back: the snapshot comes first
    release.set()
    snapshotter.join(5)
    receiver.join(5)
    assert [r.rank for r in shown[0].ranks] == [0] and taken[0].rank == 1 and agg.ranks_heard == 2
