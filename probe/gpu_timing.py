"""Device-side phase times: an event at every step and phase boundary, read later by the sender thread.

On a GPU the host clock lies: kernels are queued and the CPU moves on, so a
phase's CPU wall time is the time to *launch* its work, and the wait for it
lands wherever the queue first blocks. So, on CUDA, each boundary also records
an event, taken from a pool created on the device once (when timing attaches),
on the stream current at that boundary. The sender thread later asks each
event ``query()`` (has the GPU reached it?) and, once a step's events have all
completed, turns their elapsed times into the step's device times (the ``g``
field of a step record: ``{"w": s, "p": {phase: s}}``, self time like ``p``).
Nothing here ever synchronizes the device. A step waits for its events as long
as the GPU takes, up to :data:`HOLD_S` (a device that has not moved for that
long is hung: the step goes without ``g``); an empty pool (a GPU far behind),
a CUDA-graph capture (no timing event may go into a graph) or an event the
device cannot time (``elapsed_time`` raising) cost steps their ``g``, never an
allocation on the hot path or a fault of the probe. During a capture the
sender queries nothing (probe/device_waits.py, ``CAPTURES``).

When it attaches: automatic mode at the first optimizer step, on the device of
its parameters (:func:`starter`); ``probe.init()`` + ``probe.step()`` at the
first step once the script has initialised CUDA (:func:`arm`). Either way
collective waits are then timed on the device too (probe/device_waits.py).

The timeline wraps the recorder's boundary methods (``Recorder.attach_timeline``,
the way ``Recorder.disable`` swaps them for no-ops), so explicit ``probe.phase()`` blocks get device times
too. Where there is no GPU the same code runs on :class:`CpuEvent` (host
clock), which is what the tests and ``RANKTOP_DEVICE_TIMING=cpu`` use.

This module never imports torch itself; it uses the torch the script has imported.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import sys
import time
from typing import Any, Callable, Iterable

from ranktop.wire import settings

from .recorder import Recorder

_perf = time.perf_counter

#: Events allocated up front: about 10 per step, so a few hundred steps in flight.
POOL_SIZE = 4096
#: Seconds a step record may wait for its events before it is sent without device times. The host may
#: run far ahead of the GPU (a deep queue, a slow step): a record waits as long as the device takes to get
#: there; only a device that has not got there in this long (hung) loses the times, so the steps still show.
HOLD_S = 60.0
#: Step records held at most while they wait for their events (past it the oldest go without device times).
MAX_HELD = 2048

#: A boundary's mark: (kind, name, event): ``s``/``S`` a step's start and end, ``b``/``e`` a phase's begin and end.
Mark = tuple[str, Any, Any]


class CpuEvent:
    """``torch.cuda.Event``'s interface on the host clock."""

    __slots__ = ("t",)

    def __init__(self) -> None:
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = _perf()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "CpuEvent") -> float:
        return (end.t - self.t) * 1000.0  # milliseconds, like CUDA's


class EventPool:
    """Events made once; the training thread takes, the sender thread gives back (deque ops are atomic)."""

    def __init__(self, factory: Callable[[], Any] | None, size: int = POOL_SIZE, events: list[Any] | None = None):
        self.size = size
        if events is None:
            if factory is None:
                raise TypeError("EventPool needs a factory or its events")
            events = [factory() for _ in range(size)]
        self._free: collections.deque[Any] = collections.deque(events)

    def take(self) -> Any:
        try:
            return self._free.popleft()
        except IndexError:
            return None

    def give(self, events: Iterable[Any]) -> None:
        self._free.extend(e for e in events if e is not None)

    @property
    def available(self) -> int:
        return len(self._free)


class Timeline:
    """Marks the recorder's boundaries with events, and resolves finished steps into device times.

    Marks are ``(kind, name, event)``: ``s``/``S`` the step's start and end,
    ``b``/``e`` a phase's begin and end.
    """

    def __init__(
        self,
        recorder: Recorder,
        pool: EventPool,
        stream: Any = None,
        *,
        hold_s: float = HOLD_S,
        label: str = "cuda",
        capturing: Callable[[], bool] | None = None,
        guard: Any = None,
        stream_of: Callable[[], Any] | None = None,
        on_device: Callable[[], Any] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ):
        self.rec = recorder
        self.pool = pool
        self.stream = stream  # None: each boundary's event goes on the stream current then (see stream_of)
        # On CUDA: the current stream *of the training device* (cuda.current_stream(index)). The thread's current
        # device may be another one (a model moved to cuda:N without set_device): an event made on device N
        # cannot be recorded on device 0's stream (CUDAEvent::record refuses it).
        self.stream_of = stream_of
        # On CUDA: a device guard for the training device, for the sender thread's queries. cudaEventQuery has
        # no guard of its own, and a new thread's current device is 0: without it every rank of a node would
        # open a CUDA context (hundreds of MB) on GPU 0.
        self.on_device = on_device
        self.on_error = on_error  # a CUDA error recording an event: device timing off for this rank, once
        self.off = False
        self.hold_s = hold_s
        self.capturing = capturing  # on CUDA: whether a CUDA graph is being captured (no event in a capture)
        self.guard = guard  # device_waits.CAPTURES: the sender queries events only while no capture runs
        self.label = label  # what the device times are measured with; shown by the TUI
        self._marks: list[Mark] = []
        self._skip_step = True  # the step in progress when we attached has no start mark
        self._ready: collections.deque[tuple[int, list[Mark]]] = collections.deque(maxlen=4096)  # (step number, marks), training -> sender
        self._by_step: dict[int, list[Mark]] = {}
        self._held: list[tuple[dict[str, Any], float]] = []  # sender side: records waiting for their events
        self._limbo: list[list[Mark]] = []  # marks given up on, their events back to the pool once complete

    # -- the training thread ------------------------------------------------------

    def _mark(self, kind: str, name: Any = None) -> None:
        capturing = self.capturing
        if self.off or (capturing is not None and capturing()):
            event = None  # a timing event cannot go into a CUDA graph: this step has no device times
        else:
            event = self.pool.take()
            if event is not None:
                try:
                    event.record(self.stream_of() if self.stream_of is not None else self.stream)
                except Exception as exc:  # never into training: this rank's device timing goes off
                    event = None
                    self.fail(exc)
        self._marks.append((kind, name, event))

    def fail(self, exc: BaseException) -> None:
        """A CUDA error on the hot path: no more events from now on (steps go without device times)."""
        if not self.off:
            self.off = True
            if self.on_error is not None:
                self.on_error(exc)

    def _release(self) -> None:
        if self._marks:
            self.pool.give(m[2] for m in self._marks)
            self._marks = []

    def attach(self) -> None:
        """Start timing the recorder's boundaries on the device (call from the training thread)."""
        self.rec.attach_timeline(self)

    def wrap(self, rec: Recorder) -> dict[str, Callable[..., None]]:
        """The recorder's boundaries, each also marking an event (see ``Recorder.replace_boundaries``)."""
        begin_step, end_step, begin_phase, end_phase, discard = (rec.begin_step, rec.end_step, rec.begin_phase, rec.end_phase, rec.discard)
        mark, release = self._mark, self._release

        def begin_step_timed(number: int | None = None) -> None:
            if rec.step_started:
                rec.end_step()
            if not rec._pending:
                release()  # marks of phases the recorder will not carry into this step
            begin_step(number)
            self._skip_step = False
            if not self._marks:
                mark("s")

        def end_step_timed() -> None:
            if not rec.step_started:
                return end_step()
            number = rec.current_step
            end_step()  # closes open phases through end_phase_timed
            mark("S")
            if self._skip_step:
                release()
            else:
                self._ready.append((number, self._marks))
                self._marks = []

        def begin_phase_timed(name: str) -> None:
            begin_phase(name)
            mark("b", name)

        def end_phase_timed() -> None:
            if rec._stack:
                mark("e")
            end_phase()

        def discard_timed() -> None:
            discard()
            release()

        return {
            "begin_step": begin_step_timed,
            "end_step": end_step_timed,
            "begin_phase": begin_phase_timed,
            "end_phase": end_phase_timed,
            "discard": discard_timed,
        }

    # -- the sender thread ----------------------------------------------------------

    def resolve(self, records: list[dict[str, Any]], final: bool = False) -> list[dict[str, Any]]:
        """The records ready to send, in order, with ``g`` where their device times are known."""
        guard = self.guard
        with self.on_device() if self.on_device is not None else contextlib.nullcontext():
            if guard is None:
                return self._resolve(records, final, True)
            with guard.quiet() as may_query:  # no event.query() while a CUDA graph is captured
                return self._resolve(records, final, may_query)

    def _resolve(self, records: list[dict[str, Any]], final: bool, may_query: bool) -> list[dict[str, Any]]:
        marks: list[Mark] | None  # each ready step's, then each held record's
        while True:
            try:
                number, marks = self._ready.popleft()
            except IndexError:
                break
            stale = self._by_step.pop(number, None)
            if stale is not None:
                self._limbo.append(stale)
            self._by_step[number] = marks
        now = _perf()
        self._held.extend((r, now) for r in records)
        out = []
        while self._held:
            record, since = self._held[0]
            marks = self._by_step.get(record["n"])
            if marks is not None:
                if may_query and _complete(marks):
                    del self._by_step[record["n"]]
                    g = device_times(marks)
                    if g is not None:
                        record["g"] = g
                    self.pool.give(m[2] for m in marks)
                elif final or now - since >= self.hold_s or len(self._held) > MAX_HELD:
                    del self._by_step[record["n"]]
                    self._limbo.append(marks)  # the GPU is stuck: send without g
                else:
                    break  # events complete in order: the later steps are not ready either
            self._held.pop(0)
            out.append(record)
        if self._limbo and may_query:
            done = [m for m in self._limbo if _complete(m)]
            for marks in done:
                self.pool.give(m[2] for m in marks)
            self._limbo = [m for m in self._limbo if m not in done]
        if len(self._by_step) > 4096:  # marks whose records fell off the recorder's buffer
            for number in sorted(self._by_step)[:-1024]:
                self._limbo.append(self._by_step.pop(number))
        return out


def _complete(marks: list[Mark]) -> bool:
    """Whether the device has passed every event of ``marks`` (an error reading one counts as not yet)."""
    try:
        return all(e is None or e.query() for _, _, e in marks)
    except Exception:
        return False


def device_times(marks: list[Mark]) -> dict[str, Any] | None:
    """``{"w": step seconds, "p": {phase: self seconds}}`` from one step's completed marks, or None
    (also when the device will not say: ``elapsed_time`` raises for an event it cannot time)."""
    try:
        return _device_times(marks)
    except Exception:
        return None


def _device_times(marks: list[Mark]) -> dict[str, Any] | None:
    if len(marks) < 2 or marks[0][2] is None or marks[-1][2] is None:
        return None
    first = marks[0][2]
    phases: dict[str, float] = {}
    stack: list[list[Any]] = []  # [name, begin event, seconds in children]
    for kind, name, event in marks[:-1]:
        if event is None:
            return None  # the pool ran dry inside this step
        if kind == "b":
            stack.append([name, event, 0.0])
        elif kind == "e" and stack:
            pname, begin, children = stack.pop()
            elapsed = max(0.0, begin.elapsed_time(event) / 1000.0)
            phases[pname] = phases.get(pname, 0.0) + max(0.0, elapsed - children)
            if stack:
                stack[-1][2] += elapsed
    return {"w": max(0.0, first.elapsed_time(marks[-1][2]) / 1000.0), "p": phases}


def attach_cuda(probe: Any, cuda: Any, device: Any = None, work_class: Any = None, accelerator: Any = None) -> bool:
    """Time ``probe``'s phases and collective waits on the GPU, from now on. Call on the training thread.

    ``device``: the training's CUDA device (default: the thread's current one). All the
    events are made and created on the device here (the hot path then only records them);
    ``work_class``: the Work class whose ``wait()`` ends an async collective on the device
    (torch.distributed's by default); ``accelerator``: the module whose ``Graph`` captures are watched beside
    ``cuda.CUDAGraph``'s (``torch.accelerator`` by default, where torch has it). False if it was attached already.
    """
    from . import device_waits, stream_waits

    rec = probe.recorder
    if rec.timeline is not None:
        return False
    with cuda.device(device) if device is not None else contextlib.nullcontext():
        index = cuda.current_device()
        note_device(probe, f"cuda:{index} {cuda.get_device_name(index)}")
        pool = EventPool(None, POOL_SIZE, events=device_waits.make_events(cuda, POOL_SIZE))
        if accelerator is None:
            accelerator = getattr(sys.modules.get("torch"), "accelerator", None)
        waits = device_waits.DeviceWaits(cuda, device=index, accelerator=accelerator)
    # A capture begun where no wrapper sees it (in C++): the training thread asks CUDA before each event.
    device_waits.CAPTURES.check = device_waits.stream_capturing(cuda, index)
    tracker = getattr(probe, "collectives", None)
    timeline = Timeline(
        rec,
        pool,
        capturing=device_waits.CAPTURES.active,
        guard=device_waits.CAPTURES,
        stream_of=functools.partial(cuda.current_stream, index),
        on_device=functools.partial(cuda.device, index),
    )
    timeline.on_error = waits.on_error = _switch_off(probe, timeline, waits, index)
    timeline.attach()
    if tracker is not None:
        tracker.device = waits
        # A collective waited for on a side stream waits there for the compute stream's own wait on it.
        waits.sides = stream_waits.SideStreams(waits, lambda: (rec.current_step, rec.current_phase))
        stream_waits.watch_events(cuda.Event, cuda.current_stream, waits.sides)
        if work_class is None:
            dist = sys.modules.get("torch.distributed")
            work_class = getattr(getattr(dist, "distributed_c10d", None), "Work", None)
        if work_class is not None:
            device_waits.watch_work(work_class, waits)
    return True


def _switch_off(probe: Any, timeline: Timeline, waits: Any, index: int) -> Callable[[BaseException], None]:
    """What a CUDA error on the training thread does: one line, and this rank's device timing off for good
    (phases and collective waits go on with host times); never an exception into training."""
    said: list[BaseException] = []

    def off(exc: BaseException) -> None:
        timeline.off = True
        waits.off = True
        if not said:
            said.append(exc)
            rank = getattr(getattr(probe, "identity", None), "rank", "?")
            print(f"ranktop: device timing off on rank {rank} (cuda:{index}) after a CUDA error "
                  f"({exc.__class__.__name__}: {exc}); host times go on", file=sys.stderr)  # fmt: skip

    return off


def attach_cpu(probe: Any) -> bool:
    """The same timeline on the host clock (``RANKTOP_DEVICE_TIMING=cpu``: tests)."""
    if probe.recorder.timeline is not None:
        return False
    Timeline(probe.recorder, EventPool(CpuEvent), label="cpu").attach()
    return True


def note_device(probe: Any, device: str) -> None:
    """The rank's device as its hello says it, learnt on the training thread (where set_device holds)."""
    sender = getattr(probe, "sender", None)
    if sender is not None:
        sender.device = device


def _script_cuda() -> Any:
    """``torch.cuda`` once the script has initialised it, else None; never initialises anything itself."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    cuda = getattr(torch, "cuda", None)
    return cuda if cuda is not None and cuda.is_initialized() else None


def _mode() -> str:
    return (settings.DEVICE_TIMING.get() or "").lower()  # (it has a default)


def arm(probe: Any, find_cuda: Callable[[], Any] = _script_cuda) -> None:
    """``probe.init()`` + ``probe.step()`` mode (and the demo): device timing attaches at the first step
    that begins once the script has initialised CUDA, on the device current on the training thread then.

    Until then ``begin_step`` also asks ``find_cuda()`` (a flag read: ``torch.cuda.is_initialized()``);
    once attached, or when device timing is off, it is the recorder's own again. Automatic mode disarms
    this and attaches on the optimizer's parameters' device instead (:func:`starter`).
    """
    mode = _mode()
    if mode in ("off", "0", "no"):
        return
    if mode == "cpu":
        attach_cpu(probe)
        return
    rec = probe.recorder
    original = rec.begin_step

    def begin_step_armed(number: int | None = None) -> None:
        cuda = find_cuda()
        if cuda is None:
            return original(number)
        device = _training_device(cuda)
        if _capturing(cuda, device):  # no event may be made inside a graph capture: attach at a later step
            return original(number)
        rec.replace_boundaries(begin_step=original)
        _attach_or_say(probe, cuda, device)
        rec.begin_step(number)

    setattr(begin_step_armed, "_ranktop_armed", True)  # what disarm looks for on the recorder's begin_step
    rec.replace_boundaries(begin_step=begin_step_armed)
    probe._gpu_disarm = lambda: getattr(rec.begin_step, "_ranktop_armed", False) and rec.replace_boundaries(begin_step=original)


def _training_device(cuda: Any) -> int | None:
    """The device the training holds memory on, when the process sees several (a script that moves its model
    to ``cuda:LOCAL_RANK`` without ``set_device`` leaves the thread's current device at 0: events there
    would open a context on another rank's GPU); None: the current device."""
    try:
        count = cuda.device_count()
        if count <= 1:
            return None
        reserved = [cuda.memory_reserved(i) for i in range(count)]
        best = max(range(count), key=reserved.__getitem__)
        return best if reserved[best] > 0 else None
    except Exception:
        return None


def disarm(probe: Any) -> None:
    undo = getattr(probe, "_gpu_disarm", None)
    if undo is not None:
        undo()


def _attach_or_say(probe: Any, cuda: Any, device: Any = None) -> None:
    try:
        attach_cuda(probe, cuda, device)
    except Exception as exc:  # device timing is a bonus: its failure must not stop the rest
        print(f"ranktop: device timing off: {exc.__class__.__name__}: {exc}", file=sys.stderr)


def starter(probe: Any) -> Callable[[Any], str | None] | None:
    """The callback automatic mode runs at the first optimizer step: device timing on the parameters' device.

    ``RANKTOP_DEVICE_TIMING``: ``off`` never, ``cpu`` host-clock events (tests), default CUDA when present.
    """
    mode = _mode()
    if mode in ("off", "0", "no"):
        return None
    disarm(probe)

    def start(optimizer: Any) -> str | None:
        if mode == "cpu":
            attach_cpu(probe)
            return None
        torch = sys.modules.get("torch")
        device = _param_device(optimizer)
        if torch is None or device is None or device.type != "cuda":
            return None
        if _capturing(torch.cuda, device):  # a step captured whole (torch.cuda.graph around it): the next one
            return AGAIN
        _attach_or_say(probe, torch.cuda, device)
        return None

    return start


#: What the callback of automatic mode's first optimizer step returns to be called again at the next one.
AGAIN = "again"


def _capturing(cuda: Any, device: Any) -> bool:
    """Whether a CUDA graph is being captured now: one a wrapper of ours saw begin (``torch.cuda.CUDAGraph``,
    ``torch.accelerator.Graph``), or, asked of ``device``'s current stream, one begun in C++. Making the pool's
    events (each recorded once) inside a capture would ruin it; an error asking counts as a capture."""
    from . import device_waits

    if device_waits.CAPTURES.depth:
        return True
    try:  # asked of the training device's stream: the thread's current device may be another (no context there)
        with cuda.device(device) if device is not None else contextlib.nullcontext():
            return bool(cuda.is_current_stream_capturing())
    except Exception:
        return True


def _param_device(optimizer: Any) -> Any:
    for group in getattr(optimizer, "param_groups", ()):
        for param in group.get("params", ()):
            return getattr(param, "device", None)
    return None
