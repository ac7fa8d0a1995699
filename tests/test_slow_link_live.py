"""A real slow link: three nodes in network namespaces, one node's link capped, a DDP job across them.

Each node is a network namespace of its own (tests/netns.py) running
``ranktop launch -- torchrun --nnodes 3 --node_rank i`` with RANKTOP_HOST its
name, RANKTOP_BIND its address and GLOO_SOCKET_IFNAME its interface, so the
job's all-reduces cross the veths and the bridge as they would cross a
cluster's network; ``tc``'s token bucket caps node-c's. The viewer runs in
the bridge's namespace (``ranktop watch --json``). The same job with no cap
is the control, and a job slowed by one rank's own work names that rank and
no link. Needs root and ``ip netns`` (skipped with the reason
otherwise); every namespace and link it made is gone at the end.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from netns import Network, unavailable
from support import wait_for

from ranktop.transport import rendezvous

pytestmark = pytest.mark.slow

HOSTS = ("node-a", "node-b", "node-c")
#: node-c's link: far below what the job's all-reduces move at full speed (about 15 MB/s a node here).
CAP = "24mbit"
#: How long the viewer watches the job before it answers.
WATCH_S = 15
TRAIN = "ranktop.demo.train"


@pytest.fixture(scope="module")
def namespaces_work():
    reason = unavailable()
    if reason:
        pytest.skip(reason)


def run_job(tmp_path, job: str, cap: dict[int, str], *train_args: str) -> dict:
    """The 3-node job on a network with ``cap`` (the demo given ``train_args`` too); the viewer's ``--json`` document
    once it watched WATCH_S."""
    with Network(len(HOSTS), cap) as net:
        master = net.addresses[0]
        for i, host in enumerate(HOSTS):
            env = dict(os.environ, RANKTOP_HOST=host, RANKTOP_BIND=net.addresses[i], GLOO_SOCKET_IFNAME=net.interfaces[i],
                       OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")  # fmt: skip
            env.pop("RANKTOP_JOB", None)
            cmd = [sys.executable, "-m", "ranktop.cli", "launch", "--job", job, "--",
                   sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(HOSTS)), "--node_rank", str(i),
                   "--nproc_per_node", "1", "--master_addr", master, "--master_port", "29517",
                   "-m", TRAIN, "--steps", "1000000", "--log-every", "1000000", *train_args]  # fmt: skip
            net.popen(i, cmd, env, tmp_path / f"{job}-{host}.log")
        wait_for(lambda: len([n for n in rendezvous.read_nodes(job) if n.links]) == len(HOSTS), 120,
                 f"the 3 nodes' relays never all wrote their records: {_logs(tmp_path, job)}")  # fmt: skip
        env = dict(os.environ)
        env.pop("RANKTOP_JOB", None)
        viewer = net.popen(None, [sys.executable, "-m", "ranktop.cli", "watch", job, "--json", "--duration", str(WATCH_S),
                                  "--wait", "60"], env, tmp_path / f"{job}-viewer.json")  # fmt: skip
        viewer.wait(WATCH_S + 120)
        text = (tmp_path / f"{job}-viewer.json").read_text()
        assert viewer.returncode == 0, text[-3000:] + _logs(tmp_path, job)
        doc = json.loads(text[text.index("{") :])
    assert not net.pids_inside(), "a process of the job outlived its namespaces"
    return doc


def _logs(tmp_path, job: str) -> str:
    return "".join(f"\n--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(tmp_path.glob(f"{job}-node-*.log")))


def test_a_node_whose_link_is_capped_is_named_slow_link_and_none_of_its_ranks_slow(namespaces_work, rdv, tmp_path):
    doc = run_job(tmp_path, "capped", {2: CAP})
    verdict = doc["verdict"]
    assert verdict["kind"] == "slow_link", (verdict, doc["links"])
    assert verdict["host"] == "node-c" and verdict["ranks"] == []
    assert verdict["loss"] >= 0.05 and verdict["excess_s"] > 0
    assert "node-c's network is slow" in verdict["text"]
    assert [s["host"] for s in doc["slow_links"]] == ["node-c"]
    slow = doc["slow_links"][0]
    assert slow["rate_bps"] * 3 <= slow["expected_bps"]
    # Its ranks are not blamed for it: nobody's own work is slow.
    assert all(r["status"] != "slow" for r in doc["ranks"]), [(r["rank"], r["host"], r["status"]) for r in doc["ranks"]]
    measured = {(link["src"], link["dst"]) for link in doc["links"]}
    assert {(a, b) for a in HOSTS for b in HOSTS if a != b} <= measured  # every node x node link measured


def test_the_same_job_with_no_cap_names_no_link(namespaces_work, rdv, tmp_path):
    doc = run_job(tmp_path, "uncapped", {})
    assert doc["verdict"]["kind"] != "slow_link", doc["verdict"]
    assert doc["slow_links"] == []
    assert len(doc["links"]) == 6  # measured all the same


def test_a_job_slowed_by_a_ranks_own_work_names_the_rank_and_no_link(namespaces_work, rdv, tmp_path):
    doc = run_job(tmp_path, "slowrank", {}, "--slow-rank", "2", "--slow-ms", "60", "--slow-phase", "forward")
    assert doc["verdict"]["kind"] in ("slow_rank", "slow_node"), doc["verdict"]
    assert doc["verdict"]["host"] == "node-c"
    assert doc["slow_links"] == []
