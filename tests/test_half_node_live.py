"""Half the job slow on a real two-node torchrun/gloo job under ``ranktop launch`` (issue 46, item 2): two torchrun
agents on this machine, one per fake node (``RANKTOP_HOST`` node-a and node-b, each with a relay of its own), 4 ranks
each, every rank of node-b 8 ms longer in forward. Half of every rank's peers are slow, so their median is no
healthy rank; the healthy node is the reference (watch/analysis/node_groups.py) and the verdict names node-b with its
true size."""

import json
import os
import socket
import subprocess
import sys

import pytest
from support import JOBS, RANKTOP, brief, run_cli, stop_group, wait_for

from ranktop.transport import rendezvous
from ranktop.watch.session import WatchSession, resolve

pytestmark = pytest.mark.slow

JOB = "half-slow"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def two_nodes(rdv, tmp_path):
    port = _free_port()
    procs = []
    for node_rank, host in enumerate(("node-a", "node-b")):
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node_rank}",
                    "--nproc_per_node=4", "--master_addr=127.0.0.1", f"--master_port={port}"]  # fmt: skip
        command = [RANKTOP, "launch", "--job", JOB, "--", *torchrun, str(JOBS / "sleepy_rank.py"), "--gloo",
                   "--slow-ranks", "4,5,6,7", "--slow-phase", "forward", "--slow-ms", "8"]  # fmt: skip
        env = dict(os.environ, OMP_NUM_THREADS="1", RANKTOP_HOST=host, RANKTOP_BIND="127.0.0.1")
        log = open(tmp_path / f"{host}.log", "wb")
        procs.append(subprocess.Popen(command, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    try:
        wait_for(lambda: len(rendezvous.read_nodes(JOB)) == 2 or any(p.poll() is not None for p in procs), 120,
                 "the two nodes never started their relays")  # fmt: skip
        assert all(p.poll() is None for p in procs), [(tmp_path / f"{h}.log").read_text()[-2000:] for h in ("node-a", "node-b")]
        with WatchSession(resolve([JOB])) as session:
            wait_for(lambda: (rs := session.snapshot().ranks) and len(rs) == 8 and all(r.steps_seen >= 5 for r in rs),
                     150, "the 8 ranks never started training")  # fmt: skip
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_group(proc, 30, group=False)


def test_one_node_of_two_slow_is_named_slow_node_with_its_true_size(two_nodes):
    out = run_cli("watch", JOB, "--json", "--duration", "10", timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    verdict, rows = doc["verdict"], [brief(r) for r in doc["ranks"]]
    assert {e["host"] for e in doc["endpoints"]} == {"node-a", "node-b"}, doc["endpoints"]
    assert verdict["kind"] == "slow_node" and verdict["host"] == "node-b", (verdict["text"], rows)
    assert verdict["excess_s"] == pytest.approx(0.008, rel=0.35), (verdict, rows)
    assert "node-b" in verdict["text"], verdict["text"]
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    assert all(by_rank[r]["status"] == "ok" for r in range(4)), rows  # the healthy node is nobody's straggler
