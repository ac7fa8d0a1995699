"""The size of a slowdown, told right: real torchrun/gloo jobs (tests/jobs/sleepy_rank.py --gloo: own work made of
sleeps, waits in a real all_reduce) under ``ranktop launch``, read with ``ranktop watch --json``.

A rank's excess is measured against what a healthy peer does (with two peers the faster one), so a 2-rank
job's 20 ms slowdown reads 20 ms, not the 10 ms the two ranks' midpoint said (issue 30), and the job's loss
is that excess over the job's step.
"""

import json
import re
import sys

import pytest
from support import JOBS, run_cli

pytestmark = pytest.mark.slow


def _watch(job: str) -> dict:
    out = run_cli("watch", job, "--json", "--duration", "6", timeout=90)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("world", [2, 4])
def test_a_20_ms_slowdown_reads_20_ms_and_its_share_of_the_step_at_any_world_size(launched, world):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"]
    launched(f"size-{world}", *torchrun, str(JOBS / "sleepy_rank.py"), "--gloo", "--slow-rank", "1", "--slow-ms", "20", ranks=world)
    doc = _watch(f"size-{world}")
    verdict = doc["verdict"]
    rows = [(r["rank"], r["status"], r["excess_s"], r["phases"]) for r in doc["ranks"]]
    assert verdict["kind"] == "slow_rank" and verdict["ranks"] == [1] and verdict["phase"] == "forward", rows
    assert verdict["excess_s"] == pytest.approx(0.020, rel=0.15), rows
    assert all(status == "ok" for rank, status, _, _ in rows if rank != 1), rows
    step = doc["ranks"][1]["step_s"]  # every rank's step: they all wait for the slow one
    assert verdict["loss"] == pytest.approx(verdict["excess_s"] / step, rel=0.15), (verdict, step)
    told = re.search(r"\+([\d.]+) ms per step", verdict["text"])  # the line a person reads says the same
    assert told and float(told.group(1)) == pytest.approx(20, rel=0.15), verdict["text"]


def test_a_healthy_2_rank_job_flags_nobody(launched):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    launched("size-healthy", *torchrun, str(JOBS / "sleepy_rank.py"), "--gloo")
    doc = _watch("size-healthy")
    assert doc["verdict"]["kind"] == "healthy", doc["verdict"]
    assert [r["status"] for r in doc["ranks"]] == ["ok", "ok"]


def test_the_slowed_rank_of_4_is_the_one_the_others_wait_for_at_the_collectives(launched):
    """The second signal (watch/analysis/arrivals.py): the others' waits in the all_reduce say whom they waited
    for. The slowed rank arrives last at nearly every step's collective, and the verdict says so beside its phase
    times; the others about never."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
    launched("arrivals-4", *torchrun, str(JOBS / "sleepy_rank.py"), "--gloo", "--slow-rank", "2", "--slow-ms", "20", ranks=4)
    doc = _watch("arrivals-4")
    shares = {r["rank"]: r["last_arrivals"] for r in doc["ranks"]}
    assert shares[2] is not None and shares[2] >= 0.8, shares
    assert all(share is not None and share <= 0.2 for rank, share in shares.items() if rank != 2), shares
    verdict = doc["verdict"]
    assert verdict["ranks"] == [2] and verdict["last_arrivals"] == shares[2], verdict
    assert re.search(r"arrives last at \d+% of its steps' collectives", verdict["text"]), verdict["text"]
