"""What ``ranktop watch`` runs behind the screen: find the job, receive, aggregate, command.

:func:`resolve` turns what the user typed into a :class:`Target` or a one-line
:class:`TargetError`; :class:`WatchSession` wires discovery, the receiver
thread, the aggregator and the requests (watch/engine/requests.py) together. It is
the ``source`` the App (and ``--json``) takes snapshots from, and what every
command asks the ranks through (:meth:`WatchSession.request`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union
from urllib.parse import urlsplit

from ranktop.watch import heap, slurm
from ranktop.watch.aggregator import DEFAULT_SILENT_AFTER_S, DEFAULT_WINDOW, Aggregator
from ranktop.watch.errors import RanktopError
from ranktop.watch.analysis.history import History
from ranktop.watch.engine.keys import ClientKeys
from ranktop.watch.engine.receiver import Receiver, parse_endpoint
from ranktop.watch.offline.recording import FlightRecorder
from ranktop.watch.engine.requests import RequestError, Requests
from ranktop.watch.model.answers import Answer
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.analysis.stalls import DEFAULT_STALL_FACTOR, DEFAULT_STALL_FLOOR_S
from ranktop.wire import auth
from ranktop.transport import ports, rendezvous

#: Seconds a --rate request waits for the first rank before giving up.
RATE_REQUEST_WAIT_S = 30.0
#: How often the waiting line (the jobs there are) is read again while the job has not started.
WAITING_LINE_EVERY_S = 2.0

_ENDPOINT = re.compile(r"^(tcp://)?[A-Za-z0-9_.\-\[\]:]+:\d+$")


#: A rendezvous root as given (None: the default, transport/rendezvous.py root).
Folder = Union[str, os.PathLike[str], None]


class TargetError(RanktopError):
    """The user named something we cannot watch; the message is the whole story."""


class SlurmTargetError(TargetError):
    def __init__(self, message: str, answered: bool, pending: bool = False):
        super().__init__(message)
        self.answered = answered  # SLURM knows the job and said why not (see slurm.SlurmError)
        self.pending = pending  # ... and that it has not started yet


class NotStartedError(TargetError):
    """A job named that is not running (yet, or again): what a monitor started first waits for.

    ``waiting`` is the line said while waiting: the job, where it is looked for,
    and the jobs that do run, so a typo shows.
    """

    def __init__(self, message: str, waiting: str, job: str, pending_in_slurm: bool = False):
        super().__init__(message)
        self.waiting = waiting
        self.job = job
        self.pending_in_slurm = pending_in_slurm  # a SLURM job still pending: its nodes are not known yet


class WaitedTooLong(NotStartedError):
    """``--wait`` ran out before the job started (its own exit code: cli/errors.py ``Exit.NOT_STARTED``)."""


@dataclass
class Target:
    job: str | None  # None when watching raw endpoints until the first message names it
    endpoints: list[str] = field(default_factory=list)  # user-given telemetry URLs
    directory: Path | None = None  # rendezvous root, when the job is found through it
    slurm: slurm.SlurmJob | None = None  # a SLURM job: its nodes are dialled by the port convention when no record names them


def _short(host: str) -> str:
    return host.split(".", 1)[0]


def slurm_records(job: slurm.SlurmJob, directory: Folder = None, name: str | None = None) -> tuple[str | None, list[rendezvous.NodeRecord]]:
    """The rendezvous name of a SLURM job and its live records on the job's nodes.

    Its relays' records sit under the job's name, which is the SLURM id unless
    the job chose another (RANKTOP_JOB, ``ranktop launch --job``): those are found
    by the SLURM id each record carries (``name``, once known, spares reading
    every job's folder). Records of hosts outside the job's node list are an
    earlier job's, and ignored.
    """
    nodes = {_short(n) for n in job.nodes}
    found: dict[str, list[rendezvous.NodeRecord]] = {}
    candidates = {name: rendezvous.read_nodes(name, directory)} if name else rendezvous.list_jobs(directory)
    for name, records in candidates.items():
        for r in records:
            if (r.slurm_job == job.job_id or (name == job.job_id and r.slurm_job is None)) and _short(r.host) in nodes and not r.is_stale():
                found.setdefault(name, []).append(r)
    if not found:
        return None, []
    name = job.job_id if job.job_id in found else max(found, key=lambda n: max(r.started for r in found[n]))
    return name, found[name]


def convention_record(job: slurm.SlurmJob, node: str) -> rendezvous.NodeRecord:
    """Where a node's relay listens by the port convention (transport/ports.py), as a record nobody wrote."""
    telemetry, control = ports.slurm_ports(job.job_id)
    return rendezvous.NodeRecord(job.job_id, node, f"tcp://{node}:{telemetry}", f"tcp://{node}:{control}", pid=0, started=0.0)


def resolve_slurm(job_id: str, directory: Folder = None) -> Target:
    """A running SLURM job of ours: its nodes from SLURM, its relays from records or the port convention."""
    try:
        job = slurm.find_job(job_id)
        ports.slurm_ports(job.job_id)  # a bad RANKTOP_PORT_BASE is said now, not in the receiver thread
    except slurm.SlurmError as exc:
        if exc.pending:
            waiting = str(exc).replace(": nothing to watch until it starts", "") + "; waiting for it to start"
            raise NotStartedError(str(exc), waiting, job_id, pending_in_slurm=True) from None
        raise SlurmTargetError(str(exc), exc.answered) from None
    except ports.PortConfigError as exc:
        raise TargetError(str(exc)) from None
    name, _ = slurm_records(job, directory)
    return Target(job=name, directory=rendezvous.root(directory), slurm=job)


def live_jobs(directory: Folder = None) -> dict[str, list[rendezvous.NodeRecord]]:
    """Jobs with a live relay: on this machine its process exists; on another, SLURM does not say the job ended."""
    ended = slurm.EndedJobs()
    jobs = {}
    for job, nodes in rendezvous.list_jobs(directory).items():
        live = [n for n in nodes if not n.is_stale() and (n.on_this_machine or not ended(n.slurm_job))]
        if live:
            jobs[job] = live
    return jobs


def resolve(targets: list[str], directory: Folder = None, *, allow_pending: bool = False) -> Target:
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
    if slurm.is_job_id(job) and not allow_pending and slurm.configured():
        # `ranktop watch 123456` on a cluster: SLURM's word on the job comes first (pending, ended, its nodes).
        try:
            return resolve_slurm(job, directory)
        except SlurmTargetError as exc:
            if exc.answered or not rendezvous.read_nodes(job, directory):
                raise  # else: a job that merely has a numeric name, outside SLURM
    if allow_pending:
        return Target(job=job, directory=root)
    nodes = rendezvous.read_nodes(job, directory)
    if not nodes:
        hint = running_hint(directory)
        raise NotStartedError(f"unknown job {job!r} under {root} ({hint})", f"waiting for job {job!r} to start under {root} ({hint})", job)
    if all(n.is_stale() for n in nodes):
        raise NotStartedError(
            f"job {job!r} has ended: its relays are gone (pid {', '.join(str(n.pid) for n in nodes)})",
            f"job {job!r} is not running (its last run ended); waiting for it to start again ({running_hint(directory)})",
            job,
        )
    return Target(job=job, directory=root)


def running_hint(directory: Folder = None) -> str:
    """ "running jobs: a, b" or "no job is running": what a line about a job not found adds, so a typo shows."""
    running = sorted(live_jobs(directory))
    return f"running jobs: {', '.join(running)}" if running else "no job is running"


def resolve_waiting(
    targets: list[str],
    directory: Folder = None,
    *,
    wait_s: float | None = None,
    say: Callable[[str], None] | None = None,
    poll_s: float = 0.5,
    follow: bool = False,
    resolver: Callable[[], Target] | None = None,
) -> Target:
    """:func:`resolve`, waiting for a named job that is not running yet (a monitor started before its job).

    ``say(line)`` is told once what is awaited (the jobs that do run included,
    so a typo shows). ``wait_s`` bounds the wait (0: not at all); past it,
    :class:`WaitedTooLong`. With ``follow``, a job found through the rendezvous
    folder is not waited for here: its target is returned at once, and the
    session's receiver picks its relays up when they come (``export``,
    ``record`` and the TUI serve or show meanwhile); a pending SLURM job is
    still waited for here, as its nodes are not known before it runs.
    ``resolver`` replaces ``resolve(targets, directory)`` (``attach --slurm``).
    """
    deadline = None if wait_s is None else time.monotonic() + wait_s
    said = False
    while True:
        try:
            return resolver() if resolver is not None else resolve(targets, directory)
        except NotStartedError as exc:
            if not said and say is not None and wait_s != 0:
                bound = f" for up to {wait_s:g}s" if wait_s is not None else ""
                say(f"{exc.waiting}{bound}")
                said = True
            if follow and not exc.pending_in_slurm:
                return Target(job=exc.job, directory=rendezvous.root(directory))
            if deadline is not None and time.monotonic() >= deadline:
                waited = f"; gave up after waiting {wait_s:g}s (--wait)" if wait_s else ""
                raise WaitedTooLong(f"{exc}{waited}", exc.waiting, exc.job, exc.pending_in_slurm) from None
        time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))


def live_nodes(target: Target) -> list[rendezvous.NodeRecord]:
    """The job's relays as the rendezvous folder lists them now, stale ones (dead jobs) left out.

    For a SLURM job, every node of the job: its record if it has one, else
    where the port convention puts its relay. The receiver polls this every second.
    """
    job = target.slurm
    if job is None:
        assert target.job is not None, "a target of endpoints alone has no rendezvous records"
        return [n for n in rendezvous.read_nodes(target.job, target.directory) if not n.is_stale()]
    _, records = slurm_records(job, target.directory, target.job)
    named = {_short(r.host) for r in records}
    return records + [convention_record(job, node) for node in job.nodes if _short(node) not in named]


def local_job_of(endpoints: list[str], directory: Folder = None) -> str | None:
    """The job whose relay on this machine listens at one of ``endpoints`` (by its record), or None.

    A viewer given a bare endpoint of a relay here reads the job's secret as if
    it had named the job; through a tunnel it needs ``RANKTOP_SECRET``.
    """
    here = {"127.0.0.1", "localhost", "::1", socket.gethostname()}
    wanted = {(urlsplit(url).hostname, urlsplit(url).port) for url in endpoints}
    for job, records in rendezvous.list_jobs(directory).items():
        for record in records:
            try:
                host, port = urlsplit(record.telemetry).hostname, urlsplit(record.telemetry).port
            except ValueError:
                continue
            if not record.on_this_machine or record.is_stale():
                continue
            if (host, port) in wanted or any(h in here and p == port for h, p in wanted):
                return job
    return None


@dataclass(frozen=True)
class Answers:
    """Every rank's answer to one command, and who was expected to answer."""

    id: str
    expected: tuple[int, ...]
    replies: list[Answer]
    waited_s: float  # from sending to the last answer awaited (or the timeout)

    @property
    def missing(self) -> list[int]:
        answered = {r.rank for r in self.replies}
        return [rank for rank in self.expected if rank not in answered]


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
        rate_hz: float | None = None,
        recorder: FlightRecorder | None = None,
    ):
        self.target = target
        self.recorder = recorder  # the flight recorder (watch/offline/recording.py): hears every frame the receiver gets
        self.rate_hz = rate_hz  # messages/s to ask every rank for once attached (--rate), None: leave theirs
        self.aggregator = Aggregator(
            target.job, window=window, silent_after_s=silent_after_s, stall_factor=stall_factor, stall_floor_s=stall_floor_s
        )
        load_secret = None
        if secret is None and (target.job is not None or target.slurm is not None):
            # A SLURM job found by the port convention is named by its first hello.
            load_secret = lambda: rendezvous.read_secret(self._job_name() or "", target.directory)  # noqa: E731
        elif secret is None:
            local = local_job_of(target.endpoints)  # a relay of this machine's rendezvous folder: its job's secret
            secret = auth.read_secret_env() or (rendezvous.read_secret(local) if local else None)
        self.requests = Requests(
            target.job,
            secret,
            self.aggregator.requests,
            load_secret,
            job_of=lambda: self.aggregator.job,
            on_error=self.aggregator.note_error,
        )
        self.controller = self.requests  # what the App sends through (tui/app.py), by its older name
        discover = (lambda: live_nodes(target)) if target.job is not None or target.slurm is not None else None
        self.receiver = Receiver(
            self.aggregator,
            target.endpoints,
            discover,
            on_control=self.requests.add_endpoint,
            recorder=recorder,
            keys=ClientKeys(lambda: self.requests.secret, self._secret_place(), self._job_name),
        )
        self.history = History()  # step time and episodes over the last minutes, sampled as snapshots are taken
        self._waiting_cache: tuple[float, str] | None = None  # (when, line): _waiting_line
        self._handed_back = time.monotonic()  # when the heap's free pages were last returned (watch/heap.py)

    def _job_name(self) -> str | None:
        """The job's name: as named, as its first message said, or (a SLURM job found by the port convention) its id."""
        slurm_id = self.target.slurm.job_id if self.target.slurm is not None else None
        return self.target.job or self.aggregator.job or slurm_id

    def _secret_place(self) -> str | None:
        """Where this viewer looks for the job's secret, as the one-line errors say it."""
        if auth.read_secret_env() is not None:
            return "RANKTOP_SECRET"
        job = self._job_name() or local_job_of(self.target.endpoints)
        return str(rendezvous.job_dir(job, self.target.directory) / "secret") if job else None

    def start(self) -> "WatchSession":
        if self.recorder is not None:
            self.recorder.start()
        self.receiver.start()
        return self

    def snapshot(self) -> Snapshot:
        if self.recorder is not None and self.recorder.stats.error:
            self.aggregator.note_error(self.recorder.stats.error)  # said once on the status line; watching goes on
        snap = self.aggregator.snapshot()
        self.history.note(snap, self.aggregator.now())
        if time.monotonic() - self._handed_back >= heap.TRIM_EVERY_S:  # what the stream of messages left free (watch/heap.py)
            self._handed_back = time.monotonic()
            heap.hand_back()
        if not snap.ranks:
            waiting = self._waiting_line()
            if waiting is not None:
                snap = dataclasses.replace(snap, waiting=waiting)
        return snap

    def ended(self) -> bool:
        """Every rank of the job ended cleanly: nothing more will come (cheap: no snapshot)."""
        return self.aggregator.ended()

    def refused(self) -> str | None:
        """Why the relays refused this viewer's handshake (no key, or not the job's), if they did."""
        return self.receiver.handshakes.problem

    def changes_every_s(self) -> float:
        """How often the job's data changes at most (watch/aggregator.py): the TUI refreshes no faster."""
        return self.aggregator.changes_every_s()

    def _waiting_line(self) -> str | None:
        """Before the job is up: that the viewer waits for it to start, and the jobs there are (read again
        every :data:`WAITING_LINE_EVERY_S`); None once a relay of the job is known."""
        target = self.target
        if target.job is None or target.slurm is not None or self.receiver_endpoints():
            return None
        now = time.monotonic()
        cached = self._waiting_cache
        if cached is None or now - cached[0] >= WAITING_LINE_EVERY_S:
            cached = self._waiting_cache = (
                now,
                f"job {target.job!r} has not started under {rendezvous.root(target.directory)} ({running_hint(target.directory)})",
            )
        return cached[1]

    def receiver_endpoints(self) -> list[str]:
        """The relays this session dials or heard of (none before the job's first record)."""
        return self.aggregator.endpoint_urls()

    def replies_to(self, command_id: str) -> list[Answer]:
        """Every rank's answer to a command this session sent (the stacks screen reads them all)."""
        return self.aggregator.replies_to(command_id)

    def wait_until(self, test: Callable[[], bool], timeout: float) -> bool:
        """Block until ``test()`` holds or ``timeout`` passes; woken by arrivals, not a sleep loop."""
        return self.aggregator.requests.wait_until(test, timeout)

    def wait_for_ranks(self, timeout: float) -> Snapshot:
        """A snapshot once the job's size and a relay to command are known; RequestError if not within ``timeout``."""
        if not self.requests.available:
            raise RequestError(self.requests.unavailable_reason)
        known = lambda: self.aggregator.world_size is not None and self.requests.ready()  # noqa: E731
        if not self.wait_until(known, timeout):
            if self.aggregator.world_size is None:
                raise RequestError(self.receiver.handshakes.problem or f"no rank reported within {timeout:g}s")
            raise RequestError("no relay control endpoint known yet")
        return self.snapshot()

    def wait_for_every_rank(self, timeout: float) -> bool:
        """Wait until every rank of the job's world has been heard, up to ``timeout``: a job that has just
        started has ranks still starting, and a command sent before a rank listens never reaches it."""
        deadline = time.monotonic() + timeout
        while True:
            world = self.aggregator.world_size
            if world is not None and self.aggregator.ranks_heard >= world:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def request(self, cmd: str, args: dict[str, Any] | None = None, *, ranks: list[int] | None = None, timeout: float = 5.0) -> Answers:
        """Send a signed command to ``ranks`` (default: every rank) and wait up to ``timeout`` for each to answer.

        Counts every answer at any job size. Raises :class:`RequestError` (one
        line) without the job's secret, without a rank within ``timeout``, or for
        a rank the job does not have.
        """
        started = time.monotonic()
        snap = self.wait_for_ranks(timeout)
        world = snap.world_size or 0
        expected = tuple(sorted(set(ranks))) if ranks else tuple(range(world))
        unknown = [r for r in expected if not 0 <= r < world]
        if unknown:
            raise RequestError(f"no such rank(s) {unknown} in a job of {world}")
        remaining = max(0.1, timeout - (time.monotonic() - started))
        try:
            sent_at = time.monotonic()
            command_id, replies = self.requests.ask(cmd, expected, args, only=list(expected) if ranks else None, timeout=remaining)
        except RuntimeError as exc:
            raise RequestError(str(exc)) from None
        return Answers(command_id, expected, replies, time.monotonic() - sent_at)

    def set_rate_when_ready(self, hz: float) -> threading.Thread:
        """Ask every rank to send ``hz`` messages a second (signed set_rate), once a relay and the job are known.

        On its own thread with its own command sockets (ZeroMQ sockets stay on the
        thread that made them), so the TUI starts at once; a failure is said in
        the status line. The rate is the ranks' own: it holds for every watcher of
        the job until someone sets another (``--rate``).
        """

        def run() -> None:
            main = self.requests
            if not main.available:
                self.aggregator.note_error(f"--rate {hz:g} not sent: {main.unavailable_reason}")
                return
            self.wait_until(main.ready, RATE_REQUEST_WAIT_S)
            requests = Requests(main.job, main.secret, self.aggregator.requests, on_error=self.aggregator.note_error)
            try:
                time.sleep(0.5)  # the relays' subscriptions settle
                for url in main.endpoints():
                    requests.add_endpoint(url)
                requests.send("set_rate", {"hz": hz})
            except Exception as exc:  # a request that fails is said in the status line, never a crash
                self.aggregator.note_error(f"--rate {hz:g} not sent: {exc}")
            finally:
                time.sleep(0.5)  # let the frames leave before the sockets close
                requests.close()

        thread = threading.Thread(target=run, name="ranktop-rate-request", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self.receiver.stop()
        self.requests.close()
        if self.recorder is not None:
            self.recorder.close()

    def __enter__(self) -> "WatchSession":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
