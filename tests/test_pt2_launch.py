"""Compiled jobs under ``ranktop launch`` (issue 29), real ones: 4 torchrun ranks on gloo, the model compiled
as trainers compile it (tests/jobs/compiled_ranks.py), rank 3 slowed by 15 ms per micro-batch inside its
compiled forward. Before issue 29 the fullgraph layouts died at their first forward (dynamo met automatic
mode's hooks); now each trains, and rank 3 is named first and alone, slow in forward. Read with
``ranktop watch --json``.
"""

import json
import os
import signal
import subprocess
import sys

import pytest
from support import JOBS, RANKTOP, run_cli, start_job

pytest.importorskip("torch")

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
LAYOUTS = ("ddp-fullgraph", "compile-ddp", "fsdp2-blocks")


@pytest.fixture
def job(rdv, tmp_path):
    procs = []

    def launch(name, *args):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        command = [RANKTOP, "launch", "--job", name, "--", *TORCHRUN, str(JOBS / "compiled_ranks.py"), *args]
        procs.append(start_job(command, name, 4, tmp_path, env))
        out = run_cli("watch", name, "--json", "--duration", "6", timeout=90)
        assert out.returncode == 0, out.stderr
        log = (tmp_path / f"{name}.log").read_text()
        return json.loads(out.stdout), log

    yield launch
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_compiled_job_under_launch_names_its_slow_rank_first_and_alone_in_forward(job, layout):
    doc, log = job("pt2-slow", "--layout", layout, "--slow-rank", "3", "--slow-ms", "15")
    assert "Unsupported" not in log and "graph break" not in log.lower(), log[-3000:]
    assert doc["stragglers"][0] == 3, doc["stragglers"]
    slow = doc["ranks"][3]
    assert slow["status"] == "slow" and slow["culprit_phase"] == "forward", slow
    assert [r["status"] for r in doc["ranks"][:3]] == ["ok"] * 3, doc["ranks"]
    verdict = doc["verdict"]
    assert verdict["kind"] == "slow_rank" and verdict["ranks"] == [3] and verdict["others"] == 0, verdict
    assert verdict["text"].startswith("rank 3 slow in forward: +"), verdict
    assert 0.040 < slow["excess_s"] < 0.090, slow  # 4 micro-batches of 15 ms
    for row in doc["ranks"]:  # every phase seen from the eager boundary of the compiled region
        assert {"data", "forward", "backward", "optimizer"} <= set(row["phases"]), row
