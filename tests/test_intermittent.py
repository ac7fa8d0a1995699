"""Intermittent stragglers (watch/analysis/intermittent.py): a rank slow on some steps only is flagged with what it
costs the job on average and how often, where its window's median says nothing; a noisy healthy job, pauses of the
OS or GC now and then included, flags nobody. Synthetic steps through a real Aggregator."""

import random

import pytest

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.model.json_doc import document
from ranktop.watch.model.verdict import brief, verdict
import messages

BASE = {"data": 0.004, "forward": 0.008, "backward": 0.012, "optimizer": 0.003}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def run(world=8, steps=160, slow_rank=-1, slow_s=0.0, every=10, phase="data", noise=0.03, pauses=0.0, seed=0):
    """Synchronous training: each rank's own phases (gaussian noise, and a pause of 5-100 ms on ``pauses`` of its
    steps), the others waiting for the slowest in backward's all-reduce (their wait: comm)."""
    rng = random.Random(seed)
    clock = Clock()
    agg = Aggregator("j", clock=clock, window=64)
    for r in range(world):
        agg.ingest(messages.hello(r, world, "n0", pid=r))
    t = 100.0
    for n in range(steps):
        own = []
        for r in range(world):
            p = {k: v * (1 + rng.gauss(0, noise)) for k, v in BASE.items()}
            if r == slow_rank and n % every == every - 1:
                p[phase] += slow_s
            if rng.random() < pauses:  # heavy-tailed (Pareto from 5 ms), as benchmarks/accuracy.py's pauses
                p[rng.choice(list(BASE))] += min(0.5, 0.005 * rng.paretovariate(1.5))
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
    return agg.snapshot()


def test_a_rank_slow_on_one_step_in_ten_is_flagged_with_its_cost_on_average_and_how_often():
    snap = run(slow_rank=2, slow_s=0.134)
    answer = verdict(snap)
    rows = [(r.rank, r.status, r.excess_s, r.every) for r in snap.ranks]
    assert answer.kind == "slow_rank" and answer.ranks == [2] and answer.phase == "data", (answer.text, rows)
    assert answer.every == pytest.approx(10, rel=0.25) and answer.excess_s == pytest.approx(0.0134, rel=0.3), answer
    assert answer.text.startswith("rank 2 slow in data on 1 step in ") and " ms per step on average, the job loses " in answer.text
    assert [r.status for r in snap.ranks if r.rank != 2] == ["ok"] * 7, rows
    assert document(snap)["ranks"][2]["every"] == answer.every
    assert "ms/step avg" in brief(answer, 60)


def test_a_rank_slow_on_every_step_has_no_every():
    snap = run(slow_rank=2, slow_s=0.010, every=1)
    answer = verdict(snap)
    assert answer.kind == "slow_rank" and answer.ranks == [2] and answer.every is None, answer.text


@pytest.mark.parametrize("seed", range(8))
def test_a_noisy_healthy_job_with_pauses_now_and_then_flags_nobody(seed):
    snap = run(noise=0.08, pauses=0.01, seed=seed, steps=200)  # pauses on 1% of steps: 3x benchmarks/accuracy.py's
    assert {r.status for r in snap.ranks} == {"ok"}, [(r.rank, r.excess_s, r.every) for r in snap.ranks if r.status != "ok"]


def test_the_straggler_table_says_how_often_it_is_slow():
    from ranktop.tui.panes.stragglers import cells

    snap = run(slow_rank=2, slow_s=0.134)
    every = round(snap.ranks[2].every)
    assert cells(snap.ranks[2])[6].plain == f"slow 1/{every}" and cells(snap.ranks[3])[6].plain == "ok"
