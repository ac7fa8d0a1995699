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
"""

from __future__ import annotations

import gc

#: Young collections after this many allocations (CPython's default is 700), the older ones as rarely.
THRESHOLDS = (20_000, 20, 50)


def settle_for_viewing() -> None:
    """Set this process's collector for a viewer (the ``ranktop`` commands that watch a job call it once,
    at start; never in a rank: the probe leaves the job's interpreter as it found it)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
