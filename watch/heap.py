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
few hundred KB to a few MB (the engine is numpy columns, watch/engine/step_columns.py).
A mapping of its own for each (a low mmap threshold) is returned on free, but
its pages fault in afresh at every snapshot: at 16,384 ranks that was a quarter
of a snapshot's CPU (median 109-113 ms against 81-84 ms from the heap, offline,
the same 23 snapshots). So the threshold is fixed at glibc's highest,
:data:`MMAP_FROM_BYTES` (fixing it also stops glibc moving it), and the arrays
are reused from the heap from one snapshot to the next. What is left free in
the heap (those arrays between snapshots, and the stream of decoded messages
and snapshot rows, freed out of order) glibc keeps until asked: the viewer
asks every :data:`TRIM_EVERY_S` (``malloc_trim``, whole free pages handed
back, wherever they lie in the heap) when more than :data:`KEEP_FREE_BYTES` is
free, so its RSS holds no more than that beyond what it keeps; and it keeps to
:data:`ARENAS` malloc arenas, since every thread that allocates (ZeroMQ's I/O
thread, the receiver, the snapshot's) would otherwise get a heap of its own to
fragment.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from typing import Any, Literal

#: Young collections after this many allocations (CPython's default is 700), the older ones as rarely.
THRESHOLDS = (20_000, 20, 50)
#: Allocations from this size on get a mapping of their own (glibc's M_MMAP_THRESHOLD, at its most on 64-bit: a
#: snapshot's arrays of 16,384 ranks come from the heap; fixing it also stops glibc moving it as blocks are freed).
MMAP_FROM_BYTES = 32 * 1024 * 1024
_M_MMAP_THRESHOLD = -3
#: Malloc arenas at most (glibc's M_ARENA_MAX; its default is 8 per core).
ARENAS = 2
_M_ARENA_MAX = -8
#: Seconds between two looks at the heap's free bytes (``mallinfo2``, about a millisecond at 16,384 ranks, off the
#: GIL), handing them back (:func:`hand_back`) when there are enough.
TRIM_EVERY_S = 10.0
#: Free heap bytes kept rather than handed back. Between two snapshots of 16,384 ranks 14-20 MB of the heap is
#: free (5-8 MB at 4,096): the arrays the next snapshot takes again. Handed back, the next snapshot faulted those
#: pages in afresh (2,000-2,600 of them, 4-6 ms of its CPU), every 10 s, for an RSS lower by that much for a
#: moment. More than this free is a burst past (a capture's reply, a big job's first seconds): handed back.
KEEP_FREE_BYTES = 64 * 1024 * 1024


def settle_for_viewing() -> None:
    """Set this process's collector for a viewer (the ``ranktop`` commands that watch a job call it once,
    at start; never in a rank: the probe leaves the job's interpreter as it found it)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_FROM_BYTES)
        libc.mallopt(_M_ARENA_MAX, ARENAS)


def hand_back(keep: int = KEEP_FREE_BYTES) -> bool:
    """Return the heap's whole free pages to the system (glibc's ``malloc_trim``; elsewhere nothing) when more
    than ``keep`` bytes of it are free (a glibc without ``mallinfo2``, before 2.33, is trimmed each time); whether
    it was. ctypes releases the GIL for both calls: the receiver goes on meanwhile."""
    libc = _libc()
    if libc is None:
        return False
    if _MALLINFO2 is not None and _MALLINFO2().fordblks <= keep:
        return False
    libc.malloc_trim(0)
    return True


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h): the heap's counts in bytes; ``fordblks``, its free bytes."""

    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip


def _libc() -> ctypes.CDLL | None:
    """glibc's functions, or None (elsewhere, or without it, the allocator is left as it is)."""
    global _LIBC, _MALLINFO2
    if _LIBC is False:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC = lib if hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim") else None
        except OSError:
            _LIBC = None
        if _LIBC is not None and hasattr(_LIBC, "mallinfo2"):
            _MALLINFO2 = _LIBC.mallinfo2
            _MALLINFO2.restype, _MALLINFO2.argtypes = _MallInfo2, []
    return _LIBC


_LIBC: ctypes.CDLL | None | Literal[False] = False  # not looked for yet
_MALLINFO2: Any = None  # glibc's mallinfo2 (2.33 on), once _libc has looked
