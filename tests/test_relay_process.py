"""The node's relay as a process of its own: claimed once per job and node, kept alive by the ranks, gone with them.

Real processes throughout: relays started as ``python -m ranktop.relay.process``,
torch-free ranks with the real probe (tests/jobs/sleepy_rank.py), the demo under
torchrun, and an ``mp.spawn`` job under ``ranktop launch``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import JOBS, run_cli, wait_for

from ranktop.transport.identity import detect
from ranktop.relay.claim import Claim, process_start
from ranktop.watch.session import WatchSession, resolve
from ranktop.transport import rendezvous
from ranktop.transport.ipc import ipc_endpoints, socket_file

HOST = socket.gethostname()
RELAY = [sys.executable, "-m", "ranktop.relay.process"]


def relay_pids(job: str) -> list[int]:
    """The running relay processes of ``job`` on this machine (zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ranktop.relay.process" in argv and job.encode() in argv and process_start(int(entry.name)) is not None:
            found.append(int(entry.name))
    return sorted(found)


def live_record(job: str):
    return next((n for n in rendezvous.read_nodes(job) if not n.is_stale()), None)


# -- who the process is ----------------------------------------------------------------------


def test_local_rank_comes_from_LOCAL_RANK_whatever_else_is_missing():
    # Lightning's second process: LOCAL_RANK and WORLD_SIZE, no RANK
    assert detect("j", env={"LOCAL_RANK": "1", "WORLD_SIZE": "2"}).local_rank == 1
    assert detect("j", env={}).local_rank == 0
    torchrun = detect("j", env={"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})
    assert (torchrun.rank, torchrun.local_rank, torchrun.local_world, torchrun.launcher) == (5, 1, 4, "torchrun")
    srun = detect("j", env={"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4"})
    assert (srun.rank, srun.local_rank, srun.launcher) == (3, 1, "slurm")


@pytest.mark.slow
def test_under_torch_distributed_the_local_rank_is_LOCAL_RANK_not_zero(tmp_path):
    code = (
        "import torch.distributed as dist\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path}/store', rank=0, world_size=1)\n"
        "from ranktop.transport.identity import detect\n"
        "i = detect('j'); print(i.launcher, i.rank, i.local_rank)\n"
        "dist.destroy_process_group()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "SLURM_PROCID", "RANKTOP_AUTO")}
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, LOCAL_RANK="1"), capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["torch.distributed", "0", "1"], out.stderr
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["torch.distributed", "0", "0"], out.stderr  # mp.spawn: the rank itself (no GPU here)


# -- the claim -------------------------------------------------------------------------------


@pytest.mark.slow
def test_four_relays_started_at_once_leave_exactly_one_running(rdv):
    claim = Claim("claim-4", HOST)
    claim.register(os.getpid(), 0)  # this test stands for the job's rank
    procs = [subprocess.Popen([*RELAY, "--job", "claim-4", "--host", HOST]) for _ in range(4)]
    try:
        wait_for(lambda: sum(p.poll() is not None for p in procs) == 3 and live_record("claim-4"), 30, "the relays never settled")
        (winner,) = [p for p in procs if p.poll() is None]
        assert [p.returncode for p in procs if p is not winner] == [0, 0, 0]  # the losers bound nothing and left
        assert [n.pid for n in rendezvous.read_nodes("claim-4")] == [winner.pid] == [claim.read_info().pid]
        assert relay_pids("claim-4") == [winner.pid]

        claim.unregister(os.getpid())  # the job's last rank leaves: the relay goes, its record with it
        winner.wait(5)
        assert rendezvous.read_nodes("claim-4") == [] and claim.read_info() is None and not claim.relay_running()
    finally:
        claim.unregister(os.getpid())
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_four_ranks_started_at_once_get_one_relay_apart_from_their_session_and_pipes(launch_ranks):
    ranks = launch_ranks("claim-ranks", 4)
    claim = Claim("claim-ranks", HOST)
    wait_for(lambda: len(claim.live_ranks()) == 4, 20, "the ranks never all registered")
    (relay,) = relay_pids("claim-ranks")
    assert live_record("claim-ranks").pid == relay == claim.read_info().pid
    assert sorted(claim.live_ranks().values()) == [0, 1, 2, 3]
    # a session of its own: a Ctrl-C to the job's process group does not reach it
    assert os.getsid(relay) == relay and all(os.getsid(p.pid) != relay for p in ranks.procs)
    # none of the ranks' pipes (each rank's stderr is a pipe here): nothing waiting on them waits on the relay
    fds = {fd: os.readlink(f"/proc/{relay}/fd/{fd}") for fd in os.listdir(f"/proc/{relay}/fd")}
    assert fds["0"] == fds["1"] == "/dev/null" and fds["2"] == str(claim.log_path)
    assert not [target for target in fds.values() if target.startswith("pipe:")]


def threads(pid: int) -> dict[int, tuple[str, int]]:
    """A process's OS threads: tid -> (the name ``top -H`` shows, nice value)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found[int(task.name)] = ((task / "comm").read_text().strip(), os.getpriority(os.PRIO_PROCESS, int(task.name)))
        except OSError:
            continue  # ended meanwhile
    return found


def test_ranktops_threads_and_relay_are_named_for_the_os_and_keep_their_priority(launch_ranks):
    # Named, so that top -H tells them from the job's threads; not niced, so that a saturated node still hears them.
    ranks = launch_ranks("named-threads", 2)
    claim = Claim("named-threads", HOST)
    wait_for(lambda: len(claim.live_ranks()) == 2, 20, "the ranks never all registered")
    for proc in ranks.procs:
        wait_for(lambda: "ranktop-probe" in [name for name, _ in threads(proc.pid).values()], 10, "no ranktop-probe thread")
        named = threads(proc.pid)
        assert named[proc.pid][0] != "ranktop-probe"  # the training thread keeps the process's name
        assert [name for name, _ in named.values()].count("ranktop-probe") == 1
        assert {nice for _, nice in named.values()} == {0}
    (relay,) = relay_pids("named-threads")
    named = threads(relay)
    assert named[relay][0] == "ranktop-relay"
    assert {name for name, _ in named.values() if not name.startswith("ZMQbg")} == {"ranktop-relay"}  # inherited
    assert {nice for _, nice in named.values()} == {0}


# -- kept alive, and gone with the ranks -----------------------------------------------------------


@pytest.mark.slow
def test_a_killed_relay_is_started_again_and_the_ranks_telemetry_comes_back(launch_ranks):
    launch_ranks("relay-kill", 2)
    with WatchSession(resolve(["relay-kill"])) as session:
        wait_for(lambda: len(session.snapshot().ranks) == 2, 20, "the ranks never appeared")
        old = live_record("relay-kill")
        os.kill(old.pid, signal.SIGKILL)
        killed = time.monotonic()
        new = wait_for(lambda: (r := live_record("relay-kill")) and r.pid != old.pid and r, 10, "no rank started the relay again")
        restarted_s = time.monotonic() - killed
        assert relay_pids("relay-kill") == [new.pid] and new.telemetry != old.telemetry  # a random port this time
        seen = {r.rank: r.steps_seen for r in session.snapshot().ranks}
        wait_for(
            lambda: all(r.steps_seen > seen[r.rank] + 20 and r.status == "ok" for r in session.snapshot().ranks),
            15,
            "the ranks' telemetry never came back through the new relay",
        )
    print(f"relay restarted {restarted_s:.2f} s after kill -9")
    assert restarted_s < 2 * 2.0 + 3  # a rank looks every 2 s; a start takes well under a second


@pytest.mark.slow
def test_the_relay_ends_when_its_ranks_are_killed(launch_ranks):
    ranks = launch_ranks("relay-orphan", 3)
    wait_for(lambda: len(Claim("relay-orphan", HOST).live_ranks()) == 3, 20, "the ranks never all registered")
    relay = live_record("relay-orphan").pid
    for p in ranks.procs:
        p.kill()  # kill -9: no rank unregisters
    for p in ranks.procs:
        p.wait(10)
    wait_for(lambda: process_start(relay) is None, 5, "the relay outlived its ranks")
    assert rendezvous.read_nodes("relay-orphan") == [] and relay_pids("relay-orphan") == []
    assert not list(Claim("relay-orphan", HOST).folder.glob("rank-*"))
    sockets = [socket_file(url) for url in ipc_endpoints("relay-orphan", HOST)]
    assert not [path for path in sockets if path.exists()]  # ZeroMQ leaves them; the relay takes them away


#: A launcher like torchrun's agent: two ranks in its own process group, waited for.
LAUNCHER = (
    "import os, signal, subprocess, sys\n"
    # as a launcher in a terminal has it: a test run in the background starts with Ctrl-C ignored, and its ranks would too
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "ranks = [subprocess.Popen([sys.executable, sys.argv[1]], env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r))) for r in (0, 1)]\n"
    "try:\n"
    "    [p.wait() for p in ranks]\n"
    "except KeyboardInterrupt:\n"
    "    [p.wait() for p in ranks]\n"
)


@pytest.mark.slow
def test_a_ctrl_c_to_the_jobs_process_group_ends_the_ranks_and_then_the_relay(rdv, tmp_path):
    env = dict(os.environ, RANKTOP_JOB="relay-ctrl-c", WORLD_SIZE="2")
    job = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(JOBS / "sleepy_rank.py")],
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: len(Claim("relay-ctrl-c", HOST).live_ranks()) == 2 and live_record("relay-ctrl-c"), 30, "no relay")
        relay = live_record("relay-ctrl-c").pid
        assert os.getpgid(relay) != job.pid
        os.killpg(job.pid, signal.SIGINT)  # what a Ctrl-C in the job's terminal does
        job.wait(20)
        wait_for(lambda: process_start(relay) is None, 5, "the relay outlived its ranks")
        assert rendezvous.read_nodes("relay-ctrl-c") == []
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


# -- what it changes for the user --------------------------------------------------------------


@pytest.mark.slow
def test_a_frozen_local_rank_0_leaves_ranks_1_to_3_visible_waiting_for_it(torchrun):
    torchrun("ddp-frozen", 4)
    with WatchSession(resolve(["ddp-frozen"])) as session:
        wait_for(lambda: len(rs := session.snapshot().ranks) == 4 and all(r.local_rank >= 0 for r in rs), 20, "no hello from every rank")
        rank0 = next(r for r in session.snapshot().ranks if r.local_rank == 0)
        assert rank0.rank == 0
        os.kill(rank0.pid, signal.SIGSTOP)
        try:
            frozen = time.monotonic()
            snap = wait_for(
                lambda: (s := session.snapshot()).waiting_for == [0] and [r.status for r in s.ranks] == ["silent"] + ["stalled"] * 3 and s,
                10,
                "ranks 1-3 were never shown waiting for rank 0",
            )
            shown_s = time.monotonic() - frozen
            assert "waiting for rank 0" in snap.diagnosis, snap.diagnosis
            out = run_cli("watch", "ddp-frozen", "--json", "--duration", "4", timeout=60)  # a viewer that comes later
            assert out.returncode == 0, out.stderr
            doc = json.loads(out.stdout)
            assert [r["rank"] for r in doc["ranks"] if r["status"] == "stalled"] == [1, 2, 3], doc["ranks"]
            assert doc["waiting_for"] == [0], doc["diagnosis"]
        finally:
            os.kill(rank0.pid, signal.SIGCONT)
    print(f"ranks 1-3 shown waiting for the frozen rank 0 after {shown_s:.1f} s")


@pytest.mark.slow
def test_an_mp_spawn_job_under_ranktop_launch_shows_both_ranks_through_one_relay(launched):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launched("spawned", sys.executable, str(JOBS / "spawned_ranks.py"), "--port", str(port))
    out = run_cli("watch", "spawned", "--json", "--duration", "3", timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["world_size"] == 2
    assert [(r["rank"], r["local_rank"], r["status"]) for r in doc["ranks"]] == [(0, 0, "ok"), (1, 1, "ok")]
    assert len(relay_pids("spawned")) == 1 and len(rendezvous.read_nodes("spawned")) == 1


@pytest.mark.slow
def test_a_lightning_ddp_job_under_ranktop_launch_shows_both_ranks_through_one_relay(launched):
    """Lightning's second process has LOCAL_RANK=1 and no RANK; once, both processes hosted a relay on one IPC path.

    Lightning is not among ranktop's dependencies: this runs where it is installed (`pip install lightning`).
    """
    pytest.importorskip("lightning")
    launched("lightning", sys.executable, str(JOBS / "lightning_ddp.py"), "--seconds", "120")
    out = run_cli("watch", "lightning", "--json", "--duration", "3", timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [(r["rank"], r["local_rank"], r["status"]) for r in doc["ranks"]] == [(0, 0, "ok"), (1, 1, "ok")]
    assert len(relay_pids("lightning")) == 1 and len(rendezvous.read_nodes("lightning")) == 1
