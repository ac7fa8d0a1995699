"""Helpers the tests share: paths, waiting, and running the installed `ranktop` command."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

JOBS = Path(__file__).parent / "jobs"
#: The installed console script, next to this interpreter (tests run against the installed package).
RANKTOP = shutil.which("ranktop", path=str(Path(sys.executable).parent)) or "ranktop"


def wait_for(predicate, timeout: float, message: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(message)


def run_cli(*args: str, timeout: float = 60, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([RANKTOP, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def start_job(cmd: list[str], job: str, ranks: int, cwd: Path, env: dict) -> subprocess.Popen:
    """Start a multi-rank job in its own process group, its output in cwd/JOB.log, and wait
    until every rank trains: the relay is up before torch has built the model."""
    from ranktop.watch.session import WatchSession, resolve
    from ranktop.transport import rendezvous

    log = open(cwd / f"{job}.log", "wb")
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: rendezvous.read_nodes(job) or proc.poll() is not None, 90, "the job never started its relay")
        assert proc.poll() is None, (cwd / f"{job}.log").read_text()[-3000:]
        with WatchSession(resolve([job])) as session:
            wait_for(
                lambda: (rs := session.snapshot().ranks) and len(rs) == ranks and all(r.steps_seen >= 5 for r in rs),
                120,
                "the ranks never started training",
            )
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc
