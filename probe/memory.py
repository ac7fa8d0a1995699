"""This rank's memory: process RSS always, the CUDA caching allocator's counters where CUDA is in use.

Sampled on the probe's sender thread (never the training thread), at most
every :data:`MIN_INTERVAL_S`, and sent as ``state["mem"]`` with every
telemetry message. What it costs: RSS is one read of ``/proc/self/statm`` (a
few microseconds; no psutil). The CUDA part is ``torch.cuda.memory_stats``,
which reads the allocator's counters under its own lock without touching the
device (no synchronisation, no kernel), and only once the script has imported
torch *and* initialised CUDA: the probe never imports torch nor creates a CUDA
context.

Which device: CUDA's current device is per thread, and the sender thread's is
always device 0, so ``current_device()`` here says nothing about the training
thread. The rank's device is the one where this process holds memory (the
largest reserved), else ``cuda:LOCAL_RANK`` (torchrun's convention).

Peak: ``torch.cuda.reset_peak_memory_stats`` would give a peak per window, and
is thread-safe in itself (the allocator takes its lock), but it resets the one
counter the script's own ``torch.cuda.max_memory_allocated()`` reads, silently
corrupting what the user logs. So the probe never resets it: ``peak`` is the
peak since the process started (or since the script's own last reset).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

from ranktop.wire.messages import CudaMemory, Memory

#: Samples are reused for this long: the sender may ask several times per flush.
MIN_INTERVAL_S = 0.2
#: Failures in a row of the CUDA counters after which only RSS is sampled.
MAX_CUDA_ERRORS = 5


def _imported(module: Any) -> bool:
    """False while the training thread is still executing ``import torch`` (a half-built module)."""
    return not getattr(getattr(module, "__spec__", None), "_initializing", False)


try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):  # not a POSIX system
    _PAGE = 4096


def read_rss(path: str = "/proc/self/statm") -> int | None:
    """Resident set size in bytes from ``/proc/self/statm`` (second field, in pages); None where there is no /proc."""
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return _rss_fallback()


def _rss_fallback() -> int | None:
    # macOS and other systems without /proc: the peak RSS (ru_maxrss) is the best cheap figure.
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
    except Exception:
        return None


def rank_device(torch: Any, local_rank: int) -> tuple[int | None, bool]:
    """The CUDA device index the training uses (see the module docstring), and whether that is
    certain (the process holds memory there) or a guess; None without CUDA in use."""
    cuda = torch.cuda
    if not cuda.is_initialized():
        return None, False
    count = cuda.device_count()
    if count <= 0:
        return None, False
    best, best_reserved = None, 0
    for index in range(count):
        reserved = cuda.memory_reserved(index)
        if reserved > best_reserved:
            best, best_reserved = index, reserved
    if best is not None:
        return best, True
    return (local_rank if 0 <= local_rank < count else 0), False


def cuda_sample(torch: Any, device: int) -> CudaMemory:
    """The allocator's counters of one device, in the wire's short names."""
    stats = torch.cuda.memory_stats(device)
    allocated = int(stats.get("allocated_bytes.all.current", 0))
    reserved = int(stats.get("reserved_bytes.all.current", 0))
    try:
        cap: int | None = int(torch.cuda.get_device_properties(device).total_memory)
    except Exception:
        cap = None
    return CudaMemory(
        dev=device,
        alloc=allocated,
        resv=reserved,
        peak=int(stats.get("allocated_bytes.all.peak", 0)),
        retries=int(stats.get("num_alloc_retries", 0)),
        ooms=int(stats.get("num_ooms", 0)),
        cap=cap,
    )


class MemorySampler:
    """``sample()`` -> ``Memory(rss=bytes, cuda=CudaMemory(...))``; cached for :data:`MIN_INTERVAL_S`."""

    def __init__(self, local_rank: int = 0, clock: Callable[[], float] = time.monotonic, on_device: Callable[[int], None] | None = None):
        self.local_rank = local_rank
        self._clock = clock
        self._on_device = on_device  # called once with the device index, when it is certain
        self._last: Memory | None = None
        self._at = float("-inf")
        self._device: int | None = None
        self._device_sure = False
        self._cuda_errors = 0

    def sample(self) -> Memory:
        now = self._clock()
        if self._last is not None and now - self._at < MIN_INTERVAL_S:
            return self._last
        rss, cuda = read_rss(), None
        torch = sys.modules.get("torch")  # only if the script imported it; never imported here
        if torch is not None and self._cuda_errors < MAX_CUDA_ERRORS and _imported(torch):
            try:
                if not self._device_sure:  # until the training has put memory on a device
                    self._device, self._device_sure = rank_device(torch, self.local_rank)
                    if self._device_sure and self._device is not None and self._on_device is not None:
                        self._on_device(self._device)
                if self._device is not None:
                    cuda = cuda_sample(torch, self._device)
                self._cuda_errors = 0
            except Exception:
                self._cuda_errors += 1  # an odd torch build: after a few in a row, RSS alone, never a fault
        out = Memory(rss=rss, cuda=cuda)
        self._last, self._at = out, now
        return out

    def retries(self) -> int | None:
        """The CUDA allocator's retries so far, as the last sample read them (None: no CUDA sampled)."""
        cuda = self._last.cuda if self._last is not None else None
        return int(cuda.retries) if cuda is not None and cuda.retries is not None else None

    @property
    def device(self) -> int | None:
        """The CUDA device index the training uses, once certain (it holds memory there)."""
        return self._device if self._device_sure else None
