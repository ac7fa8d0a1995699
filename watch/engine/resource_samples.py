"""Each rank's memory and GPU samples as they arrive, and the immutable view of them a snapshot holds.

The job state hands each rank's state here as it arrives (:meth:`ResourceTracker.note`,
under the aggregator's lock). A snapshot takes each rank's :class:`ResourceView`
(immutable: the latest samples; watch/analysis/resources.py makes a row's figures
of it) and, as columns, which ranks have a memory sample, GPU gauges, gauges NVML
read (what the screens count over every rank). A view is made again only for a
rank with new samples, and the views reach the snapshot by one index of an object
array: nothing per rank in Python at a refresh but the ranks that changed. The
memory creep verdict, a regression over a rank's samples (watch/engine/memory_history.py),
is worked out when a row reads it, once per view: at 16,384 ranks each stating every
2 s, working it out for every rank that changed took most of a core.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import numpy as np

from ranktop.watch.engine.memory_history import MemoryHistory, Sample, assess
from ranktop.wire.messages import Memory, State

#: GPU busy (kernel-active) samples kept per rank for the GPU sparkline.
GPU_HISTORY = 60


class ResourceView:
    """One rank's resources as a snapshot holds them: nothing in it changes after (its creep verdict is worked out
    from its own copy of the samples, the first time it is read)."""

    __slots__ = ("memory", "gpu", "gpu_history", "_samples", "_assessed")

    def __init__(self, memory: Memory | None, samples: tuple[Sample, ...] | None, gpu: dict[str, Any] | None,
                 gpu_history: tuple[float, ...]) -> None:  # fmt: skip
        self.memory = memory  # the latest ``mem`` of its state
        self.gpu = gpu  # the latest ``gpu`` of its state
        self.gpu_history = gpu_history  # recent SM utilisation, oldest first
        self._samples = samples
        self._assessed: tuple[Any, ...] | None = None

    @property
    def assessed(self) -> tuple[Any, ...] | None:
        """(tracked series, creep verdict, sparkline MB) of memory_history.assess; None: no memory sample."""
        if self._assessed is None and self._samples is not None:
            self._assessed = assess(self._samples)
        return self._assessed


class Resources(NamedTuple):
    """The views of some ranks, in their order, and what the screens count over them, as columns."""

    views: list[ResourceView | None]  # None: it sent no memory or GPU sample
    with_memory: np.ndarray  # bool: a memory sample came
    with_gpu: np.ndarray  # bool: GPU gauges, or why there are none, came
    gpu_sampled: np.ndarray  # bool: ... gauges NVML read


class ResourceTracker:
    def __init__(self) -> None:
        self._memory: dict[int, MemoryHistory] = {}
        self._gpu: dict[int, dict[str, Any]] = {}
        self._gpu_seq: dict[int, int] = {}
        self._gpu_history: dict[int, collections.deque[float]] = {}
        self._changed: set[int] = set()  # ranks with samples newer than their view
        # By rank number: its view, and the three columns of Resources.
        self._views = np.full(0, None, object)
        self._with_memory = np.zeros(0, bool)
        self._with_gpu = np.zeros(0, bool)
        self._gpu_sampled = np.zeros(0, bool)

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
        for table in (self._memory, self._gpu, self._gpu_seq, self._gpu_history):
            table.pop(rank, None)
        self._changed.discard(rank)
        if rank < len(self._views):
            self._views[rank] = None
            self._with_memory[rank] = self._with_gpu[rank] = self._gpu_sampled[rank] = False

    def views(self, ranks: np.ndarray) -> Resources:
        """The views of ``ranks`` (rank numbers, int64), made again for the ranks with new samples only."""
        n = len(ranks)
        if not self._memory and not self._gpu:
            return Resources([None] * n, np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool))
        if self._changed:
            self._grow(max(max(self._changed), int(ranks.max()) if n else 0) + 1)
            for rank in self._changed:
                history = self._memory.get(rank)
                gpu = self._gpu.get(rank)
                self._views[rank] = ResourceView(
                    history.latest if history is not None else None, history.samples if history is not None else None,
                    gpu, tuple(self._gpu_history.get(rank, ())),
                )  # fmt: skip
                self._with_memory[rank] = history is not None and history.latest is not None
                self._with_gpu[rank] = gpu is not None
                self._gpu_sampled[rank] = gpu is not None and "na" not in gpu
            self._changed.clear()
        known = ranks < len(self._views)
        if not known.all():  # ranks never sampled, beyond the last that was
            self._grow(int(ranks.max()) + 1)
        return Resources(
            self._views[ranks].tolist(), self._with_memory[ranks], self._with_gpu[ranks], self._gpu_sampled[ranks]
        )

    def _grow(self, size: int) -> None:
        if size <= len(self._views):
            return
        size = max(size, 2 * len(self._views))
        views = np.full(size, None, object)
        views[: len(self._views)] = self._views
        self._views = views
        for name in ("_with_memory", "_with_gpu", "_gpu_sampled"):
            column = np.zeros(size, bool)
            old = getattr(self, name)
            column[: len(old)] = old
            setattr(self, name, column)
