"""Snapshots taken on a thread of their own, at the screen's refresh rate.

Building a snapshot of a big job is real work (thousands of ranks); done on
the UI's event loop, it would freeze keys and drawing for as long. The
:class:`Refresher` takes them on its own thread and hands each one over
through a callback (the TUI passes one that posts to its event loop). The
next snapshot is taken only once the previous one was handed over, so a slow
screen slows the refresh instead of queueing snapshots, and a slow snapshot
delays the next instead of piling up behind it.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ranktop.watch.model.snapshot import Snapshot

#: After a snapshot that took T seconds, the next starts at least this many times T later.
BUSY_RATIO = 2.0


class Refresher(threading.Thread):
    def __init__(
        self,
        take: Callable[[], Snapshot],
        refresh_hz: float,
        deliver: Callable[[Snapshot | None, BaseException | None], None],
    ):
        """``take`` builds a snapshot; ``deliver(snapshot, None)`` or ``deliver(None, error)`` receives each."""
        super().__init__(name="ranktop-refresher", daemon=True)
        if not refresh_hz > 0:
            raise ValueError(f"refresh_hz must be positive, not {refresh_hz!r}")
        self._take = take
        self._period = 1.0 / refresh_hz
        self._deliver = deliver
        self._stop_event = threading.Event()
        self.took_s: float | None = None  # how long the last snapshot took to build

    @property
    def stopping(self) -> bool:
        """Asked to stop: a ``deliver`` that waits (for its snapshot to be drawn) gives up."""
        return self._stop_event.is_set()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        next_at = time.monotonic() + self._period
        while not self._stop_event.wait(max(0.0, next_at - time.monotonic())):
            next_at = max(next_at + self._period, time.monotonic())  # never a burst to catch up
            started = time.perf_counter()
            try:
                snapshot, error = self._take(), None
            except Exception as exc:  # the screen says what broke and keeps the last good snapshot
                snapshot, error = None, exc
            self.took_s = time.perf_counter() - started
            # A snapshot of thousands of ranks holds the interpreter for a while; the receiver needs it too
            # (decoding is what keeps the picture current). So snapshots take at most a third of the time:
            # a slow one spaces the next out rather than starve the receiver into falling behind.
            next_at = max(next_at, time.monotonic() + BUSY_RATIO * self.took_s)
            if self._stop_event.is_set():
                return
            try:
                self._deliver(snapshot, error)
            except Exception:
                return  # the receiving side has gone (the app shut down)
