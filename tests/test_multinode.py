"""One TUI, several nodes: each "node" is a group of real rank processes with a relay of its own.

The nodes share this machine under fake host names (RANKTOP_HOST=node-a, node-b), each
relay bound to loopback on a port of its own; nothing leaves the machine.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from support import JOBS, run_cli, wait_for

from ranktop.watch.session import WatchSession, resolve
from ranktop.tui.panes.status import status_text
from ranktop.transport import rendezvous
from ranktop.watch.model.json_doc import document

pytestmark = pytest.mark.slow

JOB = "two-nodes"


class Node:
    """The ranks of one node; the first of them to need it starts the node's relay process."""

    def __init__(self, host: str, first_rank: int, tmp_path, per_node: int = 2, world: int = 4, **extra_env: str):
        self.host = host
        self.procs = []
        self.said: list[str] = []  # the ranks' stderr, read as it comes (a rank passes on its relay's start-up words)
        for local in range(per_node):
            env = dict(
                os.environ,
                RANK=str(first_rank + local),
                LOCAL_RANK=str(local),
                WORLD_SIZE=str(world),
                LOCAL_WORLD_SIZE=str(per_node),
                RANKTOP_JOB=JOB,
                RANKTOP_HOST=host,
                RANKTOP_BIND="127.0.0.1",
                **extra_env,
            )
            proc = subprocess.Popen(
                [sys.executable, str(JOBS / "sleepy_rank.py")], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
            )
            threading.Thread(target=lambda p=proc: self.said.extend(p.stderr), daemon=True).start()
            self.procs.append(proc)

    def record(self):
        return next((n for n in rendezvous.read_nodes(JOB) if n.host == self.host and not n.is_stale()), None)

    def kill(self) -> None:
        """The node dies at once, its relay with it: nobody gets to clean up, its record stays behind."""
        relay = self.record().pid
        for p in self.procs:
            p.send_signal(signal.SIGSTOP)  # no rank may start the relay again in between
        os.kill(relay, signal.SIGKILL)
        for p in self.procs:
            p.send_signal(signal.SIGKILL)
            p.wait(10)
        wait_for(lambda: self.record() is None, 10, "the killed relay's record never went stale")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)


@pytest.fixture
def nodes(rdv, tmp_path):
    started = []

    def start(host, first_rank, **env):
        node = Node(host, first_rank, tmp_path, **env)
        started.append(node)
        wait_for(node.record, 20, f"{host} never wrote its record")
        return node

    yield start
    for node in started:
        node.stop()


def endpoint_of(snapshot, host):
    return next(e for e in snapshot.endpoints if e.host == host)


def test_a_node_that_dies_is_lost_with_its_ranks_and_comes_back_when_it_returns(nodes, tmp_path):
    nodes("node-a", 0)
    b = nodes("node-b", 2)
    with WatchSession(resolve([JOB]), silent_after_s=1.5) as session:
        wait_for(
            lambda: len(session.snapshot().ranks) == 4 and all(e.state == "connected" for e in session.snapshot().endpoints),
            20,
            "never saw both nodes",
        )
        first_url = endpoint_of(session.snapshot(), "node-b").url

        b.kill()
        snap = wait_for(lambda: (s := session.snapshot()) and endpoint_of(s, "node-b").state == "lost" and s, 10, "node-b never shown lost")
        assert endpoint_of(snap, "node-b").ranks == (2, 3) and endpoint_of(snap, "node-a").state == "connected"
        assert {r.rank: r.status for r in snap.ranks} == {0: "ok", 1: "ok", 2: "silent", 3: "silent"}
        assert f"lost node-b (ranks 2-3) {first_url}" in status_text(snap).plain
        lost = [e for e in json.loads(json.dumps(document(snap)))["endpoints"] if e["state"] == "lost"]
        assert lost == [{"url": first_url, "host": "node-b", "state": "lost", "quiet_s": lost[0]["quiet_s"], "ranks": [2, 3]}]

        # A fresh TUI sees the dead node's record for what it is and never dials it.
        doc = json.loads(run_cli("watch", JOB, "--json", "--duration", "2").stdout)
        assert [e["host"] for e in doc["endpoints"]] == ["node-a"] and [r["rank"] for r in doc["ranks"]] == [0, 1]

        nodes("node-b", 2)  # the node is back, its relay on a new port
        snap = wait_for(
            lambda: (s := session.snapshot()) and all(r.status == "ok" for r in s.ranks) and len(s.endpoints) == 2 and s,
            20,
            "node-b never came back",
        )
        back = endpoint_of(snap, "node-b")
        assert back.url != first_url and back.state == "connected" and back.ranks == (2, 3)
        assert "lost" not in status_text(snap).plain


def test_records_of_dead_relays_are_pruned_and_the_live_ones_kept(nodes):
    a = nodes("node-a", 0)
    b = nodes("node-b", 2)
    b.kill()
    out = run_cli("jobs", "--prune")
    assert out.returncode == 0 and out.stdout.splitlines()[0] == f"removed {rendezvous.job_dir(JOB) / 'node-node-b.json'}"
    assert [n.host for n in rendezvous.read_nodes(JOB)] == ["node-a"]
    a.kill()
    run_cli("jobs", "--prune")
    assert rendezvous.read_nodes(JOB) == []


def test_a_low_rate_for_a_slow_link_is_asked_of_every_rank_on_every_node(nodes):
    nodes("node-a", 0)
    nodes("node-b", 2)
    out = run_cli("watch", JOB, "--rate", "1", "--refresh", "0.2", "--json", "--duration", "4")
    assert out.returncode == 0, out.stderr
    answers = {r["rank"]: r["result"] for r in json.loads(out.stdout)["replies"] if r["cmd"] == "set_rate"}
    assert answers == {rank: {"rate_hz": 1.0} for rank in range(4)}


def test_a_taken_port_makes_the_relay_fall_back_to_a_random_one_and_say_so(nodes):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = nodes("node-a", 0, RANKTOP_PORT=str(port))
        assert not node.record().telemetry.endswith(f":{port}")
        # The rank that started the relay passes on what it said: at once, or (a relay slower to come up than the
        # rank waits, on a loaded machine) at its next check, which may come after the record is written.
        warning = f"relay port 127.0.0.1:{port} is not free"
        wait_for(lambda: warning in "".join(node.said), 15, "no rank passed on the relay's warning")
        node.stop()
        assert "".join(node.said).count(warning) == 1


def test_jobs_names_the_slurm_job_a_job_of_another_name_runs_in(nodes):
    nodes("node-a", 0, SLURM_JOB_ID="4711", RANKTOP_PORT="0")
    assert run_cli("jobs").stdout == f"{JOB}\trunning\t1 node(s): node-a\tSLURM job 4711\n"
