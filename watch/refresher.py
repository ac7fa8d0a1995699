"""Snapshots taken on a thread of their own, at the screen's refresh rate or the job's pace, whichever is slower.

Building a snapshot of a big job is real work (thousands of ranks); done on
the UI's event loop, it would freeze keys and drawing for as long. The
:class:`Refresher` takes them on its own thread and hands each one over
through a callback (the TUI passes one that posts to its event loop). The
next snapshot is taken only once the previous one was handed over, so a slow
screen slows the refresh instead of queueing snapshots, and a slow snapshot
delays the next instead of piling up behind it.

A snapshot is taken no more often than what it shows can change
(:func:`period_s`): a job watched in node digests changes once per digest
interval, once a second at 2,048 nodes (wire/pacing.py ``digest_hz``),
and a snapshot between two digests would cost as much (a tenth of a second
of CPU at 16,384 ranks) to show the same steps.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ranktop.watch.model.snapshot import Snapshot

#: After a snapshot that took T seconds, the next starts at least this many times T later.
BUSY_RATIO = 2.0


def period_s(refresh_hz: float, changes_every_s: float = 0.0) -> float:
    """Seconds from one snapshot to the next: the screen's period, or the interval at which the source's data
    changes (a :class:`~ranktop.watch.model.snapshot.PacedSource`'s ``changes_every_s``) where that is longer.
    The TUI's refresher and benchmarks/scale.py pace their snapshots by this one rule."""
    return max(1.0 / refresh_hz, changes_every_s)


def checked_rate(refresh_hz: float) -> float:
    """``refresh_hz`` as given, or ValueError: a screen's refresh rate is a positive number of times a second."""
    if not refresh_hz > 0:
        raise ValueError(f"refresh_hz must be positive, not {refresh_hz!r}")
    return refresh_hz


class Refresher(threading.Thread):
    def __init__(
        self,
        take: Callable[[], Snapshot],
        refresh_hz: float,
        deliver: Callable[[Snapshot | None, BaseException | None], None],
        changes_every_s: Callable[[], float] | None = None,
    ):
        """``take`` builds a snapshot; ``deliver(snapshot, None)`` or ``deliver(None, error)`` receives each;
        ``changes_every_s()``, read before each wait, how often the data changes at most (:func:`period_s`:
        a live job's pace is learnt as its relays are found)."""
        super().__init__(name="ranktop-refresher", daemon=True)
        self._take = take
        self._refresh_hz = checked_rate(refresh_hz)
        self._changes_every_s = changes_every_s
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

    @property
    def period_s(self) -> float:
        """Seconds from one snapshot to the next now (:func:`period_s`), a slow snapshot's spacing aside."""
        pace = self._changes_every_s
        return period_s(self._refresh_hz, pace() if pace is not None else 0.0)

    def run(self) -> None:
        next_at = time.monotonic() + self.period_s
        while not self._stop_event.wait(max(0.0, next_at - time.monotonic())):
            next_at = max(next_at + self.period_s, time.monotonic())  # never a burst to catch up
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
