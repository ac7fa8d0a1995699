"""Memory creep, judged from a rank's memory history (watch/engine/memory_history.py keeps the samples): pure
Python over a tuple of samples, no lock, no socket.

Memory creep is a leak seen from outside: a steady upward slope of a rank's
memory (CUDA allocated where the rank uses CUDA, process RSS always) over many
steps. A rank is flagged when, over the last :data:`CREEP_WINDOW_S` seconds of
samples (at least :data:`CREEP_MIN_SAMPLES`, spanning at least
:data:`CREEP_MIN_SPAN_S`):

- the least-squares slope exceeds a floor (:data:`CREEP_FLOOR_MB_PER_MIN`) and
  is significant: :data:`CREEP_T` times its standard error, so allocator noise
  (RSS moving by a few MB either way) is not a trend;
- the memory grew by at least :data:`CREEP_MIN_GROWTH_MB` over the window;
- and the growth is *sustained*: the slope of each third of the window is at
  least :data:`CREEP_SUSTAIN` of the whole, and the last third's is above the
  floor too. A job warming up (caches filling, the allocator reserving its
  pools) jumps, or climbs ever more slowly, and levels off: its thirds differ,
  or its last third is nearly flat, and it is not flagged; a leak rises alike
  in all three.

Samples are kept at most every half second (watch/engine/memory_history.py
``SAMPLE_EVERY_S``), on the watcher's clock.

Why the floor is 20 MB/min: a healthy rank of the demo (CPU, gloo) grows its
RSS by 10-15 MB/min through its whole first minute (Python's and the C
allocator's arenas filling) before it levels off, slowly and smoothly enough to
pass the significance and sustain tests. Leaks slower than the floor are
reported as a slope (``creep_mb_per_min``) but not flagged.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ranktop.watch.engine.memory_history import Sample

MB = 2**20
CREEP_WINDOW_S = 40.0
CREEP_MIN_SAMPLES = 20
CREEP_MIN_SPAN_S = 15.0
CREEP_FLOOR_MB_PER_MIN = 20.0
CREEP_MIN_GROWTH_MB = 12.0
CREEP_T = 4.0
CREEP_SUSTAIN = 0.5
#: Points in the sparkline of a rank's memory.
SPARK_POINTS = 60


@dataclass(frozen=True)
class Creep:
    flagged: bool
    mb_per_min: float | None  # the slope over the window (None: too few samples)


def slope(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares slope of (t, y) points and its standard error; None below 3 points or no time spread."""
    n = len(points)
    if n < 3:
        return None
    mt = math.fsum(t for t, _ in points) / n
    my = math.fsum(y for _, y in points) / n
    stt = math.fsum((t - mt) ** 2 for t, _ in points)
    if stt <= 0:
        return None
    b = math.fsum((t - mt) * (y - my) for t, y in points) / stt
    a = my - b * mt
    residual = math.fsum((y - (a + b * t)) ** 2 for t, y in points)
    se = math.sqrt(residual / (n - 2) / stt)
    return b, se


def creep(points: list[tuple[float, float]]) -> Creep:
    """Whether (seconds, bytes) samples show memory creep; see the module docstring."""
    if not points:
        return Creep(False, None)
    end = points[-1][0]
    window = [p for p in points if p[0] >= end - CREEP_WINDOW_S]
    fit = slope(window)
    if fit is None:
        return Creep(False, None)
    b, se = fit
    rate = b * 60 / MB
    span = window[-1][0] - window[0][0]
    if len(window) < CREEP_MIN_SAMPLES or span < CREEP_MIN_SPAN_S:
        return Creep(False, rate)
    if rate < CREEP_FLOOR_MB_PER_MIN or b < CREEP_T * se or b * span < CREEP_MIN_GROWTH_MB * MB:
        return Creep(False, rate)
    third = span / 3
    start = window[0][0]
    last_b = b
    for k in range(3):
        part = [p for p in window if start + k * third <= p[0] <= start + (k + 1) * third]
        fit_part = slope(part)
        if fit_part is None or fit_part[0] < CREEP_SUSTAIN * b:
            return Creep(False, rate)
        last_b = fit_part[0]
    if last_b * 60 / MB < CREEP_FLOOR_MB_PER_MIN:  # still climbing now, not a warm-up slowing down
        return Creep(False, rate)
    return Creep(True, rate)


def series(samples: tuple[Sample, ...], which: str) -> list[tuple[float, float]]:
    index = 1 if which == "rss" else 2
    return [(s[0], y) for s in samples if (y := s[index]) is not None]


def assess(samples: tuple[Sample, ...]) -> tuple[str, Creep, list[float]]:
    """What is tracked ("cuda" if the rank uses CUDA, else "rss"), its creep verdict, and its sparkline (MB).

    Both series are tested; a creep in either flags the rank (a host-side leak on a GPU rank shows in RSS only).
    """
    cuda_points = series(samples, "cuda")
    rss_points = series(samples, "rss")
    tracked = "cuda" if cuda_points else "rss"
    main = cuda_points if cuda_points else rss_points
    verdict = creep(main)
    if not verdict.flagged and cuda_points:
        host = creep(rss_points)
        if host.flagged:
            tracked, main, verdict = "rss", rss_points, host
    spark = [y / MB for _, y in main[-SPARK_POINTS:]]
    return tracked, verdict, spark


@functools.lru_cache(maxsize=1024)
def assessed(samples: tuple[Sample, ...]) -> tuple[str, Creep, list[float]]:
    """:func:`assess`, once per rank and samples however many snapshots read its row (the screen's rows at 2 Hz, a
    rank's samples new every 2 s at the most): a snapshot's view keeps its samples as a tuple that never changes."""
    return assess(samples)
