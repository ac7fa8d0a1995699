"""The training thread's side of the probe: step and phase timing into a bounded buffer.

This is the hot path, so it holds no lock and makes no system call beyond reading
clocks. Completed steps are appended to a ``collections.deque`` with a ``maxlen``:
CPython's deque append and popleft are atomic, so the sender thread can drain it
while training appends, and when the sender falls behind the oldest records fall
off the end instead of growing memory or blocking. Drops are counted without a
lock: the training thread alone increments ``produced``, the sender alone counts
what it took, and the difference is what fell off.

Phases record *self* time: a phase nested in another is subtracted from its
parent, so the phases of a step never add up to more than the step. Phases
timed outside any step (``with phase("data")`` before ``with step()``) are
carried into the next step, whose wall time is extended back to cover them.
"""

from __future__ import annotations

import collections
import functools
import time
from typing import TYPE_CHECKING, Any, Callable, Literal, TypeVar

if TYPE_CHECKING:  # for annotations only: typing has ParamSpec and Self from Python 3.10 and 3.11, the probe runs on 3.9
    from typing_extensions import ParamSpec, Self

    P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_perf = time.perf_counter
_wall = time.time


class Recorder:
    def __init__(self, capacity: int = 4096, on_fault: Callable[[BaseException], None] | None = None):
        self.buffer: collections.deque[dict[str, Any]] = collections.deque(maxlen=capacity)
        self.produced = 0  # step records appended (written by the training thread only)
        self.last_step = -1  # the last completed step number
        self.current_step = -1  # the step in progress, or the last one when between steps
        self.step_started = 0.0  # perf_counter at the start of the step in progress; 0 between steps
        self._on_fault = on_fault
        self._phases: dict[str, float] = {}
        self._pending: dict[str, float] = {}
        self._pending_start = 0.0
        self._pending_wall = 0.0
        self._stack: list[list[Any]] = []  # open phases: [name, start, time spent in children]
        # ``push([name, perf_counter(), 0.0])``: what begin_phase does for a phase begun inside an open step, as
        # one C call (the stack's append) instead of a Python frame, for automatic mode's hot path; None once the
        # boundaries are replaced (a timeline marks each phase, a disabled recorder records none): then callers
        # call begin_phase.
        self.push: Callable[[list[Any]], None] | None = self._stack.append
        # Hooks, declared here so that nothing is attached from outside unannounced:
        # ``capture``: a pending or running capture (probe/capture.py), set by the sender thread;
        #   the step boundaries hand it the step number; with none, they pay one attribute read.
        # ``timeline``: device-side timing (probe/gpu_timing.py), set by :meth:`attach_timeline`;
        #   the sender thread resolves the drained records through it.
        self.capture: Any = None
        self.timeline: Any = None

    # -- what the sender thread reads (plain attribute reads, no lock) --------

    @property
    def current_phase(self) -> str | None:
        stack = self._stack
        try:
            return stack[-1][0]
        except IndexError:
            return None

    # -- the hot path ---------------------------------------------------------

    def begin_step(self, number: int | None = None) -> None:
        try:
            if self.step_started:
                self.end_step()  # a step never ended (an exception skipped it): close it first
            now = _perf()
            self.current_step = self.last_step + 1 if number is None else number
            if self._pending:
                # Phases timed just before the step belong to it (the data fetch of
                # a `for batch in loader:` loop, typically).
                self._phases = self._pending
                self._pending = {}
                self.step_started = self._pending_start
                self._step_wall = self._pending_wall
            else:
                self._phases = {}
                self.step_started = now
                self._step_wall = _wall()
            capture = self.capture
            if capture is not None:
                capture.step_begins(self.current_step)
        except Exception as exc:
            self._fault(exc)

    def end_step(self) -> None:
        try:
            if not self.step_started:
                return
            while self._stack:  # phases left open inside the step end with it
                self.end_phase()
            now = _perf()
            self.buffer.append({"n": self.current_step, "t": self._step_wall, "w": now - self.step_started, "p": self._phases})
            self.produced += 1
            self.last_step = self.current_step
            self.step_started = 0.0
            capture = self.capture
            if capture is not None:  # after the record: stopping a profiler is not the step's time
                capture.step_ends(self.last_step)
        except Exception as exc:
            self._fault(exc)

    def begin_phase(self, name: str) -> None:
        try:
            now = _perf()
            if not self.step_started and not self._stack and not self._pending:
                self._pending_start = now
                self._pending_wall = _wall()
            self._stack.append([name, now, 0.0])
        except Exception as exc:
            self._fault(exc)

    def end_phase(self) -> None:
        try:
            name, start, children = self._stack.pop()
            elapsed = _perf() - start
            target = self._phases if self.step_started else self._pending
            target[name] = target.get(name, 0.0) + (elapsed - children)
            if self._stack:
                self._stack[-1][2] += elapsed
        except IndexError:
            pass  # an end without a begin (a phase closed by end_step already)
        except Exception as exc:
            self._fault(exc)

    def discard(self) -> None:
        """Drop the step in progress and the phases timed outside a step, unrecorded.

        Automatic mode (``probe/auto.py``) calls this when what it was timing turns
        out to be an evaluation loop rather than a training step. The step number
        is not consumed: the next step gets it. Phases still open stay open; what
        they time from now on is carried into the next step.
        """
        self.step_started = 0.0
        self.current_step = self.last_step
        self._phases = {}
        self._pending = {}
        self._pending_start = _perf()
        self._pending_wall = _wall()

    def _fault(self, exc: BaseException) -> None:
        if self._on_fault is not None:
            self._on_fault(exc)

    #: The hot-path methods that may be replaced on an instance (never a flag tested per call).
    BOUNDARIES = ("begin_step", "end_step", "begin_phase", "end_phase", "discard")

    def replace_boundaries(self, **methods: Callable[..., None]) -> None:
        """Swap some of :data:`BOUNDARIES` for other callables on this instance.

        How the probe changes what a boundary does without a branch on the hot
        path: :meth:`disable` swaps them for no-ops, a timeline for versions that
        also record device events. The scopes already handed out call through
        the instance, so they follow.
        """
        unknown = set(methods) - set(self.BOUNDARIES)
        if unknown:
            raise ValueError(f"not a recorder boundary: {', '.join(sorted(unknown))}")
        for name, method in methods.items():
            setattr(self, name, method)
        if "begin_phase" in methods:
            self.push = None  # every phase now goes through the replaced begin_phase

    def attach_timeline(self, timeline: Any) -> None:
        """Time every boundary on the device too: ``timeline.wrap(self)`` returns the wrapped boundaries."""
        self.replace_boundaries(**timeline.wrap(self))
        self.timeline = timeline

    def disable(self) -> None:
        """Turn every hot-path method into a no-op, for scopes already handed out."""
        self.replace_boundaries(**{name: _noop for name in self.BOUNDARIES})

    # -- the sender thread's side ---------------------------------------------

    def drain(self, limit: int = 100_000) -> list[dict[str, Any]]:
        return drain(self.buffer, limit)


def drain(buffer: collections.deque[T], limit: int = 100_000) -> list[T]:
    """Take up to ``limit`` items off the left of a deque another thread appends to (no lock needed)."""
    out: list[T] = []
    popleft = buffer.popleft
    for _ in range(limit):
        try:
            out.append(popleft())
        except IndexError:
            break
    return out


def _noop(*args: object, **kwargs: object) -> None:
    return None


class _Scope:
    """A context manager that also decorates: each call of the function runs inside it."""

    __slots__ = ()

    # Each kind of scope has its own (the type checker reads these; they are never called).
    def __enter__(self) -> Self:
        raise NotImplementedError

    def __exit__(self, *exc: object) -> Literal[False]:
        raise NotImplementedError

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with self:
                return func(*args, **kwargs)

        return wrapper


class StepScope(_Scope):
    """``with probe.step():`` or ``@probe.step()``; re-entrant state lives in the recorder."""

    __slots__ = ("_recorder", "_number")

    def __init__(self, recorder: Recorder, number: int | None = None):
        self._recorder = recorder
        self._number = number

    def __enter__(self) -> Self:
        self._recorder.begin_step(self._number)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self._recorder.end_step()
        return False


class PhaseScope(_Scope):
    """``with probe.phase("forward"):`` or ``@probe.phase("forward")``."""

    __slots__ = ("_recorder", "name")

    def __init__(self, recorder: Recorder, name: str):
        self._recorder = recorder
        self.name = name

    def __enter__(self) -> Self:
        self._recorder.begin_phase(self.name)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self._recorder.end_phase()
        return False


class NoopScope:
    """What ``step()``/``phase()`` return while the probe is off: costs one call."""

    __slots__ = ()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False

    def __call__(self, func: F) -> F:
        return func


NOOP = NoopScope()
