"""Answers to commands, as a snapshot and every waiter read them: one rank's :class:`Answer` and the tally of
one command (:class:`RequestStatus`). Frozen records: the engine's request book (watch/engine/requests.py) makes
them, everyone else reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    """One rank's answer to a command, as the viewer keeps it (the wire's ``Reply`` decoded, its round trip added)."""

    id: str
    cmd: str
    rank: int
    ok: bool
    result: dict[str, Any]
    rtt_s: float | None  # seconds from sending the command, when this TUI sent it


@dataclass(frozen=True)
class RequestStatus:
    """The tally of one command this viewer sent, over every rank's answer (exact at any job size; watch/engine/requests.py)."""

    id: str
    cmd: str
    sent_s: float  # when it was sent, on the viewer's clock
    answered: int
    failed: int
    answered_ranks: frozenset[int]
    max_rtt_s: float | None
    first_failure: tuple[int, str] | None = None  # (rank, reason) of the lowest failing rank

    @classmethod
    def count(cls, command_id: str, cmd: str, sent_s: float, replies: dict[int, Answer]) -> RequestStatus:
        """The tally of one command's answers, by rank."""
        rtts = [r.rtt_s for r in replies.values() if r.rtt_s is not None]
        failures = [r for r in replies.values() if not r.ok]
        first = min(failures, key=lambda r: r.rank) if failures else None
        return cls(
            command_id,
            cmd,
            sent_s,
            len(replies),
            len(failures),
            frozenset(replies),
            max(rtts) if rtts else None,
            (first.rank, failure_reason(first.result)) if first is not None else None,
        )

    @classmethod
    def of_replies(cls, command_id: str, replies: list[Answer]) -> RequestStatus | None:
        """The tally counted from a list of replies (a snapshot built without a request book), None if none."""
        mine = {r.rank: r for r in replies if r.id == command_id}
        if not mine:
            return None
        return cls.count(command_id, next(iter(mine.values())).cmd, 0.0, mine)


def failure_reason(result: Any) -> str:
    """The first line of a failed answer's error, or "failed" when it gives none."""
    error = result.get("error") if isinstance(result, dict) else None
    lines = str(error).splitlines() if error is not None else []
    return lines[0] if lines else "failed"
