"""A job that restarts: torchrun ``--max-restarts`` brings its ranks back as new processes after one is killed.

The viewer, the exporter and the recorder are all started before the job; the
job is torchrun running ranks with the real probe (tests/jobs/sleepy_rank.py).
What must hold after the restart:
the restart is said once, with its time; both ranks are their new processes,
stepping, nothing silent or stale; the exporter's series go on with a restart
counter; the recording goes on.

The ranks are torch-free: on this 2-core machine under load, the demo's gloo
mesh of a restarted attempt often fails ("Connection refused" between the new
ranks: torchrun then restarts again, or the new ranks hang in init), which
tests torch, not ranktop. The viewer's count is held to torchrun's own (its log
says each attempt that failed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import JOBS, RANKTOP, stop_group, wait_for

from ranktop.tui.panes.header import life_line, ordinal
from ranktop.watch.offline.recording import read
from ranktop.watch.session import WatchSession, resolve_waiting

pytestmark = pytest.mark.slow

RANK = str(JOBS / "sleepy_rank.py")


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return {f.name: f for f in text_string_to_metric_families(resp.read().decode())}


def child_of(pid: int, ancestor: int) -> bool:
    """``pid`` is a process below ``ancestor`` (by /proc's parent links)."""
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
    return False


def test_a_killed_rank_under_torchrun_max_restarts_is_a_restart_with_nothing_stale(rdv, tmp_path):
    job = "restarting"
    session = WatchSession(resolve_waiting([job], follow=True)).start()
    export = subprocess.Popen([RANKTOP, "export", job, "--prometheus", "0"], stderr=subprocess.PIPE, text=True)
    record = subprocess.Popen([RANKTOP, "record", job, str(tmp_path / "r.rec")], stderr=subprocess.DEVNULL)
    export.stderr.readline()  # waiting for the job
    url = export.stderr.readline().split(" at ", 1)[1].split()[0]
    env = dict(os.environ, RANKTOP_JOB=job, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "--max-restarts=1",
        "--monitor-interval=0.5",
        RANK,
    ]
    log = open(tmp_path / "torchrun.log", "wb")
    torchrun = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:

        def training(pids_not=()):
            snap = session.snapshot()
            rows = snap.ranks
            # hellos heard (pid and local rank known: -1 before), steps coming, and not the processes of before
            ok = len(rows) == 2 and all(
                r.local_rank >= 0 and r.pid > 1 and r.steps_seen >= 5 and r.status != "silent" and r.pid not in pids_not for r in rows
            )
            return snap if ok else None

        first = wait_for(training, 120, "the job never trained")
        assert first.restarts == 0 and first.state == "running"
        old = {r.rank: r.pid for r in first.ranks}
        assert child_of(old[1], torchrun.pid)  # never signal a process that is not this job's rank
        os.kill(old[1], signal.SIGKILL)  # rank 1 dies; torchrun stops rank 0 and starts both again

        try:
            after = wait_for(lambda: training(set(old.values())), 180, "the ranks never came back as new processes")
        except AssertionError:
            snap = session.snapshot()
            rows = [(r.rank, r.pid, r.steps_seen, r.status) for r in snap.ranks]
            raise AssertionError(
                f"the ranks never came back as new processes: {rows}, {snap.endpoints}, {snap.errors}\n"
                + (tmp_path / "torchrun.log").read_text()[-2000:]
            ) from None
        failures = (tmp_path / "torchrun.log").read_text().count("failed (exitcode")  # torchrun's word: attempts that failed
        assert after.restarts == failures >= 1 and after.not_back == [] and after.state == "running"
        assert {r.rank for r in after.ranks} == {0, 1} and all(r.status != "silent" for r in after.ranks)
        assert [e.state for e in after.endpoints] == ["connected"], after.endpoints  # the node's relay, no stale one
        line = life_line(after.state, after.ended_at, after.restarts, after.restarted_at, after.not_back)
        assert line.startswith("restarted at ") and line.endswith(f"({ordinal(after.restarts)} restart)"), line
        assert time.time() - 180 < after.restarted_at <= time.time()
        assert all(r.steps_seen < r.step + 200 for r in after.ranks)  # windows started afresh: new steps only

        def exported():
            families = scrape(url)
            steps = {s.labels["rank"] for s in families["ranktop_rank_step_seconds"].samples}
            restarts = families["ranktop_job_restarts"].samples[0].value
            return steps == {"0", "1"} and restarts == after.restarts and families["ranktop_job_up"].samples[0].value == 1

        wait_for(exported, 30, "the exporter's series did not go on with the restart counter")
        assert record.poll() is None  # the recording goes on through the restart
    finally:
        stop_group(torchrun, 30)
        session.close()
        export.terminate()
        export.wait(10)
        if record.poll() is None:
            record.terminate()
        record.wait(20)
    recording = read(tmp_path / "r.rec")
    pids = set()
    for entry in recording.entries:
        if entry.frames and entry.frames[0] == b"hello":
            import msgpack

            pids.add(msgpack.unpackb(entry.frames[1])["pid"])
    assert len(pids) >= 4  # both generations' processes, in one recording
    report = subprocess.run([RANKTOP, "report", str(tmp_path / "r.rec")], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert f"restarted {after.restarts} time(s) (ranks back as new processes), last at " in report.stdout, report.stdout[:800]


def test_a_simulated_job_requeued_comes_back_as_one_restart_of_all_its_nodes(rdv, tmp_path):
    """The simulator (demo/simulate.py: real relays and rendezvous, 32 ranks on 4 nodes) run twice under one job
    name, as a SLURM requeue runs a job again: every rank back as a new process, on every node's new relay."""
    job = "requeued"
    session = WatchSession(resolve_waiting([job], follow=True)).start()
    sim = [sys.executable, "-m", "ranktop.demo.simulate", "--ranks", "32", "--nodes", "4", "--job", job]
    first = subprocess.Popen(sim, stderr=subprocess.DEVNULL)
    try:

        def all_heard(pid):
            snap = session.snapshot()
            ok = len(snap.ranks) == 32 and all(r.pid == pid and r.steps_seen and r.status != "silent" for r in snap.ranks)
            return snap if ok else None

        before = wait_for(lambda: all_heard(first.pid), 90, "the first run was never heard whole")
        assert before.restarts == 0
        first.send_signal(signal.SIGTERM)
        first.wait(30)
        second = subprocess.Popen(sim, stderr=subprocess.DEVNULL)
        try:
            after = wait_for(lambda: all_heard(second.pid), 90, "the requeued run was never heard whole")
            assert after.restarts == 1 and after.not_back == [] and after.state == "running"
            assert len(after.endpoints) == 4 and all(e.state == "connected" for e in after.endpoints), after.endpoints
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
        session.close()
