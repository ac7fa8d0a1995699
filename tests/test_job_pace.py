"""The job slower than itself (watch/analysis/job_pace.py): every rank slower alike is nobody's straggler, but the
job's step against its own baseline says it; a healthy job whose window medians wander (noisy steps, heavy-tailed
input lengths, a warm-up, a drift of a few percent) never is. Synthetic steps through a real Aggregator, snapshots
as a screen takes them; the live job is tests/test_job_pace_live.py."""

import random

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.job_pace import JobPace
from ranktop.watch.model.verdict import verdict
import messages

BASE = {"data": 0.005, "forward": 0.020, "backward": 0.030, "optimizer": 0.005}


class Job:
    """Ranks stepping together, each waiting for the slowest in backward's all-reduce, a snapshot every half second
    (as the screen takes them). ``long_inputs``: a share of each rank's steps whose input is longer (forward and
    backward x 1.5-5, Pareto); ``drift``: every rank's pace wanders by up to this share, over ``drift_s`` seconds."""

    def __init__(self, world=4, noise=0.03, seed=0, long_inputs=0.0, drift=0.0, drift_s=30.0):
        self.clock = messages.Clock()
        self.agg = Aggregator("j", clock=self.clock, wall_clock=self.clock, window=64)
        self.world, self.noise, self.n, self.t = world, noise, 0, 100.0
        self.long_inputs, self.drift, self.drift_s = long_inputs, drift, drift_s
        self.rng = random.Random(seed)
        for r in range(world):
            self.agg.ingest(messages.hello(r, world, "n0", pid=r))
        self.verdicts = []

    def run(self, seconds, extra=None):
        """``seconds`` of steps; ``extra``: phase -> seconds every rank adds to it."""
        import math

        until = self.clock.now + seconds
        next_look = self.clock.now + 0.5
        while self.clock.now < until:
            pace = 1 + self.drift * math.sin(2 * math.pi * self.clock.now / self.drift_s)
            own = []
            for r in range(self.world):
                p = {k: v * pace * (1 + self.rng.gauss(0, self.noise)) + (extra or {}).get(k, 0.0) for k, v in BASE.items()}
                if self.rng.random() < self.long_inputs:
                    longer = min(5.0, 0.5 + self.rng.paretovariate(1.2))
                    p["forward"] *= longer
                    p["backward"] *= longer
                own.append(p)
            messages.lockstep(self, own)
            if self.clock.now >= next_look:
                next_look += 0.5
                self.verdicts.append(verdict(self.agg.snapshot()))
        return self.verdicts[-1]


def test_every_rank_slower_alike_is_the_job_slower_than_itself_with_the_phase_that_grew():
    job = Job()
    job.run(40)
    assert {v.kind for v in job.verdicts[-20:]} == {"healthy"}
    answer = job.run(10, extra={"forward": 0.025})  # forward 20 -> 45 ms on every rank: the step 61 -> 86 ms
    assert answer.kind == "job_slower" and answer.phase == "forward" and answer.ranks == [], answer
    assert 0.3 < answer.loss < 0.5 and 0.020 < answer.excess_s < 0.030, answer
    assert answer.text.startswith(f"the job is {round(100 * answer.loss)}% slower since ") and ": forward +2" in answer.text, answer.text
    began = job.clock.now - 10
    assert began - 1 < answer.since < began + 6, answer.since - began
    assert all(r.status == "ok" for r in job.agg.snapshot().ranks)


def test_ten_percent_slower_is_named_within_ten_seconds():
    job = Job()
    job.run(40)
    job.run(10, extra={"backward": 0.0075})  # the step 61 -> 68 ms: 12%
    named = [v for v in job.verdicts[-20:] if v.kind == "job_slower"]
    assert named and named[-1].phase == "backward", [v.text for v in job.verdicts[-4:]]


def test_a_healthy_noisy_job_and_a_warm_up_are_never_the_job_slower():
    job = Job(noise=0.08, seed=3)
    job.run(5, extra={"forward": 0.060})  # a warm-up: every rank 2x slower, then its pace
    job.run(60)
    assert "job_slower" not in {v.kind for v in job.verdicts}, [v.text for v in job.verdicts if v.kind == "job_slower"][:3]


def test_heavy_tailed_input_lengths_are_never_the_job_slower():
    """8% of every rank's inputs up to 5x long: windows of 64 steps hold from none to a dozen, and their medians
    wander; no phase's median shifts past its noise for long, and nobody is flagged."""
    for seed in range(3):
        job = Job(world=8, noise=0.05, seed=seed, long_inputs=0.08)
        job.run(90)
        kinds = {v.kind for v in job.verdicts[40:]}
        assert kinds == {"healthy"}, [v.text for v in job.verdicts if v.kind != "healthy"][:3]


def test_a_drift_of_four_percent_over_tens_of_seconds_is_no_alarm():
    """Issue 46, item 7: ranks wandering within +-4% over tens of seconds raise no alarm (here all together)."""
    job = Job(world=8, drift=0.04, drift_s=40.0, seed=1)
    job.run(120)
    assert {v.kind for v in job.verdicts[40:]} == {"healthy"}, [v.text for v in job.verdicts if v.kind != "healthy"][:3]


def test_a_job_slower_for_good_becomes_its_new_pace_after_minutes():
    job = Job()
    job.run(30)
    job.run(30, extra={"backward": 0.015})  # 25% slower for good
    assert job.verdicts[-1].kind == "job_slower" and job.verdicts[-1].phase == "backward"
    job.run(420, extra={"backward": 0.015})
    assert job.verdicts[-1].kind == "healthy", job.verdicts[-1].text


def test_a_short_look_judges_nothing_of_the_job_s_past():
    pace = JobPace()
    for k in range(16):  # 8 s of a viewer's snapshots, the job slower from 3 s: too short to say it against a baseline
        assert pace.judge(0.06 if k < 6 else 0.09, {"forward": 0.02 if k < 6 else 0.05}, {"forward": 0.0001}, True,
                          1000 + 0.5 * k, 0.0, 16.0) is None  # fmt: skip
