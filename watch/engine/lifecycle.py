"""A job's life as its ranks tell it: restarts (the same ranks back as new processes) and its end.

The aggregator calls :meth:`Lifecycle.note_hello` for every hello and
:meth:`Lifecycle.note_exit` for a rank's last heartbeat (wire/schema.py
``EXITS``), and reads :meth:`Lifecycle.view` into each snapshot. Nothing else:
the bookkeeping lives here, so the aggregator's part is two calls.

Why by process id: torchrun's ``--max-restarts``, an elastic membership change
and a SLURM requeue all bring the same job name and the same rank numbers back
as new processes. A rank whose hello names another pid than before is a new
process: its window starts afresh (its old steps are another process's), and
the first rank of a new generation counts one restart of the job. Ranks of an
older generation that went silent (or said they ended) and have not come back
are named.

Ended: every rank of the job (its world size, as the hellos say it) said it
ended cleanly, and none came back since. Counted per rank, O(1) per message;
the view is O(ranks), taken with each snapshot.
"""

from __future__ import annotations

from ranktop.watch.model.life import ENDED, RUNNING, WAITING, JobLife
from ranktop.watch.engine.rank_window import RankWindow


class Lifecycle:
    def __init__(self) -> None:
        self._pid: dict[int, int] = {}  # rank -> the pid of its process as last heard
        self._generation: dict[int, int] = {}  # rank -> how many times it came back
        self._latest = 0  # the newest generation any rank is in
        self._restarts = 0
        self._restarted_at: float | None = None
        self._exits: dict[int, tuple[str, float]] = {}  # rank -> (how its current process ended, when)

    def note_hello(self, rank: int, pid: object, wall: float) -> bool:
        """A hello of ``rank`` from process ``pid``: True when that is a new process of a rank already
        heard (its window must start afresh)."""
        if type(pid) is not int or pid <= 0:
            return False
        known = self._pid.get(rank)
        self._pid[rank] = pid
        if known is None:
            self._generation[rank] = self._latest  # first heard now: of the job as it is
            return False
        if known == pid:
            return False
        self._exits.pop(rank, None)
        generation = self._generation[rank] = self._generation.get(rank, 0) + 1
        if generation > self._latest:
            self._latest = generation
            self._restarts += 1
            self._restarted_at = wall
        return True

    def note_exit(self, rank: int, how: str, wall: float) -> None:
        """The rank's process said it is ending (``"clean"`` or ``"error"``)."""
        self._exits[rank] = (how, wall)

    @property
    def restarts(self) -> int:
        return self._restarts

    def ended(self, world: int | None) -> bool:
        """Every rank of a job of ``world`` ranks ended cleanly (cheap: what ``ranktop record`` polls)."""
        if not world or len(self._exits) < world:
            return False
        return all(self._exits.get(r, ("", 0.0))[0] == "clean" for r in range(world))

    def view(self, world: int | None, heard: bool) -> JobLife:
        """The job's life now, as far as its hellos and last words tell (who is silent is the analysis side's)."""
        if not heard:
            return JobLife(WAITING)
        failed = tuple(sorted(r for r, (how, _) in self._exits.items() if how != "clean"))
        not_back: tuple[int, ...] = ()
        older: tuple[int, ...] = ()
        if self._restarts:
            behind = [r for r, g in self._generation.items() if g < self._latest and (world is None or r < world)]
            not_back = tuple(sorted(r for r in behind if r in self._exits))
            older = tuple(sorted(r for r in behind if r not in self._exits))
        if self.ended(world):
            ended_at = max(self._exits[r][1] for r in range(world or 0))
            return JobLife(ENDED, ended_at, self._restarts, self._restarted_at, not_back, failed, older)
        return JobLife(RUNNING, None, self._restarts, self._restarted_at, not_back, failed, older)


def fresh_window(old: RankWindow, now: float) -> RankWindow:
    """The window of a rank's new process: none of the old process's steps, calls or caches; where it is
    heard through and its state as just received (that came from the new process) carry over."""
    kept = old.endpoint, old.last_seen, old.raw_at, old.state_at  # (read first: the new window empties the row)
    meta, state = old.meta, old.state
    assert old.own is not None  # (set in every window's __post_init__)
    new = RankWindow(old.rank, old.window, columns=old.own.columns, own=old.own, scalars=old.scalars)  # its rows, emptied
    new.endpoint, new.last_seen, new.raw_at, new.state_at = kept
    if meta is not None:
        new.take_hello(meta)
    new.take_state(state)
    new.progress_at = now
    return new
