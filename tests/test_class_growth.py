"""A whole peer class slower than it was (watch/analysis/class_growth.py, docs/detection.md): a node that is a
pipeline stage slows down together, so no member stands out from its peers; its class's work grew against what
it was while the other classes' did not."""

from __future__ import annotations

import numpy as np
import pytest

from ranktop.watch.analysis.class_growth import class_excess, references
from ranktop.watch.analysis.stragglers import ExcessHistory

NAMES = ["data", "forward", "backward", "optimizer", "comm", "other"]
WORK = np.array([0.006, 0.019, 0.025, 0.0075, 0.0, 0.005])  # own seconds per phase: 62.5 ms of work a step
CLASSES = np.repeat([0, 1], 8)  # two pipeline stages of 8 ranks
STEPS = np.full(16, 64)


def phases(grow: dict[int, float] | None = None, phase: int = 2, scale: float = 1.0) -> np.ndarray:
    """Every rank's window medians (the second stage does 1.6 x the work); ``grow[c]``: class c's share of its
    work more, in ``phase``; ``scale``: every rank's work times that."""
    rnd = np.random.default_rng(3)
    out = np.tile(WORK, (16, 1)) * np.where(CLASSES == 1, 1.6, 1.0)[:, None] * scale * (1 + rnd.normal(0, 0.002, (16, 6)))
    out[:, 4] = 0.004
    for c, share in (grow or {}).items():
        out[CLASSES == c, phase] += share * (WORK.sum() * (1.6 if c else 1.0))
    return out


def judged(now: np.ndarray, then: np.ndarray, sd: float = 0.001) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    level = references(then, NAMES, CLASSES)
    return class_excess(references(now, NAMES, CLASSES), level, CLASSES, np.full(16, sd), STEPS)


def test_a_stage_whose_every_rank_became_10_percent_slower_is_slow_in_that_phase_by_that_much():
    excess, culprit, bar = judged(phases({0: 0.10}), phases())
    slow = np.flatnonzero(excess > bar).tolist()
    assert slow == list(range(8))
    assert excess[0] == pytest.approx(0.10 * WORK.sum(), rel=0.05)
    assert {NAMES[c] for c in culprit[:8]} == {"backward"}
    assert excess[8:].max() == 0.0


def test_every_class_doing_more_work_alike_is_the_job_s_work_not_a_slowdown():
    excess, _, bar = judged(phases(scale=1.2), phases())
    assert not (excess > bar).any()


def test_every_class_given_the_same_seconds_alike_is_the_job_s_slowdown_not_a_stage_s():
    """Forward +12 ms on every rank (a slower filesystem, a throttled fabric: time added, not scaled) grows the
    smaller stage more as a share of its work; the job is slower (watch/analysis/job_pace.py tells it), no stage
    is (tuning part: job_slower_phase on dp_tp_pp named a stage's node as slow on 17 looks)."""
    now = phases()
    now[:, 1] += 0.012
    excess, _, bar = judged(now, phases())
    assert not (excess > bar).any(), excess


def test_a_stage_2_percent_slower_or_one_within_its_noise_is_not_slow():
    excess, _, bar = judged(phases({1: 0.02}), phases())
    assert not (excess > bar).any()
    excess, _, bar = judged(phases({1: 0.06}), phases(), sd=0.05)  # a median of 64 steps 7.8 ms off, each
    assert not (excess > bar).any()


def test_a_member_whose_level_stands_still_while_it_is_slow_does_not_speak_for_its_class():
    """A rank judged slow keeps its level from before (stragglers.ExcessHistory): an intermittent straggler first in
    its stage kept the stage's level of its warm-up, 1.3 x today's work, and the other stage read as grown 4 ms
    against it (a pipeline's healthy node named, tuning part: intermittent_3 on dp_tp_pp, 11 wrong looks)."""
    then = references(phases(), NAMES, CLASSES)
    then[8] = references(phases(scale=1.3), NAMES, CLASSES)[8]  # the second stage's first rank: its warm-up's level
    excess, _, bar = class_excess(references(phases(), NAMES, CLASSES), then, CLASSES, np.full(16, 0.001), STEPS)
    assert not (excess > bar).any(), excess


def test_one_class_or_no_level_yet_says_nothing():
    now = phases({0: 0.10})
    one = np.zeros(16, np.int64)
    excess, _, bar = class_excess(references(now, NAMES, one), references(phases(), NAMES, one), one, np.full(16, 0.001), STEPS)
    assert not (excess > bar).any()
    excess, _, bar = class_excess(references(now, NAMES, CLASSES), None, CLASSES, np.full(16, 0.001), STEPS)
    assert not (excess > bar).any()


def test_the_history_keeps_each_rank_s_class_reference_held_while_slow():
    history = ExcessHistory()
    ranks = np.arange(16)
    assert np.isnan(history.reference_before(ranks, 6)).all()
    healthy = references(phases(), NAMES, CLASSES)
    history.note(ranks, np.zeros(16), np.zeros(16, bool), 0.0, healthy)
    assert history.reference_before(ranks, 6) == pytest.approx(healthy)
    slower = references(phases({0: 0.10}), NAMES, CLASSES)
    history.note(ranks, np.zeros(16), CLASSES == 0, 60.0, slower)  # class 0 judged slow: its level stands still
    assert history.reference_before(ranks, 6)[:8] == pytest.approx(healthy[:8])
    assert np.isnan(history.reference_before(ranks, 7)).all()  # other phases: not the same columns


def test_a_class_is_named_by_its_lowest_rank_and_size_whatever_its_id_in_a_snapshot():
    from ranktop.watch.analysis.class_growth import class_keys

    ranks = np.array([0, 1, 2, 3, 5])
    assert class_keys(np.array([1, 1, 0, 0, 1]), ranks).tolist() == [(0 << 32) + 3] * 2 + [(2 << 32) + 2] * 2 + [(0 << 32) + 3]
    assert (class_keys(np.array([7, 7, 3, 3, 7]), ranks) == class_keys(np.array([1, 1, 0, 0, 1]), ranks)).all()
    assert class_keys(None, ranks).tolist() == [5] * 5


def test_a_stage_learned_after_its_ranks_were_one_class_starts_its_level_afresh():
    """Before the ranks' groups are known, a pipeline is one class and its reference the whole job's median; once
    its stages are learned, the second stage's reference (1.6x the first's) against that old level read as the
    stage grown slow, and stayed so while the level crept up (the healthy data x pipeline job flagged live)."""
    from ranktop.watch.analysis.class_growth import class_keys

    history, ranks, one = ExcessHistory(), np.arange(16), np.zeros(16, np.int64)
    history.note(ranks, np.zeros(16), np.zeros(16, bool), 0.0, references(phases(), NAMES, one), classes=class_keys(None, ranks))
    keys = class_keys(CLASSES, ranks)
    assert np.isnan(history.reference_before(ranks, 6, keys)).all()
    now = references(phases(), NAMES, CLASSES)
    history.note(ranks, np.zeros(16), np.zeros(16, bool), 1.0, now, classes=keys)
    assert history.reference_before(ranks, 6, keys) == pytest.approx(now)
    excess, _, bar = class_excess(now, history.reference_before(ranks, 6, keys), CLASSES, np.full(16, 0.001), STEPS)
    assert not (excess > bar).any()
    # what the kept level said before: the second stage 30% slower than it was
    stale = references(phases(), NAMES, one)
    excess, _, bar = class_excess(now, stale, CLASSES, np.full(16, 0.001), STEPS)
    assert (excess > bar)[8:].all()
