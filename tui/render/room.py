"""How the screen's rows are shared among the panes: each takes what it needs, up to a share, and gives the rest.

Fixed CSS shares (a pane at 35%, another at 1fr) leave a pane of four rows
with twelve blank ones under them while the pane below scrolls. Here every
pane says how many rows its content wants; the rows are dealt out in three
rounds, most important pane first:

1. every pane gets its floor (a border, a heading and a row or two), or less if it wants less;
2. every pane grows up to its share of the room, or less if it wants less;
3. what is left goes to the panes that still want more, in order.

Rows nobody wants stay at the bottom: blank rows only where every pane shows
all it has. Pure arithmetic, tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A pane whose content is as tall as it is given (the rank map of a big job).
ANY = 10**6


@dataclass(frozen=True)
class Want:
    """What one pane asks of the room."""

    name: str
    rows: int  # as many as its content takes (ANY: as many as it gets)
    floor: int  # at least this many, when it wants that many (its border, heading and a row)
    share: float  # in round 2, up to this fraction of the room


def share(room: int, wants: list[Want]) -> dict[str, int]:
    """Rows per pane, in the order given (most important first); their sum never exceeds ``room``."""
    left = max(0, room)
    given = {w.name: 0 for w in wants}

    def grant(w: Want, up_to: int) -> None:
        nonlocal left
        more = max(0, min(up_to, w.rows) - given[w.name])
        more = min(more, left)
        given[w.name] += more
        left -= more

    for w in wants:
        grant(w, w.floor)
    for w in wants:
        grant(w, max(w.floor, int(room * w.share)))
    for w in wants:
        grant(w, w.rows)
    return given


def total(wants: list[Want]) -> int:
    """The rows every pane would take to show all it has."""
    return sum(min(w.rows, ANY) for w in wants)
