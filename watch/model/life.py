"""A job's life as a snapshot says it (:class:`JobLife`: waiting, running or ended, its restarts, the ranks not
back). The engine's lifecycle (watch/engine/lifecycle.py) counts what the ranks' hellos and last words tell; this
is what it hands on; the snapshot carries its facts and the screen words them (tui/panes/header.py ``life_line``).
"""

from __future__ import annotations

from dataclasses import dataclass

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
