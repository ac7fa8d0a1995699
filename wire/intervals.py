"""The length covered by overlapping intervals: one definition for a rank's collective waits and a trace's busy time.

Both the collectives summary (probe/collective_summary.py: DDP's buckets and
FSDP's prefetches overlap) and a trace's compute/comm/idle shares
(probe/trace_summary.py: nested and concurrent events) must count each instant
once. Standard library only, and no import of this package's other modules:
probe/trace_summary.py runs as a script under ``python -I -S`` (no
site-packages) and loads this file by its path.
"""

from __future__ import annotations

from typing import Iterable


def union(intervals: Iterable[tuple[float, float]]) -> float:
    """Length covered by possibly overlapping ``(start, stop)`` intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total
