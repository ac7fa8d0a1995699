"""What a rank's trace says in a few lines: its top operators and kernels, and where its time went.

Computed from the Chrome trace JSON the rank has just written, so the summary
describes exactly the file the user will open. Pure Python over the trace's
events, no torch, and run as a script in a child process of the rank
(``python trace_summary.py TRACE`` prints the summary as JSON): parsing a trace
holds the GIL for hundreds of milliseconds, which would stall the training
thread even from another thread of the rank.

- **top operators**: PyTorch ops (``cpu_op`` events) by *self* time, their own
  duration minus that of the ops nested in them on the same thread.
- **top kernels**: device kernels by duration (a kernel has no children).
- **shares** of the captured steps' wall time (the ``ProfilerStep#N`` spans):
  *communication* is time in collectives (gloo/NCCL ops and kernels,
  ``record_param_comms``, c10d), *compute* the rest of the busy time, *idle*
  the time inside the steps in none of them. With device kernels in the trace
  the shares are of the device's timeline (what HTA's temporal breakdown
  shows); without, of the training thread's ops and annotations plus the
  collectives on any thread (gloo runs them on threads of its own): there
  *idle* is time outside all of those (Python between ops, sleeping, waiting).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING or __package__:  # (the type checker reads the package's)
    from ranktop.wire.intervals import union
else:  # run as a script by probe/capture.py, under ``python -I -S``: no site-packages, so the wire's file by its path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "wire"))
    from intervals import union

#: Entries in each top list: enough to see the answer, small enough for one telemetry message.
TOP = 10
#: Longest op or kernel name sent (templated kernel names run to kilobytes).
NAME_CHARS = 96

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_COMM = re.compile(
    r"nccl|gloo|c10d::|record_param_comms|allreduce|all_reduce|allgather|all_gather|reduce_scatter|"
    r"alltoall|all_to_all|broadcast|barrier",
    re.IGNORECASE,
)


def is_communication(name: str) -> bool:
    return bool(_COMM.search(name))


def summarize(trace: dict[str, Any], top: int = TOP) -> dict[str, Any]:
    """The summary of one rank's trace (see the module docstring); small enough to send every few seconds."""
    events = [e for e in trace.get("traceEvents", ()) if isinstance(e, dict) and e.get("ph") == "X"]
    steps = [e for e in events if _STEP.match(str(e.get("name", "")))]
    numbers = sorted(int(m.group(1)) for e in steps if (m := _STEP.match(str(e.get("name", "")))))
    window = _span(steps)
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    out: dict[str, Any] = {
        "steps": [numbers[0], numbers[-1]] if numbers else None,
        "ops": _top(_self_times(ops), top),
        "kernels": _top(_totals(kernels), top) if kernels else [],
    }
    if window is None:
        out.update(basis=None, wall_us=0.0, compute=None, comm=None, idle=None)
        return out
    wall = sum(float(e.get("dur", 0.0)) for e in steps)
    if kernels:
        basis, busy_events = "device", kernels
    else:
        # The training thread's ops and annotations, and collectives on any thread (gloo runs
        # them on threads of its own, so the training thread's wait for them shows as no op).
        main = {(e.get("pid"), e.get("tid")) for e in steps}
        annotated = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation") and not _STEP.match(str(e.get("name", "")))]
        basis, busy_events = (
            "cpu",
            [e for e in annotated if (e.get("pid"), e.get("tid")) in main or is_communication(str(e.get("name", "")))],
        )
    out.update(basis=basis, wall_us=round(wall, 1), **shares(busy_events, window, wall))
    return out


def shares(events: Iterable[dict[str, Any]], window: tuple[float, float], wall: float) -> dict[str, float]:
    """Fractions of ``wall`` (µs) spent in communication, in other work (compute) and in neither (idle),
    counting each instant once however many events overlap it."""
    lo, hi = window
    busy, comm = [], []
    for e in events:
        start = float(e.get("ts", 0.0))
        end = start + float(e.get("dur", 0.0))
        start, end = max(start, lo), min(end, hi)
        if end > start:
            busy.append((start, end))
            if is_communication(str(e.get("name", ""))):
                comm.append((start, end))
    if wall <= 0:
        return {"compute": 0.0, "comm": 0.0, "idle": 0.0}
    busy_us, comm_us = min(union(busy), wall), union(comm)
    return {
        "compute": round((busy_us - comm_us) / wall, 4),
        "comm": round(comm_us / wall, 4),
        "idle": round((wall - busy_us) / wall, 4),
    }


def _span(events: list[dict[str, Any]]) -> tuple[float, float] | None:
    if not events:
        return None
    starts = [float(e.get("ts", 0.0)) for e in events]
    ends = [float(e.get("ts", 0.0)) + float(e.get("dur", 0.0)) for e in events]
    return min(starts), max(ends)


def _self_times(ops: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per op name: [self µs, calls]. Nesting is per thread: an op's children lie inside it on its thread."""
    totals: dict[str, list[float]] = {}
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in ops:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (float(e.get("ts", 0.0)), -float(e.get("dur", 0.0))))
        stack: list[list[Any]] = []  # [end, name, duration, children's time]
        for e in thread_ops:
            start, dur = float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
            while stack and start >= stack[-1][0]:
                _close(stack.pop(), totals)
            if stack:
                stack[-1][3] += dur
            stack.append([start + dur, str(e.get("name", "?")), dur, 0.0])
        while stack:
            _close(stack.pop(), totals)
    return totals


def _close(frame: list[Any], totals: dict[str, list[float]]) -> None:
    _end, name, dur, children = frame
    entry = totals.setdefault(name, [0.0, 0])
    entry[0] += max(0.0, dur - children)
    entry[1] += 1


def _totals(events: list[dict[str, Any]]) -> dict[str, list[float]]:
    totals: dict[str, list[float]] = {}
    for e in events:
        entry = totals.setdefault(str(e.get("name", "?")), [0.0, 0])
        entry[0] += float(e.get("dur", 0.0))
        entry[1] += 1
    return totals


def _top(totals: dict[str, list[float]], top: int) -> list[list[Any]]:
    """``[[name, self µs, calls], ...]``, biggest first."""
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
    return [[name[:NAME_CHARS], round(us, 1), int(calls)] for name, (us, calls) in ranked]


def main(argv: list[str]) -> int:
    """``python trace_summary.py TRACE.json``: the summary as one JSON line, at a low priority."""
    try:
        os.nice(10)  # after the training processes
    except (AttributeError, OSError):
        pass
    with open(argv[1], "rb") as f:
        print(json.dumps(summarize(json.load(f))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
