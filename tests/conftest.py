"""Shared fixtures: a private rendezvous folder per test, and real rank processes."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from support import JOBS, RANKTOP, LaunchedJobs, start_job, stop_group, wait_for

from ranktop.relay.claim import Claim


#: The demo's training script, as torchrun runs it.
TRAIN = importlib.util.find_spec("ranktop.demo.train").origin


@pytest.fixture
def rdv(tmp_path, monkeypatch):
    """A rendezvous directory of this test's own, in the environment of every child."""
    folder = tmp_path / "rdv"
    monkeypatch.setenv("RANKTOP_DIR", str(folder))
    monkeypatch.delenv("RANKTOP_SECRET", raising=False)
    monkeypatch.delenv("RANKTOP_JOB", raising=False)
    return folder


class Ranks:
    """Rank processes launched the way torchrun would: env vars, one process each."""

    def __init__(self, job: str, world: int, script: Path, args: list[str], cwd: Path):
        self.job = job
        self.procs = []
        for rank in range(world):
            env = dict(
                os.environ,
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(world),
                LOCAL_WORLD_SIZE=str(world),
                RANKTOP_JOB=job,
            )
            self.procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=cwd, stderr=subprocess.PIPE))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def launch_ranks(rdv, tmp_path):
    """launch_ranks(job, world, *args): torch-free ranks with the real probe (tests/jobs/sleepy_rank.py)."""
    started = []

    def launch(job: str, world: int, *args: str, script: Path = JOBS / "sleepy_rank.py") -> Ranks:
        ranks = Ranks(job, world, script, list(args), tmp_path)
        started.append(ranks)
        wait_for(lambda: any(rdv.glob(f"jobs/{job}/node-*.json")), 30, f"relay of job {job} never appeared")
        # and every rank's probe up (registered with the relay): a loaded machine may start the last rank seconds
        # after the first, which a test's listening window (watch --duration) should not have to cover
        claim = Claim(job, socket.gethostname())
        wait_for(lambda: len(claim.live_ranks()) == world or any(p.poll() is not None for p in ranks.procs), 60,
                 f"the ranks of job {job} never all started", seen=lambda: f"registered: {claim.live_ranks()}")  # fmt: skip
        return ranks

    yield launch
    for ranks in started:
        ranks.stop()


@pytest.fixture
def torchrun(rdv, tmp_path):
    """torchrun(job, nproc, *demo_args): the demo under torchrun (DDP, gloo), returned once every rank trains."""
    procs = []

    def launch(job, nproc, *args):
        env = dict(os.environ, RANKTOP_JOB=job, OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", TRAIN, *args]
        proc = start_job(cmd, job, nproc, tmp_path, env)
        procs.append(proc)
        return proc

    yield launch
    for proc in procs:
        if proc.poll() is None:
            stop_group(proc, 20)


@pytest.fixture
def job(rdv, tmp_path):
    """job(name, script, *args, ranks=4, listen_s=6): a tests/jobs script under ``ranktop launch -- torchrun``, its
    ``ranktop watch --json`` document once every rank trains (support.LaunchedJobs); ended after the test."""
    jobs = LaunchedJobs(tmp_path)
    yield jobs.launch
    jobs.close()


@pytest.fixture
def launched(rdv, tmp_path):
    """launched(job, *command, ranks=2): ``ranktop launch --job JOB -- COMMAND``, returned once every rank reports."""
    procs = []

    def launch(job, *command, ranks=2):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        proc = start_job([RANKTOP, "launch", "--job", job, "--", *command], job, ranks, tmp_path, env)
        procs.append(proc)
        return proc

    yield launch
    for proc in procs:
        if proc.poll() is None:
            stop_group(proc, 30, group=False)  # ranktop launch passes it on to torchrun, which stops its ranks


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A real one-node SLURM cluster of this machine (tests/slurm_cluster.py), for the whole session."""
    from slurm_cluster import SlurmCluster, unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield cluster
    cluster.stop()
