"""Stalled ranks and whom the others wait for, from synthetic heartbeats: no sockets, no terminal."""

import numpy as np
import pytest

from ranktop.watch.analysis import stalls
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.stalls import StallPolicy, assess
from ranktop.watch.model.stall import Position
from ranktop.wire.messages import State
from ranktop.watch.model.verdict import verdict
from ranktop.watch.model.json_doc import document
import messages
from messages import Clock, state

STEP_S = 0.05


def hello(rank, world):
    return messages.hello(rank, world, "n0", pid=rank)


def train(agg, clock, world, n_steps):
    """n_steps of healthy synchronous training; every rank ends between steps."""
    for r in range(world):
        agg.ingest(hello(r, world))
    for n in range(n_steps):
        clock.now += STEP_S
        for r in range(world):
            rec = {"n": n, "t": 100.0 + n * STEP_S, "w": STEP_S, "p": {"forward": 0.02, "backward": 0.03}}
            agg.ingest(messages.steps(r, [rec], state=state(n, n, None, in_step=False), world=world))


def heartbeat(agg, rank, st):
    agg.ingest(messages.heartbeat(rank, st))


def hang(agg, clock, seconds, where, world=4):
    """Every rank heartbeats while frozen for ``seconds``: where[rank] = (step, last, phase[, collective])."""
    t = 0.0
    while t < seconds:
        step = min(1.0, seconds - t)
        clock.now += step
        t += step
        for r in range(world):
            s, last, phase, *coll = where[r]
            heartbeat(agg, r, state(s, last, phase, step_age=t, collective=coll[0] if coll else None))


def test_a_healthy_job_has_no_stalled_rank_and_no_diagnosis():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 40)
    snap = agg.snapshot()
    assert {r.status for r in snap.ranks} == {"ok"}
    assert snap.waiting_for == [] and snap.diagnosis is None
    assert all(r.stalled_s is None for r in snap.ranks)


def test_the_rank_in_forward_is_the_one_the_others_wait_for_in_backward():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 30)
    where = {0: (30, 29, "backward"), 1: (30, 29, "backward"), 2: (30, 29, "forward"), 3: (30, 29, "backward")}
    hang(agg, clock, 1.5, where)
    assert {r.status for r in agg.snapshot().ranks} == {"ok"}  # 1.5 s < the 2 s floor: not yet
    hang(agg, clock, 3.0, where)
    snap = agg.snapshot()
    assert [r.status for r in snap.ranks] == ["stalled"] * 4
    assert snap.waiting_for == [2] and snap.stragglers[0] == 2
    row = snap.ranks[2]
    assert row.stalled_phase == "forward" and row.stalled_step == 30 and row.stalled_s >= 3.0
    assert snap.diagnosis.startswith("ranks 0-1,3 stalled in backward at step 30 for 3s, waiting for rank 2")
    assert "in forward at step 30" in snap.diagnosis
    assert document(snap)["waiting_for"] == [2] and document(snap)["ranks"][0]["status"] == "stalled"


def test_the_threshold_is_a_multiple_of_the_median_step_with_a_floor():
    policy = StallPolicy(factor=5, floor_s=2)
    assert policy.limit(0.01) == 2 and policy.limit(1.0) == 5 and policy.limit(None) == 10
    clock = Clock()
    agg = Aggregator("j", clock=clock, stall_factor=3, stall_floor_s=0.5)
    train(agg, clock, 2, 10)
    hang(agg, clock, 1.0, {0: (10, 9, "backward"), 1: (10, 9, "data")}, world=2)
    snap = agg.snapshot()
    # two ranks: no majority, the earlier phase is the one behind
    assert [r.status for r in snap.ranks] == ["stalled", "stalled"] and snap.waiting_for == [1]


def test_a_rank_a_step_behind_is_waited_for_even_in_the_same_phase():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 3, 20)
    hang(agg, clock, 4, {0: (21, 20, "backward"), 1: (20, 19, "backward"), 2: (21, 20, "backward")}, world=3)
    snap = agg.snapshot()
    assert snap.waiting_for == [1]
    assert "waiting for rank 1: in backward at step 20" in snap.diagnosis


def test_inside_a_collective_beats_phases():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 10)
    coll = {"op": "all_reduce", "seq": 42, "b": 4 << 20, "dt": "float32", "g": 4, "inside": True, "age": 3.0}
    done = dict(coll, seq=41, inside=False)
    where = {r: (10, 9, "backward", coll) for r in range(4)}
    where[3] = (10, 9, "backward", done)
    hang(agg, clock, 4, where)
    snap = agg.snapshot()
    assert snap.waiting_for == [3]
    assert "(in all_reduce #42, 4.0 MB)" in snap.diagnosis and "not in a collective" in snap.diagnosis
    assert snap.ranks[0].collective["seq"] == 42  # rendered wherever the probe reports it


def test_a_rank_that_never_entered_the_others_last_collective_is_waited_for():
    # DDP's bucket all-reduces are launched asynchronously: nobody is "inside", but the
    # sequence numbers tell who never launched the latest one, whatever the phase names.
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 2, 10)
    bucket = {"op": "ddp_allreduce", "seq": 31, "b": 547840, "dt": "float32", "g": 2, "inside": False, "age": 0.0}
    hang(agg, clock, 4, {0: (10, 9, "step", bucket), 1: (10, 9, "step", dict(bucket, seq=30))}, world=2)
    snap = agg.snapshot()
    assert snap.waiting_for == [1]
    assert snap.diagnosis.endswith("(last: ddp_allreduce #30, 535.0 KB), never entered the others' last collective")


def test_a_silent_rank_is_the_one_the_stalled_ranks_wait_for():
    clock = Clock()
    agg = Aggregator("j", clock=clock, silent_after_s=3.0)
    train(agg, clock, 3, 10)
    for t in range(1, 6):
        clock.now += 1
        for r in (0, 1):
            heartbeat(agg, r, state(10, 9, "backward", step_age=t))
    snap = agg.snapshot()
    assert [r.status for r in snap.ranks] == ["stalled", "stalled", "silent"]
    assert snap.waiting_for == [2] and "silent" in snap.diagnosis


def test_all_ranks_frozen_at_the_same_place_blame_nobody():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 10)
    hang(agg, clock, 4, {r: (10, 9, "optimizer") for r in range(4)})
    snap = agg.snapshot()
    assert snap.waiting_for == [] and "no rank stands out" in snap.diagnosis


def test_a_tui_that_attaches_to_a_hung_job_judges_from_the_ranks_own_state():
    # No step record ever arrives: the probes' heartbeats say how long the step has run and
    # how long a step usually takes there.
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    for r in range(3):
        agg.ingest(hello(r, 3))
    for r in range(3):
        phase = "forward" if r == 1 else "backward"
        heartbeat(agg, r, state(30, 29, phase, step_age=40.0, median_step_s=0.08))
    clock.now += 0.5
    snap = agg.snapshot()
    assert [r.status for r in snap.ranks] == ["stalled"] * 3 and snap.waiting_for == [1]
    assert snap.stragglers[0] == 1


def test_a_rank_that_never_finished_a_step_is_not_stalled_while_nobody_has():
    positions = [Position(r, False, 0, -1, True, "data", 30.0, None) for r in range(2)]
    assert assess(positions).stalled == {}
    positions.append(Position(2, False, 5, 4, False, None, 0.1, 0.1))
    assert set(assess(positions).stalled) == {0, 1}


def test_a_rank_between_steps_for_long_is_stalled_with_no_phase():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 2, 10)
    for _ in range(5):
        clock.now += 1
        heartbeat(agg, 0, state(9, 9, None, in_step=False))
        heartbeat(agg, 1, state(11, 10, "data"))
    snap = agg.snapshot()
    assert snap.ranks[0].status == "stalled" and snap.ranks[0].stalled_phase is None
    assert snap.ranks[0].stalled_step == 10


def test_a_viewer_that_never_heard_a_rank_names_it_when_the_others_stall_at_one_place():
    """A viewer started after local rank 0 froze: ranks 1-3 wait in the all-reduce, rank 0 never spoke to it."""
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    for r in (1, 2, 3):
        agg.ingest(hello(r, 4))
    where = {r: (30, 29, "backward", {"op": "all_reduce", "inside": True, "seq": 61}) for r in (1, 2, 3)}
    for _ in range(4):  # longer than a rank may take to be heard: rank 0 is not merely late
        clock.now += 1.0
        for r in (1, 2, 3):
            heartbeat(agg, r, state(*where[r][:3], step_age=20.0 + clock.now - 1000.0, collective=where[r][3], median_step_s=STEP_S))
    snap = agg.snapshot()
    assert [r.rank for r in snap.ranks] == [1, 2, 3] and [r.status for r in snap.ranks] == ["stalled"] * 3
    assert snap.waiting_for == [0]
    assert snap.diagnosis.startswith("ranks 1-3 stalled in backward at step 30")
    assert snap.diagnosis.endswith("waiting for rank 0: never heard from (silent since this viewer started)")
    assert verdict(snap).text.endswith("waiting for rank 0 (never reported)")


def test_a_rank_never_heard_is_named_before_a_stalled_rank_one_bucket_behind_the_others():
    """As above, but rank 3 had not yet launched the bucket ranks 1 and 2 wait in: it waits too (rank 0's part of
    every all-reduce is missing), so the rank never heard is whom they wait for, not rank 3."""
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    for r in (1, 2, 3):
        agg.ingest(hello(r, 4))
    where = {r: (55, 54, "backward", {"op": "ddp_allreduce", "inside": True, "seq": 56}) for r in (1, 2)}
    where[3] = (54, 53, "backward", {"op": "ddp_allreduce", "inside": True, "seq": 55})
    for _ in range(4):
        clock.now += 1.0
        for r in (1, 2, 3):
            heartbeat(agg, r, state(*where[r][:3], step_age=20.0 + clock.now - 1000.0, collective=where[r][3], median_step_s=STEP_S))
    snap = agg.snapshot()
    assert [r.status for r in snap.ranks] == ["stalled"] * 3
    assert snap.waiting_for == [0]
    assert snap.diagnosis.endswith("waiting for rank 0: never heard from (silent since this viewer started)")


def test_a_node_still_being_connected_is_neither_silent_nor_never_heard():
    """A viewer of a big job connects to its relays over seconds: a node it knows of but has not heard, or
    first heard a moment ago, is still being reached; only once every node has settled are ranks silent or
    "never heard from"."""
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    agg.add_endpoint("tcp://a:1", "a")
    agg.add_endpoint("tcp://b:1", "b")  # rank 0's node: known, not heard yet
    for r in (1, 2, 3):
        agg.ingest(hello(r, 4), endpoint="tcp://a:1")
    where = (30, 29, "backward", {"op": "all_reduce", "inside": True, "seq": 61})

    def beat(ranks, endpoint):
        for r in ranks:
            st = state(*where[:3], step_age=20.0 + clock.now - 1000.0, collective=where[3], median_step_s=STEP_S)
            agg.ingest(messages.heartbeat(r, st), endpoint=endpoint)

    for _ in range(4):
        clock.now += 1.0
        beat((1, 2, 3), "tcp://a:1")
    snap = agg.snapshot()
    assert [r.status for r in snap.ranks] == ["stalled"] * 3
    assert "never heard" not in snap.diagnosis  # node b was added 4 s ago: still being connected
    for _ in range(2):
        clock.now += 1.0
        beat((1, 2, 3), "tcp://a:1")
    assert agg.snapshot().diagnosis.endswith("waiting for rank 0: never heard from (silent since this viewer started)")

    agg.ingest(hello(0, 4), endpoint="tcp://b:1")  # node b is reached at last, heard once, then not for a while
    beat((0,), "tcp://b:1")
    for _ in range(4):
        clock.now += 1.0
        beat((1, 2, 3), "tcp://a:1")
    assert {r.rank: r.status for r in agg.snapshot().ranks}[0] != "silent"  # heard 4 s ago, its node first heard then
    for _ in range(2):
        clock.now += 1.0
        beat((1, 2, 3), "tcp://a:1")
    assert {r.rank: r.status for r in agg.snapshot().ranks}[0] == "silent"  # its node settled, and it is quiet


def test_a_step_heard_after_a_rank_s_state_bounds_how_long_it_is_stuck():
    """A node digest carries a running rank's state every few seconds and its steps four times a second: a
    state that said "in a step for 0.1 s" three seconds ago does not make the rank stuck for 3 s when its
    steps kept coming; a rank whose steps stopped with that state is stuck the whole time."""
    state = State(last=41, step=42, in_step=True, step_age=0.1)
    now, state_at = 103.0, 100.0
    assert stalls.stuck_s(state, now, state_at, progress_at=100.0) == pytest.approx(3.1)  # no step since: stuck
    assert stalls.stuck_s(state, now, state_at, progress_at=100.0, stepped_at=102.75) == pytest.approx(0.25)
    assert stalls.stuck_s(state, now, state_at, progress_at=100.0, stepped_at=99.0) == pytest.approx(3.1)  # older
    columns = stalls.stuck_columns(np.array([0.1, 0.1, np.nan]), np.array([100.0, 100.0, 100.0]),
                                   np.array([100.0, 100.0, 99.0]), now, np.array([102.75, 99.0, 102.5]))  # fmt: skip
    assert columns.tolist() == pytest.approx([0.25, 3.1, 0.5])
