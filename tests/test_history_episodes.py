"""Which episodes the history keeps, with their cost: every one of 3 s or 3 steps, whenever nobody looked.

The snapshots are the real engine's, of tests/test_recording.py's 3-rank job (rank 1 slow in forward from 10 s
to 30 s): one taken while rank 1 is slow, one while every rank is well. The tests hand them to the history in the
order and at the times a job would, so that an episode lasts exactly as long as each test says.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_recording import recorded_job

from ranktop.watch.analysis.history import MAX_EPISODES, MIN_EPISODE_STEPS, NODE, STALL, STRAGGLER, History
from ranktop.watch.offline.replay import Replay


@pytest.fixture(scope="module")
def looks(tmp_path_factory):
    """(a snapshot with rank 1 slow, one with every rank well), of the real engine."""
    replay = Replay(recorded_job(tmp_path_factory.mktemp("job")), clock=lambda: 0.0)
    replay.seek_to_offset(20)
    slow = replay.snapshot()
    replay.seek_to_offset(5)
    well = replay.snapshot()
    assert [r.rank for r in slow.ranks if r.status == "slow"] == [1]
    assert not [r.rank for r in well.ranks if r.status != "ok"]
    return slow, well


def fed(looks, slow_at: set[int], seconds: int = 30, steps_per_s: float = 10.0) -> History:
    """A history fed once a second for ``seconds``: rank 1 slow at the seconds in ``slow_at``."""
    slow, well = looks
    history = History()
    for t in range(seconds):
        snap = slow if t in slow_at else well
        history.note(dataclasses.replace(snap, global_step=int(t * steps_per_s)), 1000.0 + t)
    return history


def test_an_episode_of_three_seconds_is_kept_with_what_it_cost(looks):
    history = fed(looks, {10, 11, 12})
    (ep,) = history.episodes_since(0)
    assert (ep.kind, ep.who, ep.phase, ep.open) == (STRAGGLER, "rank 1", "forward", False)
    assert (ep.start, ep.end) == (1010.0, 1012.0)
    # its excess per step times the steps made while it was seen (10 a second, from the look before the first)
    excess = looks[0].ranks[1].excess_s
    assert ep.steps == 30 and ep.cost_s == pytest.approx(30 * excess)


def test_a_blip_shows_while_it_lasts_and_is_then_forgotten(looks):
    history = fed(looks, {10}, seconds=11)
    assert [e.who for e in history.episodes_since(0)] == ["rank 1"]  # open: it may last
    history = fed(looks, {10}, seconds=30)
    assert history.episodes_since(0) == []  # one look, no step after it: a blip, not kept


def test_a_fast_job_s_short_episode_is_kept_by_its_steps_a_slow_job_s_by_its_seconds(looks):
    # two looks a second apart: at 10 steps/s the job made 10 steps while it was seen, at 2 steps/s only 2
    assert [e.who for e in fed(looks, {10, 11}, steps_per_s=10.0).episodes_since(0)] == ["rank 1"]
    assert 2 < MIN_EPISODE_STEPS and fed(looks, {10, 11}, steps_per_s=2.0).episodes_since(0) == []
    # at 0.2 steps/s, 3 s is what keeps it (no step made in them)
    (ep,) = fed(looks, {10, 11, 12}, steps_per_s=0.2).episodes_since(0)
    assert ep.duration_s == 2.0


def test_an_episode_nobody_looked_at_is_kept_and_the_blips_take_no_room(looks):
    """Fed with every snapshot the viewer takes, whichever screen is open (watch/session.py): an episode that began
    and ended long before anyone opened the history screen is there, however many blips came after it."""
    blips = set(range(20, 5500, 5))  # a blip every 5 s for 90 minutes: more than the history keeps episodes
    assert len(blips) > MAX_EPISODES
    history = fed(looks, {10, 11, 12} | blips, seconds=5510)
    (ep,) = history.episodes_since(0)
    assert ep.start == 1010.0


def test_each_culprit_s_episodes_and_their_cost_the_costliest_first(looks):
    history = fed(looks, {5, 6, 7, 8, 9, 10, 20, 21, 22})
    (culprit,) = history.culprits_since(0)
    assert culprit.who == "rank 1" and culprit.kind == STRAGGLER and not culprit.open
    assert [(e.start, e.end) for e in culprit.episodes] == [(1005.0, 1010.0), (1020.0, 1022.0)]
    assert culprit.cost_s == pytest.approx(sum(e.cost_s for e in culprit.episodes)) and culprit.cost_s > 0
    assert {NODE, STALL}.isdisjoint({culprit.kind})


def test_the_timeline_has_a_strip_per_culprit_that_says_now_while_it_lasts_or_nobody(looks):
    from ranktop.tui.screens.history import timeline_text

    lines = timeline_text(fed(looks, {25, 26, 27, 28, 29}), 80).plain.splitlines()
    assert lines[1].split()[:2] == ["rank", "1"] and lines[1].endswith(" now")
    lines = timeline_text(fed(looks, {5, 6, 7}), 80).plain.splitlines()
    assert lines[1].split()[:2] == ["rank", "1"] and not lines[1].endswith(" now")
    assert "nobody" in timeline_text(fed(looks, set()), 80).plain.splitlines()[1]


def test_a_slow_node_is_one_culprit_not_its_ranks_one_by_one(rdv):
    """A node of a simulated 64-rank job slow in forward for a minute: the engine names the node, and now and then
    (as it begins and ends) its ranks one by one; the history keeps one episode of the node all along."""
    import os

    from ranktop.demo.sim_model import PHASES, JobModel
    from ranktop.demo.simulate import Scenario, Simulator
    from ranktop.watch.aggregator import Aggregator

    class SlowNode(JobModel):
        def step(self, n, start):
            self.extra = {r: [0.0, 0.04, 0.0, 0.0, 0.0] for r in range(24, 32)} if 30 <= start < 90 else {}
            assert len(PHASES) + 1 == 5
            return super().step(n, start)

    s = Scenario(job="sim-node", ranks=64, nodes=8, steps_per_s=8.0)
    sim = Simulator(s, directory=os.environ["RANKTOP_DIR"])
    sim.model = SlowNode(s)
    clock = [0.0]
    agg = Aggregator(s.job, clock=lambda: clock[0], wall_clock=lambda: clock[0])
    agg.ingest_batch([(f, None) for f in sim.hellos(0.0)])
    history, next_look, named = History(), 1.0, set()
    for now, frames in sim.replay(120, start=0.0):
        clock[0] = now
        agg.ingest_batch([(f, None) for f in frames])
        if now >= next_look:
            next_look += 1.0
            snap = agg.snapshot()
            named.update(snap.slow_hosts)
            history.note(snap, now)
    history.close()
    assert named == {"sim0003"}
    culprits = history.culprits_since(0)
    assert [c.who for c in culprits] == ["node sim0003"], [(c.who, [(e.start, e.end) for e in c.episodes]) for c in culprits]
    (ep,) = culprits[0].episodes
    assert ep.phase == "forward" and 30 <= ep.start <= 75 and 90 <= ep.end <= 120
