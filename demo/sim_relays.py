"""The simulated nodes' relays, in processes apart from the simulated ranks, as a real node's relay is.

A relay holds 14 file descriptors of its own (its four sockets' mailboxes, its
two proxies' steering pairs, its TCP and IPC listeners, the IPC connections of
its node's ranks) and 2 more per viewer attached (the TCP connections to its
telemetry and control ports). With the ranks' side of each node (4 more) that
is 20 a node: 2,048 nodes' relays in the simulator's own process would need
about 40,000, twice the hard limit of the VM ranktop is developed on (20,000,
``ulimit -Hn``), and only root raises a hard limit. So the simulator keeps
only its ranks' side of each node (two sockets over IPC, as a real node's
ranks hold) and runs the relays in as few processes as the limit allows
(:func:`processes_for`), each a :class:`~ranktop.relay.proxy.Relay` per node,
the class ``relay/process.py`` runs, on one ZeroMQ context. What a viewer
meets is what a real job's relays give it: their records, their TCP ports and
CURVE handshakes, the ranks' messages forwarded across a process boundary.

``python -m ranktop.demo.sim_relays --job JOB --first I --count N [--dir DIR]``
runs the relays of nodes I to I+N-1 (named as demo/sim_model.py names them). It
prints one JSON line per relay, once it is bound and its record written
(``{"host": ..., "telemetry": ..., "control": ...}``), then runs until its
standard input closes, which is how it learns that the simulator ended, however
it ended, or until SIGTERM; its relays then take their records with them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import IO

import zmq

from ranktop.relay.proxy import Relay
from ranktop.transport import fd_limit
from ranktop.transport.identity import Identity
from ranktop.wire import settings

from .sim_model import node_name

#: A relay's own file descriptors (see the module's docstring), and what each viewer attached adds.
FDS_PER_RELAY = 14
FDS_PER_VIEWER = 2
#: Viewers a relay process keeps room for: the benchmark's, a ``ranktop watch`` and a ``ranktop ping`` at once.
VIEWERS = 3
#: What a process holds besides its relays: the interpreter's files, libzmq's context, pipes.
FDS_BESIDES = 256
#: ZeroMQ sockets of one relay: telemetry XSUB and XPUB, control PULL and PUB, and a steering pair per proxy.
SOCKETS_PER_RELAY = 8


def relays_per_process(hard_limit: int | None) -> int:
    """How many relays one process may run under ``hard_limit`` open files (None: no limit), viewers included."""
    if hard_limit is None:
        return 1 << 30
    return max(1, (hard_limit - FDS_BESIDES) // (FDS_PER_RELAY + VIEWERS * FDS_PER_VIEWER))


def processes_for(nodes: int, hard_limit: int | None) -> int:
    """As few relay processes as ``nodes`` relays need under ``hard_limit``: one up to some 980 nodes here."""
    return math.ceil(nodes / relays_per_process(hard_limit))


class RelayProcesses:
    """The relays of nodes 0 to ``nodes`` - 1, spread evenly over ``processes`` processes; :meth:`start`
    returns each node's (telemetry, control) URLs, :meth:`close` ends them all."""

    def __init__(self, job: str, directory: str | None, nodes: int, processes: int):
        self._job = job
        self._directory = directory
        self._shares = [range(nodes * i // processes, nodes * (i + 1) // processes) for i in range(processes)]
        self._procs: list[subprocess.Popen[str]] = []

    def start(self) -> list[tuple[str, str]]:
        """Start every process at once, then wait for each relay's URLs, in node order."""
        try:
            for share in self._shares:
                self._procs.append(self._spawn(share))
            urls: list[tuple[str, str]] = []
            for share, proc in zip(self._shares, self._procs):
                assert proc.stdout is not None  # piped by _spawn
                urls += _read_urls(proc.stdout, share, proc)
            return urls
        except BaseException:
            self.close()
            raise

    def _spawn(self, share: range) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "ranktop.demo.sim_relays", "--job", self._job]
        command += ["--first", str(share.start), "--count", str(len(share))]
        if self._directory is not None:
            command += ["--dir", self._directory]
        # Every simulated node is this machine, on random ports (a pinned one fits one relay, not hundreds): said
        # in the relays' environment only, never this process's, which may be a test or an app that goes on.
        env = dict(os.environ, **{settings.BIND.name: "127.0.0.1", settings.PORT.name: "0"})
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]

    def close(self, timeout: float = 30.0) -> None:
        """Close each process's standard input (its signal to stop), then wait for them: a process that does not
        end in ``timeout`` is killed, its records left for the viewers to find dead (their pid is gone)."""
        for proc in self._procs:
            try:
                if proc.stdin is not None:  # piped by _spawn
                    proc.stdin.close()
            except OSError:
                pass
        for proc in self._procs:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self._procs.clear()


def _read_urls(out: IO[str], share: range, proc: subprocess.Popen[str]) -> list[tuple[str, str]]:
    urls: list[tuple[str, str]] = []
    for index in share:
        line = out.readline()
        if not line:
            code = proc.wait()
            raise RuntimeError(f"the relays of nodes {node_name(share.start)} to {node_name(share.stop - 1)} did not start "
                               f"(their process ended with code {code}, having started {len(urls)})")  # fmt: skip
        said = json.loads(line)
        if said["host"] != node_name(index):
            raise RuntimeError(f"relay process said {said['host']} where {node_name(index)} was due")
        urls.append((said["telemetry"], said["control"]))
    return urls


# -- the relay process ---------------------------------------------------------------------


def serve(job: str, nodes: range, directory: str | None, stop: threading.Event, out: IO[str]) -> bool:
    """Run the relays of ``nodes`` until ``stop``; True when every one of them closed its sockets."""
    fd_limit.room_for(FDS_BESIDES + len(nodes) * (FDS_PER_RELAY + VIEWERS * FDS_PER_VIEWER))
    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, SOCKETS_PER_RELAY * len(nodes) + 64)
    relays: list[Relay] = []
    machine = socket.gethostname()
    try:
        for index in nodes:
            identity = Identity(
                job=job,
                rank=-1,
                local_rank=-1,
                world=0,
                local_world=None,
                host=node_name(index),
                pid=os.getpid(),
                launcher="relay",
                machine=machine,
            )  # fmt: skip  (as relay/process.py's)
            relay = Relay(identity, context, directory, digest=False)  # the simulator makes its nodes' digests
            relays.append(relay)
            relay.start()
            out.write(json.dumps({"host": identity.host, "telemetry": relay.telemetry_url, "control": relay.control_url}) + "\n")
            out.flush()
        stop.wait()
    finally:
        closed = all([relay.stop() for relay in relays])  # a list: every relay stops, not only those before a failure
        if closed:
            context.term()
    return closed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ranktop.demo.sim_relays", description=__doc__.split("\n")[0])
    p.add_argument("--job", required=True)
    p.add_argument("--first", type=int, required=True, help="the first node's index")
    p.add_argument("--count", type=int, required=True, help="how many nodes' relays")
    p.add_argument("--dir", default=None, help="rendezvous directory (default: RANKTOP_DIR or ~/.ranktop)")
    args = p.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the simulator too, which ends this by closing stdin

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, name="ranktop-sim-relays-stdin", daemon=True).start()
    try:
        serve(args.job, range(args.first, args.first + args.count), args.dir, stop, sys.stdout)
    except Exception as exc:  # said on the simulator's stderr, which ends as soon as this process does
        last = node_name(args.first + args.count - 1)
        print(f"ranktop: the relays of simulated nodes {node_name(args.first)} to {last} failed: {exc.__class__.__name__}: {exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # as relay/process.py: a proxy thread that did not stop in time must not hold the exit
