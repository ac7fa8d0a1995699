"""Per-rank memory history: the samples a rank's states carried, kept at most every :data:`SAMPLE_EVERY_S` (the
probes send a state four times a second) for :data:`HISTORY_S`, on the watcher's clock. Pure Python, fed by the
job state under the aggregator's lock; whether they show memory creep is the analysis' to say
(watch/analysis/memory_creep.py).
"""

from __future__ import annotations

from typing import Optional, Tuple

from ranktop.wire.messages import Memory

SAMPLE_EVERY_S = 0.5
HISTORY_S = 120.0
#: One kept sample: (seconds on the viewer's clock, RSS bytes or None, CUDA allocated bytes or None).
Sample = Tuple[float, Optional[float], Optional[float]]


class MemoryHistory:
    """One rank's recent memory samples, as a tuple: a snapshot's view of the rank keeps the tuple as it is; the
    analysis works the creep verdict out of it later, outside the aggregator's lock (watch/analysis/memory_creep.py)."""

    def __init__(self) -> None:
        self.samples: tuple[Sample, ...] = ()
        self.latest: Memory | None = None

    def note(self, mem: Memory, now: float) -> None:
        self.latest = mem
        kept = self.samples
        if kept and now - kept[-1][0] < SAMPLE_EVERY_S:
            return
        rss = mem.rss
        alloc = mem.cuda.get("alloc") if mem.cuda else None
        old = 0
        while old < len(kept) and kept[old][0] < now - HISTORY_S:
            old += 1
        self.samples = kept[old:] + ((now, float(rss) if rss is not None else None, float(alloc) if alloc is not None else None),)
