"""The colours ranktop draws with, defined once.

Bars, the legend, the straggler table and the status line are Rich text built
in Python, so their colours live here rather than in ``ranktop.tcss`` (which
holds layout only). Phase colours follow the order of a step: data in blue,
compute in green and magenta, the optimizer in yellow, unaccounted time in grey.
"""

from __future__ import annotations

from ranktop.watch import OK, SILENT, SLOW, STALLED

#: Colours of the standard phases and of "other".
PHASE_COLOURS = {
    "data": "dodger_blue2",
    "forward": "green3",
    "backward": "magenta",
    "optimizer": "gold1",
    "other": "grey50",
}
#: User phases take these in phase_names order, cycling when there are more.
USER_PHASE_COLOURS = ("dark_orange", "cyan", "orchid", "chartreuse3", "light_pink3", "steel_blue1")

STATUS_STYLES = {OK: "green3", SLOW: "bold dark_orange", STALLED: "bold magenta", SILENT: "bold red"}
#: Ranks that cannot be measured (silent, or no steps yet) are drawn in this.
MUTED = "grey42"
WARNING = "yellow"
ERROR = "red"


def phase_colours(phase_names: list[str]) -> dict[str, str]:
    """A colour for every phase shown; user phases get stable colours by position."""
    colours = {}
    user = 0
    for name in phase_names:
        if name in PHASE_COLOURS:
            colours[name] = PHASE_COLOURS[name]
        else:
            colours[name] = USER_PHASE_COLOURS[user % len(USER_PHASE_COLOURS)]
            user += 1
    return colours
