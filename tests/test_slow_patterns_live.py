"""Two stragglers on a real torchrun/gloo job under ``ranktop launch`` (tests/jobs/sleepy_rank.py --gloo: the others
wait for the slowest in a real all_reduce), read with ``ranktop watch --json`` (issue 46, item 3): two stragglers in
different phases are both flagged with their own phase (judge._masked)."""

import json
import sys

import pytest
from support import JOBS, brief, run_cli

pytestmark = pytest.mark.slow

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]


def test_two_stragglers_in_different_phases_are_both_flagged(launched):
    # rank 1 +12 ms in forward, rank 3 +5 ms in data: rank 1 arrives last at every step, rank 3 never
    launched("two-culprits", *TORCHRUN, str(JOBS / "sleepy_rank.py"), "--gloo", "--slow-rank", "1", "--slow-ms", "12",
             "--slow-phase", "forward", "--also-rank", "3", "--also-ms", "5", "--also-phase", "data", ranks=4)  # fmt: skip
    out = run_cli("watch", "two-culprits", "--json", "--duration", "8", timeout=90)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    verdict, rows = doc["verdict"], [brief(r) for r in doc["ranks"]]
    assert verdict["kind"] == "slow_rank" and verdict["ranks"][:2] == [1, 3] and verdict["others"] == 1, (verdict["text"], rows)
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    assert by_rank[3]["status"] == "slow" and by_rank[3]["culprit_phase"] == "data", rows
    # (its size is not right yet: with 2 of 4 ranks slow, the noise taken off every rank's excess, the class's median
    # rank's, is the midpoint of a healthy and a slow one, and rank 3 reads about half its 5 ms; issue 46, item 3)
    assert by_rank[3]["excess_s"] > 0.001, rows
    assert by_rank[0]["status"] == by_rank[2]["status"] == "ok", rows
