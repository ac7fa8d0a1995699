"""What a rank does when a verified control command arrives.

Handlers run on the probe's sender thread, never on the training thread, and
return ``(ok, result)``; the result travels back on the telemetry stream as a
``reply``. Every argument is checked here: a command is signed, but its
arguments are still data from the network.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol

from . import stacks as _stacks

#: Sampling rates a command may set, in Hz.
MIN_RATE_HZ, MAX_RATE_HZ = 0.1, 50.0


class CommandTarget(Protocol):
    """What handlers may touch: the sender's settings and the recorder's state."""

    rate_hz: float

    def state(self) -> dict[str, Any]: ...


def ping(target: CommandTarget, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    return True, {"pong": time.time(), "state": target.state()}


def set_rate(target: CommandTarget, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    hz = args.get("hz")
    if isinstance(hz, bool) or not isinstance(hz, (int, float)) or not MIN_RATE_HZ <= hz <= MAX_RATE_HZ:
        return False, {"error": f"hz must be a number from {MIN_RATE_HZ} to {MAX_RATE_HZ}"}
    target.rate_hz = float(hz)
    return True, {"rate_hz": target.rate_hz}


def stacks(target: CommandTarget, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Every thread's Python stack, read from this (the sender's) thread: answers while training is blocked."""
    depth = args.get("max_frames", _stacks.MAX_FRAMES)
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= _stacks.MAX_FRAMES:
        return False, {"error": f"max_frames must be a whole number from 1 to {_stacks.MAX_FRAMES}"}
    return True, dict(_stacks.collect(max_frames=depth), state=target.state())


HANDLERS: dict[str, Callable[[CommandTarget, dict[str, Any]], tuple[bool, dict[str, Any]]]] = {
    "ping": ping,
    "set_rate": set_rate,
    "stacks": stacks,
}


def run(target: CommandTarget, cmd: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    handler = HANDLERS.get(cmd)
    if handler is None:
        return False, {"error": f"unknown command {cmd!r}; known: {', '.join(sorted(HANDLERS))}"}
    return handler(target, args)
