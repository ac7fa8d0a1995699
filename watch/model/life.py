"""A job's life as a snapshot says it (:class:`JobLife`: waiting, running or ended, its restarts, the ranks not
back), and the one line the header writes of it. The engine's lifecycle (watch/engine/lifecycle.py) counts
what the ranks' hellos and last words tell; this is what it hands on, and how those facts are said.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from ranktop.watch import format as fmt

#: Job states a snapshot says (``Snapshot.state``).
WAITING = "waiting"  # no rank heard yet
RUNNING = "running"
ENDED = "ended"  # every rank said it ended cleanly
STATES = (WAITING, RUNNING, ENDED)


@dataclass(frozen=True)
class JobLife:
    """What a snapshot says of the job's life."""

    state: str  # one of STATES
    ended_at: float | None = None  # when its last rank ended (unix seconds), once ENDED
    restarts: int = 0  # times its ranks came back as new processes, since this viewer started
    restarted_at: float | None = None  # when the latest restart was seen (unix seconds)
    not_back: tuple[int, ...] = ()  # ranks of the job not heard from as a new process since the latest restart
    failed: tuple[int, ...] = ()  # ranks whose process said it died of an exception
    # ranks still of an older process, that did not end: not back if they are silent too (a rank of an older
    # generation still talking was not restarted at all: one node's ranks may come back alone); the analysis
    # side, which knows who is silent, adds those to ``not_back`` (watch/analysis/judge.py)
    older: tuple[int, ...] = ()


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def life_line(state: str, ended_at: float | None, restarts: int, restarted_at: float | None, not_back: Sequence[int]) -> str | None:
    """The viewer's one line on the job's life: "ended at 12:09:55", "restarted at 12:04:31 (2nd restart);
    rank 3 not back"; None while it simply runs."""
    parts = []
    if state == ENDED and ended_at is not None:
        parts.append(f"ended at {_clock(ended_at)}")
    if restarts and restarted_at is not None:
        parts.append(f"restarted at {_clock(restarted_at)} ({ordinal(restarts)} restart)")
    if not_back:
        parts.append(f"{fmt.ranks_text(not_back)} not back")
    return "; ".join(parts) or None


def _clock(unix: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(unix))
