"""How sizes, durations, ages, ratios, rank lists and host names are written, everywhere alike.

The screen, the commands' lines, the diagnosis and the capture summaries all
write through these functions, so 1000 bytes or three hours read the same in
each of them.
"""

from __future__ import annotations

import ipaddress
from typing import Iterable


def ms(seconds: float | None) -> str:
    """A duration in milliseconds with three significant-ish digits: 0.42, 12.3, 1234."""
    if seconds is None:
        return "–"
    value = seconds * 1000.0
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def ms_brief(seconds: float) -> str:
    """A duration in a sentence, in milliseconds: 4.2 under 10 ms, 38 above (the verdict's "+38 ms per step")."""
    value = seconds * 1000.0
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def ms_unit(seconds: float | None) -> str:
    """A duration with its unit, to a tenth of a millisecond: "12.3 ms" (the report's columns); "–" unknown."""
    return "–" if seconds is None else f"{seconds * 1000:.1f} ms"


def percent(fraction: float) -> str:
    """A share in a sentence: 4.2% under 10%, 41% above."""
    pct = fraction * 100
    return f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"


def score(fraction: float) -> str:
    """A slowdown against the median rank: +42%, or ±0% when there is none."""
    pct = round(fraction * 100)
    return "±0%" if pct == 0 else f"{pct:+d}%"


def clock(seconds: float) -> str:
    """Elapsed time as hh:mm:ss (hours grow past 99 rather than wrap)."""
    total = max(0, int(seconds))
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


def ago(seconds: float) -> str:
    """A short age: 12s, 4m, 3h (never "180m")."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h"


def host(name: str, width: int) -> str:
    """A host name in at most ``width`` cells, keeping the part that tells nodes apart.

    The domain goes first (``gpu-node-a.cluster.example.com`` -> ``gpu-node-a``);
    if that is still too long the end is kept, where node numbers usually are.
    """
    if len(name) <= width:
        return name
    try:
        ipaddress.ip_address(name)
    except ValueError:
        name = name.split(".", 1)[0]
    if len(name) <= width:
        return name
    return "…" + name[len(name) - width + 1 :] if width > 1 else name[:width]


#: What a gauge NVML (or the probe) could not read shows as.
NA = "N/A"


def size(nbytes: float | None, *, decimal: bool = False) -> str:
    """Bytes in binary units: 412 MB, 12.3 GB (three significant-ish digits); N/A when unknown.

    A unit is used from 1000 of the one below (1000 B is 1.0 KB). ``decimal``
    keeps one decimal whatever the size (535.0 KB), for lines that compare sizes.
    """
    if nbytes is None:
        return NA
    value = float(nbytes)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            if unit == "B":
                return f"{value:.0f} {unit}"
            return f"{value:.1f} {unit}" if decimal or abs(value) < 100 else f"{value:.0f} {unit}"
        value /= 1024
    return NA


# -- rank lists -----------------------------------------------------------------------


def compress_ranks(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5, 9, 10]`` -> ``"0-3,5,9-10"``."""
    out: list[str] = []
    ordered = sorted(set(ranks))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def ranks_text(ranks: Iterable[int]) -> str:
    ranks = sorted(set(ranks))
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {compress_ranks(ranks)}"
