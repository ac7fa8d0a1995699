"""Shared fixtures: a private rendezvous folder per test, and real rank processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import JOBS, wait_for

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
            self.procs.append(
                subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=cwd, stderr=subprocess.PIPE)
            )

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
        wait_for(lambda: any(rdv.glob(f"jobs/{job}/node-*.json")), 20, f"relay of job {job} never appeared")
        return ranks

    yield launch
    for ranks in started:
        ranks.stop()


