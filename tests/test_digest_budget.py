"""The job-wide digest budget (wire/pacing.py: ``digest_hz``): the relays of a big job pace their digests so that
together they send a viewer at most ``DIGEST_BUDGET`` a second.

A viewer pays for each digest before its content counts; at 16,384 ranks (2,048 nodes) four digests a node a second
were a quarter of a core for their count alone. The rule is pure and tested as such; a real relay process, fed by
real probes that say they are ranks of a big job, is held to it; so is the simulator, which paces its nodes' digests
through the same function.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import zmq
from support import JOBS, wait_for

from ranktop.demo.simulate import Scenario, Simulator
from ranktop.transport import rendezvous
from ranktop.watch.engine import keys
from ranktop.watch.session import WatchSession, resolve
from ranktop.wire import pacing, schema, step_block
from ranktop.wire.names import NODE
from ranktop.wire.messages import Links, Node, RankInfo
from ranktop.relay.digest_fold import NodeDigest
from ranktop.wire.pacing import DIGEST_BUDGET, DIGEST_HZ, MIN_DIGEST_HZ, digest_hz, job_nodes


def info(world: int, local_world: int | None, local_rank: int = 0) -> RankInfo:
    return RankInfo(host="node0", world=world, local_rank=local_rank, pid=100 + local_rank, local_world=local_world)


# -- the rule --------------------------------------------------------------------------------


def test_jobs_up_to_512_nodes_keep_four_digests_a_second_and_bigger_ones_share_the_budget():
    assert [digest_hz(n) for n in (1, 16, 512)] == [DIGEST_HZ] * 3
    assert digest_hz(1024) == 2.0 and digest_hz(2048) == 1.0  # 8,192 ranks of 8, and 16,384
    for nodes in range(512, 2049, 37):
        assert nodes * digest_hz(nodes) <= DIGEST_BUDGET + 1e-9
    assert digest_hz(0) == DIGEST_HZ  # no node known yet


def test_no_relay_goes_quieter_than_a_viewer_takes_for_silence():
    assert digest_hz(100_000) == MIN_DIGEST_HZ == 1.0  # a viewer finds a rank silent after 3 s without news


def test_a_job_s_nodes_are_its_world_over_its_node_s_ranks_or_over_those_heard_where_unsaid():
    assert job_nodes(16384, 8, heard=3) == 2048
    assert job_nodes(10, 4, heard=1) == 3  # a last node less than full
    assert job_nodes(16384, None, heard=8) == 2048  # a launcher that does not say LOCAL_WORLD_SIZE
    assert job_nodes(16384, 0, heard=4) == 4096
    assert job_nodes(0, None, heard=0) == 1


def test_a_node_digest_learns_its_pace_from_its_ranks_hellos():
    digest = NodeDigest("j", "node0")
    assert digest.hz == DIGEST_HZ  # nothing heard yet
    digest.add_hello(0, info(64, 8), None)
    assert digest.hz == DIGEST_HZ
    digest.add_hello(0, info(16384, 8), None)
    assert digest.hz == 1.0
    unsaid = NodeDigest("j", "node0")
    for r in range(4):
        unsaid.add_hello(r, info(8192, None, local_rank=r), None)
    assert unsaid.hz == digest_hz(2048)  # 8,192 ranks over the 4 heard on the node


def test_the_biggest_jobs_send_a_running_rank_s_state_hello_and_collectives_less_often_but_a_stalled_rank_s_at_once():
    """Beyond 8,192 ranks the job's entries would cost a viewer more than ENTRY_BUDGET a second: a running rank's
    state, hello and collectives ride twice as far apart at 16,384; its steps still ride every digest."""
    from ranktop.wire.messages import Heartbeat, OpSummary, State

    assert pacing.slow_factor(64) == pacing.slow_factor(8192) == 1.0
    assert pacing.slow_factor(16384) == 2.0
    for world, every in ((8192, pacing.SLOW_EVERY_S), (16384, 2 * pacing.SLOW_EVERY_S)):
        digest = NodeDigest("j", "node0")
        digest.add_hello(0, info(world, 8), None)
        running = State(step=3, last=2, in_step=True, phase="forward")
        ops = {"all_reduce": OpSummary(calls=1, bytes=8, waited=0.001, total=0.002, longest=0.002, group=8, dtype="float32")}
        carried = []
        for tick in range(int(4 * every) + 1):  # a digest a second, a step each
            digest.add_columns([0], [running], last=[tick], count=[1], start=[float(tick)], wall=[0.1], own={"forward": [0.1]})
            digest.add_ops(0, ops)
            body = digest.body(float(tick), 1e9 + tick)
            entry = body.ranks[0] if body.ranks else None
            assert body.steps is not None  # the steps, every digest
            carried.append(tuple(name for name in ("state", "hello", "ops") if entry is not None and getattr(entry, name) is not None))
        assert [i for i, c in enumerate(carried) if c] == list(range(0, int(4 * every) + 1, int(every))), world
        assert all(c == ("state", "hello", "ops") for c in carried if c)
        stalled = State(step=3, last=2, in_step=True, phase="forward", step_age=9.0)
        digest.add(Heartbeat(job="j", rank=0, ts=2e9, state=stalled))  # it spoke, and made no step
        assert digest.body(4 * every + 1.0, 2e9).ranks[0].state == stalled  # at once, whatever the job's size


def test_the_job_s_relays_send_at_most_the_sample_budget_of_raw_calls_a_second():
    """A node's digest carries one rank's sample of raw calls every 2 s up to 512 nodes, and as much less often
    beyond: 256 samples a second from the whole job are plenty for the fit, and the viewer decodes every one."""
    from ranktop.wire.messages import Call

    assert pacing.sample_every_s(1) == pacing.sample_every_s(512) == pacing.SAMPLE_EVERY_S == 2.0
    assert pacing.sample_every_s(2048) == 8.0
    for nodes in (64, 512, 1024, 2048, 4096):
        assert nodes / pacing.sample_every_s(nodes) <= pacing.SAMPLE_BUDGET
    digest = NodeDigest("j", "node0")
    digest.add_hello(0, info(16384, 8), None)
    sample = [Call(op="all_reduce", seq=1, b=8, dt="float32", g=8, d=0.001, n=1, ph="backward", t0=0.0)]
    sampled = []
    for tick in range(17):  # a digest a second, a step and a fresh sample each
        digest.add_columns([0], [None], last=[tick], count=[1], start=[float(tick)], wall=[0.1], own={"forward": [0.1]},
                           sample=sample)  # fmt: skip
        body = digest.body(float(tick), 1e9 + tick)
        if any(entry.cx for entry in body.ranks):
            sampled.append(tick)
    assert sampled == [0, 8, 16]


# -- a real relay --------------------------------------------------------------------------------


def digests_a_second(job: str, seconds: float = 4.0) -> float:
    """Digests a second that the job's (one) relay sends, from the first that passes on a rank's hello (the relay
    has heard the job's size by then: a probe says hello as it starts, maybe before its relay is up, and again
    every 2 s): one over the median gap between the digests' own timestamps, so neither this process's nor the
    relay's lateness on a busy machine, nor an interval in which a rank's flush came late (no steps to digest),
    moves it."""
    wait_for(lambda: rendezvous.read_nodes(job) and rendezvous.read_secret(job), 20, f"relay of job {job} never appeared")
    (node,) = rendezvous.read_nodes(job)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        assert keys.secure(sub, rendezvous.read_secret(job))
        sub.setsockopt(zmq.SUBSCRIBE, NODE.encode())
        sub.connect(node.telemetry)
        stamps: list[float] = []
        end = time.monotonic() + 60
        while time.monotonic() < end and (len(stamps) < 5 or stamps[-1] - stamps[0] < seconds):
            if sub.poll(500):
                msg = schema.decode(sub.recv_multipart())
                if not isinstance(msg, Node):
                    continue
                if not stamps and not any(entry.hello for entry in msg.ranks):
                    continue
                if msg.steps is not None:
                    stamps.append(msg.ts)
        assert len(stamps) >= 5, f"{len(stamps)} digests with steps in 60 s"
        gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
        return 1.0 / gaps[len(gaps) // 2]
    finally:
        sub.close(linger=0)
        ctx.term()


@pytest.mark.parametrize("world, expected_hz", [(2, DIGEST_HZ), (16384, 1.0)], ids=["2 ranks", "16,384 ranks"])
def test_a_real_relay_paces_its_digests_by_the_job_size_its_ranks_hellos_say(rdv, tmp_path, world, expected_hz):
    """Two real probes (tests/jobs/sleepy_rank.py) that say they are ranks 0 and 1 of ``world`` ranks, 8 a node
    (torchrun's WORLD_SIZE and LOCAL_WORLD_SIZE): their node's real relay process sends 4 digests a second for
    the small job and 1 for the job of 2,048 nodes."""
    job = f"budget-{world}"
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(min(world, 8)), RANKTOP_JOB=job)  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(JOBS / "sleepy_rank.py")], env=env, cwd=tmp_path, stderr=subprocess.DEVNULL))
    try:
        rate = digests_a_second(job)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
    assert expected_hz * 0.8 < rate < expected_hz * 1.2, f"{rate:.2f} digests a second"


# -- the simulator -------------------------------------------------------------------------------


def test_the_simulator_s_relays_digests_follow_the_budget_in_its_replay(tmp_path):
    """1,024 simulated nodes of 2 ranks: 2 digests a node a second (the relays' rule), each with the node's steps
    since the last one, none lost."""
    scenario = Scenario(job="budget", ranks=2048, nodes=1024, calls_per_step=0, steps_per_s=16.0)
    sim = Simulator(scenario, str(tmp_path))
    # the digests only: each relay also says what its link probes measured, once a second (relay/links.py)
    ticks = [(now, [f for f in frames if not isinstance(schema.decode(f), Links)]) for now, frames in sim.replay(3.0, digests=True)]
    ticks = [(now, frames) for now, frames in ticks if frames]
    times = [now for now, _ in ticks]
    assert [round(b - a, 3) for a, b in zip(times, times[1:])] == [0.5] * (len(times) - 1)
    assert all(len(frames) == 1024 for _, frames in ticks)
    first_node = [step_block.read(schema.decode(frames[0]).steps) for _, frames in ticks]
    assert [sum(block["c"][i] for block in first_node) for i in (0, 1)] == [sim.steps_done] * 2  # every step, once
    assert first_node[-1]["n"] == [sim.steps_done - 1] * 2
    assert 6 <= first_node[-1]["c"][0] <= 10  # the steps of the last half second, at 16 a second


def test_a_live_simulated_job_paced_by_the_budget_is_watched_whole_with_no_malformed_digest(rdv, monkeypatch):
    """The simulator's nodes live, paced by the budget (made small here, so that 32 nodes of 2 ranks get the pace of
    a 2,048-node job: 1 digest a second): a viewer of digests hears every rank, and no digest is refused (a node's
    ranks' steps summed once per digest, never twice into one, also after the viewer took the ranks' own messages
    at their cadence for a while)."""
    monkeypatch.setattr(pacing, "DIGEST_BUDGET", 16.0)
    monkeypatch.setenv("RANKTOP_DIGESTS", "auto")  # the ranks' own messages first, digests from 16 relays: both cadences
    sim = Simulator(Scenario(job="paced", ranks=64, nodes=32, calls_per_step=4, slow_rank=40, slow_ms=20.0, slow_phase="forward"))
    stop = threading.Event()
    sim.start()
    assert all(node.digest.hz == DIGEST_HZ for node in sim._nodes)  # before any hello: the most
    runner = threading.Thread(target=sim.run, args=(stop,), daemon=True)
    runner.start()
    try:
        with WatchSession(resolve(["paced"], None, allow_pending=True)) as session:
            wait_for(lambda: len(session.snapshot().ranks) == 64 and session.snapshot().stragglers[:1] == [40], 30,
                     "the viewer never had every rank, the slow one on top")  # fmt: skip
            time.sleep(3.0)
            snap = session.snapshot()
        assert len(snap.ranks) == 64 and snap.silent == 0 and not snap.errors, snap.errors
        assert all(node.digest.hz == 1.0 for node in sim._nodes)  # as its ranks' hellos said the job's size
    finally:
        stop.set()
        runner.join(10)
        sim.close()
