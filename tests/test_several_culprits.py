"""Several culprits (issue 46, item 3): two stragglers in different phases are each flagged with their own phase
and size; the verdict names the costlier and counts the other. The larger arrives last at every collective, so the
smaller is never last: the last arrivals' veto must not drop a rank whose own excess is measured while a costlier
flagged rank of its class is the one last. Synthetic steps through a real Aggregator."""

import random

import pytest

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.model.verdict import verdict
import messages

BASE = {"data": 0.004, "forward": 0.008, "backward": 0.012, "optimizer": 0.003}


def run(world=8, slow=(), noise=0.03, steps=200, seed=0):
    """Synchronous training, the others waiting for the slowest in backward's all-reduce; ``slow``: (rank, phase,
    seconds) each. A snapshot every 16 steps (a viewer's); the last."""
    rng = random.Random(seed)
    clock = messages.Clock()
    agg = Aggregator("j", clock=clock, window=64)
    for r in range(world):
        agg.ingest(messages.hello(r, world, "n0", pid=r))
    t = 100.0
    snap = None
    for n in range(steps):
        own = []
        for r in range(world):
            p = {k: v * (1 + rng.gauss(0, noise)) for k, v in BASE.items()}
            for rank, phase, seconds in slow:
                if r == rank:
                    p[phase] += seconds
            own.append(p)
        wall = messages.synchronous_step(agg, n, t, own, world)
        t += wall
        clock.now += wall
        if n % 16 == 15 or n == steps - 1:
            snap = agg.snapshot()
    return snap


@pytest.mark.parametrize("seed", range(3))
def test_two_stragglers_in_different_phases_are_both_flagged_with_their_own_phase_and_size(seed):
    snap = run(slow=[(2, "forward", 0.012), (5, "data", 0.005)], seed=seed)
    rows = {r.rank: r for r in snap.ranks}
    answer = verdict(snap)
    assert answer.kind == "slow_rank" and answer.ranks[:2] == [2, 5] and answer.others == 1, answer.text
    assert rows[2].culprit_phase == "forward" and rows[2].excess_s == pytest.approx(0.012, rel=0.2)
    assert rows[5].status == "slow" and rows[5].culprit_phase == "data", (rows[5].status, rows[5].last_arrivals)
    assert rows[5].excess_s == pytest.approx(0.005, rel=0.25), rows[5].excess_s
    assert rows[5].last_arrivals == 0.0  # never last: rank 2 is, on every step
    assert {r.status for r in snap.ranks if r.rank not in (2, 5)} == {"ok"}


@pytest.mark.parametrize("seed", range(3))
def test_one_straggler_does_not_carry_a_healthy_rank_with_it(seed):
    snap = run(slow=[(2, "forward", 0.012)], seed=seed, noise=0.05)
    assert [r.rank for r in snap.ranks if r.status != "ok"] == [2]
