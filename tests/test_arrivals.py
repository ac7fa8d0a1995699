"""Who arrives last at the collectives (watch/analysis/arrivals.py): the rank the others waited for, step by step."""

from __future__ import annotations

import numpy as np
import pytest

from ranktop.demo.sim_model import PHASES, JobModel, Scenario
from ranktop.demo.simulate import Simulator
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.arrivals import SETTLING, VETO_AFTER, ArrivalBook, grid_of, intervals_on_steps, last_arrivals, shares
from ranktop.watch.engine.step_columns import StepColumns
from ranktop.wire import schema
from ranktop.wire.messages import Node


def steps_of(ranks: int, steps: int, slow: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every rank's last ``steps`` steps (newest first) and their waits: each step every rank works 100 ms, give or take 5 ms,
    and waits for the slowest; rank ``slow`` works 20% longer."""
    rnd = np.random.default_rng(seed)
    work = rnd.normal(0.1, 0.005, (ranks, steps))
    if slow is not None:
        work[slow] += 0.02
    waits = work.max(axis=0) - work + 0.001  # the transfer every rank waits for, the last one too
    nums = np.tile(np.arange(100 + steps - 1, 99, -1), (ranks, 1))
    return nums, waits


def test_a_slowed_rank_arrives_last_at_nearly_every_step_and_the_others_almost_never():
    nums, waits = steps_of(8, 32, slow=5)
    share, counted = last_arrivals(nums, waits)
    assert counted.tolist() == [32 - SETTLING] * 8  # the job's newest steps are left out: their waits may still come
    assert share[5] > 0.9
    assert np.delete(share, 5).max() < 0.1


def test_on_a_healthy_job_each_rank_is_last_about_its_fair_share():
    nums, waits = steps_of(4, 32 * 8, seed=3)
    share, _ = last_arrivals(nums, waits)
    assert abs(share.sum() - 1.0) < 1e-9  # one last arrival per step
    assert share.min() > 0.15 and share.max() < 0.35  # 1 in 4, give or take


def test_peer_classes_are_counted_apart():
    """Ranks of two pipeline stages meet at different collectives: each stage has its own last arrival."""
    a_nums, a_waits = steps_of(4, 32, slow=1, seed=1)
    b_nums, b_waits = steps_of(4, 32, slow=2, seed=2)
    share, _ = last_arrivals(np.vstack([a_nums, b_nums]), np.vstack([a_waits, b_waits]), np.array([0, 0, 0, 0, 1, 1, 1, 1]))
    assert share[1] > 0.9 and share[4 + 2] > 0.9
    assert abs(share[:4].sum() - 1.0) < 1e-9 and abs(share[4:].sum() - 1.0) < 1e-9


def test_a_step_counts_only_when_every_peer_has_it_and_someone_waited():
    nums, waits = steps_of(3, 8, slow=0)
    nums[1, :3] = -1  # rank 1 has not sent its newest steps yet (or they left its window)
    waits[:, 5] = 0.0  # a step without collectives: nobody waited for anybody
    share, counted = last_arrivals(nums, waits)
    # the job's newest 2 steps are left out, rank 1 lacks one more, and one step had no wait
    assert counted.tolist() == [8 - SETTLING - 1 - 1] * 3
    assert share[0] == 1.0


def test_nothing_to_say_without_waits_or_peers():
    share, counted = last_arrivals(np.full((3, 4), -1), np.zeros((3, 4)))
    assert np.isnan(share).all() and not counted.any()
    share, _ = last_arrivals(*steps_of(1, 8))
    assert np.isnan(share).all()


def test_the_step_columns_hand_over_each_rank_s_last_waits_newest_first():
    cols = StepColumns(window=4, rows=2)
    rows = [cols.new_row(), cols.new_row()]
    for n in range(6):
        cols.add(rows[0], n, float(n), 0.1, {"forward": 0.05, "comm": 0.01 * n})
        if n < 2:
            cols.add(rows[1], n, float(n), 0.1, {"forward": 0.05, "comm": 0.02})
    nums, waits = cols.recent_waits(np.array(rows), 3)
    assert nums.tolist() == [[5, 4, 3], [1, 0, -1]]
    assert np.allclose(waits[0], [0.05, 0.04, 0.03])
    nums, _ = StepColumns(window=4).recent_waits(np.array([0]), 3)
    assert (nums == -1).all()  # no wait seen yet: nothing to compare


def by_hand(nums: np.ndarray, waits: np.ndarray, class_ids) -> tuple[list, list]:
    """The rule as it reads, a step and a class at a time: the last arrivals of every step every member of the
    class has (the window's newest settled steps), where someone waited longer than another."""
    n, width = nums.shape
    held = nums[nums >= 0]
    if n < 2 or not len(held):
        return [None] * n, [0] * n
    newest = int(held.max()) - SETTLING
    window = range(newest - width + 1, newest + 1)
    classes = [0] * n if class_ids is None else list(class_ids)
    counted, lasts = [0] * n, [0] * n
    for c in set(classes):
        members = [r for r in range(n) if classes[r] == c]
        for step in window:
            at = {r: [waits[r, j] for j in range(width) if nums[r, j] == step] for r in members}
            if len(members) < 2 or not all(at.values()):
                continue
            wait = {r: at[r][-1] for r in members}  # (a step held twice: its oldest slot's wait)
            least, most = min(wait.values()), max(wait.values())
            if not most > least:
                continue
            for r in members:
                counted[r] += 1
                lasts[r] += wait[r] <= least
    return [lasts[r] / counted[r] if counted[r] else None for r in range(n)], counted


def test_the_whole_array_passes_give_what_the_rule_says_step_by_step():
    rnd = np.random.default_rng(7)
    for trial in range(400):
        n, k = int(rnd.integers(1, 10)), int(rnd.integers(1, 8))
        nums = rnd.integers(16, 30, n)[:, None] - np.arange(k)[None, :] * rnd.integers(1, 3)
        nums = np.where(rnd.random((n, k)) < 0.2, -1, nums)  # steps missing, or not yet come
        waits = np.round(rnd.random((n, k)), 1) * (rnd.random((n, k)) < 0.9)  # ties, and steps nobody waited in
        classes = rnd.integers(0, 3, n) if trial % 2 else None
        share, counted = last_arrivals(nums, waits, classes)
        want_share, want_counted = by_hand(nums, waits, classes)
        assert counted.tolist() == want_counted, (nums, waits, classes)
        assert [None if np.isnan(s) else round(s, 12) for s in share] == [None if s is None else round(s, 12) for s in want_share]


def test_a_rank_slow_after_its_last_collective_makes_the_others_wait_at_the_next_step_s_first():
    """The simulator as a real job: a rank slow in its optimizer ends its step late, the others begin the next
    one sooner and wait for it at its first collective, so it arrives last there."""
    model = JobModel(Scenario(job="j", ranks=8, nodes=1, slow_rank=5, slow_ms=10.0, slow_phase="optimizer"))
    start, waits = 0.0, []
    for n in range(40):
        step = model.step(n, start)
        start += step.duration
        records = [model.records(step, r) for r in range(8)]
        waits.append([sum(c.w for c in cs) for _, cs in records])
    share, counted = last_arrivals(np.tile(np.arange(40), (8, 1)), np.array(waits).T)
    assert share[5] > 0.9 and counted[5] >= 30
    record, _ = model.records(step, 0)
    assert record.t < step.start  # the others began the step sooner than the last


def test_a_node_digest_s_sums_are_its_ranks_records_summed_when_ranks_begin_steps_sooner():
    """What a big job's viewer reads (node digests, summed without building records) says the same waits."""
    model = JobModel(Scenario(job="j", ranks=8, nodes=1, slow_rank=2, slow_ms=10.0, slow_phase="optimizer"))
    start, steps = 0.0, []
    for n in range(6):
        steps.append(model.step(n, start))
        start += steps[-1].duration
    sums = model.node_sums(steps, np.array([0, 2]))
    for at, rank in enumerate((0, 2)):
        records = [model.records(st, rank)[0] for st in steps]
        assert sums["wall"][at] == pytest.approx(sum(r.w for r in records))
        for i, phase in enumerate(PHASES):
            assert sums["phases"][at, i] == pytest.approx(sum(r.p[phase] for r in records)), phase


def node_digests(nodes: int, per_node: int, steps: int, every: int, slow: int | None = None, seed: int = 0):
    """What a viewer of digests holds (newest first): each node's relay sends every ``every`` steps at its own
    moment (node j's intervals end at steps j mod ``every`` apart), each record its interval's last step and mean
    wait per step; every step each rank works 100 ms, give or take 5 ms, rank ``slow`` 20% longer."""
    nums, waits = steps_of(nodes * per_node, steps, slow=slow, seed=seed)
    step_waits = waits[:, ::-1]  # oldest first, step 100 + i at column i
    rows_nums, rows_waits = [], []
    for rank in range(nodes * per_node):
        ends = [s for s in range(steps) if (s + rank // per_node) % every == every - 1]
        records = [(100 + end, step_waits[rank, start + 1 : end + 1].mean()) for start, end in zip(ends, ends[1:])]
        records = records[::-1][:32]
        rows_nums.append([n for n, _ in records] + [-1] * (32 - len(records)))
        rows_waits.append([w for _, w in records] + [0.0] * (32 - len(records)))
    return np.array(rows_nums), np.array(rows_waits)


def test_node_digests_that_end_at_each_node_s_own_steps_still_say_who_arrives_last():
    """Live, each relay sends its digest at its own moment: no step number ends an interval on every node, so
    read as steps nothing counts (and the veto never acts); laid on one grid of steps, a slowed rank is last
    nearly everywhere and counted long enough for the veto."""
    nums, waits = node_digests(4, 4, 160, every=4, slow=6)
    _, counted = last_arrivals(nums, waits)
    assert not counted.any()  # the defect seen on a live 256-rank job
    share, counted = shares(nums, waits)
    assert counted.min() >= VETO_AFTER
    assert share[6] > 0.9 and np.delete(share, 6).max() < 0.1
    healthy, _ = shares(*node_digests(4, 4, 800, every=4, seed=5))
    assert abs(healthy.sum() - 1.0) < 1e-9 and healthy.max() < 0.25  # 1 in 16, give or take: no one never last by rule


def test_digest_intervals_are_read_at_the_steps_the_rule_says():
    """Each point's wait is that of the record covering the step (after the record before it, up to its own),
    NaN where a rank has none (before its oldest record, whose first step is unknown, or no record at all)."""
    rnd = np.random.default_rng(11)
    for _ in range(200):
        n, k = int(rnd.integers(2, 7)), int(rnd.integers(2, 9))
        ends = 400 - rnd.integers(0, 5, (n, 1)) - np.cumsum(rnd.integers(2, 7, (n, k)), axis=1)
        nums = np.where(np.arange(k)[None, :] < rnd.integers(0, k + 1, (n, 1)), ends, -1)  # some rows hold fewer
        waits = rnd.random((n, k))
        laid = intervals_on_steps(nums, waits, points=12)
        newest = nums[:, 1] >= 0
        if laid is None:
            assert not newest.any() or np.median(nums[newest, 0] - nums[newest, 1]) <= 1 or (nums[:, 0] < 0).all()
            continue
        stride = int(np.median(nums[newest, 0] - nums[newest, 1]))
        top = nums[:, 0][nums[:, 0] >= 0].min()
        for r in range(n):
            for j in range(12):  # newest first
                step = top - stride * j
                cover = [i for i in range(k - 1) if nums[r, i + 1] >= 0 and nums[r, i + 1] < step <= nums[r, i]]
                if cover:
                    assert laid[r, j] == waits[r, cover[0]]
                else:
                    assert np.isnan(laid[r, j])


def test_a_viewer_of_relays_that_send_each_at_its_own_moment_counts_every_rank_s_last_arrivals(tmp_path):
    """256 simulated ranks on 32 nodes, whose relays send their digests in 4 turns (as live, each at its own
    moment: no step ends an interval on every node), through the real decoder and aggregator: every rank's
    share is counted, and the slowed one arrives last throughout."""
    sim = Simulator(Scenario(job="j", ranks=256, nodes=32, rate_hz=16.0, slow_rank=77, slow_ms=6, slow_phase="forward"), str(tmp_path))
    clock = [1.0e9]
    agg = Aggregator("j", clock=lambda: clock[0], wall_clock=lambda: clock[0])
    ends: dict[str, set[int]] = {}  # each node's intervals' last steps
    for now, frames in sim.replay(8.0, clock[0], digests=True, turns=4):
        clock[0] = now
        agg.ingest_batch([(f, None) for f in frames])
        for f in frames:
            msg = schema.decode(f)
            if isinstance(msg, Node) and msg.steps is not None:
                ends.setdefault(msg.host, set()).update(np.frombuffer(msg.steps.n, np.int64).tolist())
    both = ends["sim0000"] & ends["sim0001"]
    assert len(both) < len(ends["sim0000"]) / 3  # seldom does a step end an interval on both nodes
    snap = agg.snapshot()
    shares_of = [r.last_arrivals for r in snap.ranks]
    assert None not in shares_of
    assert snap.ranks[77].last_arrivals == 1.0 and snap.ranks[77].status == "slow"
    assert max(s for r, s in enumerate(shares_of) if r != 77) == 0.0


def digests_until(step_waits: np.ndarray, until: int, per_node: int, every: int, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """What a viewer of digests holds once the job made ``until`` steps (``step_waits``: each rank's wait per step,
    oldest first, step 100 + i at column i): each node's relay sends every ``every`` steps at its own moment,
    each record its interval's last step and mean wait; the newest ``slots`` records a rank, newest first."""
    ranks = len(step_waits)
    nums, waits = np.full((ranks, slots), -1, np.int64), np.zeros((ranks, slots))
    for rank in range(ranks):
        ends = [s for s in range(until) if (s + rank // per_node) % every == every - 1]
        records = [(100 + end, step_waits[rank, start + 1 : end + 1].mean()) for start, end in zip(ends, ends[1:])]
        for j, (n, w) in enumerate(records[::-1][:slots]):
            nums[rank, j], waits[rank, j] = n, w
    return nums, waits


def test_a_book_kept_from_snapshot_to_snapshot_says_what_laying_every_point_afresh_says():
    """The arrival book lays only the points new since the snapshot before, from as few of each rank's last steps
    as those need (it asks the next view for them: ``slots``), and says what laying all 32 points afresh from every
    rank's records says, snapshot after snapshot (those still in a view's window and those before: a point it laid
    stays, where afresh a rank's record of the oldest point may have left the last 32); the slowed rank arrives
    last throughout."""
    _, waits = steps_of(16, 900, slow=6, seed=4)
    step_waits = waits[:, ::-1]
    classes = np.array([0] * 8 + [1] * 8)
    book = ArrivalBook()
    asked = []
    for until in range(300, 900, 7):  # a snapshot every 7 steps, digests every 4 at each node's own moment
        asked.append(book.slots)
        nums, waits_now = digests_until(step_waits, until, per_node=4, every=4, slots=book.slots)
        share, counted = book.shares(nums, waits_now, classes, np.arange(16), roster=1)
        afresh = {}
        for slots in (32, 64):
            full_nums, full_waits = digests_until(step_waits, until, per_node=4, every=4, slots=slots)
            stride, top = grid_of(full_nums)
            laid = intervals_on_steps(full_nums, full_waits, points=32, stride=stride, top=top - top % stride)
            afresh[slots] = shares_on_grid(laid, classes)
        # the first time, from the view's last 32 records; once every point was laid since, from all of them
        expected = afresh[32] if until == 300 else afresh[64] if until >= 300 + 32 * 4 else None
        if expected is not None:
            assert np.array_equal(counted, expected[1]) and np.allclose(share, expected[0], equal_nan=True), until
        assert (counted >= afresh[32][1]).all() and counted.min() >= VETO_AFTER and share[6] > 0.9
    assert asked[0] == 32 and max(asked[1:]) < 8  # all of them once, then a few


def shares_on_grid(laid: np.ndarray, class_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """shares() of a laid grid: last_arrivals per column, a column every rank of a class holds (the rule, spelled
    out for the test: the least wait of a class is its last arrival, where someone waited longer)."""
    n, points = laid.shape
    lasts, counted = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for c in np.unique(class_ids):
        members = np.flatnonzero(class_ids == c)
        for j in range(points):
            column = laid[members, j]
            if np.isnan(column).any() or not column.max() > column.min():
                continue
            counted[members] += 1
            lasts[members] += column <= column.min()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counted > 0, lasts / np.maximum(counted, 1), np.nan), counted


def test_a_book_starts_afresh_when_a_rank_restarts_or_the_ranks_change_and_says_the_last_shares_meanwhile():
    _, waits = steps_of(8, 400, slow=2, seed=9)
    step_waits = waits[:, ::-1]
    book = ArrivalBook()
    ranks = np.arange(8)
    for until in (200, 207, 214):
        nums, w = digests_until(step_waits, until, per_node=2, every=4, slots=book.slots)
        share, _ = book.shares(nums, w, None, ranks, roster=1)
    assert book.slots < 32 and share[2] > 0.9
    nums, w = digests_until(step_waits, 221, per_node=2, every=4, slots=book.slots)
    again, _ = book.shares(nums, w, None, ranks, roster=2)  # a rank restarted: too few of its steps to lay afresh
    assert np.array_equal(again, share) and book.slots == 32  # the last shares meanwhile; all of them next time
    nums, w = digests_until(step_waits, 228, per_node=2, every=4, slots=book.slots)
    laid, counted = book.shares(nums, w, None, ranks, roster=2)
    stride, top = grid_of(nums)
    expected = shares_on_grid(intervals_on_steps(nums, w, stride=stride, top=top - top % stride), np.zeros(8, np.int64))
    assert np.array_equal(counted, expected[1]) and book.slots < 32
    fewer = book.shares(nums[:6], w[:6], None, ranks[:6], roster=2)[1]  # two ranks went silent: laid afresh
    assert np.array_equal(
        fewer, shares_on_grid(intervals_on_steps(nums[:6], w[:6], stride=stride, top=top - top % stride), np.zeros(6, np.int64))[1]
    )
