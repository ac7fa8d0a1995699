"""The history keeps a hang's episodes from the snapshot's columns as it kept them from every rank's row.

watch/analysis/history.py opens one stall episode per stalled rank and merges
the ranks each snapshot says they wait for. It used to build every flagged
rank's row and merge per episode each second (seconds a sample once thousands
of ranks looked stuck); now it reads the columns and merges once per change.
The reference here is a stalled rank's tracking as it was written (a copy, kept
only to hold the new one to it): fed the same snapshots, both keep the same episodes.
"""

from __future__ import annotations

import random

import pytest

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.history import STALL, Episode, History
import messages


class ReferenceHistory(History):
    """A stalled rank's episode as it was kept: from its row, the ranks waited for merged per episode and sample."""

    def _stalled(self, table, i, snap, now, seen):
        row = snap.ranks[i]
        key = (STALL, f"rank {row.rank}")
        ep = self._extend(
            key, now,
            lambda: Episode(STALL, key[1], row.rank, row.host, row.stalled_phase, now - (row.stalled_s or 0.0), now,
                            step=row.stalled_step),
        )  # fmt: skip
        ep.waiting_for = sorted((set(ep.waiting_for) | set(snap.waiting_for)) - {row.rank})
        ep.diagnosis = snap.diagnosis or ep.diagnosis
        ep.cost_s = ep.duration_s
        seen.add(key)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def heartbeat(rank, step, phase, age, seq, inside, world):
    coll = {"op": "all_reduce", "seq": seq, "inside": inside}
    st = {"last": step - 1, "step": step, "in_step": True, "phase": phase, "step_age": age, "collective": coll}
    return messages.heartbeat(rank, st, world=world, host=f"node{rank // 4}")


@pytest.mark.parametrize("seed", range(25))
def test_stall_episodes_from_columns_are_those_from_rows(seed):
    """Ranks hang, some stay behind, some recover, some are never heard from again: the episodes, their ranks
    waited for and their texts are the same, sample by sample."""
    rng = random.Random(seed)
    world = rng.randint(3, 12)
    clock = Clock()
    agg = Aggregator("j", clock=clock, wall_clock=clock)
    for rank in range(world):
        agg.ingest(messages.hello(rank, world, f"node{rank // 4}"))
    new, old = History(), ReferenceHistory()
    age = 0.0
    for second in range(40):
        clock.now += 1.0
        age += 1.0
        for rank in range(world):
            if rng.random() < 0.15:
                continue  # (a missed heartbeat now and then; some ranks go silent)
            step = 9 if rng.random() < 0.2 else 10
            agg.ingest(heartbeat(rank, step, rng.choice(["forward", "backward"]), age if rng.random() < 0.9 else 0.1,
                                 rng.choice([41, 42, 42]), rng.random() < 0.7, world))  # fmt: skip
        snap = agg.snapshot()
        new.note(snap, clock.now)
        old.note(snap, clock.now)
        assert [e.to_json() for e in new.episodes] == [e.to_json() for e in old.episodes]
        assert set(new._open) == set(old._open)
    assert any(e.kind == STALL and e.waiting_for for e in new.episodes)  # (the case is exercised)
