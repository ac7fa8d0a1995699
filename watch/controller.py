"""Signed commands from this TUI to every rank of the job, one PUSH socket per relay.

One PUSH socket per relay, because a single PUSH connected to several relays
would deal commands out round-robin instead of giving each node a copy. Sockets
are created lazily on the thread that sends (the UI thread, or the CLI's main
thread): ZeroMQ sockets must stay on one thread.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import zmq

from ranktop.wire import auth

from ranktop.watch.aggregator import Aggregator


class Controller:
    def __init__(
        self,
        job: str | None,
        secret: bytes | None,
        aggregator: Aggregator,
        load_secret: Callable[[], bytes | None] | None = None,
    ):
        self._job = job
        self._secret = secret
        # A job that is still starting may not have written its secret yet: look again when needed.
        self._load_secret = load_secret
        self._aggregator = aggregator
        self._context = zmq.Context()
        self._lock = threading.Lock()
        self._urls: list[str] = []
        self._sockets: dict[str, zmq.Socket] = {}

    @property
    def available(self) -> bool:
        if self._secret is None and self._load_secret is not None:
            self._secret = self._load_secret()
        return self._secret is not None

    @property
    def secret(self) -> bytes | None:
        return self._secret if self.available else None

    def endpoints(self) -> list[str]:
        """The relays' control URLs known so far."""
        with self._lock:
            return list(self._urls)

    @property
    def unavailable_reason(self) -> str:
        return "read-only: no job secret (RANKTOP_SECRET or the job's rendezvous folder), commands disabled"

    def add_endpoint(self, url: str) -> None:
        """Called from the receiver thread as relays are discovered."""
        with self._lock:
            if url not in self._urls:
                self._urls.append(url)

    def send(self, cmd: str, args: dict | None = None, ranks: list[int] | None = None) -> str:
        """Sign and send a command to every known relay; returns its id (replies quote it)."""
        if not self.available:
            raise PermissionError(self.unavailable_reason)
        job = self._job or self._aggregator.snapshot().job
        if job is None:
            raise RuntimeError("no rank has reported yet: the job is unknown, nothing to command")
        with self._lock:
            urls = list(self._urls)
        if not urls:
            raise RuntimeError("no relay control endpoint known yet")
        command_id, frames = auth.sign_command(self._secret, job, cmd, args, ranks)
        self._aggregator.note_sent(command_id)
        self.send_frames(frames, urls)
        return command_id

    def send_by(self, deadline: float, cmd: str, args: dict | None = None, ranks: list[int] | None = None) -> str:
        """:meth:`send`, tried again until ``deadline`` (``time.monotonic()``) while it cannot be sent yet:
        a relay's control endpoint, or the job's name, may be learnt a moment after the first hello.
        Past the deadline the last ``RuntimeError`` is raised."""
        while True:
            try:
                return self.send(cmd, args, ranks)
            except RuntimeError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def send_frames(self, frames: list[bytes], urls: list[str] | None = None) -> None:
        """Push frames to every relay (tests use it to replay or forge commands)."""
        if urls is None:
            with self._lock:
                urls = list(self._urls)
        for url in urls:
            sock = self._sockets.get(url)
            if sock is None:
                sock = self._sockets[url] = self._context.socket(zmq.PUSH)
                sock.setsockopt(zmq.LINGER, 500)
                sock.setsockopt(zmq.SNDHWM, 100)
                sock.connect(url)
            try:
                sock.send_multipart(frames, flags=zmq.NOBLOCK)
            except zmq.Again:
                self._aggregator.note_error(f"relay {url} is not taking commands (queue full)")

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()
        self._context.term()
