"""Why a rank may be slow, as figures its peers can be held against: time in the garbage collector, waits for a CPU.

The viewer names a slow rank and its phase from the step times; these figures
say why (watch/analysis/causes.py compares each with the rank's peers'). Each
is a rate over the last :data:`WINDOW_S` seconds, so the viewer, which keeps a
rank's latest state only, compares like with like:

- ``gc``: seconds per second the training thread spent in Python's garbage
  collector. ``gc.callbacks`` marks each collection's start and stop; only the
  training thread's collections are timed (a DataLoader thread's are not the
  step's). The callback adds two floats: no lock, no allocation worth the name.
- ``runq`` and ``nvcsw``: seconds per second the training thread waited on a
  run queue for a CPU (``/proc/self/task/<tid>/schedstat``, second field) and
  its involuntary context switches per second (``.../status``): a busy process
  on its core shows there first. Read by the sender thread (Linux only;
  elsewhere the fields are left out).

Everything but the GC callback runs on the sender thread with each state
(:meth:`Evidence.sample`), at most every :data:`SAMPLE_EVERY_S`.
"""

from __future__ import annotations

import collections
import gc
import threading
import time
from typing import Any

#: The window the rates are over: long enough to smooth a step's noise, short enough to follow a change.
WINDOW_S = 10.0
#: How often the counters are read (the state goes more often; between reads it carries the last figures).
SAMPLE_EVERY_S = 0.5
#: The fewest seconds of counters a rate is given over: a first rate over a tenth of a second says little.
MIN_SPAN_S = 1.0


class GcTimer:
    """Seconds the training thread spent in the garbage collector, and its collections, as running totals."""

    def __init__(self, thread_ident: int):
        self.thread = thread_ident
        self.seconds = 0.0  # written by the training thread only, read by the sender (a float: atomic)
        self.collections = 0
        self._started = 0.0
        self._installed = False

    def __call__(self, phase: str, info: dict) -> None:
        # The training thread, inside every collection: two comparisons and an add; never an exception out.
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self.seconds += time.perf_counter() - self._started
            self.collections += 1
            self._started = 0.0

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self)
            self._installed = True

    def remove(self) -> None:
        if self._installed:
            self._installed = False
            try:
                gc.callbacks.remove(self)
            except ValueError:
                pass


def read_sched(native_id: int) -> tuple[float, int] | None:
    """The thread's run-queue wait (seconds, since it began) and involuntary context switches, or None where
    /proc does not say them (not Linux, schedstats off)."""
    base = f"/proc/self/task/{native_id}/"
    try:
        with open(base + "schedstat", "rb") as f:
            wait_ns = int(f.read().split()[1])
        with open(base + "status", "rb") as f:
            for line in f:
                if line.startswith(b"nonvoluntary_ctxt_switches:"):
                    return wait_ns / 1e9, int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class Evidence:
    """The rates a rank's state carries as ``ev`` (wire/messages.py ``Evidence``), from running totals kept over
    :data:`WINDOW_S`. Built on the training thread (which it times), sampled by the sender thread."""

    def __init__(self, thread_ident: int | None = None, native_id: int | None = None, *, clock=time.monotonic):
        self.gc = GcTimer(threading.get_ident() if thread_ident is None else thread_ident)
        self.native_id = threading.get_native_id() if native_id is None else native_id
        self._clock = clock
        self._totals: collections.deque[tuple[float, float, int, float | None, int | None]] = collections.deque()
        self._next = 0.0
        self._latest: dict[str, Any] | None = None

    def start(self) -> None:
        self.gc.install()

    def stop(self) -> None:
        self.gc.remove()

    def sample(self) -> dict[str, Any] | None:
        """The rates over the window, read now if the last read is :data:`SAMPLE_EVERY_S` old (the sender thread)."""
        now = self._clock()
        if now < self._next:
            return self._latest
        self._next = now + SAMPLE_EVERY_S
        sched = read_sched(self.native_id)
        runq, switches = sched if sched is not None else (None, None)
        totals = self._totals
        totals.append((now, self.gc.seconds, self.gc.collections, runq, switches))
        while len(totals) > 2 and now - totals[1][0] >= WINDOW_S:
            totals.popleft()
        self._latest = rates(totals[0], totals[-1])
        return self._latest


def rates(first: tuple, last: tuple) -> dict[str, Any] | None:
    """Per second between two readings of the totals ``(t, gc_s, gc_n, runq_s, nvcsw)``; None below :data:`MIN_SPAN_S`."""
    span = last[0] - first[0]
    if span < MIN_SPAN_S:
        return None
    out: dict[str, Any] = {
        "win": span,
        "gc": max(0.0, (last[1] - first[1]) / span),
        "gc_n": max(0.0, (last[2] - first[2]) / span),
    }
    if first[3] is not None and last[3] is not None:
        out["runq"] = max(0.0, (last[3] - first[3]) / span)
        out["nvcsw"] = max(0.0, (last[4] - first[4]) / span)
    return out
