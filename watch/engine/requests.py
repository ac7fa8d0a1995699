"""Commands to the ranks and their answers: the one owner of both.

:class:`RequestBook` is pure bookkeeping, fed by the aggregator on the receiver
thread: which commands this viewer sent, every rank's answer to each of the
last few of them (however many ranks: a 4,096-rank ping keeps 4,096 answers),
and a condition that wakes whoever waits for those answers, instead of
polling. :class:`Requests` signs and sends commands, one PUSH socket per
relay, and waits on the book: ``ranktop ping``, ``stacks``, ``capture``,
``memsnap``, ``--rate``, the status line and the TUI's screens all go through it.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Iterable

import zmq

from ranktop.watch.engine import keys
from ranktop.watch.model.answers import Answer, RequestStatus
from ranktop.watch.errors import RanktopError
from ranktop.wire import auth

#: Our own commands whose answers are all kept (the oldest is forgotten first).
MAX_COMMANDS_KEPT = 8
#: How many times a second a waiter may re-check a condition that needs a snapshot.
CHECKS_PER_S = 10


class RequestError(RanktopError):
    """A command that cannot be sent, or that no rank could be asked (no secret, no rank, no relay)."""


class _Sent:
    __slots__ = ("cmd", "at", "replies")

    def __init__(self, cmd: str, at: float):
        self.cmd = cmd
        self.at = at
        self.replies: dict[int, Answer] = {}


class RequestBook:
    """What was sent and what came back, shared by the receiver thread (answers) and any waiter."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, keep: int = MAX_COMMANDS_KEPT):
        self._clock = clock
        self._origin = clock()
        self._keep = keep
        self._sent: collections.OrderedDict[str, _Sent] = collections.OrderedDict()
        self._changed = threading.Condition()
        self._generation = 0  # bumped by every answer and every readiness change: waiters compare it

    def note_sent(self, command_id: str, cmd: str = "") -> None:
        with self._changed:
            self._sent[command_id] = _Sent(cmd, self._clock())
            while len(self._sent) > self._keep:
                self._sent.popitem(last=False)

    def note_reply(self, command_id: str, cmd: str, rank: int, ok: bool, result: dict[str, Any]) -> Answer:
        """Record one rank's answer; the :class:`~ranktop.watch.model.answers.Answer` (with its round trip when the command was ours)."""
        with self._changed:
            sent = self._sent.get(command_id)
            reply = Answer(command_id, cmd, rank, ok, result, None if sent is None else self._clock() - sent.at)
            if sent is not None:
                sent.replies[rank] = reply
                self._generation += 1
                self._changed.notify_all()
            return reply

    def poke(self) -> None:
        """Something a waiter may be waiting for changed (a relay or the job's name became known)."""
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def replies_to(self, command_id: str) -> list[Answer]:
        """Every rank's answer to one of our last commands, by rank."""
        with self._changed:
            sent = self._sent.get(command_id)
            return sorted(sent.replies.values(), key=lambda r: r.rank) if sent is not None else []

    def statuses(self) -> list[RequestStatus]:
        """The tally of each command still kept, oldest first."""
        with self._changed:
            return [RequestStatus.count(cid, sent.cmd, sent.at - self._origin, sent.replies) for cid, sent in self._sent.items()]

    def wait_replies(self, command_id: str, ranks: Iterable[int], timeout: float) -> list[Answer]:
        """Block until each of ``ranks`` answered ``command_id`` (or ``timeout`` passed); every answer so far."""
        expected = set(ranks)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                sent = self._sent.get(command_id)
                if sent is None or expected <= sent.replies.keys():
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
        return self.replies_to(command_id)

    def wait_until(self, test: Callable[[], bool], timeout: float) -> bool:
        """Block until ``test()`` holds, re-checking whenever an answer or readiness change arrives.

        ``test`` runs outside the book's lock (it may take a snapshot), at most
        :data:`CHECKS_PER_S` times a second.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._changed:
                generation = self._generation
            if test():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._changed:
                if self._generation == generation:
                    self._changed.wait(min(remaining, 1.0 / CHECKS_PER_S))


class Requests:
    """Sign and send commands to every rank (one PUSH socket per relay), and wait for their answers.

    One PUSH socket per relay, because a single PUSH connected to several relays
    would deal commands out round-robin instead of giving each node a copy.
    Sockets are made lazily on the thread that sends: ZeroMQ sockets stay on one
    thread, so a command sent from another thread (``--rate``) uses its own
    :class:`Requests` over the same book.
    """

    def __init__(
        self,
        job: str | None,
        secret: bytes | None,
        book: RequestBook,
        load_secret: Callable[[], bytes | None] | None = None,
        job_of: Callable[[], str | None] | None = None,
        on_error: Callable[[str], None] | None = None,
    ):
        self._job = job
        self._secret = secret
        # A job that is still starting may not have written its secret yet: look again when needed.
        self._load_secret = load_secret
        self._job_of = job_of  # the job's name as the first message said it, for targets given by URL
        self._on_error = on_error
        self.book = book
        self._context = zmq.Context()
        self._lock = threading.Lock()
        self._urls: list[str] = []
        self._known: set[str] = set()  # the same, to ask (a relay's address rides in each of its digests)
        self._sockets: dict[str, zmq.Socket[bytes]] = {}

    @property
    def available(self) -> bool:
        if self._secret is None and self._load_secret is not None:
            self._secret = self._load_secret()
        return self._secret is not None

    @property
    def secret(self) -> bytes | None:
        return self._secret if self.available else None

    @property
    def unavailable_reason(self) -> str:
        return "read-only: no job secret (RANKTOP_SECRET or the job's rendezvous folder), commands disabled"

    @property
    def job(self) -> str | None:
        return self._job or (self._job_of() if self._job_of is not None else None)

    def endpoints(self) -> list[str]:
        """The relays' control URLs known so far."""
        with self._lock:
            return list(self._urls)

    def add_endpoint(self, url: str) -> None:
        """Called from the receiver thread as relays are discovered."""
        with self._lock:
            if url in self._known:
                return
            self._known.add(url)
            self._urls.append(url)
        self.book.poke()

    def ready(self) -> bool:
        """A command can go out: the job's name and at least one relay are known."""
        return self.job is not None and bool(self.endpoints())

    def send(self, cmd: str, args: dict[str, Any] | None = None, ranks: list[int] | None = None, *, wait_s: float = 0.0) -> str:
        """Sign and send a command to every known relay; its id (answers quote it).

        ``wait_s``: how long to wait for the job's name and a relay, which may be
        learnt a moment after the first hello. Raises PermissionError without
        the job's secret, RuntimeError when it cannot be sent.
        """
        if not self.available:
            raise PermissionError(self.unavailable_reason)
        if wait_s > 0:
            self.book.wait_until(self.ready, wait_s)
        job = self.job
        if job is None:
            raise RuntimeError("no rank has reported yet: the job is unknown, nothing to command")
        urls = self.endpoints()
        if not urls:
            raise RuntimeError("no relay control endpoint known yet")
        secret = self._secret
        if secret is None:  # (available says so, above)
            raise PermissionError(self.unavailable_reason)
        command_id, frames = auth.sign_command(secret, job, cmd, args, ranks)
        self.book.note_sent(command_id, cmd)
        self.send_frames(frames, urls)
        return command_id

    def ask(
        self,
        cmd: str,
        ranks: Iterable[int],
        args: dict[str, Any] | None = None,
        *,
        only: list[int] | None = None,
        timeout: float,
        wait_s: float = 0.0,
    ) -> tuple[str, list[Answer]]:
        """Send ``cmd`` (to ``only`` those ranks, or all) and wait up to ``timeout`` for each of ``ranks`` to answer."""
        command_id = self.send(cmd, args, only, wait_s=wait_s)
        return command_id, self.book.wait_replies(command_id, ranks, timeout)

    def replies_to(self, command_id: str) -> list[Answer]:
        return self.book.replies_to(command_id)

    def send_frames(self, frames: list[bytes], urls: list[str] | None = None) -> None:
        """Push frames to every relay (tests use it to replay or forge commands)."""
        if urls is None:
            urls = self.endpoints()
        for url in urls:
            sock = self._sockets.get(url)
            if sock is None:
                sock = self._sockets[url] = self._context.socket(zmq.PUSH)
                sock.setsockopt(zmq.LINGER, 500)
                sock.setsockopt(zmq.SNDHWM, 100)
                keys.secure(sock, self.secret)  # CURVE, as the relay's control port demands (watch/engine/keys.py)
                sock.connect(url)
            try:
                sock.send_multipart(frames, flags=zmq.NOBLOCK)
            except zmq.Again:
                if self._on_error is not None:
                    self._on_error(f"relay {url} is not taking commands (queue full)")

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()
        self._context.term()
