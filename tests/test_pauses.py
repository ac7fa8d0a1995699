"""Checkpoints and evaluations told as what they are (watch/analysis/pauses.py): never a stall, never a straggler,
the verdict ``checkpoint`` or ``eval`` when the job waits for one or spends 5% of its time in them. Synthetic
messages through a real Aggregator; the live jobs are in tests/test_pauses_live.py."""

import numpy as np

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.pauses import PauseBook, without
from ranktop.watch.model.json_doc import document
from ranktop.watch.model.verdict import brief, verdict
import messages
from messages import Clock, state

STEP_S = 0.05


def train(agg, clock, world, n_steps, first=0, saver=None, every=0, save_s=0.0, phase="checkpoint"):
    """``n_steps`` of synchronous training; ``saver`` (a rank, or "all") spends ``save_s`` in ``phase`` every
    ``every`` steps, and the others wait for it in their next step's backward (no collective seen: its wait is
    their backward's)."""
    for r in range(world):
        agg.ingest(messages.hello(r, world, "n0", pid=r))
    t = 100.0 + first * STEP_S
    for n in range(first, first + n_steps):
        pausing = every and n % every == every - 1
        clock.now += STEP_S + (save_s if pausing else 0.0)
        for r in range(world):
            p = {"data": 0.005, "forward": 0.015, "backward": 0.025}
            if pausing and (saver == "all" or r == saver):
                p[phase] = save_s
            elif pausing:
                p["backward"] += save_s
            wall = sum(p.values()) + 0.002
            agg.ingest(messages.steps(r, [{"n": n, "t": t, "w": wall, "p": p}], state=state(n, n, None, in_step=False), world=world))
        t += STEP_S + (save_s if pausing else 0.0)


def hold(agg, clock, seconds, where, world=4, since=0.0):
    """Every rank heartbeats for ``seconds`` with no step finished (its step begun ``since`` seconds before):
    where[rank] = (step, last, phase)."""
    t = since
    while t < since + seconds:
        clock.now += 1.0
        t += 1.0
        for r in range(world):
            s, last, phase = where[r]
            agg.ingest(messages.heartbeat(r, state(s, last, phase, step_age=t)))


def test_ranks_waiting_for_a_checkpoint_under_way_are_waiting_not_stalled():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 40)
    hold(agg, clock, 10, {0: (40, 39, "checkpoint"), 1: (40, 39, "backward"), 2: (40, 39, "backward"), 3: (40, 39, "backward")})
    snap = agg.snapshot()
    assert {r.status for r in snap.ranks} == {"ok"} and snap.diagnosis is None
    answer = verdict(snap)
    assert answer.kind == "checkpoint" and answer.ranks == [0] and answer.severity == "warn", answer
    assert answer.text == "rank 0 saving a checkpoint for 10s, the others wait", answer.text
    doc = document(snap)
    assert doc["verdict"]["kind"] == "checkpoint" and doc["pauses"][0]["holding"] is True


def test_a_job_stuck_with_no_checkpoint_or_evaluation_under_way_is_still_stalled():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 40, saver=0, every=10, save_s=0.5)  # it has saved checkpoints: none is under way now
    hold(agg, clock, 10, {0: (40, 39, "forward"), 1: (40, 39, "backward"), 2: (40, 39, "backward"), 3: (40, 39, "backward")})
    snap = agg.snapshot()
    assert [r.status for r in snap.ranks] == ["stalled"] * 4
    assert verdict(snap).kind == "stalled"


def test_an_evaluation_every_rank_runs_is_no_stall_and_says_so():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 40)
    hold(agg, clock, 20, {r: (40, 39, "eval") for r in range(4)})
    snap = agg.snapshot()
    assert {r.status for r in snap.ranks} == {"ok"}
    answer = verdict(snap)
    assert answer.kind == "eval" and answer.text == "evaluating for 20s", answer.text


def test_a_rank_that_saves_every_checkpoint_is_no_straggler_and_the_cost_is_told():
    clock = Clock()
    agg = Aggregator("j", clock=clock, window=64)
    train(agg, clock, 4, 80, saver=0, every=8, save_s=0.4)
    snap = agg.snapshot()
    assert {r.status for r in snap.ranks} == {"ok"}, [(r.rank, r.status, r.culprit_phase) for r in snap.ranks]
    answer = verdict(snap)
    # 0.4 s every 8 steps of 47 ms: 0.4 / (8 x 0.047 + 0.4) of the job's time
    assert answer.kind == "checkpoint" and answer.ranks == [0] and answer.every == 8, answer
    assert answer.text.startswith("rank 0 saving a checkpoint: 0.40 s every 8 steps, the job spends "), answer.text
    assert 0.45 < answer.loss < 0.58 and answer.text.endswith("of its time in checkpoints"), answer
    short = brief(answer, 80)  # an 80-column screen
    assert (
        len(short) <= 80 and short.startswith("rank 0 saving a checkpoint: 0.40 s every 8 steps, ") and short.endswith("% in checkpoints")
    ), short


def test_checkpoints_that_cost_under_5_percent_leave_the_job_healthy():
    clock = Clock()
    agg = Aggregator("j", clock=clock, window=64)
    train(agg, clock, 4, 80, saver=0, every=16, save_s=0.02)  # 20 ms every 16 steps: under 3% of the time
    answer = verdict(agg.snapshot())
    assert answer.kind == "healthy", answer.text


def test_a_pause_phase_is_left_out_of_what_the_scoring_compares():
    phases = np.array([[0.01, 0.3, 0.02], [0.01, 0.0, 0.02]])
    out = without(phases, ["forward", "checkpoint", "backward"])
    assert out.tolist() == [[0.01, 0.0, 0.02], [0.01, 0.0, 0.02]] and phases[0, 1] == 0.3  # a copy
    assert without(phases, ["forward", "other", "backward"]) is phases  # none: no copy


def test_a_pause_s_share_is_averaged_over_the_snapshots_of_the_last_minute():
    book = PauseBook(average_s=60.0)
    assert book.average({"checkpoint": 0.3}, 0.0) == {"checkpoint": 0.3}  # the first stands alone
    # a window that holds the checkpoint now and then: its share comes and goes, its average stays near the truth
    shares = [book.average({"checkpoint": 0.3 if (k // 10) % 2 else 0.0}, 0.5 * k)["checkpoint"] for k in range(1, 400)]
    assert all(0.1 < s < 0.2 for s in shares[200:]), shares[200:220]


def test_ranks_that_waited_for_a_checkpoint_just_ended_are_not_stalled_before_their_messages_come():
    """The rank that saved reports its next step first; the others' word that they are past the barrier is on its
    way: for as long as a checkpoint takes they are given that much more before they are stalled."""
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 40, saver=0, every=10, save_s=2.5)
    where = {0: (41, 40, "forward"), **{r: (40, 39, "backward") for r in (1, 2, 3)}}
    hold(agg, clock, 4, where)  # 4 s: past the 2 s limit, within 2 s + 2.5 s
    assert {r.status for r in agg.snapshot().ranks} == {"ok"}
    hold(agg, clock, 3, where, since=4)
    assert [r.status for r in agg.snapshot().ranks][1:] == ["stalled"] * 3
