"""Each rank's scalar figures (when it was last heard, its step counts, what its state said) in job-wide arrays.

A snapshot reads a dozen figures of every rank. Kept as attributes of 4,096
window objects, that is a dozen Python passes over the windows per snapshot;
kept here, one array per figure with a row per rank (the rank's row of the
step columns, watch/engine/step_columns.py), a view gathers each in one fancy index, and
a node digest's steps update the counts of all its ranks at once
(watch/engine/rank_store.py, the only writer). One rank's message writes its row one
item at a time, through :attr:`RankScalars.views` (memoryviews: an item store through one
costs about half a numpy scalar store).

Absent values have a sentinel of their type: -1 for a step number never
seen, NaN for a time never said.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ranktop.wire.messages import NO_STATE, State

#: A step number a state did not say (``last``, ``step``): below any the wire allows (wire/messages.py ``Whole``).
NO_STEP = np.iinfo(np.int64).min
#: Bits of ``coll_flags``: what a rank's last collective says beyond its op, number and size
#: (watch/analysis/stalls.py reads them, and tells two collectives apart by them).
INSIDE, HAS_SEQ, SEQ_BOOL, B_BOOL = 1, 2, 4, 8
#: Phase and op names kept as numbers at most; past this many (a peer sending made-up names) the table starts
#: again from the names the ranks' last states hold.
MAX_NAMES = 65536
_LOW, _HIGH = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)

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
    # the step in which its state last named a pause phase (wire/names.py PAUSE_PHASES; -1: none), and when: a rank
    # whose recompilation has ended is still in the step it held up until that step's record comes
    # (watch/analysis/stalls.py ``paying``)
    "paused_step": (np.int64, -1),
    "paused_at": (np.float64, float("-inf")),
    "stated": (np.bool_, False),  # it sent a state
    "capturing": (np.bool_, False),  # its state says a capture is under way at it
    "refused": (np.bool_, False),  # its state says it refused commands
    "dropped": (np.int64, 0),  # records its probe could not send
    "rate_hz": (np.float64, float("nan")),  # the telemetry rate it says it sends at
    "works": (np.bool_, False),  # its hello says its work per step
    "endpoint": (np.int64, 0),  # the relay it was last heard through, as an index of RankScalars.urls (0: none)
    "host_id": (np.int64, -1),  # its host by its hello, as an index of RankScalars.hosts (-1: no hello yet)
    # where its last state says its training thread is (watch/analysis/stalls.py), read once per state
    "state_last": (np.int64, NO_STEP),  # the last step it finished (NO_STEP: not said)
    "state_step": (np.int64, NO_STEP),  # the step it is in, or the next one between steps
    "in_step": (np.bool_, False),
    "phase": (np.int64, 0),  # the phase it is in, an index of RankScalars.names (0: none)
    "state_median": (np.float64, float("nan")),  # the median step time it says (NaN: not said)
    "coll_op": (np.int64, 0),  # its last collective's op, an index of RankScalars.names (0: none, or not a name)
    "coll_seq": (np.int64, 0),  # ... its number (when HAS_SEQ)
    "coll_b": (np.int64, 0),  # ... its bytes (0: not said, or not a positive whole number)
    "coll_flags": (np.uint8, 0),  # INSIDE, HAS_SEQ, SEQ_BOOL, B_BOOL
    # its evidence (watch/analysis/causes.py: NaN where not said)
    "ev_gc": (np.float64, float("nan")),
    "ev_runq": (np.float64, float("nan")),
    "ev_nvcsw": (np.float64, float("nan")),
    "gpu_sm_mhz": (
        np.float64,
        float("nan"),
    ),  # its GPU's SM clock by its last state, over its sampler's window where sent (gpu_throttle): NaN where not said
}

#: The columns of FIELDS that say where a rank's state says it is (watch/analysis/stalls.py reads them, as a view's ``where``).
WHERE = ("state_last", "state_step", "in_step", "phase", "state_median", "coll_op", "coll_seq", "coll_b", "coll_flags")

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
    paused_step: np.ndarray
    paused_at: np.ndarray
    stated: np.ndarray
    capturing: np.ndarray
    refused: np.ndarray
    dropped: np.ndarray
    rate_hz: np.ndarray
    works: np.ndarray
    endpoint: np.ndarray
    host_id: np.ndarray
    state_last: np.ndarray
    state_step: np.ndarray
    in_step: np.ndarray
    phase: np.ndarray
    state_median: np.ndarray
    coll_op: np.ndarray
    coll_seq: np.ndarray
    coll_b: np.ndarray
    coll_flags: np.ndarray
    ev_gc: np.ndarray
    ev_runq: np.ndarray
    ev_nvcsw: np.ndarray
    gpu_sm_mhz: np.ndarray
    state: np.ndarray  # (object) the figures of HELD
    meta: np.ndarray
    capture_summary: np.ndarray

    def __init__(self, rows: int = 8):
        self.urls: list[str | None] = [None]
        self._url_ids: dict[str | None, int] = {None: 0}
        self.hosts: list[str] = []  # the hosts that ``host_id`` indexes (and the relays' hosts: RankStore.gather)
        self._host_ids: dict[str, int] = {}
        self.names: list[str | None] = [None]  # phases' and ops' names that ``phase`` and ``coll_op`` index
        self._name_ids: dict[str | None, int] = {None: 0}
        self.views: dict[str, memoryview[Any]] = {}  # the same arrays, for one rank's item stores
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

    def take_state(self, row: int, state: State) -> None:
        """What a snapshot reads of every rank's state as columns (where it is, its last collective, its
        evidence), read here once per state rather than once per snapshot: at 16,384 ranks a Python pass over
        the states costs a snapshot tens of milliseconds. (Written for speed: it runs for every state taken.)"""
        views, last, step, names = self.views, state.last, state.step, self._name_ids
        in_step = bool(state.in_step)
        views["state_last"][row] = NO_STEP if last is None else last
        views["state_step"][row] = step if in_step and step is not None else (NO_STEP if last is None else last + 1)
        views["in_step"][row] = in_step
        phase = names.get(state.phase)
        views["phase"][row] = self.name_id(state.phase) if phase is None else phase
        median = state.median_step_s
        views["state_median"][row] = NAN if median is None else median
        coll = state.collective
        if coll:
            get = coll.get
            op, seq, size = get("op"), get("seq"), get("b")
            flags = INSIDE if get("inside") else 0
            number = 0
            if type(seq) is int:
                flags |= HAS_SEQ
                number = seq if _LOW <= seq <= _HIGH else _clamped(seq)
            elif isinstance(seq, int):  # a bool (or an int subclass: msgspec makes none)
                flags |= HAS_SEQ | (SEQ_BOOL if type(seq) is bool else 0)
                number = _clamped(seq)
            bytes_ = 0
            if type(size) is int:
                bytes_ = size if 0 < size <= _HIGH else (_HIGH if size > 0 else 0)
            elif isinstance(size, int) and size > 0:  # True (a bool), or an int subclass
                flags |= B_BOOL if type(size) is bool else 0
                bytes_ = _clamped(size)
            if type(op) is str:
                found = names.get(op)
                views["coll_op"][row] = self.name_id(op) if found is None else found
            else:
                views["coll_op"][row] = self.name_id(op) if isinstance(op, str) else 0
            views["coll_seq"][row] = number
            views["coll_b"][row] = bytes_
            views["coll_flags"][row] = flags
        else:
            views["coll_op"][row] = views["coll_seq"][row] = views["coll_b"][row] = views["coll_flags"][row] = 0
        ev = state.ev
        if ev is None:
            views["ev_gc"][row] = views["ev_runq"][row] = views["ev_nvcsw"][row] = NAN
        else:
            gc, runq, nvcsw = ev.gc, ev.runq, ev.nvcsw
            views["ev_gc"][row] = NAN if gc is None else gc
            views["ev_runq"][row] = NAN if runq is None else runq
            views["ev_nvcsw"][row] = NAN if nvcsw is None else nvcsw
        gpu = state.gpu
        sm = (gpu["sm_avg"] if isinstance(gpu.get("sm_avg"), (int, float)) else gpu.get("sm_mhz")) if gpu is not None else None
        views["gpu_sm_mhz"][row] = sm if isinstance(sm, (int, float)) and not isinstance(sm, bool) else NAN

    def name_id(self, name: str | None) -> int:
        """The index of a phase's or op's name in :attr:`names` (given one when first seen)."""
        found = self._name_ids.get(name)
        if found is None:
            if len(self.names) >= MAX_NAMES:
                self._forget_names()
            found = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return found

    def _forget_names(self) -> None:
        """The names table full (made-up names): started again from those the rows' last states hold."""
        self.names, self._name_ids = [None], {None: 0}
        for row, state in enumerate(self.state.tolist()):
            if state is not NO_STATE:
                self.take_state(row, state)

    def note_host(self, row: int, host: str) -> None:
        """A rank's host by its hello, as a small whole number: a view reads every rank's host as one column
        (slow-host counting bins by it), not in a Python pass over the windows."""
        if len(self.hosts) >= MAX_NAMES:
            self._forget_hosts()
        self.views["host_id"][row] = self.id_of_host(host)

    def id_of_host(self, host: str) -> int:
        """The index of ``host`` in :attr:`hosts` (given one when first named)."""
        found = self._host_ids.get(host)
        if found is None:
            found = self._host_ids[host] = len(self.hosts)
            self.hosts.append(host)
        return found

    def _forget_hosts(self) -> None:
        """The hosts table full (made-up hosts, or many restarts): started again from the rows' hellos."""
        self.hosts, self._host_ids = [], {}
        for row, meta in enumerate(self.meta.tolist()):
            if meta is not None:
                self.views["host_id"][row] = self.id_of_host(str(meta.host))

    def url_id(self, url: str | None) -> int:
        """The index of a relay's URL in :attr:`urls` (given one when first seen)."""
        found = self._url_ids.get(url)
        if found is None:
            found = self._url_ids[url] = len(self.urls)
            self.urls.append(url)
        return found


NAN = float("nan")


def _clamped(value: int) -> int:
    """A whole number from the wire as an int64 column holds it (beyond its range: its end)."""
    return min(max(int(value), _LOW), _HIGH)
