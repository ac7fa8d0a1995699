"""A stall as the analysis reports it: each stalled rank's :class:`Position` (where its training thread is, from its
last state) and the :class:`StallReport` (who is stalled, whom they wait for, the diagnosis line).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ranktop.wire.messages import LastCollective


@dataclass(frozen=True)
class Position:
    """Where one rank's training thread is, as its last state said, brought up to now."""

    rank: int
    silent: bool
    step: int  # the step in progress, or the next one when between steps
    last: int  # the last step finished (-1: none yet)
    in_step: bool
    phase: str | None
    stuck_s: float  # seconds since it last finished a step (or since its step began)
    median_step_s: float | None
    collective: LastCollective | None = None  # the last collective its state named

    @property
    def inside_collective(self) -> bool:
        return bool(self.collective and self.collective.get("inside"))


@dataclass(frozen=True)
class StallReport:
    """Which ranks are stalled and where, whom they wait for, and the one line that says so (watch/analysis/stalls.py)."""

    stalled: Mapping[int, Position]  # rank -> where it is stuck (StalledPositions: built when read)
    waiting_for: list[int]  # the ranks the stalled ones wait for (empty if none stands out)
    diagnosis: str | None  # one line for the user; None when nothing is stalled

    def stalled_ranks(self) -> np.ndarray:
        """The stalled ranks, ascending, as an array (without building their positions)."""
        ranks = getattr(self.stalled, "ranks", None)  # the analysis' StalledPositions keeps them as an array
        if isinstance(ranks, np.ndarray):
            return ranks
        return np.array(sorted(self.stalled), np.int64)
