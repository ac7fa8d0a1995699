"""Straggler scoring at 4,096 simulated ranks (ranktop.demo.simulate), through the real wire encoder and decoder.

The simulator's job is replayed on a clock of its own into an aggregator that
shares that clock, so a 4,096-rank job takes seconds of CPU, not minutes of
waiting. A viewer of 4,096 ranks takes one digest per node (wire/node_digest.py),
so that is what these feed; one test feeds every rank's own messages too. The
same job runs live, over relays, in test_simulate.py.
"""

import pytest

from ranktop.demo.simulate import Scenario, Simulator
from ranktop.watch.aggregator import Aggregator

RANKS = 4096


def watch(tmp_path, seconds: float, digests: bool = True, **scenario):
    """The snapshot an aggregator takes after ``seconds`` of the simulated job."""
    sim = Simulator(Scenario(job="big", ranks=RANKS, nodes=RANKS // 8, **scenario), str(tmp_path))
    clock = [0.0]
    agg = Aggregator("big", clock=lambda: clock[0])
    start = 1.0e9
    clock[0] = start
    if not digests:
        for frames in sim.hellos(start):
            agg.ingest_frames(frames)
    for now, frames in sim.replay(seconds, start, digests=digests):
        clock[0] = now
        for message in frames:
            assert agg.ingest_frames(message) is not None
    return agg.snapshot()


def flagged(snap):
    return {r.rank for r in snap.ranks if r.status != "ok"}


@pytest.mark.slow
@pytest.mark.parametrize("digests", [True, False], ids=["node digests", "every rank's messages"])
def test_one_slow_rank_among_4096_is_named_with_its_phase(tmp_path, digests):
    snap = watch(tmp_path, 3.0, digests, slow_rank=3071, slow_ms=20, slow_phase="forward")
    top = snap.ranks[snap.stragglers[0]]
    assert (top.rank, top.status, top.culprit_phase) == (3071, "slow", "forward")
    assert flagged(snap) == {3071} and snap.slow_hosts == []
    assert len(snap.ranks) == RANKS and {r.host for r in snap.ranks} >= {"sim0000", "sim0511"}
    assert all(r.steps_seen >= r.step for r in snap.ranks)  # every step counted, whichever way it came


@pytest.mark.slow
def test_a_slow_node_is_named_as_a_node(tmp_path):
    snap = watch(tmp_path, 3.0, slow_node="sim0100", slow_ms=20, slow_phase="backward")
    assert snap.slow_hosts == ["sim0100"]
    assert flagged(snap) == set(range(800, 808))
    assert {snap.ranks[r].culprit_phase for r in range(800, 808)} == {"backward"}


@pytest.mark.slow
def test_a_stalled_rank_is_the_one_4095_others_wait_for(tmp_path):
    snap = watch(tmp_path, 6.0, stall_rank=1234, stall_at_s=2.0)
    assert snap.waiting_for == [1234]
    assert "waiting for rank 1234" in snap.diagnosis


@pytest.mark.slow
def test_a_healthy_job_of_4096_ranks_flags_nobody(tmp_path):
    snap = watch(tmp_path, 3.0)
    assert len(snap.ranks) == RANKS and all(r.step_s is not None for r in snap.ranks)
    assert flagged(snap) == set() and snap.slow_hosts == [] and snap.waiting_for == [] and snap.diagnosis is None
