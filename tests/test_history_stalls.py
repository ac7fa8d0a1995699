"""The history keeps a hang's episodes from the snapshot's columns as it kept them from every rank's row.

watch/analysis/history.py opens one stall episode per stalled rank and merges
the ranks each snapshot says they wait for. It used to build every flagged
rank's row and merge per episode each second (seconds a sample once thousands
of ranks looked stuck); now it reads the columns and merges once per change.
The reference here is the tracking as it was written (a copy, kept only to hold
the new one to it): fed the same snapshots, both keep the same episodes.
"""

from __future__ import annotations

import collections
import random

import pytest

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis import history as hist
from ranktop.watch.analysis.history import NODE, STALL, STRAGGLER, Episode, History
from ranktop.watch.model.snapshot import SLOW, STALLED
import messages


class ReferenceHistory(History):
    """The episodes as they were tracked from rows."""

    def _track(self, snap, now, made):
        seen = set()
        slow_hosts = set(snap.slow_hosts)
        flagged = [snap.ranks[i] for i in hist.np.flatnonzero(snap.ranks.table.statuses(SLOW, STALLED)).tolist()]
        for row in flagged:
            if row.status == SLOW and row.host not in slow_hosts:
                key = (STRAGGLER, f"rank {row.rank}")
                ep = self._extend(key, now, lambda: Episode(STRAGGLER, key[1], row.rank, row.host, row.culprit_phase, now, now))
                ep.cost_s += row.excess_s * made
                ep.steps += made
                ep.peak_excess_s = max(ep.peak_excess_s, row.excess_s)
                ep.phase = ep.phase or row.culprit_phase
                seen.add(key)
            elif row.status == STALLED:
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
        for host in slow_hosts:
            rows = [r for r in flagged if r.host == host and r.status == SLOW]
            key = (NODE, f"node {host}")
            phases = collections.Counter(r.culprit_phase for r in rows if r.culprit_phase)
            ep = self._extend(key, now, lambda: Episode(NODE, key[1], None, host, None, now, now))
            ep.phase = ep.phase or (phases.most_common(1)[0][0] if phases else None)
            excess = max((r.excess_s for r in rows), default=0.0)
            ep.cost_s += excess * made
            ep.steps += made
            ep.peak_excess_s = max(ep.peak_excess_s, excess)
            seen.add(key)
        for key, ep in list(self._open.items()):
            if key not in seen and now - ep.end > hist.EPISODE_GAP_S:
                ep.open = False
                del self._open[key]


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
