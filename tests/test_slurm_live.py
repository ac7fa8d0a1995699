"""Against a real SLURM cluster (tests/slurm_cluster.py): jobs submitted with sbatch, found by their id.

Every job's relays bind loopback (RANKTOP_BIND=127.0.0.1) on the port convention's ports;
"no shared home" is a TUI whose rendezvous folder is another one than the job's.
"""

import getpass
import json
import os
import subprocess
import sys
import time

import pytest

from support import RANKTOP, run_cli, wait_for

from ranktop.transport import ports, rendezvous

pytestmark = pytest.mark.slow

PYTHON = sys.executable
JOB_ENV = {"RANKTOP_BIND": "127.0.0.1", "OMP_NUM_THREADS": "1"}


@pytest.fixture
def cluster(slurm, rdv, monkeypatch):
    """The session's cluster, its SLURM_CONF in this test's environment (and so in every `ranktop` it runs).

    Every job still queued or running at the end of a test is cancelled, so that a failing test
    never leaves the next one's jobs pending behind its own.
    """
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    yield slurm
    slurm.run("scancel", "--user", getpass.getuser(), check=False)
    wait_for(lambda: not slurm.run("squeue", "-h", "-o", "%i", check=False).stdout.strip(), 30, "jobs outlived scancel")


def submit(cluster, tmp_path, body: str, ntasks: int) -> str:
    script = f"#!/bin/bash\n{body}\n"
    return cluster.sbatch(script, "-n", str(ntasks), "-o", str(tmp_path / "slurm-%j.out"), "-D", str(tmp_path), env=JOB_ENV)


def attach_json(*args: str, duration: float = 3.0) -> dict:
    out = run_cli("attach", *args, "--json", "--duration", str(duration))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_training(job_id: str, ranks: int, tmp_path, *extra: str) -> dict:
    """Attach until every rank has stepped a few times (torch takes a while to start on 2 cores)."""
    deadline = time.monotonic() + 90
    while True:
        out = run_cli("attach", "--slurm", job_id, *extra, "--json", "--duration", "3")
        doc = json.loads(out.stdout) if out.stdout.strip() else {"ranks": []}
        trained = all(r["steps_seen"] >= 5 and r["host"] != "?" for r in doc["ranks"])  # "?": no hello heard yet
        if doc.get("world_size") == ranks and len(doc["ranks"]) == ranks and trained:
            return doc
        if time.monotonic() > deadline:
            log = "".join(p.read_text()[-2000:] for p in tmp_path.glob("slurm-*.out"))
            raise AssertionError(f"job {job_id} never trained: {out.stderr}\n{log}")


def test_srun_python_one_task_per_rank_is_watched_by_slurm_job_id_with_and_without_a_shared_home(cluster, rdv, tmp_path, monkeypatch):
    job = submit(cluster, tmp_path, f"srun {PYTHON} -m ranktop.demo.train", ntasks=2)
    doc = wait_training(job, 2, tmp_path)
    assert doc["job"] == job and doc["world_size"] == 2
    assert [r["host"] for r in doc["ranks"]] == [cluster.node] * 2
    (record,) = rendezvous.read_nodes(job)
    assert record.slurm_job == job and record.telemetry.endswith(f":{ports.slurm_ports(job)[0]}")

    # No shared home: the TUI's own folder knows nothing; the node list and the port convention find the
    # relay, and the job's secret (copied, or in RANKTOP_SECRET) opens it. Without it, one line says so.
    home = str(tmp_path / "login-node-home")
    out = run_cli("attach", "--slurm", job, "--dir", home, "--json", "--duration", "3")
    assert out.returncode == 1 and "RANKTOP_SECRET" in out.stderr and "Traceback" not in out.stderr, out.stderr
    monkeypatch.setenv("RANKTOP_SECRET", rendezvous.read_secret(job).decode())
    elsewhere = attach_json("--slurm", job, "--dir", home)
    assert elsewhere["job"] == job and [r["rank"] for r in elsewhere["ranks"]] == [0, 1]
    assert elsewhere["endpoints"][0]["url"] == f"tcp://{cluster.node}:{ports.slurm_ports(job)[0]}"
    monkeypatch.delenv("RANKTOP_SECRET")

    # From a laptop: the ssh command that forwards the node's two ports, side by side.
    out = run_cli("attach", "--slurm", job, "--print-ssh", "--via", "login.example.org", "--local-port", "7000")
    tele, ctl = ports.slurm_ports(job)
    assert out.returncode == 0 and f"ssh -N -L 7000:{cluster.node}:{tele} -L 7001:{cluster.node}:{ctl} login.example.org &" in out.stdout
    assert out.stdout.splitlines()[-1].endswith("ranktop watch tcp://localhost:7000")

    # `ranktop watch JOBID` is the same thing when the id is a SLURM job's.
    assert [r["rank"] for r in json.loads(run_cli("watch", job, "--json", "--duration", "3").stdout)["ranks"]] == [0, 1]

    cluster.run("scancel", job)
    wait_for(lambda: cluster.state(job) in ("", "CANCELLED"), 30, "the job never ended")
    wait_for(lambda: not rendezvous.read_nodes(job), 15, "the relay left its record behind")
    out = run_cli("attach", "--slurm", job, "--json")
    assert out.returncode == 1 and out.stderr == f"ranktop: error: SLURM job {job} has ended (cancelled)\n"


def test_srun_torchrun_under_ranktop_launch_one_task_per_node(cluster, rdv, tmp_path, monkeypatch):
    torchrun = f"{PYTHON} -m torch.distributed.run --standalone --nproc_per_node 2"
    job = submit(cluster, tmp_path, f"srun -n 1 {RANKTOP} launch -- {torchrun} {os.path.dirname(__file__)}/jobs/unmodified_ddp.py", 2)
    # A login node without the shared home: the job's secret in RANKTOP_SECRET opens its encrypted relay.
    secret = wait_for(lambda: rendezvous.read_secret(job), 90, "the job never made its secret")
    monkeypatch.setenv("RANKTOP_SECRET", secret.decode())
    doc = wait_training(job, 2, tmp_path, "--dir", str(tmp_path / "login-node-home"))
    assert doc["job"] == job  # `ranktop launch` names the job after SLURM_JOB_ID
    cluster.run("scancel", job)


def test_srun_tasks_of_an_unmodified_script_under_ranktop_launch_are_ranks_by_slurms_variables(cluster, rdv, tmp_path):
    job = submit(cluster, tmp_path, f"srun {RANKTOP} launch -- {PYTHON} {os.path.dirname(__file__)}/jobs/plain_torch_task.py", 2)
    doc = wait_training(job, 2, tmp_path)
    assert [(r["rank"], r["local_rank"]) for r in doc["ranks"]] == [(0, 0), (1, 1)]
    cluster.run("scancel", job)


def test_a_pending_an_unknown_and_a_malformed_job_id_each_get_one_line(cluster, rdv, tmp_path):
    pending = cluster.sbatch("#!/bin/bash\nsleep 600\n", "--begin=now+1hour", "-o", "/dev/null")
    try:
        out = run_cli("attach", "--slurm", pending, "--wait", "0")
        # The reason is BeginTime once the scheduler has looked at the job, None before.
        assert out.returncode == 3 and out.stderr.startswith(f"ranktop: error: SLURM job {pending} is pending")
        assert out.stderr.endswith("nothing to watch until it starts\n") and len(out.stderr.splitlines()) == 1
        # Started first, attach waits for the pending job (one line), and attaches once SLURM starts it.
        proc = subprocess.Popen(
            [RANKTOP, "attach", "--slurm", pending, "--json", "--duration", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        line = proc.stderr.readline()
        assert line.startswith(f"ranktop: SLURM job {pending} is pending") and line.endswith("; waiting for it to start\n"), line
        time.sleep(2)
        assert proc.poll() is None
        cluster.run("scontrol", "update", f"jobid={pending}", "starttime=now")
        out, err = proc.communicate(timeout=120)
        # it attached: the job's node was dialled, and a `sleep` runs no ranktop, as the one line says
        assert proc.returncode == 1 and f"no rank reported within 2s from the 1 node(s) of SLURM job {pending}" in err, err
    finally:
        cluster.run("scancel", pending)

    # A record another node left behind for this (now ended) job is recognised by SLURM's word, and pruned.
    rendezvous.write_node(
        rendezvous.NodeRecord(pending, "node-elsewhere", "tcp://node-elsewhere:1", "tcp://node-elsewhere:2", 1, 0.0, slurm_job=pending)
    )
    assert run_cli("jobs").stdout.startswith("no running jobs")
    assert f"{pending}\tended" in run_cli("jobs", "--all").stdout
    assert run_cli("jobs", "--prune").stdout.startswith(f"removed {rendezvous.job_dir(pending)}/node-node-elsewhere.json")
    assert rendezvous.read_nodes(pending) == []
    out = run_cli("attach", "--slurm", "999999", "--json")
    assert out.returncode == 1 and "SLURM job 999999 is unknown" in out.stderr and len(out.stderr.splitlines()) == 1
    out = run_cli("attach", "--slurm", "nope")
    assert out.returncode == 1 and "not a SLURM job id: 'nope'" in out.stderr


def test_without_slurm_installed_attach_says_so(rdv, tmp_path):
    env = dict(os.environ, PATH=os.path.dirname(RANKTOP))
    out = subprocess.run([RANKTOP, "attach", "--slurm", "12"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1 and "SLURM's commands are not installed here" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_running_job_without_ranktop_is_waited_for_then_named(cluster, rdv, tmp_path):
    job = cluster.sbatch("#!/bin/bash\nsleep 60\n", "-o", "/dev/null")
    try:
        wait_for(lambda: cluster.state(job) == "RUNNING", 30, "the job never started")
        out = run_cli("attach", "--slurm", job, "--json", "--duration", "2")
        assert out.returncode == 1 and out.stderr.splitlines()[-1] == (
            f"ranktop: error: no rank reported within 2s from the 1 node(s) of SLURM job {job}: does it run ranktop "
            "(probe.init() or ranktop launch), with the same RANKTOP_PORT_BASE?"
        )
        assert json.loads(out.stdout)["endpoints"][0]["state"] == "waiting"
    finally:
        cluster.run("scancel", job)
