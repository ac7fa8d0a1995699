"""What ``ranktop watch`` runs behind the screen: find the job, receive, aggregate, command.

:func:`resolve` turns what the user typed into a :class:`Target` or a one-line
:class:`TargetError`; :class:`WatchSession` wires discovery, the receiver
thread, the aggregator and the controller together and is the ``source`` the
App (and ``--json``) takes snapshots from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ranktop.wire import auth, rendezvous

from .aggregator import DEFAULT_SILENT_AFTER_S, DEFAULT_WINDOW, Aggregator
from .controller import Controller
from .receiver import Receiver, parse_endpoint
from .snapshot import Reply, Snapshot
from .stalls import DEFAULT_STALL_FACTOR, DEFAULT_STALL_FLOOR_S

_ENDPOINT = re.compile(r"^(tcp://)?[A-Za-z0-9_.\-\[\]:]+:\d+$")


class TargetError(Exception):
    """The user named something we cannot watch; the message is the whole story."""


@dataclass
class Target:
    job: str | None  # None when watching raw endpoints until the first message names it
    endpoints: list[str] = field(default_factory=list)  # user-given telemetry URLs
    directory: Path | None = None  # rendezvous root, when the job is found through it


def live_jobs(directory=None) -> dict[str, list[rendezvous.NodeRecord]]:
    jobs = {}
    for job, nodes in rendezvous.list_jobs(directory).items():
        live = [n for n in nodes if not n.is_stale()]
        if live:
            jobs[job] = live
    return jobs


def resolve(targets: list[str], directory=None, *, allow_pending: bool = False) -> Target:
    root = rendezvous.root(directory)
    if not targets:
        jobs = live_jobs(directory)
        if not jobs:
            raise TargetError(
                f"no running job found under {root}; start one (ranktop demo, or ranktop.probe.init() in your "
                "script) or name a job or an endpoint: ranktop watch JOB | tcp://HOST:PORT"
            )
        if len(jobs) > 1:
            raise TargetError(f"{len(jobs)} jobs are running, name one: {', '.join(sorted(jobs))}")
        return Target(job=next(iter(jobs)), directory=root)
    if all("://" in t or _ENDPOINT.match(t) for t in targets):
        try:
            return Target(job=None, endpoints=[parse_endpoint(t) for t in targets])
        except ValueError as exc:
            raise TargetError(str(exc)) from None
    if len(targets) > 1:
        raise TargetError("name one job, or one or more endpoints (tcp://HOST:PORT), not a mix")
    job = targets[0]
    if allow_pending:
        return Target(job=job, directory=root)
    nodes = rendezvous.read_nodes(job, directory)
    if not nodes:
        running = sorted(live_jobs(directory))
        hint = f"running jobs: {', '.join(running)}" if running else "no job is running"
        raise TargetError(f"unknown job {job!r} under {root} ({hint})")
    if all(n.is_stale() for n in nodes):
        raise TargetError(f"job {job!r} has ended: its relays are gone (pid {', '.join(str(n.pid) for n in nodes)})")
    return Target(job=job, directory=root)


class WatchSession:
    def __init__(
        self,
        target: Target,
        *,
        secret: bytes | None = None,
        window: int = DEFAULT_WINDOW,
        silent_after_s: float = DEFAULT_SILENT_AFTER_S,
        stall_factor: float = DEFAULT_STALL_FACTOR,
        stall_floor_s: float = DEFAULT_STALL_FLOOR_S,
    ):
        self.target = target
        self.aggregator = Aggregator(
            target.job, window=window, silent_after_s=silent_after_s, stall_factor=stall_factor, stall_floor_s=stall_floor_s
        )
        load_secret = None
        if secret is None and target.job is not None:
            job, directory = target.job, target.directory
            load_secret = lambda: rendezvous.read_secret(job, directory)  # noqa: E731
        elif secret is None:
            secret = auth.read_secret_env()
        self.controller = Controller(target.job, secret, self.aggregator, load_secret)
        discover = self._live_nodes if target.job is not None else None
        self.receiver = Receiver(self.aggregator, target.endpoints, discover, on_control=self.controller.add_endpoint)

    def _live_nodes(self) -> list[rendezvous.NodeRecord]:
        """The job's relays as the rendezvous folder lists them now, stale ones (dead jobs) left out."""
        return [n for n in rendezvous.read_nodes(self.target.job, self.target.directory) if not n.is_stale()]

    def start(self) -> "WatchSession":
        self.receiver.start()
        return self

    def snapshot(self) -> Snapshot:
        return self.aggregator.snapshot()

    def replies_to(self, command_id: str) -> list[Reply]:
        """Every rank's answer to a command this session sent (the stacks screen reads them all)."""
        return self.aggregator.replies_to(command_id)

    def close(self) -> None:
        self.receiver.stop()
        self.controller.close()

    def __enter__(self) -> "WatchSession":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
