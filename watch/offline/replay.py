"""Playing a recording back through the live engine: the same Aggregator on a virtual clock.

A :class:`Replay` is a snapshot source like a :class:`~ranktop.watch.session.WatchSession`:
the TUI and ``--json`` cannot tell them apart, except that commands are refused
(there is no job to send them to). The recorded frames go through
:meth:`Aggregator.ingest_frames`, the decoding and checks of a live session, and the
aggregator's clock reads the recording's time, so every window, stall timer and
"last seen" is what it was when the frames arrived.

Seeking forward feeds the frames in between; seeking back starts a fresh
aggregator :data:`WARMUP_S` before the target (the longest history the engine
keeps, memory's 2 minutes, with room to spare) and feeds up to it.
"""

from __future__ import annotations

import bisect
import re
import time
from typing import Any, Callable, Protocol

from ranktop.watch.aggregator import DEFAULT_SILENT_AFTER_S, DEFAULT_WINDOW, Aggregator
from ranktop.watch.analysis.history import DEFAULT_SAMPLES, SAMPLE_EVERY_S, History
from ranktop.watch.offline.recording import Recording
from ranktop.watch.model.answers import Answer
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.analysis.stalls import DEFAULT_STALL_FACTOR, DEFAULT_STALL_FLOOR_S

#: A seek back replays this much of the recording before the target, so the windows are full again.
WARMUP_S = 300.0
#: A seek rebuilds the history screen's samples for this much before its target, at most SAMPLES_PER_STEP
#: of them (sparser than live), and a fast playback takes at most SAMPLES_PER_STEP per refresh: a snapshot
#: of a big job costs tens of milliseconds (64 ranks: about 80 ms here), the UI thread must keep up.
SAMPLED_S = 120.0
SAMPLES_PER_STEP = 12
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)

_CLOCK = re.compile(r"^(?:(\d+):)?(\d+):(\d+(?:\.\d*)?)$")


class Sampler(Protocol):
    """What takes a replay's sampled snapshots: a :class:`History`, or whatever feeds one (the report's observer)."""

    def note(self, snap: Snapshot, now: float, /) -> None: ...


class Player:
    """Feeds a recording's entries into an aggregator up to a time; the aggregator reads that time."""

    def __init__(self, recording: Recording, options: dict[str, Any]):
        self.recording = recording
        self._options = options
        self._times = [e.t for e in recording.entries]
        self.t = recording.start
        self.i = 0
        self.aggregator = self._fresh(recording.start)

    def _fresh(self, t: float) -> Aggregator:
        self.t = t
        clock: Callable[[], float] = lambda: self.t  # noqa: E731
        return Aggregator(None, clock=clock, wall_clock=clock, **self._options)

    def advance(
        self,
        to: float,
        history: Sampler | None = None,
        sample_from: float | None = None,
        most: int | None = None,
        every: float = SAMPLE_EVERY_S,
    ) -> None:
        """Ingest every entry that arrived by ``to``; with ``history``, sample it every ``every`` seconds after
        ``sample_from`` (default: from where it is), or more sparsely to take at most ``most`` samples."""
        to = min(max(to, self.recording.start), self.recording.end)
        if to < self.t:
            start = max(self.recording.start, to - WARMUP_S)
            self.aggregator = self._fresh(start)
            self.i = bisect.bisect_left(self._times, start)
        entries = self.recording.entries
        next_sample = max(self.t, sample_from) if sample_from is not None else self.t
        if most:
            every = max(every, (to - next_sample) / most)
        while self.i < len(entries) and entries[self.i].t <= to:
            entry = entries[self.i]
            if history is not None and entry.t >= next_sample:
                self.t = next_sample
                history.note(self.aggregator.snapshot(), self.t)
                next_sample += every
            self.t = entry.t
            if entry.frames is None:
                if entry.endpoint:  # always: a recording keeps no endpoint's entry without its address (recording._entry)
                    self.aggregator.add_endpoint(entry.endpoint, entry.host)
            else:
                self.aggregator.ingest_frames(entry.frames, entry.endpoint)
            self.i += 1
        self.t = to


class Replay:
    """A recording played at a speed, paused, sought: the TUI's snapshot source in ``ranktop replay``."""

    def __init__(
        self,
        recording: Recording,
        *,
        speed: float = 1.0,
        start_s: float = 0.0,
        window: int = DEFAULT_WINDOW,
        silent_after_s: float = DEFAULT_SILENT_AFTER_S,
        stall_factor: float = DEFAULT_STALL_FACTOR,
        stall_floor_s: float = DEFAULT_STALL_FLOOR_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.recording = recording
        self.speed = speed
        self.paused = False
        self._clock = clock
        self._player = Player(
            recording, dict(window=window, silent_after_s=silent_after_s, stall_factor=stall_factor, stall_floor_s=stall_floor_s)
        )
        self.history = History(DEFAULT_SAMPLES)
        self._seek_to(recording.start + start_s)

    # -- the source protocol ----------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        to = self.position_t()
        self._player.advance(to, self.history, sample_from=to - SAMPLED_S, most=SAMPLES_PER_STEP)
        snap = self._player.aggregator.snapshot()
        self.history.note(snap, self._player.t)
        return snap

    def replies_to(self, command_id: str) -> list[Answer]:
        return self._player.aggregator.replies_to(command_id)

    # -- controls -----------------------------------------------------------------------------

    def position_t(self) -> float:
        """The recording's time now playing (wall-clock seconds of the recorded run)."""
        if self.paused:
            return self._anchor_t
        t = self._anchor_t + (self._clock() - self._anchor_wall) * self.speed
        return min(t, self.recording.end)

    @property
    def offset_s(self) -> float:
        return self.position_t() - self.recording.start

    @property
    def at_end(self) -> bool:
        return self.position_t() >= self.recording.end

    def toggle_pause(self) -> None:
        self._seek_to(self.position_t())
        self.paused = not self.paused

    def seek(self, delta_s: float) -> None:
        self.seek_to_offset(self.offset_s + delta_s)

    def seek_to_offset(self, offset_s: float) -> None:
        self._seek_to(self.recording.start + offset_s)

    def set_speed(self, speed: float) -> None:
        self._seek_to(self.position_t())
        self.speed = speed

    def faster(self, steps: int) -> None:
        i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - self.speed))
        self.set_speed(SPEEDS[max(0, min(len(SPEEDS) - 1, i + steps))])

    def _seek_to(self, t: float) -> None:
        t = min(max(t, self.recording.start), self.recording.end)
        if t < self._player.t:
            self.history = History(DEFAULT_SAMPLES)  # rebuilt from the warm-up on
        self._anchor_t = t
        self._anchor_wall = self._clock()
        self._player.advance(t, self.history, sample_from=t - SAMPLED_S, most=SAMPLES_PER_STEP)


def snapshot_at(recording: Recording, offset_s: float, **options: Any) -> Snapshot:
    """The snapshot a live session would have shown ``offset_s`` into the recording (``replay --json --at``)."""
    player = Player(recording, options)
    player.advance(recording.start + offset_s)
    return player.aggregator.snapshot()


def parse_offset(text: str, duration_s: float) -> float:
    """A time in a recording: seconds (``90``, ``90.5``), ``M:SS`` or ``H:MM:SS`` from its start; negative or
    ``end`` count from its end. ValueError with a one-line reason otherwise."""
    s = text.strip()
    if s == "end":
        return duration_s
    sign = -1 if s.startswith("-") else 1
    body = s.lstrip("+-")
    m = _CLOCK.match(body)
    try:
        value = (int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3))) if m else float(body)
    except ValueError:
        raise ValueError(f"not a time: {text!r} (seconds, M:SS, H:MM:SS, negative from the end, or 'end')") from None
    if value != value or value in (float("inf"),):
        raise ValueError(f"not a time: {text!r}")
    return duration_s - value if sign < 0 else value


def clock_text(seconds: float) -> str:
    """``H:MM:SS`` (or ``M:SS``) of an offset."""
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
