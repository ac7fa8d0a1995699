"""What the relays' link probes cost the job's network: bytes a second per node, against 0.1% of a 1 Gbit/s link.

relay/links.py paces its probes to at most ``BUDGET_BPS`` (100,000 bytes a
second, answers included, as it counts them); this measures what actually
leaves each node. N relays of one job (no ranks, no viewer: nothing else
sends) run for a while, each in a process of its own, and for each node:

- ``counted``: what the prober says it sent (its frames, plus 96 bytes each
  for ZeroMQ's framing, CURVE's box and the TCP/IP headers);
- ``on the wire`` (as root, with ``--netns``): the bytes its interface sent,
  each node a network namespace of its own on a bridge (tests/netns.py), TCP/IP
  headers, acknowledgements and ARP included: the real cost.

    python benchmarks/link_probe_cost.py                   # 3 nodes, 20 s, loopback
    python benchmarks/link_probe_cost.py --nodes 8 --netns # as root: every byte on each node's interface

The target: under 125,000 bytes a second per node (0.1% of 1 Gbit/s). With
more nodes each relay probes its peers in turn at the same pace, so its cost
does not grow with the job; the answers it gives grow with the peers that
probe it, bounded by ``ANSWERS_PER_S``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ranktop.relay import links

TARGET_BPS = 125_000  # 0.1% of 1 Gbit/s
JOB = "probe-cost"

#: One node's relay, for ``seconds``: says the prober's own count at the end.
NODE = (
    """
import os, sys, time, zmq
from ranktop.relay.proxy import Relay
from ranktop.transport.identity import Identity
host, seconds = sys.argv[1], float(sys.argv[2])
ctx = zmq.Context()
relay = Relay(Identity(job=%r, rank=-1, local_rank=-1, world=0, local_world=None, host=host, pid=os.getpid(),
                       launcher="relay", machine=host, slurm_job=None), ctx)
relay.start()
print("up", flush=True)
sys.stdin.readline()  # the measurement starts
start, begun = relay._links.sent_bytes, time.monotonic()
sys.stdin.readline()  # ... and ends
print(relay._links.sent_bytes - start, time.monotonic() - begun, relay._links.answered, flush=True)
relay.stop()
ctx.term()
"""
    % JOB
)


def _tx(net, i: int) -> int:
    out = subprocess.run(["ip", "netns", "exec", net.namespaces[i], "cat", f"/sys/class/net/{net.interfaces[i]}/statistics/tx_bytes"],
                         capture_output=True, text=True)  # fmt: skip
    return int(out.stdout.strip() or 0)


def measure(nodes: int, seconds: float, netns: bool) -> list[dict]:
    directory = tempfile.mkdtemp(prefix="ranktop-probe-cost-")
    env = dict(os.environ, RANKTOP_DIR=directory, RANKTOP_BIND="127.0.0.1")
    net = None
    if netns:
        sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
        from netns import Network, unavailable

        reason = unavailable()
        if reason:
            raise SystemExit(f"--netns: {reason}")
        net = Network(nodes).__enter__()
    procs = []
    try:
        for i in range(nodes):
            node_env = dict(env, RANKTOP_HOST=f"node-{i}")
            cmd = [sys.executable, "-c", NODE, f"node-{i}", str(seconds)]
            if net is not None:
                node_env["RANKTOP_BIND"] = net.addresses[i]
                cmd = ["ip", "netns", "exec", net.namespaces[i], *cmd]
            procs.append(subprocess.Popen(cmd, env=node_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for p in procs:
            assert p.stdout.readline().strip() == "up"
        time.sleep(3.0)  # every relay found the others and the probes settled into their pace
        before = [_tx(net, i) if net else 0 for i in range(nodes)]
        began = time.monotonic()
        for p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
        time.sleep(seconds)
        elapsed = time.monotonic() - began
        after = [_tx(net, i) if net else 0 for i in range(nodes)]
        rows = []
        for i, p in enumerate(procs):
            p.stdin.write("\n")
            p.stdin.flush()
            counted, took, answered = p.stdout.readline().split()
            p.wait(30)
            rows.append({
                "node": f"node-{i}",
                "counted_bps": round(int(counted) / float(took)),
                "wire_bps": round((after[i] - before[i]) / elapsed) if net else None,
                "answered_per_s": round(int(answered) / float(took), 2),
            })  # fmt: skip
        return rows
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if net is not None:
            net.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--netns", action="store_true", help="as root: each node a network namespace; count its interface's bytes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(args.nodes, args.seconds, args.netns)
    worst = max(max(r["counted_bps"], r["wire_bps"] or 0) for r in rows)
    doc = {"nodes": args.nodes, "seconds": args.seconds, "probe_bytes": links.PROBE_BYTES, "budget_bps": links.BUDGET_BPS,
           "target_bps": TARGET_BPS, "worst_bps": worst, "share_of_1gbit": worst / 125e6, "rows": rows}  # fmt: skip
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(f"{args.nodes} relays, {args.seconds:g} s, probes of {links.PROBE_BYTES} bytes; bytes a second per node:")
        print(f"{'node':<8} {'counted':>9} {'on wire':>9} {'answers/s':>10}")
        for r in rows:
            wire = r["wire_bps"] if r["wire_bps"] is not None else "-"
            print(f"{r['node']:<8} {r['counted_bps']:>9} {wire:>9} {r['answered_per_s']:>10}")
        print(f"worst {worst:,} B/s = {worst / 125e6:.3%} of 1 Gbit/s (target under 0.1%: {TARGET_BPS:,} B/s): "
              f"{'met' if worst <= TARGET_BPS else 'MISSED'}")  # fmt: skip
    return 0 if worst <= TARGET_BPS else 1


if __name__ == "__main__":
    sys.exit(main())
