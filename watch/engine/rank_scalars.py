"""Each rank's scalar figures (when it was last heard, its step counts, what its state said) in job-wide arrays.

A snapshot reads a dozen figures of every rank. Kept as attributes of 4,096
window objects, that is a dozen Python passes over the windows per snapshot;
kept here, one array per figure with a row per rank (the rank's row of the
step columns, watch/engine/step_columns.py), a view gathers each in one fancy index, and
a node digest's steps update the counts of all its ranks at once
(watch/engine/job_state.py). A rank's window (watch/engine/rank_window.py) reads and writes its
own row through properties, one item at a time, through memoryviews (an item
store through one costs about half a numpy scalar store).

Absent values have a sentinel of their type: -1 for a step number never
seen, NaN for a time never said.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ranktop.wire.messages import NO_STATE

#: name -> (dtype, the value of a row nobody wrote yet)
FIELDS: dict[str, tuple[type, Any]] = {
    "last_seen": (np.float64, 0.0),  # viewer clock of its last message
    "raw_at": (np.float64, float("-inf")),  # viewer clock of its last own steps or heartbeat (not a node digest's)
    "steps_seen": (np.int64, 0),
    "first_step": (np.int64, -1),  # the first step number received (-1: none yet): where counting gaps begins
    "last_step": (np.int64, -1),
    "device_times": (np.bool_, False),  # some of its step records carry GPU (device) times
    "state_at": (np.float64, 0.0),  # viewer clock when its last state arrived
    "progress_at": (np.float64, 0.0),  # ... and when that state's last finished step last changed (watch/analysis/stalls.py)
    "stepped_at": (np.float64, float("-inf")),  # viewer clock when a step of it last arrived (its own or a digest's)
    "step_age": (np.float64, float("nan")),  # inside a step by its last state: the step's age then (NaN: not in one)
    "stated": (np.bool_, False),  # it sent a state
    "capturing": (np.bool_, False),  # its state says a capture is under way at it
    "refused": (np.bool_, False),  # its state says it refused commands
    "dropped": (np.int64, 0),  # records its probe could not send
    "rate_hz": (np.float64, float("nan")),  # the telemetry rate it says it sends at
    "works": (np.bool_, False),  # its hello says its work per step
    "endpoint": (np.int64, 0),  # the relay it was last heard through, as an index of RankScalars.urls (0: none)
}

#: name -> the value of a row nobody wrote yet: what each rank's messages said, the frozen Structs themselves, in
#: object arrays (a view gathers every rank's with one fancy index, not a Python pass over the windows).
HELD: dict[str, Any] = {
    "state": NO_STATE,  # its last state
    "meta": None,  # its hello, less the envelope
    "capture_summary": None,  # (capture id, summary) of its last capture: kept after the rank stops sending it
}


class RankScalars:
    """The figures of :data:`FIELDS` for every row; ``urls`` names the relays that ``endpoint`` indexes."""

    # One array per figure of FIELDS, a row per rank.
    last_seen: np.ndarray
    raw_at: np.ndarray
    steps_seen: np.ndarray
    first_step: np.ndarray
    last_step: np.ndarray
    device_times: np.ndarray
    state_at: np.ndarray
    progress_at: np.ndarray
    stepped_at: np.ndarray
    step_age: np.ndarray
    stated: np.ndarray
    capturing: np.ndarray
    refused: np.ndarray
    dropped: np.ndarray
    rate_hz: np.ndarray
    works: np.ndarray
    endpoint: np.ndarray
    state: np.ndarray  # (object) the figures of HELD
    meta: np.ndarray
    capture_summary: np.ndarray

    def __init__(self, rows: int = 8):
        self.urls: list[str | None] = [None]
        self._url_ids: dict[str | None, int] = {None: 0}
        self.views: dict[str, memoryview[Any]] = {}  # the same arrays, for a window's item stores
        self._allocate(max(1, rows))

    def _allocate(self, rows: int) -> None:
        old = getattr(self, "last_seen", None)
        for name, (dtype, blank) in FIELDS.items():
            array: np.ndarray = np.full(rows, blank, dtype)
            if old is not None:
                current = getattr(self, name)
                array[: len(current)] = current
            setattr(self, name, array)
            self.views[name] = array.data
        for name, blank in HELD.items():
            held = np.full(rows, blank, object)
            if old is not None:
                current = getattr(self, name)
                held[: len(current)] = current
            setattr(self, name, held)

    def ensure(self, row: int) -> None:
        """Room for ``row`` (the arrays double as the job grows)."""
        size = len(self.last_seen)
        if row >= size:
            self._allocate(max(row + 1, size * 2))

    def reset(self, row: int) -> None:
        """A row as nobody wrote it (a new rank, or its new process)."""
        self.ensure(row)
        for name, (_, blank) in FIELDS.items():
            self.views[name][row] = blank
        self.state[row], self.meta[row], self.capture_summary[row] = NO_STATE, None, None

    def url_id(self, url: str | None) -> int:
        """The index of a relay's URL in :attr:`urls` (given one when first seen)."""
        found = self._url_ids.get(url)
        if found is None:
            found = self._url_ids[url] = len(self.urls)
            self.urls.append(url)
        return found


def host_ids(host: list[str]) -> np.ndarray:
    """Each rank's host as a small whole number (0 for the first host named, 1 for the next, ...): what slow-host
    counting bins by. Worked out once per host list by its owner (watch/engine/job_state.py keeps one while no hello
    changes it), not once a snapshot."""
    ids: dict[str, int] = {}
    return np.fromiter((ids.setdefault(h, len(ids)) for h in host), np.int64, len(host))
