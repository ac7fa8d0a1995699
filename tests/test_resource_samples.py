"""Every rank's memory and GPU samples as the viewer keeps them (watch/engine/resource_samples.py): columns by rank,
written as states arrive and gathered by one index per column at a refresh; a rank's view, and its memory creep, made
only when its row is read. At 16,384 GPU ranks, a view and a creep regression for every rank that stated since the
last refresh were 14 ms of each snapshot and more.
"""

from __future__ import annotations

import numpy as np

from ranktop.demo.simulate import Scenario, Simulator
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.memory_creep import MB, assess, assessed
from ranktop.watch.engine.memory_history import MemoryHistory
from ranktop.watch.engine.resource_samples import ResourceTracker
from ranktop.wire.messages import Memory, State


def state(rss: float | None = None, gpu: dict | None = None) -> State:
    return State(step=1, last=0, in_step=True, mem=Memory(rss=rss) if rss is not None else None, gpu=gpu)


def test_a_refresh_gathers_every_rank_s_samples_as_columns_and_a_row_s_view_when_it_is_read():
    tracker = ResourceTracker()
    for rank in range(6):
        tracker.note(rank, state(rss=1e9 + rank), 0.0)
    tracker.note(6, state(gpu={"na": "no NVML"}), 0.0)
    tracker.note(7, state(gpu={"seq": 1, "util": 90}), 0.0)
    tracker.note(8, state(), 0.0)  # a state without samples
    ranks = np.arange(10)
    first = tracker.views(ranks)
    assert len(first) == 10 and [first[i] is None for i in range(10)] == [False] * 8 + [True] * 2
    assert first.with_memory.tolist() == [True] * 6 + [False] * 4
    assert first.with_gpu.tolist() == [False] * 6 + [True, True, False, False]
    assert first.gpu_sampled.tolist() == [False] * 7 + [True, False, False]
    assert first[7].gpu == {"seq": 1, "util": 90} and first[7].gpu_history == (90.0,) and first[7].memory is None

    tracker.note(3, state(rss=2e9), 1.0)
    tracker.note(7, state(gpu={"seq": 2, "util": 80}), 1.0)
    second = tracker.views(ranks)
    assert second[3].memory.rss == 2e9 and first[3].memory.rss == 1e9 + 3  # the first snapshot's is as it was
    assert second[7].gpu_history == (90.0, 80.0) and first[7].gpu_history == (90.0,)
    asked = tracker.views(np.array([7, 3, 12]))  # in the order asked; a rank never heard of has none
    assert asked[0].gpu["util"] == 80 and asked[1].memory.rss == 2e9 and asked[2] is None


def test_a_view_s_creep_verdict_is_the_history_s_as_it_was_when_the_view_was_taken():
    history, tracker = MemoryHistory(), ResourceTracker()
    for i in range(100):  # a leak of 60 MB a minute, sampled every half second
        mem = Memory(rss=1e9 + i * 0.5 * MB)
        history.note(mem, i * 0.5)
        tracker.note(0, State(step=i, last=i - 1, in_step=True, mem=mem), i * 0.5)
    view = tracker.views(np.array([0]))[0]
    tracker.note(0, State(step=100, last=99, in_step=True, mem=Memory(rss=5e9)), 50.0)  # after the view was taken
    tracked, verdict, spark = assessed(view.samples)
    assert (tracked, verdict, spark) == assess(history.samples) and verdict.flagged and spark[-1] == (1e9 + 99 * 0.5 * MB) / MB


def test_a_restarted_rank_s_columns_and_view_are_gone_until_its_new_process_samples():
    tracker = ResourceTracker()
    tracker.note(2, state(rss=1e9, gpu={"seq": 1, "util": 50}), 0.0)
    assert tracker.views(np.array([2])).with_memory.tolist() == [True]
    tracker.forget(2)
    gone = tracker.views(np.array([0, 2]))
    assert [gone[0], gone[1]] == [None, None] and not gone.with_memory.any() and not gone.with_gpu.any()


def test_the_simulator_s_gpu_ranks_reach_the_rows_and_the_columns(tmp_path):
    """--gpu: every simulated rank's state carries memory and NVML samples; a snapshot counts them over every rank."""
    sim = Simulator(Scenario(job="gpus", ranks=256, nodes=32, calls_per_step=0, gpu=True), str(tmp_path))
    clock = [1.0e9]
    agg = Aggregator("gpus", clock=lambda: clock[0], wall_clock=lambda: clock[0])
    for frames in sim.hellos(clock[0]):
        agg.ingest_frames(frames)
    for now, ticks in sim.replay(3.0, digests=True):
        clock[0] = now
        for frames in ticks:
            agg.ingest_frames(frames)
    snap = agg.snapshot()
    table = snap.ranks.table
    assert table.with_memory.all() and table.with_gpu.all() and table.gpu_sampled.all()
    row = snap.ranks[0]
    assert row.gpu.util == 97 and row.memory.allocated is not None and row.memory.tracked == "cuda"
