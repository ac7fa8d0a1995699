"""The job slower than itself on a real torchrun/gloo job under ``ranktop launch`` (tests/jobs/sleepy_rank.py
--gloo --slow-all: every rank's forward 8 ms longer from 40 s after it started): nobody stands out among its
peers, and the verdict says the job is slower than it was, in which phase (watch/analysis/job_pace.py)."""

import sys
import time

import pytest
from support import JOBS

from ranktop.watch.model.verdict import verdict
from ranktop.watch.session import WatchSession, resolve

pytestmark = pytest.mark.slow


def test_every_rank_slower_alike_is_the_job_slower_than_itself(launched):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    launched("pace", *torchrun, str(JOBS / "sleepy_rank.py"), "--gloo", "--slow-all", "--slow-phase", "forward",
             "--slow-ms", "8", "--slow-from-s", "40")  # fmt: skip
    seen = []
    with WatchSession(resolve(["pace"])) as session:  # a screen's snapshots, twice a second, from before the slowdown
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snap = session.snapshot()
            seen.append((time.time(), verdict(snap), snap))
            if seen[-1][1].kind == "job_slower" and seen[-1][1].phase == "forward" and len(seen) > 4 and all(
                    answer.kind == "job_slower" for _, answer, _ in seen[-4:]):  # fmt: skip
                break
            time.sleep(0.5)
    at, answer, snap = seen[-1]
    texts = [a.text for _, a, _ in seen[-6:]]
    assert answer.kind == "job_slower" and answer.phase == "forward" and answer.ranks == [], texts
    assert answer.excess_s == pytest.approx(0.008, rel=0.4) and answer.loss > 0.2, (answer, texts)
    assert ": forward +" in answer.text and " ms on every rank" in answer.text, answer.text
    assert at - 30 < answer.since <= at, (at, answer.since)
    assert {r.status for r in snap.ranks} == {"ok"}, [(r.rank, r.status, r.excess_s) for r in snap.ranks]
