"""A job's life as its ranks tell it: restarts (the same ranks back as new processes) and its end.

The rank store (watch/engine/rank_store.py) calls :meth:`LifeColumns.note_hello` for
every hello and :meth:`LifeColumns.note_exit` for a rank's last heartbeat
(wire/schema.py ``EXITS``), each by the rank's row, and reads :meth:`LifeColumns.view`
into each gathered view. The bookkeeping lives here, as columns by row beside the
rank's other figures.

Why by process id: torchrun's ``--max-restarts``, an elastic membership change
and a SLURM requeue all bring the same job name and the same rank numbers back
as new processes. A rank whose hello names another pid than before is a new
process: its row starts afresh (``RankStore.forget``) (its old steps are another process's), and
the first rank of a new generation counts one restart of the job. Ranks of an
older generation that went silent (or said they ended) and have not come back
are named.

Ended: every rank of the job (its world size, as the hellos say it) said it
ended cleanly, and none came back since. Counted per rank, O(1) per message;
the view is O(ranks), taken with each snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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


#: A row's last word, as its ``exit`` column holds it.
NO_EXIT, CLEAN_EXIT, ERROR_EXIT = 0, 1, 2


class LifeColumns:
    """Each row's process (its pid, how many times its rank came back, how its process said it ended) as columns
    by row, and the job's restarts. Written by the rank store (watch/engine/rank_store.py) only."""

    pid: np.ndarray  # int64: the pid of its process as last heard (0: none yet)
    generation: np.ndarray  # int64: how many times it came back (-1: no pid heard yet)
    exit: np.ndarray  # int8: NO_EXIT, CLEAN_EXIT or ERROR_EXIT, of its current process
    exit_at: np.ndarray  # when it said so (unix seconds)

    def __init__(self, rows: int = 8) -> None:
        self._latest = 0  # the newest generation any rank is in
        self.restarts = 0
        self._restarted_at: float | None = None
        self._size = 0
        self.ensure(max(1, rows) - 1)

    def ensure(self, row: int) -> None:
        """Room for ``row`` (the columns double as the job grows)."""
        if row < self._size:
            return
        size = max(row + 1, 2 * self._size)
        for name, dtype, blank in (("pid", np.int64, 0), ("generation", np.int64, -1), ("exit", np.int8, NO_EXIT),
                                   ("exit_at", np.float64, 0.0)):  # fmt: skip
            column = np.full(size, blank, dtype)
            if self._size:
                column[: self._size] = getattr(self, name)
            setattr(self, name, column)
        self._size = size

    def note_hello(self, row: int, pid: object, wall: float) -> bool:
        """A hello from process ``pid`` of the rank in ``row``: True when that is a new process of a rank already
        heard (its row must start afresh)."""
        if type(pid) is not int or pid <= 0:
            return False
        self.ensure(row)
        known = int(self.pid[row])
        self.pid[row] = pid
        if not known:
            self.generation[row] = self._latest  # first heard now: of the job as it is
            return False
        if known == pid:
            return False
        self.exit[row] = NO_EXIT
        generation = int(self.generation[row]) + 1
        self.generation[row] = generation
        if generation > self._latest:
            self._latest = generation
            self.restarts += 1
            self._restarted_at = wall
        return True

    def note_exit(self, row: int, how: str, wall: float) -> None:
        """The row's process said it is ending (``"clean"`` or ``"error"``)."""
        self.ensure(row)
        self.exit[row] = CLEAN_EXIT if how == "clean" else ERROR_EXIT
        self.exit_at[row] = wall

    def ended(self, rank: np.ndarray, world: int | None) -> bool:
        """Every rank of a job of ``world`` ranks ended cleanly; ``rank``: the rank of each row, from row 0 on
        (what ``ranktop record`` polls)."""
        if not world:
            return False
        n = len(rank)
        self.ensure(max(n, 1) - 1)
        return int(np.count_nonzero((self.exit[:n] == CLEAN_EXIT) & (rank < world))) >= world

    def view(self, rank: np.ndarray, rows: np.ndarray, world: int | None) -> JobLife:
        """The job's life now, as far as its hellos and last words tell (who is silent is the analysis side's);
        ``rank``, ``rows``: every rank heard, and its row."""
        if not len(rank):
            return JobLife(WAITING)
        self.ensure(int(rows.max()))
        exit, generation = self.exit[rows], self.generation[rows]
        within = rank < world if world is not None else np.ones(len(rank), bool)
        failed = tuple(rank[exit == ERROR_EXIT].tolist())
        not_back: tuple[int, ...] = ()
        older: tuple[int, ...] = ()
        if self.restarts:
            behind = (generation >= 0) & (generation < self._latest) & within
            not_back = tuple(rank[behind & (exit != NO_EXIT)].tolist())
            older = tuple(rank[behind & (exit == NO_EXIT)].tolist())
        if world and int(np.count_nonzero((exit == CLEAN_EXIT) & within)) >= world:
            ended_at = float(self.exit_at[rows][within].max())
            return JobLife(ENDED, ended_at, self.restarts, self._restarted_at, not_back, failed, older)
        return JobLife(RUNNING, None, self.restarts, self._restarted_at, not_back, failed, older)


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
