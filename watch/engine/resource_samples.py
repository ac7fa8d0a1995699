"""Each rank's memory and GPU samples as they arrive, and the immutable view of them a snapshot holds.

The job state hands each rank's state here as it arrives (:meth:`ResourceTracker.note`,
under the aggregator's lock). A snapshot takes each rank's :class:`ResourceView`
(immutable: the latest samples and the memory verdict; watch/analysis/resources.py
makes a row's figures of it). The memory creep verdict, a regression over a rank's
samples, is worked out again at most every :data:`ASSESS_EVERY_S` per rank:
at 4,096 ranks sending four states a second it would otherwise be most of a
snapshot.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

from ranktop.watch.engine.memory_history import MemoryHistory
from ranktop.wire.messages import Memory, State

#: GPU busy (kernel-active) samples kept per rank for the GPU sparkline.
GPU_HISTORY = 60
#: Seconds between two assessments of a rank's memory creep (its window is 40 s).
ASSESS_EVERY_S = 2.0


class ResourceView(NamedTuple):
    """One rank's resources as a snapshot holds them: nothing in it changes after."""

    memory: Memory | None  # the latest ``mem`` of its state
    assessed: tuple[Any, ...] | None  # (tracked series, creep verdict, sparkline MB) of MemoryHistory.assess
    gpu: dict[str, Any] | None  # the latest ``gpu`` of its state
    gpu_history: tuple[float, ...]  # recent SM utilisation, oldest first


class ResourceTracker:
    def __init__(self) -> None:
        self._memory: dict[int, MemoryHistory] = {}
        self._gpu: dict[int, dict[str, Any]] = {}
        self._gpu_seq: dict[int, int] = {}
        self._gpu_history: dict[int, collections.deque[float]] = {}
        self._views: dict[int, tuple[float, ResourceView]] = {}  # rank -> (when its memory was assessed, view)
        self._changed: set[int] = set()  # ranks with samples newer than their view

    def note(self, rank: int, state: State, now: float) -> None:
        mem = state.mem
        if mem is not None:
            self._memory.setdefault(rank, MemoryHistory()).note(mem, now)
            self._changed.add(rank)
        gpu = state.gpu
        if gpu is not None:
            self._gpu[rank] = gpu
            self._changed.add(rank)
            seq = gpu.get("seq")
            if isinstance(seq, int) and seq != self._gpu_seq.get(rank):  # a new NVML sample, not a repeat
                self._gpu_seq[rank] = seq
                util = gpu.get("util")
                if isinstance(util, (int, float)):
                    self._gpu_history.setdefault(rank, collections.deque(maxlen=GPU_HISTORY)).append(float(util))

    def forget(self, rank: int) -> None:
        """A rank restarted as a new process (watch/engine/lifecycle.py): its memory history and GPU samples were the
        old process's (a slope across the restart is no creep; the new process counts its samples from 0)."""
        for table in (self._memory, self._gpu, self._gpu_seq, self._gpu_history, self._views):
            table.pop(rank, None)
        self._changed.discard(rank)

    def views(self, ranks: list[int], now: float) -> list[ResourceView | None]:
        """Each rank's view (None: it sent no memory or GPU sample), made again for the ranks with new samples."""
        if not self._memory and not self._gpu:
            return [None] * len(ranks)
        for rank in self._changed:
            kept = self._views.get(rank)
            history = self._memory.get(rank)
            assessed_at, assessed = (kept[0], kept[1].assessed) if kept is not None else (float("-inf"), None)
            if history is not None and (assessed is None or now - assessed_at >= ASSESS_EVERY_S):
                assessed_at, assessed = now, history.assess()
            view = ResourceView(
                history.latest if history is not None else None, assessed, self._gpu.get(rank),
                tuple(self._gpu_history.get(rank, ())),
            )
            self._views[rank] = (assessed_at, view)
        self._changed.clear()
        views = self._views
        return [views[r][1] if r in views else None for r in ranks]
