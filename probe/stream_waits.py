"""The compute stream's waits for collectives that ran, or were waited for, on a side stream.

FSDP2 all-gathers (and reduce-scatters) with ``async_op=False`` inside
``with stream(side)``: the kernel runs after the side stream's work and only
that stream waits for it. FSDP2 records an event on the side stream right
after the collective (``all_gather_stream.record_event()``), and the compute
stream waits for it where the parameters are needed: ``wait_for_unshard`` ->
``foreach_all_gather_copy_out`` -> ``current_stream().wait_event(event)``
(torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py). A script can do
the same with an async collective: ``with stream(side): work.wait()``, then
``compute.wait_stream(side)``. Either way the side stream's own wait stalls no
training; the compute stream's wait on the event does, and that stall is the
collective's wait here:

- a collective whose wait is on a side stream is *opened* on that stream
  (:meth:`SideStreams.opened`), with its kernel's events where known (the
  link's time, not a wait);
- an event recorded on that stream afterwards (``Event.record``, which
  ``Stream.record_event`` and ``Stream.wait_stream`` call) covers the stream's
  open collectives (stream order: it completes after them), and so does every
  later one, until one of them is waited for on the compute stream;
- the compute stream's wait on such an event (``Event.wait``, which
  ``Stream.wait_event`` and ``wait_stream`` call) is timed by two events of the
  pool on the compute stream around it: the stall, the wait of the last of
  those collectives, in the step and phase where the compute stream waited
  (the others end inside it: their wait is 0);
- a collective no compute-stream wait covers within :data:`OPEN_S` (its events
  dropped, or waited for by another side stream only) keeps its host time: it
  held the compute stream up nowhere the probe saw.

``torch.cuda.Event.record`` and ``.wait`` are wrapped once, class-wide
(:func:`watch_events`); while no collective is open on a side stream their
wrappers cost ``is_compiling()`` and a dict's truth test. The training thread
alone opens, covers and closes; the sender thread only reads what
:class:`~.device_waits.DeviceWaits` queues.
"""

from __future__ import annotations

import functools
import time
import weakref
from typing import Any, Callable

from . import dynamo_guard

_perf = time.perf_counter

#: Collectives open on side streams, at most (past it the oldest go with their host time).
MAX_OPEN = 1024
#: Seconds a collective stays open on its side stream, waiting for the compute stream to wait for it (FSDP2's are
#: waited for within the step); past it it goes with its host time.
OPEN_S = 10.0


#: An entry: ``[record, kernel events or None, opened at, done]`` (a list: ``done`` is set in place).
Entry = list[Any]


class SideStreams:
    """Collectives waited for on side streams, until the compute stream waits for them (see the module).

    An entry is ``[record, kernel events or None, opened at, done]``. It stays open on its stream until a
    compute-stream wait covers it: every event recorded on that stream meanwhile covers it (stream order), so
    FSDP2's reduce-scatter is covered by its ``reduce_scatter_event`` and by the ``post_reduce_event`` recorded
    after it, whichever the compute stream waits for first."""

    def __init__(self, waits: Any, where: Callable[[], tuple[Any, ...]] | None = None):
        self.waits = waits  # the DeviceWaits: its pool, its compute stream, its queue to the sender
        self.where = where  # () -> (step, phase) now, on the training thread
        self.open: dict[Any, list[Entry]] = {}  # side stream -> its entries not yet waited for, oldest first
        self.tagged: dict[int, tuple[weakref.ref[Any], list[Entry]]] = {}  # id(event) -> (weak ref to it, [entries] it covers)
        self.count = 0  # entries open
        self.matched = 0  # collectives whose wait was the compute stream's stall on an event

    # -- the training thread ---------------------------------------------------------

    def opened(self, stream: Any, record: dict[str, Any], kernel: tuple[Any, ...] | None) -> None:
        """A collective's wait is on ``stream``, a side stream: its record waits for the compute stream's."""
        now = _perf()
        self._expire(now)
        self.open.setdefault(stream, []).append([record, kernel, now, False])
        self.count += 1

    def recorded(self, event: Any, stream: Any) -> None:
        """``event`` was recorded on ``stream``: it completes after every collective open there, and covers them
        (a record replaces what an event covered before, as CUDA's does)."""
        entries = self.open.get(stream)
        if not entries:
            self.tagged.pop(id(event), None)
            return
        key, tagged = id(event), self.tagged
        try:
            ref = weakref.ref(event, lambda _r: tagged.pop(key, None))  # a dropped event covers nothing
        except TypeError:
            return
        tagged[key] = (ref, list(entries))

    def waiting(self, event: Any, stream: Any) -> list[Entry] | None:
        """The open entries ``event`` covers, if ``stream`` (where it is waited for) is the compute stream;
        they are closed (a later wait covering them is no wait of theirs)."""
        item = self.tagged.get(id(event))
        if item is None or item[0]() is not event or stream != self.waits.compute:
            return None
        del self.tagged[id(event)]
        entries = [e for e in item[1] if not e[3]]
        if not entries:
            return None
        for entry in entries:
            entry[3] = True
        for side, kept in list(self.open.items()):
            kept[:] = [e for e in kept if not e[3]]
            if not kept:
                del self.open[side]
        self.count -= len(entries)
        return entries

    def waited(self, entries: list[Entry], wait: Callable[[], Any]) -> Any:
        """The compute stream waits for ``entries``' event (``wait()``): the stall, timed by two of the pool's
        events around it, is the wait of the last of them; the others end inside it (0)."""
        waits = self.waits
        start = waits.start(stream=waits.compute)  # (the thread's current stream may be a side stream)
        try:
            return wait()
        finally:
            last = entries[-1][0]
            if start is not None and self.where is not None:
                last["n"], last["ph"] = self.where()
            for record, kernel, *_ in entries[:-1]:
                record["d"] = 0.0
                waits.queue(record, None, None, kernel)
            if start is None:
                waits.queue(last, None, None, entries[-1][1])
            else:
                self.matched += 1
                waits.finish(last, start, entries[-1][1])

    def _expire(self, now: float) -> None:
        """Entries open past :data:`OPEN_S` (never waited for on the compute stream), and the oldest past
        :data:`MAX_OPEN`, go with their host time."""
        for side, entries in list(self.open.items()):
            while entries and now - entries[0][2] > OPEN_S:
                self._release([entries.pop(0)])
            if not entries:
                del self.open[side]
        while self.count >= MAX_OPEN and self.open:
            side = min(self.open, key=lambda s: self.open[s][0][2])
            self._release([self.open[side].pop(0)])
            if not self.open[side]:
                del self.open[side]

    def _release(self, entries: list[Entry]) -> None:
        """Entries no compute-stream wait covered: each with its host time (and its kernel's, where known)."""
        for entry in entries:
            entry[3] = True
            self.waits.queue(entry[0], None, None, entry[1])
        self.count -= len(entries)

    def release_all(self) -> None:
        """Every entry with its host time (the probe flushes at shutdown)."""
        opened, self.open = self.open, {}
        self.tagged.clear()
        for entries in opened.values():
            self._release(entries)


# -- Event.record and Event.wait, class-wide, once -------------------------------------

_sides: SideStreams | None = None


def watch_events(event_class: Any, current_stream: Callable[[], Any], sides: SideStreams | None) -> None:
    """Route ``event_class.record``/``.wait`` past ``sides`` (idempotent; None passes them straight through).

    ``current_stream``: what ``record()``/``wait()`` with no stream use (``torch.cuda.current_stream``)."""
    global _sides
    _sides = sides
    if getattr(event_class.record, "_ranktop_sides", False):
        return
    record, wait = event_class.record, event_class.wait

    @functools.wraps(record)
    def record_event(self: Any, stream: Any = None) -> Any:
        if dynamo_guard.is_compiling():  # first: traced, nothing of ours is read (no guard, no recompile)
            return record(self, stream)
        sides = _sides
        if sides is None or not sides.open or getattr(self, "_ranktop", False):
            return record(self, stream)
        result = record(self, stream)
        try:
            sides.recorded(self, stream if stream is not None else current_stream())
        except Exception:
            pass
        return result

    @functools.wraps(wait)
    def wait_event(self: Any, stream: Any = None) -> Any:
        if dynamo_guard.is_compiling():
            return wait(self, stream)
        sides = _sides
        if sides is None or not sides.tagged:
            return wait(self, stream)
        try:
            entries = sides.waiting(self, stream if stream is not None else current_stream())
        except Exception:
            entries = None
        if entries is None:
            return wait(self, stream)
        return sides.waited(entries, lambda: wait(self, stream))

    for fn in (record_event, wait_event):
        dynamo_guard.keep_out(fn)
        setattr(fn, "_ranktop_sides", True)  # the mark that makes this idempotent (a function's own attribute)
    event_class.record, event_class.wait = record_event, wait_event


def unwatch() -> None:
    """Every ``Event.record``/``wait`` straight through again (the probe was switched off)."""
    global _sides
    _sides = None


dynamo_guard.keep_out(SideStreams.opened, SideStreams.recorded, SideStreams.waiting, recursive=True)
