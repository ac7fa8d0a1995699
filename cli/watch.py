"""``ranktop watch``: the live TUI on a job, or one JSON snapshot of it (``--json``)."""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from typing import Any, Callable
from urllib.parse import urlsplit

from ranktop.cli import record
from ranktop.cli.errors import UserError, say
from ranktop.cli.options import Command, add_view_options, add_wait_option
from ranktop.watch import WAITING, Target, WatchSession, resolve_waiting
from ranktop.watch.model.json_doc import document

#: How long an endpoint may stay silent before the user is told (then we keep waiting).
WAITING_NOTICE_S = 3.0


HELP = "watch a running job live (TUI), or print a JSON snapshot"
DESCRIPTION = (
    "Attach to a running job. TARGET is a job name (see `ranktop jobs`) or one or more "
    "relay endpoints tcp://HOST:PORT; with no TARGET, the only running job. A job named that is not "
    "running yet is waited for (the TUI says so; with --json, one line on stderr): start the watcher first."
)


def why_silent(url: str) -> str | None:
    """Why a relay endpoint the user named says nothing, when the network can tell: a host name that does not
    resolve (a typo), or a port nobody listens on (a wrong port, a job that ended). None when it answers a connect
    (then it is a relay that has no rank yet, or not ranktop's)."""
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port
    if not host or port is None:
        return None
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return f"host {host} does not resolve"
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except ConnectionRefusedError:
        return f"nothing listens at {host}:{port}"
    except OSError as exc:
        return f"{host}:{port} cannot be reached ({exc.strerror or exc})"
    return None


def configure(watch: argparse.ArgumentParser) -> None:
    watch.add_argument("targets", nargs="*", metavar="TARGET", help="job name or tcp://HOST:PORT endpoints")
    add_view_options(watch)
    add_wait_option(watch)
    watch.add_argument("--record", metavar="FILE", default=None, help="also record the job's telemetry to FILE (ranktop replay, report)")
    record.add_record_options(watch)
    watch.set_defaults(run=cmd_watch)


def session_of(args: argparse.Namespace, target: Target | None = None) -> WatchSession:
    """The session of ``watch``/``attach``: ``target`` if already resolved (``attach --slurm``), else what the user named."""
    if target is None:
        # The TUI follows a job not started yet (its waiting screen says so); --json and --wait wait here first.
        follow = not args.json and args.wait is None
        target = resolve_waiting(args.targets, args.dir, wait_s=args.wait, say=None if follow else say, follow=follow)
    path = getattr(args, "record", None)  # attach shares this session and has no --record
    return WatchSession(
        target,
        window=args.window,
        silent_after_s=args.silent_after,
        stall_factor=args.stall_factor,
        stall_floor_s=args.stall_floor,
        rate_hz=args.rate,
        recorder=record.make_recorder(path, args, target.job) if path else None,
    )


def cmd_watch(args: argparse.Namespace, target: Target | None = None) -> int:
    session = session_of(args, target)
    if session.rate_hz is not None:
        session.set_rate_when_ready(session.rate_hz)  # its own thread: waits for the first rank, then asks
    if args.json:
        return watch_json(session, args.duration)
    return run_tui(session, args.refresh)


def run_tui(session: WatchSession, refresh_hz: float, title: str = "ranktop", on_app: Callable[[Any], None] | None = None) -> int:
    """Run the TUI until the user quits; ``on_app(app)`` runs first (the demo watches its job with it)."""
    try:
        from ranktop.tui.app import RanktopApp  # type: ignore[import-untyped]  # the TUI is not checked yet (no py.typed)
    except ImportError as exc:
        raise UserError(f"the TUI needs textual ({exc}): pip install 'ranktop[tui]', or use --json") from None
    with session:
        app = RanktopApp(session, session.requests, refresh_hz=refresh_hz, title=title)
        if on_app is not None:
            on_app(app)
        app.run()
    return 0


def watch_json(session: WatchSession, duration: float) -> int:
    """Listen for ``duration`` seconds, telling which endpoints stay silent, then print one snapshot."""
    told: dict[str, str | None] = {}  # endpoint -> why it is silent, as told while waiting (asked of the network once)
    with session:
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:  # a fixed listening time, with a notice for each endpoint that stays silent
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
            if session.ended():
                break  # every rank ended: nothing more will come
            for e in session.snapshot().endpoints:
                if e.state == WAITING and e.quiet_s >= WAITING_NOTICE_S and e.url not in told and not session.refused():
                    why = told[e.url] = why_silent(e.url) if e.url in session.target.endpoints else None
                    because = f" ({why})" if why else ""
                    print(f"ranktop: no answer from {e.url} after {e.quiet_s:.0f}s{because}; still waiting", file=sys.stderr)
        snap = session.snapshot()
    print(json.dumps(document(snap), indent=2))
    refused = session.refused()  # no key, or not the job's: said last, as the reason
    for error in snap.errors:
        if snap.ranks or error != refused:
            print(f"ranktop: {error}", file=sys.stderr)
    if not snap.ranks:
        if refused:
            raise UserError(refused)
        job = session.target.slurm
        hint = ""
        if job is not None:  # the commonest cause: a job that does not run ranktop, or another port base
            hint = (
                f" from the {len(job.nodes)} node(s) of SLURM job {job.label}: does it run ranktop "
                "(probe.init() or ranktop launch), with the same RANKTOP_PORT_BASE?"
            )
        else:  # endpoints the user named: what the network says of those that could not be reached
            reasons = [f"{url}: {why}" for url in session.target.endpoints if (why := told[url] if url in told else why_silent(url))]
            hint = f" ({'; '.join(reasons)})" if reasons else ""
        raise UserError(f"no rank reported within {duration:g}s{hint}")
    return 0


COMMAND = Command("watch", HELP, configure, DESCRIPTION)
