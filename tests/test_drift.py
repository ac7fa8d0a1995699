"""Drift is not a fault (issue 46, item 7): ranks whose speeds wander a few percent over tens of seconds raise no
alarm (±2% here; the issue asks ±4%, not met yet: docs/detection.md), while a slowdown that starts at once is
named as soon as its windows take it in, at any step rate. A rank's level follows its excess up by the floor over
three of its windows' lengths at most (stragglers.level_rise): a drift creeps and its level keeps up; a fault's
onset outruns it. And where the ranks are a few percent apart at any moment (stragglers.ExcessHistory.wander), one
that did not grow is held to that much. Synthetic data-parallel steps through a real Aggregator on a simulated
clock; benchmarks/drift.py counts the episodes over longer runs."""

import math
import random

import numpy as np
import pytest

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis import stragglers
from ranktop.watch.model.verdict import verdict
import messages

BASE = {"data": 0.005, "forward": 0.020, "backward": 0.030, "optimizer": 0.005}  # 60 ms of own work: 16 steps/s


def run(seconds, world=6, amp=0.04, seed=2, slow_from=None, slow=None, scale=1.0, periods=(20, 60)):
    """Verdicts twice a second of ``world`` ranks each wandering as a sine of ±``amp`` (``periods``, seconds) with 3%
    noise, each phase ``scale`` times BASE; from ``slow_from`` seconds each rank of ``slow`` (rank: (phase,
    share)) does that share of the whole step more in that phase, for good."""
    rng = random.Random(seed)
    clock = messages.Clock()
    agg = Aggregator("j", clock=clock, wall_clock=clock, window=64)
    for r in range(world):
        agg.ingest(messages.hello(r, world, "n0", pid=r))
    phase = [rng.uniform(0, 2 * math.pi) for _ in range(world)]
    period = [rng.uniform(*periods) for _ in range(world)]
    whole = scale * sum(BASE.values())
    start, n, t, out = clock.now, 0, 100.0, []
    next_look = clock.now + 0.5
    while clock.now - start < seconds:
        own = []
        for r in range(world):
            f = 1 + amp * math.sin(2 * math.pi * (clock.now - start) / period[r] + phase[r])
            p = {k: scale * v * f * (1 + rng.gauss(0, 0.03)) for k, v in BASE.items()}
            if slow_from is not None and r in (slow or {}) and clock.now - start >= slow_from:
                p[slow[r][0]] += slow[r][1] * whole
            own.append(p)
        wall = messages.synchronous_step(agg, n, t, own, world)
        n, t = n + 1, t + wall
        clock.now += wall
        if clock.now >= next_look:
            next_look += 0.5
            out.append((clock.now - start, verdict(agg.snapshot())))
    return out


def named_after(looks, rank, onset):
    """Seconds from ``onset`` to the first look naming ``rank`` slow (None: never)."""
    return next((round(at - onset, 1) for at, v in looks if at >= onset and v.kind == "slow_rank" and rank in v.ranks), None)


@pytest.mark.parametrize("seed", [2, 3, 4, 5])
def test_ranks_wandering_within_two_percent_name_nobody(seed):
    """Each rank's speed a sine of ±2% over 20-60 s: at any moment two ranks are up to 4% apart, and one that
    drifts up moves up to 0.6% of its step a second (the viewer before issue 46's level named a rank in 5 of 8
    such runs; one of ±4% it still names at times: docs/detection.md)."""
    named = [(round(at), v.text) for at, v in run(150, amp=0.02, seed=seed) if at > 10 and v.kind in ("slow_rank", "slow_node")]
    assert not named, named[:5]


def test_ranks_wandering_within_two_percent_at_two_steps_a_second_name_nobody():
    named = [(round(at), v.text) for at, v in run(240, amp=0.02, scale=8.0, seed=5) if at > 20 and v.kind in ("slow_rank", "slow_node")]
    assert not named, named[:5]


def test_a_five_percent_slowdown_that_starts_at_once_among_wandering_ranks_is_named_within_ten_seconds():
    """Among ranks wandering ±1% (a 5% slowdown among ranks wandering ±2% is at times 3% beyond its peers: then
    no more than a drift)."""
    looks = run(70, amp=0.01, slow_from=40, slow={1: ("forward", 0.05)})
    after = named_after(looks, 1, 40)
    assert after is not None and after <= 10, [(round(at, 1), v.text) for at, v in looks if at > 39][:20]
    assert all(v.kind == "slow_rank" and v.ranks[:1] == [1] for at, v in looks if at > 55), "named only for a while"


def test_a_ten_percent_slowdown_at_two_steps_a_second_is_named_within_a_window_and_a_half():
    """2 steps a second: a window of 32 steps is 16 s, and its median takes a slowdown in once half of it is slow."""
    looks = run(120, amp=0.02, slow_from=60, slow={1: ("forward", 0.10)}, scale=8.0)
    after = named_after(looks, 1, 60)
    assert after is not None and after <= 24, [(round(at, 1), v.text) for at, v in looks if at > 59][:20]


def test_a_second_smaller_straggler_that_began_with_a_larger_one_is_named_too():
    """Two stragglers at once (issue 46, item 3): the smaller one, 5% in the optimizer beside a 15% one in forward,
    among wandering ranks: both named, each within ten seconds."""
    looks = run(60, amp=0.02, slow_from=30, slow={1: ("forward", 0.15), 4: ("optimizer", 0.05)})
    assert named_after(looks, 1, 30) is not None and named_after(looks, 1, 30) <= 10
    after = named_after(looks, 4, 30)
    assert after is not None and after <= 10, [(round(at, 1), v.text, v.ranks) for at, v in looks if at > 29][:20]


def _drift_of(amp, bias, seed=0, world=8, seconds=120):
    """stragglers.ExcessHistory.drift after ``seconds`` of looks twice a second at ``world`` ranks, each one's own
    time beyond its reference a sine of ±``amp`` over 20-60 s plus a lasting ``bias`` (uniform ±) and its window
    median's noise (0.3%)."""
    rng = random.Random(seed)
    history = stragglers.ExcessHistory()
    ranks = np.arange(world)
    phase = [rng.uniform(0, 2 * math.pi) for _ in ranks]
    period = [rng.uniform(20, 60) for _ in ranks]
    lasting = [rng.uniform(-bias, bias) for _ in ranks]
    for look in range(2 * seconds):
        t = look / 2
        strays = np.array([lasting[r] + amp * math.sin(2 * math.pi * t / period[r] + phase[r]) + rng.gauss(0, 0.003) for r in ranks])
        history.note(ranks, np.zeros(world), np.zeros(world, bool), 1000.0 + t, strays=strays, noise=np.full(world, 0.003))
    return history.drift()


def test_ranks_that_drift_are_told_from_ranks_that_differ_for_good():
    """The drift measure counts how far ranks stray from their own recent past beyond their windows' noise: ±4% over
    20-60 s is a drift of 2-3%; ranks ±3% apart for good (their hardware) with the same noise do not drift."""
    assert all(0.015 < _drift_of(0.04, 0.0, seed) < 0.04 for seed in range(3))
    assert all(_drift_of(0.0, 0.03, seed) == 0.0 for seed in range(3))
