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
  ``Stream.record_event`` and ``Stream.wait_stream`` call) takes the stream's
  open collectives with it (stream order: it completes after them);
- the compute stream's wait on such an event (``Event.wait``, which
  ``Stream.wait_event`` and ``wait_stream`` call) is timed by two events of the
  pool on the compute stream around it: the stall, the wait of the last of
  those collectives, in the step and phase where the compute stream waited
  (the others end inside it: their wait is 0);
- a collective no compute-stream wait covers (its event dropped, or waited for
  by another side stream only) keeps its host time: it held the compute
  stream up nowhere the probe saw.

``torch.cuda.Event.record`` and ``.wait`` are wrapped once, class-wide
(:func:`watch_events`); while no collective is open on a side stream their
wrappers cost ``is_compiling()`` and a dict's truth test. The training thread alone opens, tags and
closes; the sender thread only reads what :class:`~.device_waits.DeviceWaits`
queues.
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
#: Seconds a collective stays open on its side stream, waiting for an event to be recorded there after it.
OPEN_S = 30.0


class SideStreams:
    """Collectives waited for on side streams, until the compute stream waits for them (see the module)."""

    def __init__(self, waits: Any, where: Callable[[], tuple] | None = None):
        self.waits = waits  # the DeviceWaits: its pool, its compute stream, its queue to the sender
        self.where = where  # () -> (step, phase) now, on the training thread
        self.open: dict[Any, list[list]] = {}  # side stream -> [[record, kernel events or None, opened at]]
        self.tagged: dict[int, tuple] = {}  # id(event) -> (weak ref to it, [entries] it covers)
        self.count = 0  # entries open or tagged
        self.matched = 0  # collectives whose wait was the compute stream's stall on an event

    # -- the training thread ---------------------------------------------------------

    def opened(self, stream: Any, record: dict[str, Any], kernel: tuple | None) -> None:
        """A collective's wait is on ``stream``, a side stream: its record waits for the compute stream's."""
        now = _perf()
        entries = self.open.setdefault(stream, [])
        if entries and now - entries[0][2] > OPEN_S:  # no event recorded there after it for long: never waited on
            stale = [e for e in entries if now - e[2] > OPEN_S]
            del entries[: len(stale)]
            self._release(stale)
        if self.count >= MAX_OPEN:
            self._release_oldest()
        entries.append([record, kernel, now])
        self.count += 1

    def recorded(self, event: Any, stream: Any) -> None:
        """``event`` was recorded on ``stream``: it completes after the collectives open there, and takes them."""
        entries = self.open.pop(stream, None)
        if not entries:
            return
        key = id(event)
        try:
            ref = weakref.ref(event, lambda _r: self._dropped(key))
        except TypeError:
            self.open[stream] = entries
            return
        old = self.tagged.pop(key, None)
        if old is not None:  # the event is recorded again: what it covered before is covered by this record too
            entries = old[1] + entries
        self.tagged[key] = (ref, entries)

    def waiting(self, event: Any, stream: Any) -> list | None:
        """The entries ``event`` covers, if ``stream`` (where it is waited for) is the compute stream; taken."""
        item = self.tagged.get(id(event))
        if item is None or item[0]() is not event or stream != self.waits.compute:
            return None
        del self.tagged[id(event)]
        return item[1]

    def waited(self, entries: list, wait: Callable[[], Any]) -> Any:
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
            for record, kernel, _ in entries[:-1]:
                record["d"] = 0.0
                waits.queue(record, None, None, kernel)
            self.count -= len(entries)
            if start is None:
                waits.queue(last, None, None, entries[-1][1])
            else:
                self.matched += 1
                waits.finish(last, start, entries[-1][1])

    def _dropped(self, key: int) -> None:
        item = self.tagged.pop(key, None)
        if item is not None:
            self._release(item[1])

    def _release(self, entries: list) -> None:
        """Entries no compute-stream wait covered: each with its host time (and its kernel's, where known)."""
        for record, kernel, _ in entries:
            self.waits.queue(record, None, None, kernel)
        self.count -= len(entries)

    def _release_oldest(self) -> None:
        oldest = min((e[0][2], s) for s, e in self.open.items() if e) if any(self.open.values()) else None
        if oldest is not None:
            entries = self.open[oldest[1]]
            self._release([entries.pop(0)])
            return
        key = next(iter(self.tagged), None)
        if key is not None:
            self._dropped(key)

    def release_all(self) -> None:
        """Every entry with its host time (the probe flushes at shutdown)."""
        opened, self.open = self.open, {}
        for entries in opened.values():
            self._release(entries)
        for key in list(self.tagged):
            self._dropped(key)


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
    def record_event(self, stream=None):
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
    def wait_event(self, stream=None):
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
        fn._ranktop_sides = True
    event_class.record, event_class.wait = record_event, wait_event


def unwatch() -> None:
    """Every ``Event.record``/``wait`` straight through again (the probe was switched off)."""
    global _sides
    _sides = None


dynamo_guard.keep_out(SideStreams.opened, SideStreams.recorded, SideStreams.waiting, recursive=True)
