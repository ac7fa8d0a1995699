"""An intermittent straggler on a real torchrun/gloo job under ``ranktop launch`` (tests/jobs/sleepy_rank.py --gloo:
rank 2 of 4 sleeps 100 ms more in data on one step in 10, the others wait for it in a real all_reduce), read with
``ranktop watch --json``: its median says nothing, what the job pays for it on average does
(watch/analysis/intermittent.py)."""

import json
import sys

import pytest
from support import JOBS, brief, run_cli

pytestmark = pytest.mark.slow


def test_a_rank_slow_on_one_step_in_ten_is_named_with_how_often_and_its_cost_on_average(launched):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
    launched("every-10th", *torchrun, str(JOBS / "sleepy_rank.py"), "--gloo", "--slow-rank", "2", "--slow-ms", "100",
             "--slow-phase", "data", "--slow-every", "10", ranks=4)  # fmt: skip
    out = run_cli("watch", "every-10th", "--json", "--duration", "8", timeout=90)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    verdict, rows = doc["verdict"], [brief(r) for r in doc["ranks"]]
    assert verdict["kind"] == "slow_rank" and verdict["ranks"] == [2] and verdict["phase"] == "data", (verdict["text"], rows)
    # How often: of the order of one in 10 (on a busy machine its sleeps' own jitter makes some of its other steps
    # far too: one in 6 to 10 read here at a load of 7 on 2 cores; tests/test_intermittent.py holds the figure to 25%)
    assert 4 <= verdict["every"] <= 15, (verdict, rows)
    assert verdict["excess_s"] == pytest.approx(0.010, rel=0.4), (verdict, rows)  # 100 ms on 1 step in 10
    assert verdict["text"].startswith("rank 2 slow in data on 1 step in "), verdict["text"]
    assert "ms per step on average, the job loses" in verdict["text"], verdict["text"]
    assert doc["ranks"][2]["every"] == verdict["every"]
    assert [r["status"] for r in doc["ranks"] if r["rank"] != 2] == ["ok"] * 3, rows
