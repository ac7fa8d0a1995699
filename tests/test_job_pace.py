"""The job slower than itself (watch/analysis/job_pace.py): every rank slower alike is nobody's straggler, but the
job's step against its own baseline says it. Synthetic steps through a real Aggregator, snapshots as a screen
takes them; the live job is in tests/test_pauses_live.py's neighbour, tests/test_job_pace_live.py."""

import random

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.job_pace import JobPace
from ranktop.watch.model.verdict import verdict
import messages

BASE = {"data": 0.005, "forward": 0.020, "backward": 0.030, "optimizer": 0.005}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Job:
    """4 ranks stepping together, a snapshot every half second (as the screen takes them)."""

    def __init__(self, world=4, noise=0.03, seed=0):
        self.clock = Clock()
        self.agg = Aggregator("j", clock=self.clock, wall_clock=self.clock, window=64)
        self.world, self.noise, self.n, self.t = world, noise, 0, 100.0
        self.rng = random.Random(seed)
        for r in range(world):
            self.agg.ingest(messages.hello(r, world, "n0", pid=r))
        self.verdicts = []

    def run(self, seconds, extra=None):
        """``seconds`` of steps; ``extra``: phase -> seconds every rank adds to it."""
        until = self.clock.now + seconds
        next_look = self.clock.now + 0.5
        while self.clock.now < until:
            walls = []
            for r in range(self.world):
                p = {k: v * (1 + self.rng.gauss(0, self.noise)) + (extra or {}).get(k, 0.0) for k, v in BASE.items()}
                walls.append(sum(p.values()) + 0.001)
                self.agg.ingest(messages.steps(r, [{"n": self.n, "t": self.t, "w": walls[-1], "p": p}], world=self.world))
            self.n += 1
            self.t += max(walls)
            self.clock.now += max(walls)
            if self.clock.now >= next_look:
                next_look += 0.5
                self.verdicts.append(verdict(self.agg.snapshot()))
        return self.verdicts[-1]


def test_every_rank_slower_alike_is_the_job_slower_than_itself_with_the_phase_that_grew():
    job = Job()
    job.run(40)
    assert {v.kind for v in job.verdicts[-20:]} == {"healthy"}
    answer = job.run(8, extra={"forward": 0.025})  # forward 20 -> 45 ms on every rank: the step 61 -> 86 ms
    assert answer.kind == "job_slower" and answer.phase == "forward" and answer.ranks == [], answer
    assert 0.3 < answer.loss < 0.5 and 0.020 < answer.excess_s < 0.030, answer
    assert answer.text.startswith(f"the job is {round(100 * answer.loss)}% slower since ") and ": forward +2" in answer.text, answer.text
    began = job.clock.now - 8
    assert began - 3 < answer.since < began + 5, (answer.since - began)  # dated back half a window from when seen
    assert all(r.status == "ok" for r in job.agg.snapshot().ranks)


def test_a_healthy_noisy_job_and_a_warm_up_are_never_the_job_slower():
    job = Job(noise=0.08, seed=3)
    job.run(5, extra={"forward": 0.060})  # a warm-up: every rank 2x slower, then its pace
    job.run(60)
    assert "job_slower" not in {v.kind for v in job.verdicts}, [v.text for v in job.verdicts if v.kind == "job_slower"][:3]


def test_a_job_slower_for_good_becomes_its_new_pace_after_minutes():
    job = Job()
    job.run(30)
    job.run(30, extra={"backward": 0.015})  # 25% slower for good
    assert job.verdicts[-1].kind == "job_slower" and job.verdicts[-1].phase == "backward"
    job.run(400, extra={"backward": 0.015})
    assert job.verdicts[-1].kind == "healthy", job.verdicts[-1].text


def test_a_short_look_judges_nothing_of_the_job_s_past():
    pace = JobPace()
    for k in range(20):  # 10 s of a viewer's snapshots: too short for a baseline of the last minutes
        assert pace.judge(0.06 if k < 10 else 0.09, {"forward": 0.02}, True, 1000 + 0.5 * k, 0.0) is None
