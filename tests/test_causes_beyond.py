"""Causes beyond one rank (watch/analysis/causes.py): a slow node's own evidence (other processes on it), a stalled
rank's stack (what it is in now), a job slower than itself (its ranks' evidence against the job's own past); and
page faults as a rank's cause. Plain columns and states, and synthetic steps and states through a real Aggregator."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

import messages
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis import causes
from ranktop.watch.model.json_doc import document
from ranktop.watch.model.verdict import verdict
from ranktop.wire.messages import Evidence, State


def slow_first(n: int) -> np.ndarray:
    return np.array([True] + [False] * (n - 1))


# -- page faults -------------------------------------------------------------------------------------------------


def test_major_page_faults_beyond_its_peers_are_a_cause_costed_by_the_time_its_thread_was_blocked():
    # steps of 100 ms, 20 ms of which each rank waits at its collective; the slow rank runs 60 ms a step on its
    # CPU as its peers do, but is blocked 30 ms more (its peers' waits are the collective's)
    st = [State(ev=Evidence(win=10.0, majflt=f, cpu=0.6, runq=0.01)) for f in (2500.0, 3.0, 5.0, 4.0)]
    comm = np.array([0.0, 0.03, 0.03, 0.03])
    found = causes.of_ranks(st, np.full(4, 0.1), np.array([0.03, 0, 0, 0]), slow_first(4), np.ones(4, bool), None,
                            comm_s=comm)  # fmt: skip
    (cause,) = found[0]
    assert cause.kind == "page_faults" and cause.basis == "measured"
    assert cause.extra_s == pytest.approx(0.03) and cause.explains == pytest.approx(1.0)
    assert cause.text.startswith("its process takes 2500 major page faults a second against its peers' 4; ")
    assert cause.text.endswith("blocked 30 ms per step beyond its peers, off its CPU and outside its collectives (page faults)")


def test_the_kernel_time_of_its_faults_is_theirs_not_python_the_step_waits_on():
    # the slow rank's thread runs 25 ms a step more, all of it in the kernel (handling its faults), and is blocked
    # 15 ms (its peers 40 ms, all of it at their collective): page faults, 40 ms; not host bound
    cpu, sys_ = [0.85, 0.6, 0.6, 0.6], [0.25, 0.0, 0.0, 0.0]
    st = [State(ev=Evidence(win=10.0, majflt=f, cpu=c, sys=k, runq=0.0)) for f, c, k in zip((2500.0, 3, 5, 4), cpu, sys_)]
    step = np.array([0.1, 0.1, 0.1, 0.1])
    comm = np.array([0.0, 0.04, 0.04, 0.04])  # (its peers wait for it at their collective)
    found = causes.of_ranks(st, step, np.array([0.04, 0, 0, 0]), slow_first(4), np.ones(4, bool), None, comm_s=comm)
    assert [c.kind for c in found[0]] == ["page_faults"], found[0]
    assert found[0][0].extra_s == pytest.approx(0.04) and found[0][0].text.endswith(
        "outside its collectives, and runs 25 ms more in the kernel (page faults)"
    )


def test_page_faults_that_block_nothing_are_no_cause_and_without_cpu_time_they_are_named_with_no_cost():
    quiet = [State(ev=Evidence(win=10.0, majflt=f, cpu=0.9, runq=0.01)) for f in (2500.0, 3.0, 5.0, 4.0)]
    found = causes.of_ranks(quiet, np.full(4, 0.1), np.array([0.03, 0, 0, 0]), slow_first(4), np.ones(4, bool), None)
    assert [c.kind for c in found[0]] == ["unknown"] and "page faults" in found[0][0].ruled_out
    untimed = [State(ev=Evidence(win=10.0, majflt=f)) for f in (2500.0, 3.0, 5.0, 4.0)]
    (cause, last) = causes.of_ranks(untimed, np.full(4, 0.1), np.array([0.03, 0, 0, 0]), slow_first(4),
                                    np.ones(4, bool), None)[0]  # fmt: skip
    assert cause.kind == "page_faults" and cause.basis == "untold" and cause.explains == 0.0
    assert last.kind == "unknown"  # (named with no cost: it explains nothing told)
    few = [State(ev=Evidence(win=10.0, majflt=f, cpu=0.6)) for f in (15.0, 0.0, 0.0, 0.0)]  # under the floor
    assert all(c.kind != "page_faults" for c in causes.of_ranks(
        few, np.full(4, 0.1), np.array([0.03, 0, 0, 0]), slow_first(4), np.ones(4, bool), None).get(0, []))  # fmt: skip


# -- a slow node -------------------------------------------------------------------------------------------------

WORLD = 64
PER_NODE = 8


def host_of(rank: int) -> str:
    return f"node-{rank // PER_NODE:03d}"


def slow_node_job(ev_of) -> Aggregator:
    """node-005's every rank 20 ms slower in forward; each rank's state carries ``ev_of(rank)``."""
    from test_aggregator import Clock, ddp_step, hello, steps

    agg = Aggregator("j", clock=Clock(), window=16)
    for r in range(WORLD):
        agg.ingest(hello(r, WORLD, host=host_of(r)))
    for n in range(16):
        for r in range(WORLD):
            slow_s = 0.020 if host_of(r) == "node-005" else 0.0
            agg.ingest(steps(r, [ddp_step(n, r if slow_s else -1, r, slow_s, "forward", 0.0005)]))
    for r in range(WORLD):
        agg.ingest(messages.heartbeat(r, {"step": 16, "last": 15, "ev": ev_of(r)}, world=WORLD, host=host_of(r)))
    return agg


def test_a_slow_node_where_other_processes_use_its_cpus_is_named_with_them_and_what_its_ranks_wait():
    def ev(r):  # each rank's process uses half a CPU; node-005's other processes 4 more, and its ranks wait
        busy = node_005 = host_of(r) == "node-005"
        return {"win": 10.0, "pcpu": 0.5, "cpu": 0.45, "runq": 0.35 if busy else 0.01, "node_cpu": 8.0 if node_005 else 4.3,
                "ncpu": 16}  # fmt: skip

    snap = slow_node_job(ev).snapshot()
    (cause,) = snap.node_causes["node-005"]
    assert cause.kind == "node_busy" and cause.basis == "measured" and cause.explains >= 0.5
    answer = verdict(snap)
    assert answer.kind == "slow_node" and answer.cause == cause
    assert ", because other processes on it use 4.0 of its 16 CPUs against 0.3 on a healthy node; its ranks wait " in answer.text
    assert answer.text.endswith("(node busy)")
    assert document(snap)["node_causes"]["node-005"][0]["kind"] == "node_busy"


def test_a_slow_node_whose_cpus_nobody_else_uses_has_no_node_cause():
    snap = slow_node_job(lambda r: {"win": 10.0, "pcpu": 0.5, "node_cpu": 4.3, "ncpu": 16}).snapshot()
    assert snap.slow_hosts == ["node-005"] and snap.node_causes == {}


# -- a stall ------------------------------------------------------------------------------------------------------


def test_a_stalled_rank_s_stack_says_its_cause_whole_and_an_unknown_place_says_nothing():
    st = [State(ev=Evidence(win=10.0, doing="compile")), State(ev=Evidence(win=10.0)), State(),
          State(ev=Evidence(win=10.0, doing="checkpoint"))]  # fmt: skip
    found = causes.of_stalls(st, np.array([True, True, True, True]))
    assert sorted(found) == [0, 3]
    assert found[0][0].kind == "recompile" and found[0][0].explains == 1.0 and found[0][0].basis == "seen"
    assert found[3][0].kind == "checkpoint_write"
    with pytest.raises(Exception):  # what a rank says it is in is one of four words, checked at decode
        messages.decoded("hb", 0, {"state": {"ev": {"win": 10.0, "doing": "rm -rf"}}})


def test_a_job_stalled_on_one_rank_compiling_says_so_through_the_engine():
    clock = messages.Clock()
    agg = Aggregator("j", clock=clock, wall_clock=clock, window=16)
    world = 4
    for r in range(world):
        agg.ingest(messages.hello(r, world, "n0", pid=r))
    t = 100.0
    for n in range(20):
        own = [{"data": 0.005, "forward": 0.02, "backward": 0.03, "optimizer": 0.005} for _ in range(world)]
        t += messages.synchronous_step(agg, n, t, own, world)
    clock.now += 30.0  # rank 2 compiles for 30 s in step 20's forward; the others wait in backward's all-reduce
    for r in range(world):
        phase = "forward" if r == 2 else "backward"
        ev = {"win": 10.0, "doing": "compile"} if r == 2 else {"win": 10.0}
        coll = None if r == 2 else {"op": "all_reduce", "seq": 20, "inside": True, "age": 29.0}
        agg.ingest(messages.heartbeat(r, messages.state(20, 19, phase, step_age=30.0, collective=coll, ev=ev), world=world))
    answer = verdict(agg.snapshot())
    assert answer.kind == "stalled", answer.text
    assert answer.cause is not None and answer.cause.kind == "recompile", answer.text
    assert answer.text.endswith(", because its training thread is compiling (torch.compile: its stack is in dynamo or inductor)")


# -- the job slower than itself ---------------------------------------------------------------------------------

BASE = {"data": 0.005, "forward": 0.020, "backward": 0.030, "optimizer": 0.005}


def job_slower(extra: dict[str, float], ev_before: dict, ev_after: dict, seed: int = 0):
    """A 4-rank job: 40 s healthy, then every rank's phases grow by ``extra``; each rank's evidence moves from
    ``ev_before`` to ``ev_after`` over the probe's 10 s window. Returns the verdicts taken every half second after
    the change."""
    rng = random.Random(seed)
    clock = messages.Clock()
    agg = Aggregator("j", clock=clock, wall_clock=clock, window=64)
    world, n, t = 4, 0, 100.0
    for r in range(world):
        agg.ingest(messages.hello(r, world, "n0", pid=r))
    start, changed_at = clock.now, clock.now + 40.0
    next_look, out = clock.now + 0.5, []
    while clock.now < changed_at + 30.0:
        after = clock.now >= changed_at
        own = [{k: v * (1 + rng.gauss(0, 0.02)) + (extra.get(k, 0.0) if after else 0.0) for k, v in BASE.items()}
               for _ in range(world)]  # fmt: skip
        wall = messages.synchronous_step(agg, n, t, own, world)
        n, t, clock.now = n + 1, t + wall, clock.now + wall
        if clock.now >= next_look:
            next_look += 0.5
            moved = min(1.0, max(0.0, (clock.now - changed_at) / 10.0))
            ev = {k: ev_before[k] + (ev_after[k] - ev_before[k]) * moved for k in ev_before}
            for r in range(world):
                agg.ingest(messages.heartbeat(r, {"step": n, "last": n - 1, "ev": {"win": 10.0, **ev}}, world=world))
            if after:
                out.append(verdict(agg.snapshot()))
            else:
                agg.snapshot()
    del start
    return out


def test_every_rank_waiting_longer_for_its_data_loader_is_the_job_s_cause():
    # before: 60 ms steps, each rank waits 1 ms a step for its loader; after: 80 ms, 20 ms
    before = {"gc": 0.01, "ld": 0.083, "ld_cpu": 0.066, "cpu": 0.9, "runq": 0.01}
    after = {"gc": 0.0075, "ld": 0.3125, "ld_cpu": 0.0625, "cpu": 0.68, "runq": 0.0075}
    verdicts = job_slower({"data": 0.020}, before, after)
    told = [v for v in verdicts if v.kind == "job_slower"]
    assert told, [v.text for v in verdicts[-3:]]
    last = told[-1]
    assert last.cause is not None and last.cause.kind == "data_loader" and last.cause.explains >= 0.5, last.text
    # (1 ms of a 61 ms step before: 17 ms a second)
    assert re.search(
        r", because every rank waits 2\d ms per step for its DataLoader's batches, 1\.\d ms before \(data loader\)$", last.text
    ), last.text


def test_a_job_slower_that_no_evidence_explains_says_what_was_ruled_out():
    same = {"gc": 0.01, "ld": 0.083, "ld_cpu": 0.066, "cpu": 0.9, "runq": 0.01}
    verdicts = job_slower({"forward": 0.020}, same, dict(same, cpu=0.68))  # (a sleep: the CPU share falls)
    told = [v for v in verdicts if v.kind == "job_slower"]
    assert told
    assert told[-1].cause is not None and told[-1].cause.kind == "unknown", told[-1].text
    assert told[-1].text.endswith(", cause unknown: not GC, CPU contention, Python on its CPU, the data loader or recompiles")


def test_the_job_s_baseline_follows_its_past_and_holds_while_it_is_told_slower():
    job = causes.JobEvidence(follow_s=120.0)
    states = [State(ev=Evidence(win=10.0, gc=0.01)) for _ in range(4)]
    live, step = np.ones(4, bool), np.full(4, 0.1)
    for k in range(100):
        assert job.note(states, live, step, None, float(k), None) == []
    assert job.base["gc"] == pytest.approx(0.01)
    hot = [State(ev=Evidence(win=10.0, gc=0.2)) for _ in range(4)]

    class Told:
        excess_s = 0.02

    (cause,) = job.note(hot, live, step, None, 100.0, Told())
    assert cause.kind == "gc_pause" and cause.extra_s == pytest.approx(0.019) and cause.explains == pytest.approx(0.95)
    assert job.base["gc"] == pytest.approx(0.01)  # held while told
    assert math.isclose(job.note(hot, live, step, None, 101.0, Told())[0].value, 0.2)


# -- a mixture of experts' healthy routing spread, learned ------------------------------------------------------


def test_an_expert_s_load_is_judged_against_its_class_s_healthy_routing_spread_learned_from_the_job_s_past():
    job = causes.JobEvidence()
    keys = np.zeros(8, np.int64)
    rng = random.Random(0)
    healthy, slow = np.ones(8, bool), np.zeros(8, bool)

    def rows(hot: float = 1.0) -> list[State]:  # routing noise: each rank receives 0.6x to 1.7x the mean
        return [State(ev=Evidence(win=10.0, a2a_rows=10_000 * (hot if r == 0 else rng.uniform(0.6, 1.7)))) for r in range(8)]

    assert job.load_ratios([State() for _ in range(8)], healthy, slow, keys, 0.0) is None  # no all-to-alls: nothing
    before = job.load_ratios(rows(), healthy, slow, keys, 0.0)
    assert before.tolist() == [causes.LOAD_RATIO] * 8  # not learned yet: the fixed bar
    for t in range(1, 80):
        needed = job.load_ratios(rows(), healthy, slow, keys, float(t))
    spread = job.spread[0][0]
    assert 1.6 < spread < 3.0 and needed[0] == pytest.approx(spread * causes.SPREAD_MARGIN)
    # a rank receiving 2x its peers is within this job's noise: no expert_load; 4x is
    st = rows(hot=2.0)
    excess, step = np.array([0.03] + [0.0] * 7), np.full(8, 0.1)
    found = causes.of_ranks(st, step, excess, slow_first(8), np.ones(8, bool), None, load_ratio=needed)
    assert all(c.kind != "expert_load" for c in found.get(0, []))
    found = causes.of_ranks(rows(hot=4.0), step, excess, slow_first(8), np.ones(8, bool), None, load_ratio=needed)
    assert found[0][0].kind == "expert_load"
    # without the learned spread, 2x is past the fixed 1.5x
    assert causes.of_ranks(st, step, excess, slow_first(8), np.ones(8, bool), None)[0][0].kind == "expert_load"


def test_a_hot_expert_s_rank_flagged_slow_does_not_teach_its_class_a_wider_spread():
    job = causes.JobEvidence()
    keys = np.zeros(8, np.int64)
    even = [State(ev=Evidence(win=10.0, a2a_rows=10_000.0 * (1 + 0.05 * r))) for r in range(8)]
    for t in range(40):
        job.load_ratios(even, np.ones(8, bool), np.zeros(8, bool), keys, float(t))
    learned = job.spread[0][0]
    hot = [State(ev=Evidence(win=10.0, a2a_rows=40_000.0))] + even[1:]
    healthy_but_growing = np.ones(8, bool)  # its load grows before it is flagged ...
    job.load_ratios(hot, healthy_but_growing, np.zeros(8, bool), keys, 40.0)
    flagged = slow_first(8)  # ... and it is flagged within the lag: what its class saw meanwhile is dropped
    for t in range(41, 80):
        job.load_ratios(hot, ~flagged, flagged, keys, float(t))
    assert job.spread[0][0] == pytest.approx(learned, rel=0.01)


def test_the_brief_verdict_of_a_node_or_a_stall_says_its_cause_by_name_once():
    from ranktop.watch.model.verdict import brief

    def ev(r):
        busy = host_of(r) == "node-005"
        return {"win": 10.0, "pcpu": 0.5, "cpu": 0.45, "runq": 0.35 if busy else 0.01, "node_cpu": 8.0 if busy else 4.3, "ncpu": 16}

    answer = verdict(slow_node_job(ev).snapshot())
    short = brief(answer)
    assert short.endswith(", because: node busy") and short.count("because") == 1, short
    assert "other processes" not in short
