"""Each rank's memory and GPU samples as they arrive, and what a snapshot holds of them.

The rank store (watch/engine/rank_store.py) hands each rank's state here as it arrives
(:meth:`ResourceTracker.note`, under the aggregator's lock): a few stores into columns by the rank's row (its latest
memory and gauges, its memory history's samples and its recent GPU use, each kept as
an immutable value). A snapshot gathers the columns of its ranks by one index each
(:class:`Resources`: nothing per rank in Python, however many ranks sent samples since
the last), and a rank's :class:`ResourceView` (watch/analysis/resources.py makes a
row's figures of it) is made when its row is read. So is its memory creep verdict, a
regression over its samples (watch/engine/memory_history.py): at 16,384 GPU ranks each
stating every 2 s, a view and a verdict for every rank that stated since the last
refresh took 14 ms of each snapshot and more than the rest of it at every assessment.
"""

from __future__ import annotations

import collections
import functools
from typing import Any

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
            self._assessed = _assessed(self._samples)
        return self._assessed


@functools.lru_cache(maxsize=1024)
def _assessed(samples: tuple[Sample, ...]) -> tuple[str, Any, list[float]]:
    """memory_history.assess, once per rank and samples however many snapshots read its row (the screen's rows at
    2 Hz, a rank's samples new every 2 s at the most)."""
    return assess(samples)


class Resources:
    """The resources of some ranks, in their order: what a snapshot holds of them. Each figure is a column (copies,
    made by one index per figure: nothing per rank in Python), and a rank's :class:`ResourceView` is made when its
    row is read (``resources[i]``; None: it sent no memory or GPU sample)."""

    __slots__ = ("_memory", "_samples", "_gpu", "_gpu_history", "with_memory", "with_gpu", "gpu_sampled")

    def __init__(self, memory: np.ndarray, samples: np.ndarray, gpu: np.ndarray, gpu_history: np.ndarray,
                 with_memory: np.ndarray, with_gpu: np.ndarray, gpu_sampled: np.ndarray) -> None:  # fmt: skip
        self._memory, self._samples, self._gpu, self._gpu_history = memory, samples, gpu, gpu_history
        self.with_memory = with_memory  # bool: a memory sample came
        self.with_gpu = with_gpu  # bool: GPU gauges, or why there are none, came
        self.gpu_sampled = gpu_sampled  # bool: ... gauges NVML read

    @classmethod
    def none(cls, n: int) -> "Resources":
        blank, no = np.full(n, None, object), np.zeros(n, bool)
        return cls(blank, blank, blank, blank, no, no, no)

    def __len__(self) -> int:
        return len(self.with_memory)

    def __getitem__(self, i: int) -> ResourceView | None:
        if not (self.with_memory[i] or self.with_gpu[i]):
            return None
        return ResourceView(self._memory[i], self._samples[i], self._gpu[i], self._gpu_history[i] or ())


#: The tracker's columns, by row: what it keeps of each rank's samples, and the blank of each.
_COLUMNS = {"_memory": None, "_samples": None, "_gpu": None, "_gpu_history": None}
_FLAGS = ("_with_memory", "_with_gpu", "_gpu_sampled")


class ResourceTracker:
    """Every rank's samples as columns by its row, written as each state arrives (a few stores): a refresh
    gathers them by one index per column, whatever the number of ranks and of ranks that sent samples since."""

    _memory: np.ndarray  # object: its latest Memory
    _samples: np.ndarray  # object: its memory history's samples (a tuple, never changed: MemoryHistory)
    _gpu: np.ndarray  # object: its latest gauges
    _gpu_history: np.ndarray  # object: its recent SM utilisation (a tuple), oldest first
    _with_memory: np.ndarray
    _with_gpu: np.ndarray
    _gpu_sampled: np.ndarray

    def __init__(self) -> None:
        self._histories: dict[int, MemoryHistory] = {}
        self._gpu_seq: dict[int, int] = {}
        self._utils: dict[int, collections.deque[float]] = {}
        self._size = 0
        self._sampled = False  # some rank sent a sample (until then a refresh hands out blanks)
        self._grow(64)

    def note(self, row: int, state: State, now: float) -> None:
        mem, gpu = state.mem, state.gpu
        if mem is None and gpu is None:
            return
        if row >= self._size:
            self._grow(row + 1)
        self._sampled = True
        if mem is not None:
            history = self._histories.get(row)
            if history is None:
                history = self._histories[row] = MemoryHistory()
            history.note(mem, now)
            self._memory[row], self._samples[row], self._with_memory[row] = mem, history.samples, True
        if gpu is not None:
            self._gpu[row], self._with_gpu[row], self._gpu_sampled[row] = gpu, True, "na" not in gpu
            seq = gpu.get("seq")
            if isinstance(seq, int) and seq != self._gpu_seq.get(row):  # a new NVML sample, not a repeat
                self._gpu_seq[row] = seq
                util = gpu.get("util")
                if isinstance(util, (int, float)):
                    utils = self._utils.get(row)
                    if utils is None:
                        utils = self._utils[row] = collections.deque(maxlen=GPU_HISTORY)
                    utils.append(float(util))
                    self._gpu_history[row] = tuple(utils)

    def forget(self, row: int) -> None:
        """A row's rank restarted as a new process (watch/engine/rank_store.py ``forget``): its memory history and GPU samples were the
        old process's (a slope across the restart is no creep; the new process counts its samples from 0)."""
        for table in (self._histories, self._gpu_seq, self._utils):
            table.pop(row, None)
        if row < self._size:
            for name in _COLUMNS:
                getattr(self, name)[row] = None
            for name in _FLAGS:
                getattr(self, name)[row] = False

    def views(self, rows: np.ndarray) -> Resources:
        """The resources of ``rows`` (int64), gathered, gathered: copies, one index per column."""
        if not self._sampled:
            return Resources.none(len(rows))
        if len(rows) and int(rows.max()) >= self._size:
            self._grow(int(rows.max()) + 1)
        return Resources(*(getattr(self, name)[rows] for name in (*_COLUMNS, *_FLAGS)))

    def _grow(self, size: int) -> None:
        size = max(size, 2 * self._size)
        for name in _COLUMNS:
            column = np.full(size, None, object)
            column[: self._size] = getattr(self, name)[: self._size] if self._size else column[:0]
            setattr(self, name, column)
        for name in _FLAGS:
            flags = np.zeros(size, bool)
            flags[: self._size] = getattr(self, name)[: self._size] if self._size else flags[:0]
            setattr(self, name, flags)
        self._size = size
