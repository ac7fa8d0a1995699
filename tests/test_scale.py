"""Straggler scoring at 4,096 simulated ranks (ranktop.demo.simulate), through the real wire encoder and decoder.

The simulator's job is replayed on a clock of its own into an aggregator that
shares that clock, so a 4,096-rank job takes seconds of CPU, not minutes of
waiting. A viewer of 4,096 ranks takes one digest per node (relay/digest_fold.py),
so that is what these feed; one test feeds every rank's own messages too. The
same job runs live, over relays, in test_simulate.py.
"""

import dataclasses

import pytest

from ranktop.demo.simulate import Scenario, Simulator
from ranktop.watch.aggregator import Aggregator

import messages

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
    # the job's collectives: every op's p95 is read from its calls (a rank's latest calls alone are all of one op)
    job_rows = {c.op: c for c in snap.collectives if c.rank == -1}
    assert sorted(job_rows) == ["all_gather_into_tensor", "reduce_scatter_tensor"]
    assert all(c.p95_s >= c.mean_s > 0 for c in job_rows.values()), job_rows


@pytest.mark.parametrize("calls_per_step", [0, 1, 8, 32])
@pytest.mark.parametrize("drawn", ["from the tables", "as rows"])
def test_a_digest_summed_from_the_draws_is_the_one_the_ranks_messages_make(tmp_path, calls_per_step, drawn):
    """A node whose ranks' own messages no viewer takes sums its steps straight into its digest (Simulator.fold):
    that digest must be the one its ranks' records would make, or the simulator would test a different job. Steps
    given as rows alone (a model of its own draws, as benchmarks/accuracy.py's) sum alike."""
    from ranktop.wire import schema, step_block
    from ranktop.relay.digest_fold import NodeDigest

    sim = Simulator(Scenario(job="big", ranks=16, nodes=2, calls_per_step=calls_per_step, slow_rank=3, slow_phase="forward"), str(tmp_path))
    steps = [sim.model.step(n, 100.0 + n * 0.07) for n in range(5)]
    if drawn == "as rows":
        steps = [dataclasses.replace(st, picks=None, special={}) for st in steps]
    ranks = range(0, 8)
    by_records, by_sums = NodeDigest("big", "sim0000"), NodeDigest("big", "sim0000")
    for msg in sim.messages(ranks, steps, 101.0):
        by_records.add(msg)
    sim._next_sample.clear()  # the sample is due again, as it was for the records
    sim.fold(ranks, steps, 101.0, by_sums)
    decoded = [schema.decode(schema.encode(d.body(5.0, 101.0))) for d in (by_records, by_sums)]
    # the packed columns as lists, their floats compared to 1e-9 below
    want, got = (dict(messages.plain(msg), steps=step_block.read(msg.steps)) for msg in decoded)
    assert len(got["ranks"]) == 8
    for entry in want["ranks"] + got["ranks"]:  # the raw calls' durations are drawn afresh for each: their shape only
        if "cx" in entry:
            entry["cx"] = [sorted(call) for call in entry["cx"]]
    assert _close(got, want)


def _close(got, want) -> bool:
    """Equal, floats to 1e-9 (the sums are added in another order), through nested maps and lists."""
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        return all(_close(got[k], want[k]) for k in want)
    if isinstance(want, (list, tuple)):  # a typed fixed-length record decodes as a tuple
        assert len(got) == len(want)
        return all(_close(g, w) for g, w in zip(got, want))
    if isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
        return True
    assert got == want
    return True


def test_digests_taken_in_goes_make_the_same_snapshot_as_one_by_one(tmp_path):
    """The receiver hands the aggregator what one poll took in one go (Aggregator.ingest_batch): the node
    digests' steps of the go are written together (RankStore.settle). That is the same job as ingesting them one
    message at a time, to the last step count and median; a go may hold two digests of one node."""
    sim = Simulator(Scenario(job="big", ranks=256, nodes=32, slow_rank=191, slow_phase="forward"), str(tmp_path))
    clock = [1.0e9]
    one, goes = (Aggregator("big", clock=lambda: clock[0]) for _ in range(2))
    ticks = list(sim.replay(6.0, clock[0], digests=True))
    for k in range(0, len(ticks), 3):  # three ticks of every node's digest in a go
        batch = []
        for now, frames in ticks[k : k + 3]:
            clock[0] = now
            for message in frames:
                assert one.ingest_frames(message, "tcp://relay:1") is not None
                batch.append((message, "tcp://relay:1"))
        assert all(msg is not None for msg in goes.ingest_batch(batch))
    a, b = one.snapshot(), goes.snapshot()
    ta, tb = a.ranks.table, b.ranks.table
    assert len(ta) == len(tb) == 256 and a.stragglers[:1] == b.stragglers[:1] == [191]
    for column in ("rank", "step", "steps_seen", "missed"):
        assert getattr(ta, column).tolist() == getattr(tb, column).tolist(), column
    for column in ("step_s", "phases", "last_step_end"):
        assert getattr(ta, column) == pytest.approx(getattr(tb, column), nan_ok=True), column


def test_a_node_s_collectives_summed_over_many_sends_reach_its_digest_every_two_seconds_none_lost(tmp_path):
    """The simulator hands a node's ranks' collectives to its digest every OPS_EVERY_S, summed over the sends
    between (Simulator.fold): over the same steps, the digests carry the calls, bytes and waits the ranks'
    own messages would, and no op summary is built at the sends in between."""
    from ranktop.wire import schema
    from ranktop.relay.digest_fold import NodeDigest
    from ranktop.wire.pacing import OPS_EVERY_S

    sim = Simulator(Scenario(job="big", ranks=16, nodes=2, calls_per_step=8, slow_rank=3, slow_phase="forward"), str(tmp_path))
    steps = [sim.model.step(n, 100.0 + n * 0.07) for n in range(12)]
    ranks = range(0, 8)
    by_records, by_sums = NodeDigest("big", "sim0000"), NodeDigest("big", "sim0000")
    sends = [(steps[0:3], 101.0), (steps[3:6], 101.25), (steps[6:9], 101.5), (steps[9:12], 101.0 + OPS_EVERY_S)]
    totals = {}
    for digest, fold in ((by_records, False), (by_sums, True)):
        got = totals[fold] = {}
        for i, (part, now) in enumerate(sends):
            if fold:
                sim.fold(ranks, part, now, digest)
            else:
                for msg in sim.messages(ranks, part, now):
                    digest.add(msg)
            body = schema.decode(schema.encode(digest.body(now - 100.0, now)))
            with_ops = [e for e in body.ranks if e.ops]
            assert len(with_ops) == (8 if i in (0, 3) else 0), i  # the first send, then OPS_EVERY_S later
            for e in with_ops:
                for op, s in e.ops.items():
                    calls, nbytes, waited = got.get((e.r, op), (0, 0, 0.0))
                    got[(e.r, op)] = (calls + s.calls, nbytes + s.bytes, waited + s.waited)
    assert totals[True].keys() == totals[False].keys() and len(totals[True]) == 16
    for key, (calls, nbytes, waited) in totals[False].items():
        assert totals[True][key][:2] == (calls, nbytes) and totals[True][key][2] == pytest.approx(waited, rel=1e-9)
