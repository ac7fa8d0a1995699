"""The node's relay as a process of its own: ``python -m ranktop.relay.process --job JOB --host HOST``.

Started by whichever rank of the node first finds no relay running
(:mod:`.relay_keeper`, on the rank's probe thread), in a session of its own,
so that a Ctrl-C to the job's process group reaches the ranks and not the
relay, with no terminal and none of the job's pipes. It lives apart from the
ranks so that no rank's freeze, crash or exit hides the others: a rank
stopped with SIGSTOP (or stuck in uninterruptible I/O) is simply silent.

What it does, in order:

1. takes the node's claim (``relay.lock`` in :mod:`.relay_claim`); if another
   relay holds it, exits at once, having bound nothing;
2. runs :class:`~ranktop.relay.proxy.Relay` (binds the IPC and TCP sockets,
   writes the node record) and says where in ``relay.json``;
3. every :data:`POLL_S` looks at the ranks registered in the claim folder and
   ends when none of them runs any more (kill -9 of every rank included), or
   when none came within :data:`NO_RANK_GRACE_S` of its start; SIGTERM ends it
   too, and SIGUSR1 (a rank that unregistered last) makes it look at once.

It never imports torch, so it is up in a fraction of a second.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from types import FrameType

import zmq

from ranktop.transport import background
from ranktop.transport.identity import Identity
from .proxy import Relay
from .claim import Claim, RelayInfo

#: How often the relay looks whether its ranks still run.
POLL_S = 0.25
#: Tries at the claim before leaving it to the relay that holds it.
CLAIM_TRIES = 3
#: A relay that no rank registered with this long after its start ends.
NO_RANK_GRACE_S = 10.0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ranktop.relay.process", description=__doc__.split("\n")[0])
    parser.add_argument("--job", required=True)
    parser.add_argument("--host", required=True, help="the node's name (RANKTOP_HOST or the host name)")
    parser.add_argument("--slurm-job", default=None)
    parser.add_argument("--dir", default=None, help="rendezvous directory (default: RANKTOP_DIR or ~/.ranktop)")
    return parser.parse_args(argv)


class Signals:
    """SIGTERM and SIGINT end the relay; SIGUSR1 (from a rank that unregistered last) makes it look at its ranks now."""

    def __init__(self) -> None:
        self.stopping = False
        self.poked = False  # a rank said it left last: there were ranks, even if the relay never saw them
        self.wake = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGUSR1, self._poke)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _poke(self, signum: int, frame: FrameType | None) -> None:
        self.poked = True
        self.wake.set()

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        self.wake.set()

    def sleep(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()


def serve(args: argparse.Namespace, signals: Signals) -> int:
    claim = Claim(args.job, args.host, args.dir)
    lock = claim.hold_relay_lock()
    for _ in range(CLAIM_TRIES - 1):  # a rank testing the lock holds it for microseconds; a relay for good
        if lock is not None:
            break
        time.sleep(0.05)
        lock = claim.hold_relay_lock()
    if lock is None:
        return 0  # another relay serves this job on this node
    pid = os.getpid()
    identity = Identity(
        job=args.job,
        rank=-1,
        local_rank=-1,
        world=0,
        local_world=None,
        host=args.host,
        pid=pid,
        launcher="relay",
        machine=socket.gethostname(),
        slurm_job=args.slurm_job or None,
    )
    seen = bool(claim.live_ranks())  # a rank that registered and left before the relay was up still counts
    context = zmq.Context()
    relay = Relay(identity, context, args.dir)
    try:
        relay.start()
        claim.write_info(RelayInfo(pid, relay.telemetry_url, relay.control_url))
        started = time.monotonic()
        while not signals.stopping:
            live = claim.live_ranks(prune=True)
            seen = seen or signals.poked
            if live:
                seen = True
            elif seen or time.monotonic() - started > NO_RANK_GRACE_S:
                break
            signals.sleep(POLL_S)
    finally:
        claim.remove_info(pid)
        closed = relay.stop()
        if closed:
            context.term()
        os.close(lock)  # the claim goes last: a relay started now finds the sockets and the record gone
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    background.name_thread("ranktop-relay")  # before its threads start: they inherit the name
    signals = Signals()
    signals.install()
    try:
        return serve(args, signals)
    except Exception as exc:  # said in relay.log; the ranks start another
        print(f"ranktop: relay of job {args.job} on {args.host} failed: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # Its record is gone and its claim released: nothing is left to do, and the interpreter's own
    # shutdown could wait on a proxy thread that did not stop in time (a context term()ed at exit).
    os._exit(code)
