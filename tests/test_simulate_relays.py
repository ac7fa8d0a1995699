"""A simulated job's relays run in processes apart from its ranks, so 2,048 nodes fit where 20,000 files may be open.

The simulator keeps each node's ranks (4 open files a node) and its relay
processes the node's real ``Relay`` (14 of its own, 2 more per viewer). These
tests count what real processes hold, at 64 nodes, and check that a viewer
finds every rank whichever process relays it, and says it when it cannot.
"""

import json
import os
import resource
import signal
import subprocess
import sys

import pytest

from support import RANKTOP, wait_for
from ranktop.demo.sim_node import SimulatedNode
from ranktop.demo.sim_relays import FDS_PER_RELAY, FDS_PER_VIEWER, processes_for
from ranktop.transport import rendezvous
from ranktop.watch.engine.receiver import FDS_BESIDES as VIEWER_FDS_BESIDES
from ranktop.watch.engine.receiver import FDS_PER_RELAY as VIEWER_FDS_PER_RELAY

NODES = 64
#: Open files any of these processes holds before its sockets: the interpreter's, libzmq's context, pipes.
BASE_FDS = 48


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def simulate(job: str, *args: str, limit: int | None = None) -> subprocess.Popen:
    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return subprocess.Popen(
        [sys.executable, "-m", "ranktop.demo.simulate", "--job", job, *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=cap,
    )  # fmt: skip


@pytest.fixture
def spread_job(rdv):
    """64 ranks on 64 nodes (one rank each: a node's sockets, not its ranks, are what is counted), the relays in 2 processes."""
    job = "sim-spread"
    proc = simulate(job, "--ranks", str(NODES), "--nodes", str(NODES), "--relay-processes", "2")
    try:
        wait_for(lambda: len(rendezvous.read_nodes(job)) == NODES or proc.poll() is not None, 60, "the relays never came up")
        assert proc.poll() is None, proc.stderr.read()
        yield job, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def relay_pids(job: str) -> set[int]:
    return {record.pid for record in rendezvous.read_nodes(job)}


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's parent may be slow to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_each_node_costs_the_simulator_4_files_and_its_relay_process_14_and_a_viewer_sees_every_rank(spread_job):
    from ranktop.watch.session import WatchSession, resolve

    job, sim = spread_job
    relays = relay_pids(job)
    assert len(relays) == 2 and sim.pid not in relays  # the relays' own processes wrote the records, as real relays do
    with WatchSession(resolve([job], os.environ["RANKTOP_DIR"])) as session:  # one viewer attached while counting
        wait_for(lambda: session.snapshot().connected == NODES, 30, "the viewer never saw every rank")
        assert open_files(sim.pid) <= BASE_FDS + SimulatedNode.FDS * NODES
        for pid in relays:
            assert open_files(pid) <= BASE_FDS + (FDS_PER_RELAY + FDS_PER_VIEWER) * NODES // 2


@pytest.mark.slow
def test_a_killed_simulator_takes_its_relays_and_their_records_with_it(spread_job):
    job, sim = spread_job
    relays = relay_pids(job)
    os.kill(sim.pid, signal.SIGKILL)  # no goodbye: the relay processes see their standard input close
    sim.wait(10)
    wait_for(lambda: not rendezvous.read_nodes(job), 30, "the relays' records outlived the simulator")
    wait_for(lambda: not any(running(pid) for pid in relays), 30, "a relay process outlived the simulator")


@pytest.mark.slow
def test_a_viewer_short_of_open_files_watches_the_relays_that_fit_and_says_so_in_one_line(spread_job):
    job, _ = spread_job
    fit = 10
    limit = VIEWER_FDS_BESIDES + VIEWER_FDS_PER_RELAY * fit

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    out = subprocess.run([RANKTOP, "watch", job, "--json", "--duration", "4"], capture_output=True, text=True, timeout=60, preexec_fn=cap)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["connected"] == fit  # a rank a node
    short = [e for e in doc["errors"] if "open files" in e]
    assert short == [
        f"this viewer watches only {fit} relays: each takes {VIEWER_FDS_PER_RELAY} open files and this machine allows {limit} "
        "(`ulimit -Hn`); raise the hard limit to watch every node"
    ]


def test_a_simulator_its_machine_cannot_hold_stops_with_one_line(rdv):
    proc = simulate("sim-cramped", "--ranks", "512", limit=300)  # 64 nodes' ranks need 256 + 4 x 64 open files
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.strip() == ("ranktop: error: 64 simulated nodes need 512 open files in the simulator's process, and this machine "
                           "allows 300 (ulimit -Hn): simulate fewer nodes (--nodes), or raise the hard limit")  # fmt: skip
    assert not rendezvous.read_nodes("sim-cramped")


def test_relays_take_as_few_processes_as_the_hard_limit_allows():
    assert processes_for(512, 20_000) == 1  # 4,096 ranks
    assert processes_for(2048, 20_000) == 3  # 16,384 ranks: some 680 relays a process
    assert processes_for(2048, 1_000_000) == 1
    assert processes_for(2048, None) == 1
    assert processes_for(3, 100) == 3  # below one relay's room: one relay a process, however cramped


def test_a_simulator_started_in_a_process_that_goes_on_leaves_its_environment_as_it_found_it(rdv, monkeypatch):
    """The simulated nodes' relays bind loopback on random ports, said in their processes' environment only: a
    simulator that set RANKTOP_PORT=0 in its own had every SLURM job a later test submitted from the same process
    bind random ports instead of the port convention's."""
    from ranktop.demo.simulate import Scenario, Simulator

    for name in ("RANKTOP_PORT", "RANKTOP_BIND"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    sim = Simulator(Scenario(job="sim-env", ranks=16, nodes=2), os.environ["RANKTOP_DIR"]).start()
    try:
        records = rendezvous.read_nodes("sim-env")
        assert len(records) == 2 and all(r.telemetry.startswith("tcp://127.0.0.1:") for r in records)
        assert len({r.telemetry for r in records}) == 2
    finally:
        sim.close()
    assert dict(os.environ) == before
