"""A step's own time per phase: the time its waits in collectives are taken out of.

One definition for both sides: the viewer works it out per step from a rank's
own messages (watch/engine/step_window.py), a node's relay per interval for its
digest (relay/digest_fold.py).
"""

from __future__ import annotations

from typing import Mapping

from .names import COMM_PHASE, OTHER_PHASE


def own_times(wall: float, phases: dict[str, float], waits: Mapping[str | None, float] | None) -> dict[str, float]:
    """A step's time per phase with its waits in collectives taken out (and summed as ``comm``); the time
    outside every named phase is ``other``. ``waits``: seconds waited per phase (None: a phase of none)."""
    out = dict(phases)
    out[OTHER_PHASE] = max(0.0, wall - sum(phases.values()))
    if waits:
        total = 0.0
        for phase, waited in waits.items():
            name = phase if phase in out else OTHER_PHASE
            out[name] = max(0.0, out[name] - waited)
            total += waited
        out[COMM_PHASE] = min(total, wall)
    return out
