"""The demo as a real multi-rank job: torchrun, DDP over gloo, the probe in every rank."""

import importlib.util
import json
import os
import signal
import subprocess
import sys

import pytest
from support import run_cli, wait_for

from ranktop.tui.session import WatchSession, resolve
from ranktop.wire import rendezvous

pytestmark = pytest.mark.slow

TRAIN = importlib.util.find_spec("ranktop.demo.train").origin


@pytest.fixture
def torchrun(rdv, tmp_path):
    procs = []

    def launch(job, nproc, *args):
        env = dict(os.environ, RANKTOP_JOB=job, OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", TRAIN, *args]
        log = open(tmp_path / f"{job}.log", "wb")
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        wait_for(lambda: rendezvous.read_nodes(job) or proc.poll() is not None, 90, "the job never started its relay")
        assert proc.poll() is None, (tmp_path / f"{job}.log").read_text()[-3000:]
        # The relay is up before torch has built the model: wait until every rank trains.
        with WatchSession(resolve([job])) as session:
            wait_for(
                lambda: (ranks := session.snapshot().ranks) and len(ranks) == nproc and all(r.steps_seen >= 5 for r in ranks),
                120,
                "the ranks never started training",
            )
        return proc

    yield launch
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


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
    assert all(r["status"] == "ok" for r in doc["ranks"] if r["rank"] != 2)


def test_ranktop_demo_without_the_tui_runs_a_job_to_completion(rdv, tmp_path):
    out = run_cli("demo", "--no-tui", "--nproc", "2", "--job", "demo-done", "--steps", "30", timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ranktop watch demo-done" in out.stderr
    assert rendezvous.read_nodes("demo-done") == []  # the relay cleaned up after itself


def test_a_bad_demo_switch_is_reported_before_any_tui(rdv, tmp_path):
    out = run_cli("demo", "--nproc", "2", "--slow-rank", "9", "--slow-ms", "10", timeout=120, cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr.splitlines()[0]
    assert "the demo job exited" in out.stderr and "slow-rank" in out.stderr
