"""Collective waits measured on the device: a pair of CUDA events around each wait, read later by the sender.

With NCCL the host never waits in a collective: a "blocking" ``all_reduce``
returns once the current stream has been told to wait for NCCL's, and
ProcessGroupNCCL marks its works and futures complete at enqueue. Timed on the
host, every collective reads tens of microseconds and a rank's own time is its
wall time. What a rank *waits* is the time its compute stream stands still
until the collective's kernel ends, so that is what is timed here:

- a blocking call: an event on the current stream before the call and one
  after it (the stream now waits for NCCL): the stall of the stream;
- an async call (``async_op=True``, ``isend``/``irecv``, functional
  collectives): the same two events around ``Work.wait()``, where the current
  stream joins (:func:`watch_work` patches ``Work.wait`` once, class-wide);
  a work that is never waited for, and a future (DDP's comm hook), end in the
  future's done-callback, which CUDA futures run on a stream that waits for the
  kernel: launch to completion, as the host path times it on gloo.

Events come from a pool made (and created on the device) once, on the training
thread; the training thread only records them. The sender thread asks them
``query()`` and turns complete pairs into the call's duration ``d`` and start
``t0`` (on the device's clock, put on the host's through one reference event,
so that overlapping waits are unioned right). Nothing ever synchronises the
device. A call made while the pool is empty, or during a CUDA-graph capture,
keeps its host time.

Graph captures: in CUDA's global capture mode an ``event.query()`` from *any*
thread during a capture is an error that also ruins the capture. :data:`CAPTURES`
counts the captures in progress (``CUDAGraph.capture_begin``/``capture_end``
are wrapped once); the sender queries only under its lock and while none is,
and capture_begin (never on a hot path) takes the same lock for a moment.

Wrappers (probe/dist_wrappers.py, and new ones: point-to-point, functional
collectives) need nothing of this module: ``CollectiveTracker.begin`` records
the start, ``CollectiveTracker.end`` the end of a blocking call, and
``CollectiveTracker.complete(token, work)`` the end of an async one; a
functional collective, whose wait is ``wait_tensor``, calls
``CollectiveTracker.at_wait(token)`` before it and ``end(token)`` after.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import time
import weakref
from typing import Any, Callable

from . import dynamo_guard

_perf = time.perf_counter

#: Events made up front for collective waits: two per call, so this many calls in flight.
POOL_SIZE = 4096
#: Seconds after which a resolved call's start event becomes the new reference for ``t0``: CUDA's
#: ``elapsed_time`` is a float32 of milliseconds, 0.25 ms coarse an hour from its reference.
EPOCH_S = 60.0
#: Pending waits kept at most; past it the oldest go with their host time (a device hung for long).
MAX_PENDING = 8192


class CaptureGuard:
    """Whether a CUDA graph is being captured; the sender queries events only under :meth:`quiet`.

    Two ways to know: the captures the probe's wrappers see begin and end (``torch.cuda.CUDAGraph`` and
    ``torch.accelerator.Graph``, :func:`guard_captures`: ``depth``), and, for a capture begun where no wrapper
    sees it (in C++: a library's own, ``torch._C._CUDAGraph`` used directly), what CUDA says when the training
    thread asks before recording an event (:meth:`active`, with :attr:`check` set at attach): a capture seen
    that way is ``external`` until the training thread sees none, and the sender queries nothing meanwhile."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.external = False
        #: () -> whether the training device's current stream is capturing (``torch.cuda.is_current_stream_capturing``
        #: under that device's guard): set when device timing attaches, asked on the training thread only.
        self.check: Any = None

    def begin(self) -> None:
        with self.lock:  # waits at most for one batch of the sender's queries (microseconds)
            self.depth += 1

    def end(self) -> None:
        with self.lock:
            self.depth = max(0, self.depth - 1)

    def quiet(self) -> _Quiet:
        """A context whose value says whether events may be queried now (no capture in progress)."""
        return _Quiet(self)

    def active(self) -> bool:
        """Whether a capture runs now: what the training thread asks before recording an event (an event recorded
        into a capture is an error that ruins it). A wrapped capture is a plain read; else CUDA is asked."""
        if self.depth > 0:
            return True
        check = self.check
        if check is None:
            return False
        try:
            capturing = bool(check())
        except Exception:
            capturing = False
        if capturing != self.external:
            with self.lock:  # the sender is not between two queries when the flag changes
                self.external = capturing
        return capturing


class _Quiet:
    __slots__ = ("guard",)

    def __init__(self, guard: CaptureGuard):
        self.guard = guard

    def __enter__(self) -> bool:
        self.guard.lock.acquire()
        return self.guard.depth == 0 and not self.guard.external

    def __exit__(self, *exc: object) -> None:
        self.guard.lock.release()


#: The process's captures in progress (one per process, like the CUDA context).
CAPTURES = CaptureGuard()


def stream_capturing(cuda: Any, index: int | None) -> Any:
    """() -> whether ``index``'s current stream is capturing, asked of that device (the thread's current device
    may be another: asking there would open a context on it)."""

    def check() -> bool:
        if index is None or cuda.current_device() == index:
            return cuda.is_current_stream_capturing()
        with cuda.device(index):
            return cuda.is_current_stream_capturing()

    return check


def guard_captures(cuda: Any, accelerator: Any = None) -> None:
    """Wrap the ``capture_begin``/``capture_end`` of ``cuda.CUDAGraph`` and of ``accelerator.Graph``
    (``torch.accelerator``'s, where torch has it; ``with graph:`` calls them too) so :data:`CAPTURES` knows
    (idempotent)."""
    for graph in (getattr(cuda, "CUDAGraph", None), getattr(accelerator, "Graph", None)):
        if graph is not None and not getattr(graph, "_ranktop_guarded", False):
            _guard(graph)


def _guard(graph: Any) -> None:
    begin, end = graph.capture_begin, graph.capture_end

    @functools.wraps(begin)
    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        CAPTURES.begin()
        try:
            return begin(self, *args, **kwargs)
        except BaseException:
            CAPTURES.end()
            raise

    @functools.wraps(end)
    def capture_end(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return end(self, *args, **kwargs)
        finally:
            CAPTURES.end()

    graph.capture_begin, graph.capture_end = capture_begin, capture_end
    graph._ranktop_guarded = True


def make_events(cuda: Any, count: int) -> list[Any]:
    """``count`` timing events, created on the device now (a ``torch.cuda.Event`` is created at its first
    record): the hot path then never allocates. Call on the training thread, with its device current."""
    stream = cuda.current_stream()
    events: list[Any] = []
    for _ in range(count):
        event = cuda.Event(enable_timing=True)
        event.record(stream)
        try:
            event._ranktop = True  # ours: recording it on a side stream takes no collective along (stream_waits)
        except Exception:
            pass
        events.append(event)
    return events


#: A timed call on its way to the sender: ``[record, start event, end event]``, and for a work or future not yet
#: waited for a fourth item, whether it is closed (a list: its events and that flag are filled in place).
Entry = list[Any]


class DeviceWaits:
    """The pool, the waits in flight and their resolution (see the module's docstring)."""

    def __init__(self, cuda: Any, pool_size: int = POOL_SIZE, guard: CaptureGuard | None = None, device: int | None = None,
                 accelerator: Any = None):  # fmt: skip
        self.cuda = cuda
        self.guard = guard if guard is not None else CAPTURES
        guard_captures(cuda, accelerator)
        # Every event goes on the current stream *of the training device* (the thread's current device may be
        # another: CUDAEvent::record refuses a stream of another device), and the sender thread queries under
        # a guard of that device (cudaEventQuery has none: a new thread would open a context on GPU 0).
        self._stream = functools.partial(cuda.current_stream, device) if device is not None else cuda.current_stream
        # (no device of its own: the thread's current one, no guard)
        self._on_device = functools.partial(cuda.device, device) if device is not None else contextlib.nullcontext
        # The compute stream: the training thread's current stream at attach. A call made with another stream
        # current (FSDP2 all-gathers and reduce-scatters with async_op=False inside `with stream(side)`) runs
        # and waits on that side stream; timed there it would be kernel time, not a stall of the compute stream.
        self.compute = self._stream()
        # Collectives waited for on a side stream, until the compute stream waits for them (probe/stream_waits.py).
        self.sides: Any = None
        self.off = False  # a CUDA error on the hot path switched device timing off (see on_error)
        self.on_error: Any = None
        self._free: collections.deque[Any] = collections.deque(make_events(cuda, pool_size))
        # The reference for t0 goes on a stream of its own, idle, so it completes when it is recorded: on the
        # training stream it would complete only once the device had caught up with the queue at attach, and
        # every start would read that much early.
        self._epoch = cuda.Event(enable_timing=True)
        epoch_stream = cuda.Stream(device=device) if device is not None else cuda.current_stream()
        self._epoch.record(epoch_stream)
        self._epoch_perf = _perf()  # a call's t0 is on the probe's perf_counter clock
        self._pending: collections.deque[Entry] = collections.deque()  # [record, start, end]: training -> sender
        self._unresolved: list[Entry] = []  # sender side: pending entries whose end has not completed
        self._works: dict[int, tuple[weakref.ref[Any], Entry]] = {}  # id(async work) -> (weak ref, [record, start, end]) until Work.wait()
        self.blocked_since: float | None = None  # sender side: a wait started on the device but not ended
        self.blocked_entry: dict[str, Any] | None = None
        self._blocked_record: dict[str, Any] | None = None
        self.resolved = 0
        self.host_only = 0  # calls kept with their host time (pool empty, capture in progress)

    # -- the training thread --------------------------------------------------------

    def _record(self, event: Any, stream: Any = None) -> bool:
        """Record ``event`` on the training device's current stream (``stream``, when the caller has it already);
        False (and device timing off) on a CUDA error."""
        try:
            event.record(self._stream() if stream is None else stream)
            return True
        except Exception as exc:
            self.fail(exc)
            return False

    def fail(self, exc: BaseException) -> None:
        if not self.off:
            self.off = True
            if self.on_error is not None:
                self.on_error(exc)

    def start(self, any_stream: bool = False, stream: Any = None) -> Any:
        """An event recorded now on the current stream (``stream``, when given), or None: pool empty, a capture
        in progress, or timing off. On a side stream it marks where a collective's kernel is queued there
        (:meth:`stop` tells a side stream's wait from the compute stream's). ``any_stream``: an async launch,
        whose wait is timed later, where a stream joins it."""
        if self.off or self.guard.active():
            return None
        try:
            if stream is None:
                stream = self._stream()
            event = self._free.popleft()
        except Exception:
            return None
        if not self._record(event, stream):
            return None  # the event's state is unknown after an error: it is not given back
        return event

    def restart(self, start: Any) -> None:
        """Record ``start`` again, now, on the current stream (the wait of an async call begins here)."""
        if not self.off and not self.guard.active():
            self._record(start)

    def stop(self, record: dict[str, Any], start: Any) -> bool:
        """Record the end on the current stream; the sender fills in ``record``'s device times. False when
        the record must go as it is (no end event to be had).

        On a side stream the two events time the collective's kernel there, and its wait is the compute
        stream's, later, on an event recorded after it (probe/stream_waits.py): until then the record waits
        there, with its host time."""
        try:
            end = self._free.popleft()
        except IndexError:
            self._free.append(start)
            return False
        try:
            stream = self._stream()
        except Exception:
            stream = None
        if self.off or not self._record(end, stream):
            self._free.append(start)
            return False
        if stream is not None and stream != self.compute:
            if self.sides is None:  # nobody to match it with the compute stream's wait: its host time
                self._free.extend((start, end))
                return False
            self.sides.opened(stream, record, (start, end))
            return True
        self._pending.append([record, start, end])
        return True

    def queue(self, record: dict[str, Any], start: Any, end: Any, kernel: tuple[Any, Any] | None = None) -> None:
        """Hand ``record`` to the sender: its wait between ``start`` and ``end`` (None: its host time), its
        kernel's time between the two events of ``kernel`` where known."""
        if kernel is not None:
            record["_k"] = kernel
        self._pending.append([record, start, end])

    def finish(self, record: dict[str, Any], start: Any, kernel: tuple[Any, Any] | None = None) -> None:
        """The compute stream's wait that began at ``start`` ends now (an end event on the compute stream)."""
        try:
            end = self._free.popleft()
        except IndexError:
            end = None
        if end is None or self.off or not self._record(end, self.compute):
            if end is not None:
                self._free.append(end)
            self._free.append(start)
            self.queue(record, None, None, kernel)
            return
        self.queue(record, start, end, kernel)

    def later(self, record: dict[str, Any], start: Any, work: Any) -> None:
        """An async call. Its end is recorded where the current stream joins it (``Work.wait()``); until
        then a provisional end is recorded in its future's done-callback (a CUDA future calls back on a
        stream that waits for the kernel): launch to completion, used if the work is dropped unwaited."""
        entry = [record, start, None, False]  # the last: closed (waited, settled): no provisional end any more
        try:
            work.get_future().add_done_callback(lambda _f: self._provisional(entry))
        except Exception:
            pass
        key = id(work)
        try:
            ref = weakref.ref(work, lambda _r: self._gone(key))
        except TypeError:  # cannot tell when it is dropped: the provisional end is its end
            self._pending.append(entry)
            return
        self._works[key] = (ref, entry)

    def _provisional(self, entry: Entry) -> None:
        """A future's done-callback: a provisional end, for a work dropped unwaited. Nothing for an entry already
        closed (waited or settled: a future that completes late, gloo's) or that has its end, nor with timing off."""
        if entry[3] or entry[2] is not None:
            return
        record = entry[0]
        record["d"] = max(0.0, _perf() - record["t0"])  # the host's view, kept if the device's is lost
        try:
            end = None if self.off or self.guard.depth else self._free.popleft()
        except IndexError:
            end = None
        if end is None or not self._record(end):
            start, entry[1] = entry[1], None  # no end to be had: the host's time
            if start is not None:
                self._free.append(start)
            return
        entry[2] = end

    def _settle(self, entry: Entry) -> None:
        """Send ``entry`` off to the sender: with its events if it has both, else with its host time."""
        record, start, end = entry[:3]
        if len(entry) > 3:
            entry[3] = True
        if end is None:
            if start is not None:
                self._free.append(start)
            entry = [record, None, None]
        self._pending.append(entry)

    def _gone(self, key: int) -> None:
        item = self._works.pop(key, None)  # a work dropped without wait(): launch to completion
        if item is not None:
            self._settle(item[1])

    def future(self, record: dict[str, Any], start: Any, future: Any) -> None:
        """A future (DDP's comm hook): the end is recorded in its done-callback (at once, for a CUDA future,
        on a stream that waits for the kernel)."""
        entry = [record, start, None, False]
        try:
            future.add_done_callback(lambda _f: self._provisional(entry))
        except Exception:
            self._settle(entry)
            return
        self._pending.append(entry)  # resolved once entry[2] is there and complete

    def waited(self, work: Any, wait: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``Work.wait`` of a work we time: the stall of the current stream until the kernel ends. On a side
        stream (``with stream(side): work.wait()``) no stall of the compute stream: the record waits on that
        stream for the compute stream's own wait (probe/stream_waits.py), with the host's time in ``wait()``."""
        item = self._works.pop(id(work), None)
        if item is None or item[0]() is not work:
            return wait(work, *args, **kwargs)
        record, launch, provisional = item[1][:3]
        item[1][3] = True  # closed: a late future callback makes no provisional end for it
        kernel = (launch, provisional) if launch is not None and provisional is not None else None
        try:
            stream = self._stream()
        except Exception:
            stream = None
        if stream is not None and stream != self.compute and self.sides is not None and not self.off:
            began = _perf()
            try:
                return wait(work, *args, **kwargs)
            finally:
                record["d"], record["t0"] = _perf() - began, began
                if kernel is None:
                    self._settle_events(launch, provisional)
                self.sides.opened(stream, record, kernel)
        start = self.start(stream=stream)
        try:
            return wait(work, *args, **kwargs)
        finally:
            if start is None:
                self._settle(item[1])  # no event for the stall: launch to completion, then
            else:
                if kernel is None:
                    self._settle_events(launch, provisional)
                else:
                    record["_k"] = kernel  # the kernel's time: launch to its end (the sender reads it)
                if not self.stop(record, start):
                    self.queue(record, None, None, kernel)

    def mark(self) -> Any:
        """An event recorded now on this thread's current stream of the training device, or None (pool empty, a
        capture in progress, timing off). For a future's done-callback, on whatever thread it runs: a CUDA future
        calls back with a stream made to wait for its kernel current, so the event completes where the kernel
        does (DDP's comm hooks: probe/ddp_waits.py ``HookCompletions``). Asks CUDA nothing: a capture is known
        from the training thread's last look."""
        if self.off or self.guard.depth or self.guard.external:
            return None
        try:
            event = self._free.popleft()
        except IndexError:
            return None
        if not self._record(event):
            return None
        return event

    def give_back(self, event: Any) -> None:
        """An event of :meth:`mark` no longer needed (None: nothing)."""
        if event is not None:
            self._free.append(event)

    def _settle_events(self, *events: Any) -> None:
        """Events no longer needed, back to the pool."""
        for event in events:
            if event is not None:
                self._free.append(event)

    # -- the sender thread ----------------------------------------------------------

    def resolve(self, final: bool = False) -> list[dict[str, Any]]:
        """The records whose device times are now known (``d`` and ``t0`` replaced), in call order."""
        pending = self._unresolved
        if final:
            for key in list(self._works):
                self._gone(key)
            if self.sides is not None:
                self.sides.release_all()
        while True:
            try:
                pending.append(self._pending.popleft())
            except IndexError:
                break
        if not pending:
            self.blocked_since = None
            return []
        with self._on_device():
            return self._resolve(pending, final)

    def _resolve(self, pending: list[Entry], final: bool) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        keep: list[Entry] = []
        with self.guard.quiet() as may_query:
            if not may_query:
                return []
            for entry in pending:
                record, start, end = entry[:3]
                kernel = record.get("_k")
                if type(kernel) is tuple and not _completed(kernel[1]):
                    keep.append(entry)  # its kernel has not ended yet (an end on the compute stream comes after)
                    continue
                if start is None:  # no device times to be had: the host's
                    self.give_back(record.pop("_upto", None))
                    if kernel is True:
                        del record["_k"]  # (the host's time of a blocking call on the device is its launch)
                    self._kernel_time(record)
                    out.append(record)
                    continue
                upto = record.get("_upto")
                try:
                    done = end is not None and end.query() and (upto is None or upto.query())
                except Exception:
                    done = False
                if not done:
                    keep.append(entry)
                    continue
                try:
                    d = start.elapsed_time(end) / 1000.0
                    if upto is not None:  # the wait ended there, before its end (DDP's finalize with a comm hook)
                        d = min(d, start.elapsed_time(upto) / 1000.0)
                    since = self._epoch.elapsed_time(start) / 1000.0
                    record["d"], record["t0"] = max(0.0, d), self._epoch_perf + since
                    self.resolved += 1
                    if since > EPOCH_S:  # elapsed_time is a float of ms: far from its epoch it loses precision
                        self._free.append(self._epoch)
                        self._epoch, self._epoch_perf, start = start, record["t0"], None  # start: the new epoch
                except Exception:
                    self.host_only += 1  # an event from before a device reset, or one never timed
                if start is not None:
                    self._free.append(start)
                self._free.append(end)
                self.give_back(record.pop("_upto", None))
                self._kernel_time(record)
                out.append(record)
            self._note_blocked(keep)
        if len(keep) > MAX_PENDING or final:
            cut = len(keep) if final else len(keep) - MAX_PENDING
            for record, *_ in keep[:cut]:
                record.pop("_k", None)
                record.pop("_upto", None)
                out.append(record)
                self.host_only += 1
            keep = keep[cut:]  # their events are lost to the pool: a device that far behind is hung
        self._unresolved = keep
        out.sort(key=lambda r: r.get("seq", 0))
        return out

    def _kernel_time(self, record: dict[str, Any]) -> None:
        """``kd``, the collective's kernel time, where known: between its kernel's two events (a side stream's
        collective, an async one from launch to its end), or its wait where the two are one (``_k`` True: a
        blocking call on the compute stream, whose kernel begins where the stream reaches it)."""
        kernel = record.pop("_k", None)
        if kernel is True:
            record["kd"] = record["d"]
        elif kernel is not None:
            try:
                record["kd"] = max(0.0, kernel[0].elapsed_time(kernel[1]) / 1000.0)
            except Exception:
                pass
            self._free.extend(kernel)

    def _note_blocked(self, keep: list[Entry]) -> None:
        """The oldest wait whose start the device has reached but whose end it has not: a hang on the device
        shows as a rank inside a collective, which a host clock never sees with NCCL."""
        for record, start, *_ in keep:
            try:
                started = start is not None and start.query()
            except Exception:
                started = False
            if started:
                if self._blocked_record is not record:
                    self._blocked_record, self.blocked_since = record, _perf()
                    self.blocked_entry = {k: record[k] for k in ("op", "seq", "b", "dt", "g") if k in record}
                return
            break
        self._blocked_record = self.blocked_entry = self.blocked_since = None

    @property
    def available(self) -> int:
        return len(self._free)


def _completed(event: Any) -> bool:
    try:
        return bool(event.query())
    except Exception:
        return False


# -- Work.wait, class-wide, once ----------------------------------------------------

_waits: DeviceWaits | None = None


def watch_work(work_class: Any, waits: DeviceWaits | None) -> None:
    """Route ``work_class.wait`` through ``waits`` (idempotent; None passes every wait straight through)."""
    global _waits
    _waits = waits
    if getattr(work_class.wait, "_ranktop_device", False):
        return
    original = work_class.wait  # perhaps probe/dist_wrappers.py's own wrapper (point-to-point waits): chained

    @functools.wraps(original)
    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        waits = _waits
        if waits is None or dynamo_guard.is_compiling():
            return original(self, *args, **kwargs)
        return waits.waited(self, original, args, kwargs)

    dynamo_guard.keep_out(wait)
    setattr(wait, "_ranktop_device", True)  # not _ranktop: probe/dist_wrappers.py may still wrap it (point-to-point)
    work_class.wait = wait


dynamo_guard.keep_out(DeviceWaits.waited, recursive=True)  # ours all the way down (probe/dynamo_guard.py)


def unwatch() -> None:
    """Every ``Work.wait`` straight through again (the probe was switched off)."""
    global _waits
    _waits = None
