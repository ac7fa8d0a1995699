"""``ranktop export JOB --prometheus [HOST:]PORT``: a job's live metrics on /metrics for Prometheus.

Runs a watch session without a screen and serves what its snapshot says at
each scrape (watch/offline/prometheus.py). Binds 127.0.0.1 unless a host is given: the
metrics name hosts and ranks of a job, which is not for every network.
"""

from __future__ import annotations

import argparse
import sys
import time

from ranktop.cli.errors import UserError, say, stop_on_sigterm
from ranktop.cli.options import Command
from ranktop.watch import WatchSession, resolve_waiting

DEFAULT_HOST = "127.0.0.1"
HELP = "serve a running job's metrics to Prometheus (/metrics)"
DESCRIPTION = (
    "Watch a running job without a screen and serve its per-rank and per-job metrics at "
    "http://HOST:PORT/metrics for Prometheus (needs prometheus_client: pip install 'ranktop[export]'). "
    "Binds 127.0.0.1 unless HOST is given (0.0.0.0: every interface). Runs until Ctrl-C or SIGTERM. "
    "Start it before the job (a batch script's sidecar): it serves ranktop_job_up 0 until the job comes, "
    "follows it through restarts (ranktop_job_restarts_total) and keeps serving the last values once it ended."
)


class ExportError(UserError):
    """A one-line reason ``ranktop export`` cannot serve (exit 1)."""


def parse_listen(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); ArgumentTypeError otherwise."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected [HOST:]PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {number}")
    return host, number


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("targets", nargs="*", metavar="JOB", help="job name or tcp://HOST:PORT endpoints (default: the only running job)")
    p.add_argument("--prometheus", type=parse_listen, required=True, metavar="[HOST:]PORT", help="where to serve /metrics")
    p.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)  # tests: stop after this many seconds
    p.set_defaults(run=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from ranktop.watch.offline import prometheus
    from ranktop.watch.optional import MissingDependency

    host, port = args.prometheus
    stop_on_sigterm()
    session = WatchSession(resolve_waiting(args.targets, args.dir, say=say, follow=True))
    try:
        with session:
            try:
                server = prometheus.serve(session, host, port)
            except MissingDependency as exc:
                raise ExportError(str(exc)) from None
            except OSError as exc:
                raise ExportError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
            bound = server.server_address[1]
            shown = f"[{host}]" if ":" in host else host
            print(
                f"serving job {session.target.job or ', '.join(args.targets)} at http://{shown}:{bound}/metrics (Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
            deadline = time.monotonic() + args.duration if args.duration else float("inf")
            try:
                while time.monotonic() < deadline:
                    time.sleep(0.5)
            finally:
                server.shutdown()
    except KeyboardInterrupt:
        pass
    return 0


COMMAND = Command("export", HELP, configure, DESCRIPTION)
