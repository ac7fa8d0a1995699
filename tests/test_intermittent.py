"""Intermittent stragglers (watch/analysis/intermittent.py): a rank slow on some steps only is flagged with what it
costs the job on average and how often, where its window's median says nothing; a healthy job flags nobody however
many long steps each of its ranks has (pauses of the OS or GC, heavy-tailed input lengths), as long as no rank has
more of them than its peers. Synthetic steps through a real Aggregator."""

import random

import pytest

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.intermittent import upper_tail
from ranktop.watch.model.json_doc import document
from ranktop.watch.model.verdict import brief, verdict
import messages

BASE = {"data": 0.004, "forward": 0.008, "backward": 0.012, "optimizer": 0.003}


def run(world=8, steps=160, slow_rank=-1, slow_s=0.0, every=10, phase="data", noise=0.03, pauses=0.0, long_inputs=0.0,
        seed=0, looks=None):  # fmt: skip
    """Synchronous training: each rank's own phases (gaussian noise; a pause of 5-500 ms, Pareto, on ``pauses`` of
    its steps; an input ``long_inputs`` of its steps 1.5-5x as long in forward and backward, Pareto), the others
    waiting for the slowest in backward's all-reduce (their wait: comm). ``looks``: the steps after which a snapshot
    is taken (default: every 16th, a viewer's 2 a second at 30 ms a step: the job state tallies each rank's steps
    as a snapshot sees them); the snapshots, the last one's last."""
    looks = range(15, steps, 16) if looks is None else looks
    rng = random.Random(seed)
    clock = messages.Clock()
    agg = Aggregator("j", clock=clock, window=64)
    for r in range(world):
        agg.ingest(messages.hello(r, world, "n0", pid=r))
    t = 100.0
    snaps = []
    for n in range(steps):
        own = []
        for r in range(world):
            p = {k: v * (1 + rng.gauss(0, noise)) for k, v in BASE.items()}
            if r == slow_rank and n % every == every - 1:
                p[phase] += slow_s
            if rng.random() < pauses:
                p[rng.choice(list(BASE))] += min(0.5, 0.005 * rng.paretovariate(1.5))
            if rng.random() < long_inputs:
                longer = min(5.0, 0.5 + rng.paretovariate(1.2))
                p["forward"] *= longer
                p["backward"] *= longer
            own.append(p)
        totals = [sum(p.values()) for p in own]
        wall = max(totals) + 0.001
        for r, p in enumerate(own):
            waits = {"backward": max(0.0, wall - 0.001 - totals[r])}
            p = dict(p, backward=p["backward"] + waits["backward"])
            start = t + totals[r]
            calls = [{"op": "all_reduce", "seq": n, "b": 4096, "dt": "float32", "g": world, "d": waits["backward"],
                      "n": n, "ph": "backward", "t0": start}]
            agg.ingest(messages.steps(r, [{"n": n, "t": t, "w": wall, "p": p}], calls=calls, world=world))
        t += wall
        clock.now += wall
        if n in looks:
            snaps.append(agg.snapshot())
    snaps.append(agg.snapshot())
    return snaps


def test_a_rank_slow_on_one_step_in_ten_is_flagged_with_its_cost_on_average_and_how_often():
    snap = run(slow_rank=2, slow_s=0.134)[-1]
    answer = verdict(snap)
    rows = [(r.rank, r.status, r.excess_s, r.every) for r in snap.ranks]
    assert answer.kind == "slow_rank" and answer.ranks == [2] and answer.phase == "data", (answer.text, rows)
    assert answer.every == pytest.approx(10, rel=0.25) and answer.excess_s == pytest.approx(0.0134, rel=0.3), answer
    assert answer.text.startswith("rank 2 slow in data on 1 step in ") and " ms per step on average, the job loses " in answer.text
    assert [r.status for r in snap.ranks if r.rank != 2] == ["ok"] * 7, rows
    assert document(snap)["ranks"][2]["every"] == answer.every
    assert "ms/step avg" in brief(answer, 60)


@pytest.mark.parametrize("every", [3, 30])
def test_one_step_in_three_and_one_in_thirty_are_named_too(every):
    """The job pays 3 ms a step (10%); one step in 30 takes more steps to tell from chance: a window holds two."""
    snap = run(slow_rank=5, slow_s=0.003 * every, every=every, phase="forward", steps=500)[-1]
    answer = verdict(snap)
    assert answer.kind == "slow_rank" and answer.ranks == [5] and answer.phase == "forward", answer.text
    assert answer.every == pytest.approx(every, rel=0.5), answer


def test_a_rank_slow_on_every_step_has_no_every():
    answer = verdict(run(slow_rank=2, slow_s=0.010, every=1)[-1])
    assert answer.kind == "slow_rank" and answer.ranks == [2] and answer.every is None, answer.text


def test_a_two_rank_job_names_its_intermittent_rank():
    """Its one peer's far steps are all it has to go by, so it needs more of its own than a rank among 8."""
    answer = verdict(run(world=2, slow_rank=1, slow_s=0.1, every=10, steps=250)[-1])
    assert answer.kind == "slow_rank" and answer.ranks == [1] and answer.every is not None, answer.text


@pytest.mark.parametrize("seed", range(6))
def test_a_noisy_healthy_job_with_pauses_now_and_then_flags_nobody_at_any_look(seed):
    for snap in run(noise=0.08, pauses=0.02, seed=seed, steps=300, looks=range(80, 300, 8)):
        assert {r.status for r in snap.ranks} == {"ok"}, [(r.rank, r.excess_s, r.every) for r in snap.ranks if r.status != "ok"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("world", [2, 8])
def test_heavy_tailed_input_lengths_on_every_rank_flag_nobody_at_any_look(seed, world):
    """Every rank has long steps, 5% of them, some 5x: as many as its peers, so none is intermittent."""
    for snap in run(world=world, noise=0.05, long_inputs=0.05, seed=seed, steps=300, looks=range(80, 300, 8)):
        assert {r.status for r in snap.ranks} == {"ok"}, [(r.rank, r.excess_s, r.every) for r in snap.ranks if r.status != "ok"]


def test_the_chance_of_as_many_far_steps_is_the_binomial_tail():
    assert upper_tail(0, 64, 0.1) == 1.0 and upper_tail(65, 64, 0.1) == 0.0
    assert upper_tail(1, 10, 0.5) == pytest.approx(1 - 0.5**10)
    assert upper_tail(64, 64, 0.5) == pytest.approx(0.5**64)


def test_the_straggler_table_says_how_often_it_is_slow():
    from ranktop.tui.panes.stragglers import cells

    snap = run(slow_rank=2, slow_s=0.134)[-1]
    every = round(snap.ranks[2].every)
    assert cells(snap.ranks[2])[6].plain == f"slow 1/{every}" and cells(snap.ranks[3])[6].plain == "ok"
