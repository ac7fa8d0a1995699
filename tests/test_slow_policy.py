"""When a rank is slow (watch/analysis/stragglers.py, docs/detection.md "When a rank is slow"): past 3% of a
healthy peer's own work, past its window's noise (or a phase's, where it grew in that phase), and past what
healthy hardware differs by unless it grew."""

from __future__ import annotations

import numpy as np
import pytest

from ranktop.watch.analysis.stragglers import ExcessHistory, score_columns

NAMES = ["data", "forward", "backward", "optimizer", "comm", "other"]
WORK = np.array([0.006, 0.019, 0.025, 0.0075, 0.0, 0.005])  # own seconds per phase: 62.5 ms of work a step
STEPS = 64


def job(ranks: int, slower: dict[int, float], comm: float = 0.005, sd: float = 0.001, seed: int = 0):
    """Every rank's window medians: the same work, ``slower[r]`` more of it (a share of the work, in forward),
    and ``comm`` waited; ``sd``: how much each rank's own time varies from step to step."""
    rnd = np.random.default_rng(seed)
    phases = np.tile(WORK, (ranks, 1)) * (1 + rnd.normal(0, 0.002, (ranks, len(NAMES))))
    for r, share in slower.items():
        phases[r, 1] += share * WORK.sum()
    phases[:, 4] = comm
    steps = phases.sum(axis=1).max() + 0.001 + np.zeros(ranks)  # everyone waits for the slowest
    return phases, steps, np.full(ranks, sd), np.full(ranks, STEPS)


def slow(phases, steps, sd, counts, before=None) -> list[int]:
    excess, _, floor, _ = score_columns(phases, steps, NAMES, None, sd, counts, before)
    return np.flatnonzero(excess > floor).tolist()


@pytest.mark.parametrize("ranks", [2, 8, 64])
def test_a_rank_3_percent_slower_for_good_is_no_straggler_and_one_7_percent_slower_is(ranks):
    """Seen slower from the start (no history): past 3% + the 3% healthy hardware may differ by (6% against one
    peer, which may itself be 3% fast)."""
    assert slow(*job(ranks, {1: 0.03})) == []
    assert slow(*job(ranks, {1: 0.05})) == []  # (the accuracy benchmark's wide_bias noise: healthy)
    assert slow(*job(ranks, {1: 0.07})) == ([1] if ranks > 2 else [])
    assert slow(*job(ranks, {1: 0.10})) == [1]


@pytest.mark.parametrize("ranks", [2, 8, 64])
def test_a_rank_that_became_3_5_percent_slower_than_it_was_is_slow(ranks):
    phases, steps, sd, counts = job(ranks, {1: 0.035})
    assert slow(phases, steps, sd, counts) == []  # alone, no different from hardware a little slower
    before = np.zeros(ranks)  # seen healthy, level with its peers, a while ago
    assert slow(phases, steps, sd, counts, before) == [1]
    before[1] = 0.02 * WORK.sum()  # it was 2% slower already: it grew by 1.5% only
    assert slow(phases, steps, sd, counts, before) == []


def test_the_same_excess_in_a_noisy_job_is_noise_and_in_a_quiet_one_a_straggler():
    phases, steps, sd, counts = job(8, {3: 0.07})
    assert slow(phases, steps, sd, counts) == [3]
    noisy = np.full(8, 0.012)  # input sizes that vary step to step: the median of 64 steps is 1.9 ms off
    assert slow(phases, steps, noisy, counts) == []
    assert slow(phases, steps, noisy, counts * 16) == [3]  # the same noise over a longer window: it stands out


def test_the_floor_is_a_share_of_a_healthy_peer_s_work_not_of_a_step_long_with_waits():
    """A pipeline's bubbles make the step long; a rank 7% slower at its work is slow all the same."""
    phases, steps, sd, counts = job(8, {5: 0.07}, comm=0.060)
    assert steps[0] > 2 * WORK.sum()
    assert slow(phases, steps, sd, counts) == [5]


def test_the_size_told_is_the_slowdown_not_the_slowdown_plus_every_peer_s_noise():
    rnd = np.random.default_rng(7)
    phases, steps, sd, counts = job(64, {9: 0.20})
    phases[:, :4] *= 1 + rnd.normal(0, 0.02, (64, 4))  # each phase's median a little off, every rank
    excess, culprit, _, _ = score_columns(phases, steps, NAMES, None, sd, counts)
    assert excess[9] == pytest.approx(0.20 * WORK.sum(), rel=0.08)
    assert NAMES[culprit[9]] == "forward"
    assert (excess == 0.0).sum() >= 32  # half the ranks show no slowdown at all: noise is not one


def test_the_history_follows_a_healthy_rank_down_fast_up_slowly_and_holds_while_it_is_slow():
    history = ExcessHistory()
    ranks = np.array([0, 1, 2])
    assert np.isnan(history.before(ranks)).all()
    history.note(ranks, np.array([0.010, 0.002, 0.0]), np.zeros(3, bool), now=0.0)  # warming up: high at first
    for now in (1.0, 2.0, 3.0, 4.0):
        history.note(ranks, np.array([0.001, 0.002, 0.0]), np.zeros(3, bool), now=now)
    assert history.before(ranks)[0] == pytest.approx(0.001, abs=0.0002)  # down in seconds: the warm-up is over
    history.note(ranks, np.array([0.001, 0.002, 0.0]), np.zeros(3, bool), now=10.0)
    history.note(ranks, np.array([0.004, 0.002, 0.0]), np.zeros(3, bool), now=11.0)
    level = history.before(ranks)[0]
    assert 0.001 < level < 0.0012  # up over about 30 s: a second is 3% of the way
    history.note(ranks, np.array([0.020, 0.002, 0.0]), np.array([True, False, False]), now=100.0)
    assert history.before(ranks)[0] == level  # slow: its level stands still however long
    assert np.isnan(history.before(np.array([2, 7]))[1])  # never seen


def phase_spread(ranks: int, forward: float = 0.002) -> np.ndarray:
    """Each phase's robust SD per step: forward and backward vary with input sizes, the rest hardly."""
    return np.tile([0.0002, forward, 0.003, 0.0002, 0.0, 0.0002], (ranks, 1))


def slow_by_phase(phases, steps, sd, counts, spread, phase_before, before=None) -> list[int]:
    excess, _, floor, _ = score_columns(phases, steps, NAMES, None, sd, counts, before, spread, phase_before)
    return np.flatnonzero(excess > floor).tolist()


def test_a_5_percent_slowdown_in_one_phase_stands_out_of_that_phase_s_noise_when_not_of_the_step_s():
    phases, steps, sd, counts = job(64, {1: 0.05})
    noisy = np.full(64, 0.012)  # the whole step varies 19% step to step: its median 1.9 ms off
    assert slow(phases, steps, noisy, counts) == []
    was = np.zeros((64, len(NAMES)))  # every rank level with its peers in every phase when last healthy
    assert slow_by_phase(phases, steps, noisy, counts, phase_spread(64), was) == [1]
    assert slow_by_phase(phases, steps, noisy, counts, phase_spread(64, forward=0.012), was) == []  # its own noise


def test_a_phase_beyond_its_peers_as_it_already_was_when_healthy_is_not_a_new_slowdown():
    phases, steps, sd, counts = job(64, {1: 0.05})
    noisy = np.full(64, 0.012)
    was = np.zeros((64, len(NAMES)))
    was[1, 1] = 0.05 * WORK.sum()  # it was that much slower in forward already
    assert slow_by_phase(phases, steps, noisy, counts, phase_spread(64), was) == []
    assert slow_by_phase(phases, steps, noisy, counts, phase_spread(64), np.full((64, len(NAMES)), np.nan)) == []  # never seen


def test_the_history_follows_each_phase_s_time_beyond_its_reference_alike_up_and_down_and_holds_it_while_slow():
    history = ExcessHistory()
    ranks = np.array([0, 1])
    assert np.isnan(history.differences_before(ranks, 6)).all()
    history.note(ranks, np.zeros(2), np.zeros(2, bool), 0.0, differences=np.zeros((2, 6)))
    moved = np.array([[0.001] * 6, [-0.001] * 6])
    history.note(ranks, np.zeros(2), np.zeros(2, bool), ExcessHistory.PHASE_FOLLOW_S, differences=moved)
    level = history.differences_before(ranks, 6)
    assert level[0] == pytest.approx(0.001 * (1 - np.exp(-1)))  # up and down alike: noise averages out
    assert level[1] == pytest.approx(-0.001 * (1 - np.exp(-1)))
    history.note(ranks, np.zeros(2), np.array([True, False]), 100.0, differences=moved * 10)
    assert history.differences_before(ranks, 6)[0] == pytest.approx(level[0])  # slow: held


def test_the_size_told_of_a_slow_rank_is_its_excess_averaged_while_it_stays_slow():
    history = ExcessHistory()
    ranks = np.array([3, 5])
    slow_now = np.array([True, False])
    assert history.size(ranks, np.array([0.004, 0.001]), slow_now, now=0.0).tolist() == [0.004, 0.001]  # just slow: as is
    told = history.size(ranks, np.array([0.006, 0.002]), slow_now, now=ExcessHistory.SIZE_FOLLOW_S)
    assert told[0] == pytest.approx(0.004 + 0.002 * (1 - np.exp(-1)))  # a window's noise moves it a little
    assert told[1] == 0.002  # a rank that is not slow: its excess
    for now in np.arange(5.0, 40.0, 0.5):  # its median wanders +-1 ms about 5 ms: the size told much less
        told = history.size(ranks, np.array([0.005 + 0.001 * np.sin(now * 2.1), 0.002]), slow_now, now=now)
        if now > 20.0:
            assert abs(told[0] - 0.005) < 0.0005
    assert history.size(ranks, np.array([0.009, 0.002]), slow_now, now=now)[0] == 0.009  # again at the same moment: as is
    history.size(ranks, np.array([0.001, 0.002]), np.array([False, False]), now=50.0)  # healthy again
    assert history.size(ranks, np.array([0.008, 0.0]), slow_now, now=51.0)[0] == 0.008  # slow afresh: from its excess


@pytest.mark.parametrize("classes", [None, "pairs", "fours"])
def test_a_reference_handed_in_by_the_judge_gives_what_score_columns_works_out_itself(classes):
    """The judge works each class's healthy peer out once (class_growth.references) and hands it to the scoring:
    the same excess, culprits and bars as when the scoring works it out, whatever the classes."""
    from ranktop.watch.analysis.class_growth import references

    rng = np.random.default_rng(7)
    n, names = 24, ["data", "forward", "backward", "comm"]
    phases = rng.uniform(0.020, 0.022, (n, len(names)))
    phases[5, 1] += 0.02  # one slow rank
    steps = phases.sum(axis=1) + 0.01
    class_ids = None if classes is None else np.arange(n) // (2 if classes == "pairs" else 4)
    sd, counts, spread = np.full(n, 0.002), np.full(n, 64), np.full((n, len(names)), 0.001)
    before, phase_before = np.zeros(n), np.zeros((n, len(names)))
    args = (phases, steps, names, class_ids, sd, counts, before, spread, phase_before)
    alone = score_columns(*args)
    handed = score_columns(*args, references(phases, names, class_ids))
    for mine, theirs in zip(alone[:3], handed[:3]):
        np.testing.assert_array_equal(mine, theirs)
    assert alone[3] == handed[3] and alone[0][5] > 0


def test_one_class_of_every_rank_read_as_it_lies_scores_as_the_same_class_named_rank_by_rank():
    """A job of one peer class (class_ids None) is scored off the columns as they lie (stragglers.peer_groups: a
    slice, no gather of every rank's rows); the same ranks named one class by ids, gathered, score the same."""
    from ranktop.watch.analysis.class_growth import references

    rng = np.random.default_rng(11)
    n, names = 40, ["data", "forward", "backward", "comm"]
    phases = rng.uniform(0.020, 0.022, (n, len(names)))
    phases[[3, 17], 2] += 0.015
    steps = phases.sum(axis=1) + 0.01
    sd, counts, spread = rng.uniform(0.001, 0.003, n), np.full(n, 64), rng.uniform(0.0005, 0.002, (n, len(names)))
    before, phase_before = np.zeros(n), np.zeros((n, len(names)))
    one = np.zeros(n, np.int64)
    for reference in (False, True):
        as_slice = score_columns(phases, steps, names, None, sd.copy(), counts, before, spread, phase_before,
                                 references(phases, names, None) if reference else None)  # fmt: skip
        as_ids = score_columns(phases, steps, names, one, sd.copy(), counts, before, spread, phase_before,
                               references(phases, names, one) if reference else None)  # fmt: skip
        for a, b in zip(as_slice[:3], as_ids[:3]):
            np.testing.assert_array_equal(a, b)
        assert as_slice[3] == as_ids[3]
        assert set(np.flatnonzero(as_slice[0] > as_slice[2]).tolist()) == {3, 17}
