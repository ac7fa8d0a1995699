"""A distribution of one number over every rank, drawn in a few terminal lines.

Thousands of ranks do not fit as bars; their distribution does. Counts are
drawn on a log scale so that one straggler among 4,096 ranks still gets a
visible column, and a column holding a flagged rank takes that rank's status
colour, so the outlier stands out at the right end however small it is.
"""

from __future__ import annotations

import math

from rich.text import Text

from ranktop.tui.render import palette

LEVELS = " ▁▂▃▄▅▆▇█"
BAR_STYLE = "steel_blue1"


def bin_counts(values: list[float], marks: list[tuple[float, str]], bins: int, top: float) -> tuple[list[int], list[str | None]]:
    """Counts per bin over [0, top], and per bin the style of a marked (flagged) value in it, else None.

    Plain floats, not an object per rank: this runs over every rank at each refresh.
    """
    counts = [0] * bins
    styles: list[str | None] = [None] * bins
    if bins <= 0:
        return counts, styles
    scale = bins / top if top > 0 else 0.0
    last = bins - 1
    for value in values:
        i = int(value * scale)
        counts[last if i > last else (0 if i < 0 else i)] += 1
    for value, style in marks:
        i = int(value * scale)
        styles[last if i > last else (0 if i < 0 else i)] = style
    return counts, styles


def histogram_lines(values: list[float], width: int, height: int, *, unit: str, label: str | None = None,
                    marks: list[tuple[float, str]] = ()) -> list[Text]:  # fmt: skip
    """``height`` lines of columns (log-scaled counts), then an axis line: ``0 … max unit``.

    ``marks`` are values (also in ``values``) whose column takes a style: the flagged ranks.
    """
    width = max(1, width)
    top = max(values, default=0.0)
    counts, styles = bin_counts(values, list(marks), width, top)
    peak = max(counts, default=0)
    lines = [Text(no_wrap=True, overflow="crop") for _ in range(max(0, height))]
    steps = len(LEVELS) - 1
    for x, count in enumerate(counts):
        # log scale; any non-zero count shows at least the lowest block
        level = 0 if count == 0 else max(1, round(math.log1p(count) / math.log1p(peak) * steps * height))
        style = styles[x] or BAR_STYLE
        for row in range(height):
            filled = level - (height - 1 - row) * steps  # cells of this line, counted from the bottom
            char = LEVELS[max(0, min(steps, filled))]
            lines[row].append(char, style=style)
    axis = Text(no_wrap=True, overflow="ellipsis", style=palette.MUTED)
    right = f"{_num(top)} {unit}" + (f" ({label})" if label else "")
    left = f"0 {unit}"
    middle = f"{_num(top / 2)}"
    gap = width - len(left) - len(right)
    if gap > len(middle) + 2:
        pad = (gap - len(middle)) // 2
        axis.append(left + " " * pad + middle + " " * (gap - pad - len(middle)) + right)
    elif gap > 0:
        axis.append(left + " " * gap + right)
    else:
        axis.append(right)
    return lines + [axis]


def _num(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
