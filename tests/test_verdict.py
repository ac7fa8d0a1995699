"""The verdict: who holds the job back, in which phase, what it costs; a pure function of a Snapshot.

Snapshots of up to 4,096 ranks are built by hand (8 ranks per node, realistic
noise on the healthy ones), so every test knows the answer.
"""

from __future__ import annotations

import dataclasses
import json
import random

from test_app_render import job_snapshot, rank_row

from ranktop.watch.model.rank_row import RankRow
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.statuses import SILENT, SLOW, STALLED
from ranktop.watch.model.json_doc import document
from ranktop.watch.model.verdict import (
    HEALTHY,
    SILENT_RANKS,
    SLOW_NODE,
    SLOW_RANK,
    STALLED_JOB,
    WAITING,
    WARMING_UP,
    verdict,
)

PER_NODE = 8


def host_of(rank: int) -> str:
    return f"node-{rank // PER_NODE:03d}"


def healthy_rows(n: int, seed: int = 0) -> list[RankRow]:
    """n ranks at ~93 ms a step, each a little off the median by noise (never flagged)."""
    rnd = random.Random(seed)
    rows = []
    for r in range(n):
        excess = abs(rnd.gauss(0, 0.0004))
        row = rank_row(r, step_ms=93 + rnd.uniform(-1, 1), host=host_of(r))
        rows.append(dataclasses.replace(row, excess_s=excess, score=excess / 0.093))
    return rows


def slow(row: RankRow, *, excess_ms: float = 38.0, phase: str = "forward") -> RankRow:
    return dataclasses.replace(row, status=SLOW, excess_s=excess_ms / 1000, score=excess_ms / 93, culprit_phase=phase)


def big_job(n: int = 4096, *, slow_rank: int | None = None, phase: str = "forward", slow_node: int | None = None) -> Snapshot:
    """A job of n ranks; optionally one slow rank, or every rank of one node slow."""
    rows = healthy_rows(n)
    if slow_rank is not None:
        rows[slow_rank] = slow(rows[slow_rank], phase=phase)
    slow_hosts = []
    if slow_node is not None:
        for r in range(slow_node * PER_NODE, (slow_node + 1) * PER_NODE):
            rows[r] = slow(rows[r], excess_ms=20.0 + r % 3, phase=phase)
        slow_hosts = [host_of(slow_node * PER_NODE)]
    order = sorted(range(n), key=lambda r: (rows[r].status != SLOW, -rows[r].score, r))
    return job_snapshot(rows, stragglers=order, slow_hosts=slow_hosts)


def stalled_job(n: int = 4096, *, culprit: int = 2, silent: bool = False) -> Snapshot:
    """Every rank stalled at step 30 in backward for 14 s, waiting for ``culprit`` (in forward, or silent)."""
    rows = [dataclasses.replace(r, status=STALLED, stalled_s=14.0, stalled_phase="backward", stalled_step=30)
            for r in healthy_rows(n)]  # fmt: skip
    if silent:
        rows[culprit] = dataclasses.replace(rows[culprit], status=SILENT, last_seen_s=12.0, stalled_s=None)
    else:
        rows[culprit] = dataclasses.replace(rows[culprit], stalled_phase="forward")
    order = [culprit] + [r for r in range(n) if r != culprit]
    return job_snapshot(rows, stragglers=order, waiting_for=[culprit])


def test_one_slow_rank_among_4096_is_named_with_its_phase_and_what_it_costs_the_job():
    answer = verdict(big_job(slow_rank=3071))
    assert answer.kind == SLOW_RANK and answer.severity == "bad"
    assert answer.text == "rank 3071 slow in forward: +38 ms per step, the job loses 41%"
    assert answer.ranks == [3071] and answer.phase == "forward" and answer.host == "node-383"
    assert abs(answer.excess_s - 0.038) < 1e-9 and abs(answer.loss - 38 / 93) < 1e-9


def test_a_slow_node_is_named_as_the_node_not_as_one_of_its_ranks():
    answer = verdict(big_job(slow_node=383, phase="data"))
    assert answer.kind == SLOW_NODE and answer.host == "node-383" and answer.phase == "data"
    assert answer.text.startswith("node node-383 slow in data (ranks 3064-3071): +22 ms per step, the job loses 24%")
    assert answer.ranks == list(range(3064, 3072))


def test_a_stalled_job_says_which_rank_it_waits_for_and_where_that_rank_is():
    answer = verdict(stalled_job())
    assert answer.kind == STALLED_JOB
    assert answer.text == "job stalled at step 30 for 14s: waiting for rank 2 on node-000 (in forward)"
    assert answer.ranks == [2] and answer.phase == "forward"
    dead = verdict(stalled_job(culprit=4095, silent=True))
    assert dead.text == "job stalled at step 30 for 14s: waiting for rank 4095 on node-511 (silent 12s)"


def test_a_stall_where_no_rank_stands_out_says_so():
    snap = dataclasses.replace(stalled_job(8), waiting_for=[])
    answer = verdict(snap)
    assert answer.kind == STALLED_JOB and "8 ranks stuck" in answer.text and "no rank stands out" in answer.text


def test_a_healthy_job_flags_nobody():
    answer = verdict(big_job())
    assert answer.kind == HEALTHY and answer.severity == "good" and answer.ranks == []
    assert answer.text.startswith("healthy: no straggler among 4,096 ranks, median step 93 ms")


def test_silent_ranks_and_a_silent_node():
    rows = healthy_rows(64)
    rows[9] = dataclasses.replace(rows[9], status=SILENT, last_seen_s=7.0)
    answer = verdict(job_snapshot(rows))
    assert answer.kind == SILENT_RANKS and answer.ranks == [9]
    assert answer.text.startswith("rank 9 silent for 7s (on node-001)")
    for r in range(8, 16):
        rows[r] = dataclasses.replace(rows[r], status=SILENT, last_seen_s=7.0)
    node = verdict(job_snapshot(rows))
    assert node.host == "node-001" and node.text.startswith("node node-001 silent for 7s (ranks 8-15)")


def test_before_any_rank_and_before_any_score():
    assert verdict(job_snapshot([])).kind == WAITING
    warming = verdict(job_snapshot([rank_row(n, step_ms=None) for n in range(4)]))
    assert warming.kind == WARMING_UP and "4 ranks reporting" in warming.text


def test_ranks_that_never_reported_are_named_on_a_healthy_job():
    snap = dataclasses.replace(job_snapshot(healthy_rows(6)), world_size=8)
    answer = verdict(snap)
    assert answer.kind == HEALTHY and answer.severity == "warn" and "ranks 6-7 never reported" in answer.text


def test_several_slow_ranks_name_the_worst_and_count_the_others():
    snap = big_job(64, slow_rank=40)
    rows = list(snap.ranks)
    rows[7] = slow(rows[7], excess_ms=10.0, phase="data")
    snap = dataclasses.replace(snap, ranks=rows, stragglers=[40, 7] + [r for r in range(64) if r not in (40, 7)])
    answer = verdict(snap)
    assert answer.text.startswith("rank 40 slow in forward") and "(+1 more slow: 7)" in answer.text
    assert answer.others == 1 and answer.ranks == [40, 7]


def test_the_json_document_carries_the_verdict():
    doc = json.loads(json.dumps(document(big_job(64, slow_rank=5))))
    assert doc["verdict"]["kind"] == "slow_rank" and doc["verdict"]["ranks"] == [5]
    assert doc["verdict"]["text"].startswith("rank 5 slow in forward")


# -- from the real aggregator: messages in, verdict out -------------------------------------------


def test_the_aggregator_s_snapshot_of_a_slow_rank_gives_its_verdict():
    from test_aggregator import Clock, feed

    from ranktop.watch.aggregator import Aggregator

    agg = Aggregator("j", clock=Clock(), window=16)
    feed(agg, 512, 16, slow_rank=300, slow_s=0.030, phase="data", hosts=[host_of(r) for r in range(512)])
    answer = verdict(agg.snapshot())
    assert answer.kind == SLOW_RANK and answer.ranks[0] == 300 and answer.phase == "data"
    assert answer.text.startswith("rank 300 slow in data: +30 ms per step, the job loses ")


def test_a_rank_slow_in_its_data_phase_is_named_with_data_loader_only_on_its_loader_s_evidence():
    """Through the aggregator: a rank slow in its data phase with no evidence of its own gets no cause (the phase's
    name is none); once its states say it waits inside its DataLoader's __next__ beyond its peers (``ld``), the
    verdict says "because" with what that explains; its loader as fast as its peers': the cause is unknown, and
    the verdict says what was ruled out."""
    import messages
    from test_aggregator import Clock, feed

    from ranktop.watch.aggregator import Aggregator

    agg = Aggregator("j", clock=Clock(), window=16)
    feed(agg, 64, 16, slow_rank=30, slow_s=0.030, phase="data", hosts=[host_of(r) for r in range(64)])
    answer = verdict(agg.snapshot())
    assert answer.kind == SLOW_RANK and answer.ranks[0] == 30 and answer.cause is None, answer.text

    def told(ld_slow: float) -> None:
        for r in range(64):  # rates over its window: seconds a second inside __next__, GC, run-queue wait
            ev = {"win": 10.0, "ld": ld_slow if r == 30 else 0.1, "ld_cpu": 0.01, "gc": 0.001, "runq": 0.001, "swap": 0.0}
            agg.ingest(messages.heartbeat(r, {"step": 16, "last": 15, "ev": ev}, world=64, host=host_of(r)))

    told(0.9)  # about 30 ms a step more than its peers' (steps of ~32 ms)
    answer = verdict(agg.snapshot())
    assert answer.cause is not None and answer.cause.kind == "data_loader", answer.text
    assert answer.cause.explains >= 0.5 and ", because it waits " in answer.text and answer.text.endswith("(data loader)")
    told(0.1)
    answer = verdict(agg.snapshot())
    assert answer.cause is not None and answer.cause.kind == "unknown", answer.text
    assert answer.text.endswith(", cause unknown: not GC, CPU contention, the data loader or memory"), answer.text


def test_the_aggregator_s_snapshot_of_a_slow_node_names_the_node():
    from test_aggregator import Clock, ddp_step, hello, steps

    from ranktop.watch.aggregator import Aggregator

    agg = Aggregator("j", clock=Clock(), window=16)
    world = 64
    for r in range(world):
        agg.ingest(hello(r, world, host=host_of(r)))
    for n in range(16):
        for r in range(world):
            slow_s = 0.020 if host_of(r) == "node-005" else 0.0
            agg.ingest(steps(r, [ddp_step(n, r if slow_s else -1, r, slow_s, "forward", 0.0005)]))
    answer = verdict(agg.snapshot())
    assert answer.kind == SLOW_NODE and answer.host == "node-005" and answer.phase == "forward"
    assert answer.ranks == list(range(40, 48)) and answer.cause is None  # no evidence sent: no cause


def test_a_slow_node_whose_ranks_all_spend_their_steps_in_the_garbage_collector_says_so():
    import messages
    from test_aggregator import Clock, ddp_step, hello, steps

    from ranktop.watch.aggregator import Aggregator

    agg = Aggregator("j", clock=Clock(), window=16)
    world = 64
    for r in range(world):
        agg.ingest(hello(r, world, host=host_of(r)))
    for n in range(16):
        for r in range(world):
            slow_s = 0.020 if host_of(r) == "node-005" else 0.0
            agg.ingest(steps(r, [ddp_step(n, r if slow_s else -1, r, slow_s, "forward", 0.0005)]))
    for r in range(world):  # the node's ranks: about 20 ms a step in the garbage collector (steps of ~50 ms)
        ev = {"win": 10.0, "gc": 0.4 if host_of(r) == "node-005" else 0.001}
        agg.ingest(messages.heartbeat(r, {"step": 16, "last": 15, "ev": ev}, world=world, host=host_of(r)))
    answer = verdict(agg.snapshot())
    assert answer.kind == SLOW_NODE and answer.cause is not None and answer.cause.kind == "gc_pause", answer.text
    assert " and 7 more of its ranks: it spends " in answer.text and answer.text.endswith("(gc pause)"), answer.text


def test_the_culprit_s_last_arrivals_back_its_phase_times_or_cast_doubt_on_them():
    """The second signal (watch/analysis/arrivals.py): said when the culprit is last at most of its collectives,
    and when a costly culprit never is; a share between says nothing either way."""

    def with_arrivals(share, excess_ms=38.0):
        snap = big_job(64, slow_rank=7)
        rows = list(snap.ranks)
        rows[7] = dataclasses.replace(slow(rows[7], excess_ms=excess_ms), last_arrivals=share)
        return verdict(job_snapshot(rows, stragglers=snap.stragglers))

    backed = with_arrivals(0.92)
    assert backed.text == "rank 7 slow in forward: +38 ms per step, the job loses 41%, and arrives last at 92% of its steps' collectives"
    assert backed.last_arrivals == 0.92 and backed.kind == SLOW_RANK
    doubted = with_arrivals(0.0)
    assert doubted.text.endswith("the job loses 41%, though it is never the last to arrive at its collectives")
    assert with_arrivals(0.0, excess_ms=5.0).text.endswith("the job loses 5.4%")  # too small to be sure it should be
    assert with_arrivals(0.3).text.endswith("the job loses 41%") and with_arrivals(None).last_arrivals is None


def test_a_cause_is_because_from_half_the_excess_partly_from_a_fifth_and_below_that_left_to_the_rank_s_detail():
    from ranktop.watch.model.rank_row import Cause
    from ranktop.watch.model.verdict import brief

    gc_text = "it spends 12 ms per step in Python's garbage collector, 9.5x its peers' 1.3 ms (gc pause)"

    def with_causes(*found):
        snap = big_job(64, slow_rank=7)
        rows = list(snap.ranks)
        rows[7] = dataclasses.replace(slow(rows[7]), causes=list(found))
        return verdict(job_snapshot(rows, stragglers=snap.stragglers))

    def gc(explains, basis="measured"):
        return Cause(kind="gc_pause", text=gc_text, value=0.1, peers=0.01, ratio=9.5, extra_s=0.038 * explains,
                     explains=explains, basis=basis)  # fmt: skip

    tokens = Cause(kind="input_imbalance", text="it takes in 2.0x the tokens of its peers, 8,192 a step against 4,096 "
                   "(input imbalance)", value=8192.0, peers=4096.0, ratio=2.0, extra_s=0.03, explains=0.8, basis="estimated")  # fmt: skip
    assert with_causes(gc(0.6)).text.endswith(f", because {gc_text}")
    answer = with_causes(gc(0.3))
    assert answer.text.endswith(f", partly because {gc_text}") and brief(answer).endswith(", partly: gc pause")
    small = with_causes(gc(0.1))
    assert small.cause is None and small.text.endswith("the job loses 41%")  # (the rank's causes still hold it)
    # measured first, but one that explains half the excess is named before one that explains a part
    assert with_causes(gc(0.3), tokens).cause.kind == "input_imbalance"
    assert with_causes(gc(0.6), tokens).cause.kind == "gc_pause"
    unknown = Cause(kind="unknown", text="not GC or input size", value=0.0, peers=0.0, ratio=None, extra_s=0.0,
                    explains=0.0, basis="none", ruled_out=("GC", "input size"))  # fmt: skip
    answer = with_causes(gc(0.1), unknown)
    assert answer.text.endswith(", cause unknown: not GC or input size") and brief(answer).endswith(", cause unknown")
