"""A rank's window keeps its statistics as the aggregator always computed them, incrementally."""

import random

import numpy as np
import pytest

from ranktop.watch.engine.step_columns import StepColumns
from ranktop.watch.engine.step_window import StepWindow, own_times
from ranktop.wire.names import COMM_PHASE


def window_stats(window: StepWindow, names: list[str], min_steps: int) -> dict | None:
    """One rank's medians over its window, read from the job's columns as a snapshot reads every rank's:
    ``{"step", "phases" (in the order of names), "rate", "comm"}``; None with fewer than ``min_steps`` steps."""
    cols, row = window.columns, window.row
    if cols.count[row] < min_steps:
        return None
    cols.refresh(np.array([row]), min_steps)
    medians = cols.median_own[row]
    phases = {name: (float(medians[i]) if i is not None else 0.0) for name, i in zip(names, cols.columns_of(names))}
    comm = cols.columns_of([COMM_PHASE])[0]
    rate = float(cols.rate[row])
    return {
        "step": float(cols.median_wall[row]),
        "phases": phases,
        "rate": None if np.isnan(rate) else rate,
        "comm": (float(medians[comm]) if comm is not None else 0.0) if window.waited else None,
    }


def test_the_window_gives_the_medians_of_own_times_with_waits_taken_out():
    window = StepWindow(8)
    rng = random.Random(3)
    steps = []
    for n in range(12):
        phases = {"forward": 0.01 + rng.random() * 0.002, "backward": 0.03 + rng.random() * 0.004}
        if n == 6:
            phases["mine"] = 0.001  # a phase first seen late: earlier steps spent nothing in it
        waits = {"backward": 0.01 + rng.random() * 0.001} if n % 3 else None
        wall = sum(phases.values()) + 0.002
        window.add(n, 100.0 + n * 0.05, wall, phases, waits)
        steps.append((n, wall, own_times(wall, phases, waits)))
    names = ["forward", "backward", "mine", "comm", "other"]
    stats = window_stats(window, names, 3)
    kept = steps[-8:]
    for name in names:
        values = sorted(times.get(name, 0.0) for _, _, times in kept)
        assert stats["phases"][name] == pytest.approx((values[3] + values[4]) / 2)
    assert list(stats["phases"]) == names
    assert stats["step"] == pytest.approx(sorted(w for _, w, _ in kept)[3:5][0] / 2 + sorted(w for _, w, _ in kept)[3:5][1] / 2)
    assert stats["rate"] == pytest.approx(20.0)
    assert stats["comm"] is not None


def test_waits_that_come_after_their_step_are_taken_out_too():
    window = StepWindow(4)
    for n in range(3):
        window.add(n, float(n), 0.05, {"backward": 0.03}, None)
    assert window_stats(window, ["backward"], 3)["phases"]["backward"] == pytest.approx(0.03)
    assert not window.dirty
    for n in range(3):
        window.rewait(n, {"backward": 0.01})
    assert window.dirty
    stats = window_stats(window, ["backward", "comm"], 3)
    assert stats["phases"]["backward"] == pytest.approx(0.02) and stats["comm"] == pytest.approx(0.01)


def test_too_few_steps_give_no_statistics():
    window = StepWindow(4)
    window.add(0, 0.0, 0.05, {}, None)
    assert window_stats(window, ["other"], 3) is None


def test_a_node_digests_block_of_steps_lands_as_the_same_steps_added_one_by_one():
    """StepColumns.add_block writes a node's columns (relay/digest_fold.py) as add would write each rank's step:
    past the end of the ring, with a phase new to the job, and a phase the block lacks (its figure is 0.0)."""
    rng = random.Random(5)
    by_block, by_step = StepColumns(4, rows=2, phases=1), StepColumns(4, rows=2, phases=1)
    for columns in (by_block, by_step):
        for _ in range(3):
            columns.new_row()
    rows = [2, 0]  # a block's rows in any order, each once
    for n in range(7):
        names = ["forward", "comm"] if n != 4 else ["forward", "data"]  # "data" new to the job, "comm" not in it
        own = {name: [rng.random() for _ in rows] for name in names}
        t, wall = [100.0 + n + rng.random() for _ in rows], [rng.random() for _ in rows]
        by_block.add_block(rows, [n, n], t, wall, own)
        for k, row in enumerate(rows):
            by_step.add(row, n, t[k], wall[k], {name: own[name][k] for name in names})
    assert by_block.phases == by_step.phases == ["forward", "comm", "data"]
    for name in ("num", "start", "wall", "own", "head", "count", "waited", "changed"):
        assert np.array_equal(getattr(by_block, name), getattr(by_step, name)), name
    assert by_block.own[0, by_block.phases.index("comm"), (by_block.head[0] - 3) % 4] == 0.0  # step 4 spent nothing there


def test_each_row_s_last_waits_kept_between_refreshes_are_the_rings_as_they_are_now():
    """StepColumns.recent_waits keeps each row's last waits from one call to the next and gathers again only the rows
    written since: after any mix of steps, blocks of digests, restarts and new rows, what it hands over is each row's
    ring read by hand, whatever rows are asked and in what order."""
    rng = random.Random(7)
    cols = StepColumns(window=8, rows=2)
    rows: list[int] = []

    def by_hand(row: int, k: int) -> tuple[list[int], list[float]]:
        comm = cols.columns_of(["comm"])[0]
        nums, waits = [], []
        for j in range(k):
            slot = (int(cols.head[row]) - 1 - j) % cols.window
            held = j < cols.count[row] and cols.waited[row]
            nums.append(int(cols.num[row, slot]) if held else -1)
            waits.append(float(cols.own[row, comm, slot]))
        return nums, waits

    for round_ in range(60):
        if len(rows) < 12 and rng.random() < 0.3:
            rows.append(cols.new_row())  # (the arrays double as rows come)
        for row in rows:
            if rng.random() < 0.4:
                own = {"forward": 0.05, "comm": rng.random()} if rng.random() < 0.8 else {"forward": 0.05}
                cols.add(row, round_, float(round_), 0.1, own)
        if len(rows) > 2 and rng.random() < 0.5:
            some = rng.sample(rows, 2)
            cols.add_block(some, [round_] * 2, [float(round_)] * 2, [0.1] * 2, {"forward": [0.04] * 2, "comm": [rng.random(), 0.5]})
        if rows and rng.random() < 0.05:
            cols.clear(rng.choice(rows))  # a restart
        if not rows:
            continue
        asked = np.array(rng.sample(rows, rng.randint(1, len(rows))) if rng.random() < 0.5 else sorted(rows), np.int64)
        k = rng.choice([3, 5])
        nums, waits = cols.recent_waits(asked, k)
        if cols.columns_of(["comm"])[0] is None:
            continue
        for i, row in enumerate(asked.tolist()):
            want_nums, want_waits = by_hand(row, k)
            assert nums[i].tolist() == want_nums, (round_, row)
            assert np.allclose(waits[i][nums[i] >= 0], np.array(want_waits)[np.array(want_nums) >= 0])


def test_last_waits_are_gathered_again_only_for_rows_written_since_and_an_answer_handed_out_stands(monkeypatch):
    """A refresh paced by a big job's digests finds every row written since the last: all gathered afresh. One
    that finds few rows written gathers those only, into a copy of the last answer; the answer handed out before
    is never written again (a snapshot on another thread may be reading it): it is read-only."""
    cols = StepColumns(window=8, rows=4)
    rows = np.array([cols.new_row() for _ in range(4)], np.int64)
    gathered: list[list[int]] = []
    gather = cols._gather_recent
    monkeypatch.setattr(cols, "_gather_recent", lambda which, k, comm: (gathered.append(which.tolist()), gather(which, k, comm))[1])

    def step(n: int, which) -> None:
        cols.add_block(list(which), [n] * len(which), [float(n)] * len(which), [0.1] * len(which),
                       {"forward": [0.04] * len(which), "comm": [n / 100 + r for r in which]})  # fmt: skip

    for n in range(3):
        step(n, rows.tolist())
    first, first_waits = cols.recent_waits(rows, 2)
    assert first.tolist() == [[2, 1]] * 4 and first_waits[:, 0].tolist() == [0.02 + r for r in range(4)]
    with pytest.raises(ValueError):
        first[0, 0] = -7
    assert cols.recent_waits(rows, 2)[0] is first and gathered == [[0, 1, 2, 3]]  # nothing written since
    step(3, [3])
    nums, waits = cols.recent_waits(rows, 2)
    assert nums.tolist() == [[2, 1]] * 3 + [[3, 2]] and waits[3].tolist() == [3.03, 3.02]
    assert gathered == [[0, 1, 2, 3], [3]] and first.tolist() == [[2, 1]] * 4  # the first answer stands
    step(4, [0, 1, 2])
    assert cols.recent_waits(rows, 2)[0].tolist() == [[4, 2]] * 3 + [[3, 2]] and gathered[-1] == [0, 1, 2, 3]


@pytest.mark.parametrize("rows, parts", [(8192, 2), (16384, 4)])
def test_a_big_job_s_medians_are_worked_out_a_part_of_the_rows_at_a_time_each_row_within_that_many_refreshes(rows, parts):
    """StepColumns.refresh from SHARED_FROM rows: halves in turn, from twice as many quarters; a row never worked out is
    always worked out at once."""
    cols = StepColumns(window=4, rows=rows, phases=1)
    every = np.array([cols.new_row() for _ in range(rows)])
    cols.add_block(every, [1] * rows, [0.0] * rows, [0.1] * rows, {"forward": [0.1] * rows})
    assert len(cols.refresh(every)) == rows  # none worked out yet: all
    for k in range(2, 2 + 2 * parts):
        cols.add_block(every, [k] * rows, [float(k)] * rows, [0.1] * rows, {"forward": [0.1] * rows})
        done = cols.refresh(every)
        assert len(done) == rows // parts and (np.diff(done) == 1).all()  # a run of rows: a part
    assert (cols.stats_at[every] >= cols.changed[every] - parts).all()  # each row at most ``parts`` writes behind


@pytest.mark.parametrize("rows", [4096, 8192, 16384])
def test_in_a_big_job_the_receiver_works_the_medians_out_as_the_steps_come_and_a_snapshot_only_the_new_rows(rows):
    """StepColumns.work_ahead from AHEAD_FROM rows: called after each of the receiver's goes (ten a second here),
    it works out runs of rows in turn, AHEAD_ROWS_PER_S a second (every row again within a second at 4,096 rows, 4 s
    at 16,384); a snapshot's refresh then works out only the rows never worked out (fresh_only), so it holds the
    lock for no sort of thousands of rows."""
    from ranktop.watch.engine.step_columns import AHEAD_FROM, AHEAD_MIN_ROWS, AHEAD_ROWS_PER_S, SHARED_FROM

    assert AHEAD_FROM <= 4096  # a viewer of 4,096 ranks sorts no window per snapshot (benchmarks/scale.py)

    cols = StepColumns(window=4, rows=rows, phases=1)
    every = np.array([cols.new_row() for _ in range(rows)])
    cols.add_block(every, [1] * rows, [0.0] * rows, [0.1] * rows, {"forward": [0.1] * rows})
    assert cols.work_ahead(0.0) is None and cols.working_ahead  # from now on
    assert len(cols.refresh(every, fresh_only=True)) == rows  # none worked out yet: all, at once
    assert len(cols.refresh(every, fresh_only=True)) == 0
    cycle = rows / AHEAD_ROWS_PER_S
    worked_at = np.full(rows, 0.0)
    for tick in range(1, int(3 * cycle * 10)):
        now = tick / 10
        if tick % 10 == 0:  # a digest of every rank each second
            cols.add_block(every, [1 + tick] * rows, [now] * rows, [0.1] * rows, {"forward": [0.1] * rows})
        done = cols.work_ahead(now)
        if done is not None:  # a run of at least AHEAD_MIN_ROWS, those of them with new steps worked out
            assert len(done) < SHARED_FROM and (len(done) == 0 or len(done) >= AHEAD_MIN_ROWS)
            worked_at[done] = now
        stale = cols.changed[every] != cols.stats_at[every]
        assert (now - worked_at[stale] <= cycle + 1.0).all(), now  # a row's medians at most a cycle (and a digest) old
    for size in (8, AHEAD_FROM - 1):  # a smaller job: every snapshot works its medians out (no work ahead)
        small = StepColumns(window=4, rows=size, phases=1)
        some = np.array([small.new_row() for _ in range(size)])
        small.add_block(some, [1] * size, [0.0] * size, [0.1] * size, {"forward": [0.1] * size})
        assert small.work_ahead(0.0) is None and small.work_ahead(100.0) is None and not small.working_ahead
