"""How sizes, durations, ages, ratios, rates, rank lists, op keys and host names are written, everywhere alike.

The screen, the commands' lines, the diagnosis and the capture summaries all
write through these functions, so 1000 bytes or three hours read the same in
each of them. Numbers are written for people: three significant digits and a
unit or an SI suffix (``140k``, ``968 GB/s``), never ``140120.`` or
``991755.7``; ``--json`` keeps the raw numbers (watch/model/json_doc.py).
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
    return "–" if seconds is None else f"{ms_fixed(seconds)} ms"


def ms_fixed(seconds: float, decimals: int = 1) -> str:
    """A duration in milliseconds to a fixed number of decimals, for columns whose points line up: "3.0", "1.50"."""
    return f"{seconds * 1000:.{decimals}f}"


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


#: SI suffixes, largest first, for counts and rates: 1234 -> 1.23k.
_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def significant(value: float) -> str:
    """A plain number in three significant digits, never an exponent: 0.0123, 1.05, 17.1, 968 (a unit or
    :func:`si` keeps values under 1000: above, every digit is written)."""
    value = float(f"{value:.3g}")  # rounded first: 0.9996 is 1.00, not 1.000
    magnitude = abs(value)
    if magnitude >= 100 or magnitude == 0:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    digits = 3
    while magnitude < 0.1 and digits < 8:
        magnitude *= 10
        digits += 1
    return f"{value:.{digits}f}"


def si(value: float | None, unit: str = "") -> str:
    """A count or rate with an SI suffix and three significant digits: 960, 1.23k, 140k, 1.25M; "–" unknown.

    ``unit`` follows the number directly ("140k/s"); a value that rounds up to
    1000 takes the next suffix (999,999 is 1.00M, not 1000k).
    """
    if value is None:
        return "–"
    for scale, suffix in _SI:
        if abs(value) >= scale * 0.9995:
            return f"{value / scale:.3g}{suffix}{unit}"
    return f"{value:.3g}{unit}"


def bandwidth(bytes_per_s: float | None) -> str:
    """Bytes per second in decimal units, as nccl-tests and link specs count them: 126 MB/s, 968 GB/s; "–" unknown."""
    if bytes_per_s is None:
        return "–"
    value = float(bytes_per_s)
    for unit in ("B/s", "KB/s", "MB/s", "GB/s", "TB/s"):
        if abs(value) < 999.5 or unit == "TB/s":
            return f"{significant(value)} {unit}"
        value /= 1000
    return "–"  # unreachable: TB/s takes the rest


def op_key(op: str, width: int, group_size: int | None = None) -> str:
    """A collective's key in at most ``width`` cells, its role kept: ``reduce_scatter_t…@dp ×64``.

    On a job with several parallel dimensions the role (``@tp``, ``@dp``) says
    which group waits; so the op's name is shortened, never its role or group size.
    """
    name, at, role = op.partition("@")
    tail = f"{at}{role}" + (f" ×{group_size}" if group_size is not None else "")
    if len(name) + len(tail) <= width:
        return name + tail
    room = width - len(tail)
    if room < 2:  # not even a letter and the ellipsis: the role still fits, or its start
        return (name[:1] + tail)[:width]
    return name[: room - 1] + "…" + tail


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
