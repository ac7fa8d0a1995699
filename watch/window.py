"""One rank as the viewer remembers it: its last steps, its last state, its collective calls.

The aggregator owns one :class:`RankWindow` per rank and updates it as
messages arrive; the analyses (watch/stragglers.py, watch/stalls.py,
watch/collectives.py) read these typed fields and never each other's state.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: Collective calls per rank kept for latency and bandwidth statistics.
CALL_WINDOW = 512


class StepRecord(NamedTuple):
    n: int  # step number
    t: float  # wall-clock start (unix seconds, the rank's clock)
    w: float  # wall duration (s)
    p: dict[str, float]  # self time per phase (s)


@dataclass
class RankWindow:
    rank: int
    steps: collections.deque[StepRecord]  # the last `window` steps
    meta: dict[str, Any] = field(default_factory=dict)  # its hello, less the envelope
    state: dict[str, Any] = field(default_factory=dict)  # its last state (wire/schema.py)
    last_seen: float = 0.0  # viewer clock of its last message
    steps_seen: int = 0
    last_step: int = -1
    device_times: bool = False  # some of its step records carry GPU (device) times
    # collectives: recent calls (arrival, record), exact totals per op, and per step the
    # (start, end) intervals of waiting, by phase (watch/collectives.py fills them)
    calls: collections.deque = field(default_factory=lambda: collections.deque(maxlen=CALL_WINDOW))
    call_totals: dict[str, list[int]] = field(default_factory=dict)
    waits: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    state_at: float = 0.0  # viewer clock when its last state arrived
    progress_at: float = 0.0  # ... and when that state's last finished step last changed (watch/stalls.py)
    capture_summary: tuple[str, dict] | None = None  # (capture id, summary): kept after the rank stops sending it
    endpoint: str | None = None  # the relay it was last heard through: a lost relay is shown with its ranks

    def note_state(self, state: dict[str, Any], now: float) -> None:
        """Take a new state; remember when it came and when the rank last finished a step."""
        if self.state.get("last") != state.get("last") or not self.progress_at:
            self.progress_at = now
        self.state_at = now
        self.state = state
        cap = state.get("cap")
        if isinstance(cap, dict) and isinstance(cap.get("sum"), dict):
            self.capture_summary = (cap["id"], cap["sum"])

    def add_step(self, record: dict[str, Any]) -> None:
        if "g" in record:
            self.device_times = True
        self.steps.append(StepRecord(record["n"], record["t"], record["w"], record["p"]))
        self.steps_seen += 1
        self.last_step = max(self.last_step, record["n"])
