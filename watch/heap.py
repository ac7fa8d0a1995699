"""The viewer's garbage collector, set for what a viewer's heap holds.

A viewer of 4,096 ranks keeps millions of long-lived objects (every rank's
windows) and decodes a stream of short-lived ones (about 500,000 a second:
msgpack builds a dict, list or str per field of 2,000 digests). With
CPython's default thresholds that stream sets off a young collection every
700 allocations and, every so often, a full one that walks the whole heap:
with these settings ingest takes 148 µs a digest instead of 210 (the
simulator's digests of 4,096 ranks, fed to an aggregator offline).
Nothing the viewer builds depends on the collector to be freed (no cycles are
made per message), so it collects young objects far less often, and what
exists once the viewer is up (modules, the app) is frozen out of every scan.

The C allocator too: each snapshot of a big job makes and frees arrays of a
few hundred KB to a few MB (the engine is numpy columns, watch/columns.py).
glibc serves those from its heap once its mmap threshold has crept up past
them (it does, after the first frees), and a heap shared with millions of
small objects hands little back: the viewer's RSS then grows for minutes.
A fixed threshold keeps every such array in a mapping of its own, returned
on free.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

#: Young collections after this many allocations (CPython's default is 700), the older ones as rarely.
THRESHOLDS = (20_000, 20, 50)
#: Allocations from this size on get a mapping of their own (glibc's M_MMAP_THRESHOLD; fixing it also stops
#: glibc raising it as big blocks are freed).
MMAP_FROM_BYTES = 256 * 1024
_M_MMAP_THRESHOLD = -3


def settle_for_viewing() -> None:
    """Set this process's collector for a viewer (the ``ranktop`` commands that watch a job call it once,
    at start; never in a rank: the probe leaves the job's interpreter as it found it)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    _fix_mmap_threshold()


def _fix_mmap_threshold() -> None:
    """glibc only (elsewhere, or without it, the allocator is left as it is)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_FROM_BYTES)
    except (OSError, AttributeError):
        pass
