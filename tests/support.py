"""Helpers the tests share: paths, waiting, and running the installed `ranktop` command."""

from __future__ import annotations

import json
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


def wait_for(predicate, timeout: float, message: str, *, seen=None):
    """``predicate()``'s first true value, looked for until ``timeout`` s have passed; then AssertionError with
    ``message``, how long it waited, its last value and, where given, ``seen()``: what there was instead.

    A condition waited for, never a count reached by a deadline: ``timeout`` is only the bound past which the
    thing will not come, so it is generous (five times what a quiet machine needs); a loaded machine is slower,
    not wrong. The predicate is looked at once more after the deadline, so a slow look never misses."""
    deadline = time.monotonic() + timeout
    while True:
        last = time.monotonic() >= deadline
        value = predicate()
        if value:
            return value
        if last:
            break
        time.sleep(0.05)
    extra = f"; {seen()}" if seen is not None else ""
    raise AssertionError(f"{message} (after {timeout:g} s: last {value!r}{extra})")


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


def stop_group(proc: subprocess.Popen, timeout: float, *, group: bool = True) -> None:
    """End a job started in a process group of its own: SIGTERM to the group (``group=False``: to the process
    alone, e.g. ``ranktop launch``, which passes it on to torchrun), then, after ``timeout`` s, SIGKILL to the
    group (whatever is left of it: stuck ranks, workers)."""
    if group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


#: torchrun with 4 ranks on this machine, as the multi-rank tests start it.
TORCHRUN4 = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]


class LaunchedJobs:
    """4-rank jobs (or ``ranks``) started as a user starts them (``ranktop launch -- torchrun ... tests/jobs/SCRIPT``), each read
    once, when every rank trains, with ``ranktop watch --json``; :meth:`close` ends the ones still running."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.procs: list[subprocess.Popen] = []

    def launch(self, name: str, script: str, *args: str, ranks: int = 4, listen_s: float = 6.0) -> dict:
        """The job's ``watch --json`` document after listening ``listen_s`` seconds once every rank trains."""
        env = dict(os.environ, OMP_NUM_THREADS="1")
        torchrun = [*TORCHRUN4[:-1], f"--nproc_per_node={ranks}"]
        command = [RANKTOP, "launch", "--job", name, "--", *torchrun, str(JOBS / script), *args]
        self.procs.append(start_job(command, name, ranks, self.folder, env))
        out = run_cli("watch", name, "--json", "--duration", f"{listen_s:g}", timeout=90)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def log(self, name: str) -> str:
        """What the job printed (its ranks' output and the launcher's)."""
        return (self.folder / f"{name}.log").read_text()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                stop_group(proc, 30, group=False)


def job_ops(doc: dict) -> set[str]:
    """The ops of a ``watch --json`` document's job-wide collectives rows ("all_reduce@tp", "isend@pp", ...)."""
    return {row["op"] for row in doc["collectives"] if row["rank"] == -1}


def brief(row: dict) -> str:
    """What a failed assertion on a ``watch --json`` rank row needs to say why it was judged so (a whole row is
    cut short in pytest's message)."""

    def ms(s: float | None) -> str:  # (a row says None where it has no figure)
        return "-" if s is None else f"{1e3 * s:.1f}"

    phases = " ".join(f"{name} {ms(s)}" for name, s in (row["phases"] or {}).items())
    return (
        f"rank {row['rank']}: {row['status']}, culprit {row['culprit_phase']}, excess {ms(row['excess_s'])} ms, "
        f"score {row['score']}, step {ms(row['step_s'])} ms, steps seen {row['steps_seen']}, "
        f"last arrivals {row['last_arrivals']}, phases (ms) {phases}"
    )


def assert_named_first_and_alone(doc: dict, rank: int, phase: str, text: str) -> dict:
    """``watch --json`` of a job with one slowed rank: it tops the stragglers, slow in ``phase``, every other rank
    is ok, and the verdict names it alone, starting with ``text``. Returns its row."""
    assert doc["stragglers"][0] == rank, doc["stragglers"]
    slow = doc["ranks"][rank]
    assert slow["status"] == "slow" and slow["culprit_phase"] == phase, brief(slow)
    assert [r["status"] for r in doc["ranks"] if r["rank"] != rank] == ["ok"] * (len(doc["ranks"]) - 1), [brief(r) for r in doc["ranks"]]
    verdict = doc["verdict"]
    assert verdict["kind"] == "slow_rank" and verdict["ranks"] == [rank] and verdict["others"] == 0, verdict
    assert verdict["text"].startswith(text), verdict
    return slow
