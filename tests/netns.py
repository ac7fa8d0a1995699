"""Real nodes on one machine: a network namespace per node, a veth pair each into a bridge, one node's link capped.

Each node is a namespace of its own with one interface (its end of a veth
pair) and one address; the other ends sit in a bridge inside a namespace of
their own (the switch), which also holds the viewer's address. Nothing is
added to the machine's own namespace: every address lives inside these
namespaces, so the job's traffic reaches only them and loopback. A node's
link is capped with ``tc``'s token bucket (``tbf``) on its interface, the
rate its traffic leaves the node at (the kernel here has no netem), with a
small bucket (8 KB): a slow link does not let a burst through at full speed.

:class:`Network` is a context manager: whatever happens, every namespace it
made is deleted on the way out (and with it every veth in it, and its peer),
after the processes it started inside have been ended.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path


def unavailable() -> str | None:
    """Why namespaces cannot be made here (a skip's reason), or None when they can."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces (ip netns) and cap a link (tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2) to make network namespaces and cap a link"
    name = f"rtcheck{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode:
        return f"`ip netns add` does not work here: {made.stderr.strip() or made.returncode}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")


class Network:
    """``nodes`` namespaces on a bridge; ``cap``: {node index: tbf rate such as "24mbit"}."""

    def __init__(self, nodes: int, cap: dict[int, str] | None = None):
        tag = os.getpid() % 100000
        self.prefix = f"rt{tag}"
        self.subnet = f"10.{200 + tag % 50}.{tag // 50 % 250}"
        self.switch = f"{self.prefix}-sw"
        self.namespaces = [f"{self.prefix}-n{i}" for i in range(nodes)]
        self.interfaces = [f"{self.prefix}n{i}" for i in range(nodes)]  # (15 characters at most: IFNAMSIZ)
        self.addresses = [f"{self.subnet}.{i + 1}" for i in range(nodes)]
        self.viewer_address = f"{self.subnet}.254"
        self._cap = cap or {}
        self._made: list[str] = []
        self._procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Network":
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make(self) -> None:
        for ns in (self.switch, *self.namespaces):
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "addr", "add", f"{self.viewer_address}/24", "dev", "br0")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, (ns, nic) in enumerate(zip(self.namespaces, self.interfaces)):
            # Made inside the switch's namespace, one end moved to the node's: the machine's own never holds either.
            _ip("-n", self.switch, "link", "add", f"{self.prefix}s{i}", "type", "veth", "peer", "name", nic)
            _ip("-n", self.switch, "link", "set", nic, "netns", ns)
            _ip("-n", self.switch, "link", "set", f"{self.prefix}s{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addresses[i]}/24", "dev", nic)
            _ip("-n", ns, "link", "set", nic, "up")
            if i in self._cap:
                rate = self._cap[i]
                out = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", nic, "root", "tbf",
                                      "rate", rate, "burst", "8kb", "latency", "100ms"], capture_output=True, text=True)  # fmt: skip
                if out.returncode:
                    raise RuntimeError(f"tc qdisc add ... tbf rate {rate}: {out.stderr.strip()}")

    def popen(self, node: int | None, cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
        """``cmd`` inside node ``node``'s namespace (None: the switch's, where the viewer's address is), in a
        process group of its own, its output in ``log``; ended by :meth:`close` if still running."""
        ns = self.switch if node is None else self.namespaces[node]
        with open(log, "wb") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        self._procs.append(proc)
        return proc

    def pids_inside(self) -> list[int]:
        """Every process still in one of its namespaces (a relay the ranks started lives on a moment after them)."""
        pids: list[int] = []
        for ns in self._made:
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            pids += [int(p) for p in out.stdout.split() if p.isdigit()]
        return pids

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self._procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(5)
        deadline = time.monotonic() + 10  # the relays end once their ranks are gone (relay/process.py)
        while self.pids_inside() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in self.pids_inside():  # (only processes inside the namespaces this test made)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for ns in reversed(self._made):  # a namespace's veths go with it, and their peers with them
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._made.clear()
