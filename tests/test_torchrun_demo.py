"""The demo as a real multi-rank job: torchrun, DDP over gloo, the probe in every rank."""

import json

import pytest
from support import brief, run_cli

from ranktop.transport import rendezvous

pytestmark = pytest.mark.slow

# The `torchrun` fixture (a real multi-rank demo job) is in conftest.py.


@pytest.mark.parametrize("phase", ["data", "forward", "backward", "optimizer"])
def test_a_slow_rank_in_a_4_rank_ddp_job_tops_the_straggler_ranking(torchrun, phase):
    torchrun(f"ddp-{phase}", 4, "--slow-rank", "2", "--slow-ms", "40", "--slow-phase", phase)
    out = run_cli("watch", f"ddp-{phase}", "--json", "--duration", "6", timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["world_size"] == 4 and [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    for row in doc["ranks"]:
        assert row["steps_seen"] >= 10, row
        for name in ("data", "forward", "backward", "optimizer"):
            assert row["phases"][name] > 0, (name, row)
    assert doc["stragglers"][0] == 2, doc["stragglers"]
    slow = doc["ranks"][2]
    assert slow["status"] == "slow" and slow["culprit_phase"] == phase
    assert 0.030 < slow["excess_s"] < 0.060
    assert all(r["status"] == "ok" for r in doc["ranks"] if r["rank"] != 2), [brief(r) for r in doc["ranks"]]


def test_ranktop_demo_without_the_tui_runs_a_job_to_completion(rdv, tmp_path):
    out = run_cli("demo", "--no-tui", "--nproc", "2", "--job", "demo-done", "--steps", "30", timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ranktop watch demo-done" in out.stderr
    assert rendezvous.read_nodes("demo-done") == []  # the relay cleaned up after itself


def test_a_bad_demo_switch_is_reported_before_any_tui(rdv, tmp_path):
    out = run_cli("demo", "--nproc", "2", "--slow-rank", "9", "--slow-ms", "10", timeout=120, cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr.splitlines()[0]
    assert "the demo job exited" in out.stderr and "slow-rank" in out.stderr
