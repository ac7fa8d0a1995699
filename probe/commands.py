"""What a rank does when a verified control command arrives.

Handlers run on the probe's sender thread, never on the training thread, and
return ``(ok, result)``; the result travels back on the telemetry stream as a
``reply``. Every argument is checked here: a command is signed, but its
arguments are still data from the network.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from ranktop.wire import capture as _capture
from ranktop.wire import settings
from ranktop.wire.messages import CaptureArmed, CommandResult, Pong, RateSet, Refused
from ranktop.transport import rendezvous

from . import stacks as _stacks
from .capture import Capture, start_timeout


class CommandTarget(Protocol):
    """What handlers may touch: the sender's settings and the recorder's state."""

    rate_hz: float
    recorder: Any  # probe/recorder.py: current_step, and the capture slot the training thread reads
    identity: Any  # transport/identity.py: rank, host
    capture: Capture | None  # this rank's latest capture, running or finished

    def state(self) -> dict[str, Any]: ...

    def capture_folder(self, capture_id: str) -> Path: ...


def ping(target: CommandTarget, args: dict[str, Any]) -> tuple[bool, CommandResult]:
    return True, Pong(pong=time.time(), state=target.state())


def set_rate(target: CommandTarget, args: dict[str, Any]) -> tuple[bool, CommandResult]:
    hz = args.get("hz")
    problem = settings.rate_problem(hz)
    if problem or hz is None:
        return False, Refused(error=f"hz {problem}")
    target.rate_hz = float(hz)
    return True, RateSet(rate_hz=target.rate_hz)


def stacks(target: CommandTarget, args: dict[str, Any]) -> tuple[bool, CommandResult]:
    """Every thread's Python stack, read from this (the sender's) thread: answers while training is blocked.

    With ``fingerprint`` only the main thread's fingerprint (probe/stacks.py), so that a big job's
    thousands of ranks send a few bytes each and one rank per distinct stack the text."""
    depth = args.get("max_frames", _stacks.MAX_FRAMES)
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= _stacks.MAX_FRAMES:
        return False, Refused(error=f"max_frames must be a whole number from 1 to {_stacks.MAX_FRAMES}")
    fingerprint_only = args.get("fingerprint", False)
    if not isinstance(fingerprint_only, bool):
        return False, Refused(error=f"fingerprint must be true or false, got {fingerprint_only!r}")
    return True, _stacks.answer(_stacks.collect(max_frames=depth), target.state(), fingerprint_only)


def capture(target: CommandTarget, args: dict[str, Any]) -> tuple[bool, CommandResult]:
    """Arm a trace or memory capture of ``steps`` steps from step ``start`` (see probe/capture.py).

    The folder is this job's capture folder (wire/capture.py); from the network
    only the id is taken, made safe as one path component.
    """
    capture_id, kind = args.get("id"), args.get("kind", _capture.TRACE)
    if not isinstance(capture_id, str) or not 1 <= len(capture_id) <= 120:
        return False, Refused(error="id must be a string of 1 to 120 characters")
    if kind not in _capture.KINDS:
        return False, Refused(error=f"kind must be one of {', '.join(_capture.KINDS)}, got {kind!r}")
    steps = args.get("steps", _capture.DEFAULT_STEPS)
    problem = _capture.check_steps(steps)
    if problem:
        return False, Refused(error=problem)
    start = args.get("start")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        return False, Refused(error=f"start must be a step number (a whole number >= 0), got {start!r}")
    options = {}
    for name in ("shapes", "memory", "stacks"):
        value = args.get(name, False)
        if not isinstance(value, bool):
            return False, Refused(error=f"{name} must be true or false, got {value!r}")
        options[name] = value
    running = target.capture
    if running is not None:
        running.give_up_if_late()
    if running is not None and running.running:
        return False, Refused(error=f"a capture is already running (id {running.id}, {running.state})")
    torch = sys.modules.get("torch")  # never imported here: a rank that has not imported torch has nothing to profile
    if torch is None:
        return False, Refused(error="this rank has not imported torch: nothing to capture")
    if kind == _capture.MEMORY and not torch.cuda.is_available():
        return False, Refused(error="memory snapshots need a GPU (no CUDA on this rank)")
    now = target.recorder.current_step
    if start <= now:
        return False, Refused(error=f"missed the start step {start}: this rank is already at step {now}")
    if start > now + _capture.MAX_LEAD_STEPS:
        return False, Refused(error=f"start step {start} is more than {_capture.MAX_LEAD_STEPS} steps ahead of this rank (step {now})")
    safe_id = rendezvous.safe_name(capture_id)
    folder = target.capture_folder(safe_id)
    ident = target.identity
    timeout = start_timeout(start - now, target.state().get("median_step_s"))
    cap = Capture(safe_id, kind, start, steps, folder, rank=ident.rank, host=ident.host, torch=torch, start_timeout_s=timeout, **options)
    target.capture = cap
    cap.attach(target.recorder)
    return True, CaptureArmed(capture=safe_id, kind=kind, start=start, steps=steps, dir=str(folder))


HANDLERS: dict[str, Callable[[CommandTarget, dict[str, Any]], tuple[bool, CommandResult]]] = {
    "ping": ping,
    "set_rate": set_rate,
    "stacks": stacks,
    "capture": capture,
}


def run(target: CommandTarget, cmd: str, args: dict[str, Any]) -> tuple[bool, CommandResult]:
    handler = HANDLERS.get(cmd)
    if handler is None:
        return False, Refused(error=f"unknown command {cmd!r}; known: {', '.join(sorted(HANDLERS))}")
    return handler(target, args)
