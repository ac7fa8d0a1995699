"""A snapshot's ranks: columns for every rank, a :class:`RankRow` built only when someone reads it.

At 4,096 ranks a snapshot taken twice a second cannot afford 4,096 row objects
of 30 fields each, when a screen shows forty of them. So a snapshot keeps its
ranks as a :class:`RankTable` (one numpy array per figure, in rank order, and
for each rank the immutable messages its row is read from), and
:class:`RankRows` builds a row on first access and keeps it. What reads every
rank (counts by status, the history's per-rank series, the rank map) reads
the columns; what reads a few (the straggler table, the verdict's culprits, a
drill screen) reads rows. Iterating builds them all: ``--json`` and the
report do, once.

A snapshot built from rows (tests, a recording's replay of old snapshots)
gets its table from them, so column readers work on either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, overload

import msgspec
import numpy as np

from ranktop.wire import capture as wire_capture
from ranktop.wire.messages import CaptureSummary, RankInfo, State

from ranktop.watch.model.rank_row import CaptureStatus, Cause, RankRow, build_rank_row
from ranktop.watch.model.stall import Position
from ranktop.watch.statuses import STATUSES

STATUS_CODE = {name: code for code, name in enumerate(STATUSES)}


def median_of(values: Iterable[float]) -> float | None:
    """The median of ``values``, NaN left out (None: none left): the job's median step, wherever it is worked out
    (the judge through :func:`phase_medians`' sibling columns, the stall verdict, a snapshot made of rows)."""
    found = np.fromiter(values, np.float64)
    found = found[~np.isnan(found)]
    return float(np.median(found)) if len(found) else None


def phase_medians(names: list[str], phases: np.ndarray, live: np.ndarray) -> dict[str, float]:
    """Each phase's median over the ``live`` rows of ``phases`` (ranks x names): what "the median rank" does.
    The one place it is worked out: the judge for a snapshot, a snapshot made of rows for itself."""
    if not live.any():
        return {}
    return dict(
        zip(names, np.median(np.ascontiguousarray(phases[live].T), axis=1).tolist())
    )  # (a phase's column laid out contiguous: a faster partition)


@dataclass(frozen=True, eq=False)
class RankTable:
    """Every rank of one snapshot as columns, in rank order. A missing figure is NaN (None in a row)."""

    names: list[str]  # the phases of ``phases``' columns
    rank: np.ndarray  # int64, ascending
    status: np.ndarray  # int8: an index into statuses.STATUSES
    host: list[str]
    host_id: np.ndarray  # int64: each rank's host as a small whole number, the same for ranks of one host (host_ids)
    step: np.ndarray  # int64: the last step received (-1: none)
    steps_seen: np.ndarray  # int64
    missed: np.ndarray  # int64
    step_s: np.ndarray  # median step time over its window (NaN: not scored yet)
    phases: np.ndarray  # (ranks, names): median own time per phase
    score: np.ndarray
    excess_s: np.ndarray
    culprit: np.ndarray  # int64: an index into names, -1: none
    last_seen_s: np.ndarray
    collective_s: np.ndarray  # NaN: no collective seen
    last_step_end: np.ndarray  # NaN: no step yet
    stalled: Mapping[int, Position]  # rank -> Position (watch/model/stall.py) of the stalled ranks
    captures: dict[str, list[int]]  # captures not yet done or failed: id -> the ranks still at them
    dropped: np.ndarray  # int64: records its probe could not send
    rate_hz: np.ndarray  # telemetry messages a second it sends at (NaN: not said)
    rejected: dict[int, dict[str, int]]  # rank -> commands it refused, by reason (only ranks that refused any)
    with_memory: np.ndarray  # bool: a memory sample came (its row has ``memory``)
    with_throughput: np.ndarray  # bool: its work per step is known (its row has ``throughput``)
    with_gpu: np.ndarray  # bool: its row has ``gpu`` (gauges, or why there are none)
    gpu_sampled: np.ndarray  # bool: ... gauges NVML read
    coords: list[dict[str, int] | None]  # its place in the parallel layout ({"pp": 1, "dp": 1}; None: not known)
    rest: Callable[[int], dict[str, Any]] | None = None  # the fields of row i read from its messages (None: from rows)
    causes: dict[int, list[Cause]] = field(default_factory=dict)  # row index -> its causes (watch/analysis/causes.py), slow rows only
    last_arrivals: np.ndarray | None = None  # share of its recent steps it arrived last at the collectives (NaN: none counted)
    every: np.ndarray | None = None  # an intermittent straggler: slow on one step in this many (NaN: not one)

    def __len__(self) -> int:
        return len(self.rank)

    def index(self, rank: int) -> int | None:
        i = int(np.searchsorted(self.rank, rank))
        return i if i < len(self.rank) and self.rank[i] == rank else None

    def statuses(self, *wanted: str) -> np.ndarray:
        """A mask of the ranks with one of these statuses."""
        return np.isin(self.status, [STATUS_CODE[s] for s in wanted])

    @classmethod
    def of_rows(cls, rows: list[RankRow], names: list[str]) -> RankTable:
        rows = sorted(rows, key=lambda r: r.rank)
        names = list(names) or sorted({name for r in rows for name in r.phases})

        def column(get: Callable[[RankRow], float | None], dtype: type = np.float64) -> np.ndarray:
            return np.array([_nan(get(r)) for r in rows], dtype).reshape(len(rows))

        return cls(
            names=names,
            rank=np.array([r.rank for r in rows], np.int64),
            status=np.array([STATUS_CODE[r.status] for r in rows], np.int8),
            host=[r.host for r in rows],
            host_id=host_ids([r.host for r in rows]),
            step=np.array([r.step for r in rows], np.int64),
            steps_seen=np.array([r.steps_seen for r in rows], np.int64),
            missed=np.array([r.missed for r in rows], np.int64),
            step_s=column(lambda r: r.step_s),
            phases=np.array([[r.phases.get(name, 0.0) for name in names] for r in rows]).reshape(len(rows), len(names)),
            score=column(lambda r: r.score),
            excess_s=column(lambda r: r.excess_s),
            culprit=np.array([names.index(r.culprit_phase) if r.culprit_phase in names else -1 for r in rows], np.int64),
            last_seen_s=column(lambda r: r.last_seen_s),
            collective_s=column(lambda r: r.collective_s),
            last_step_end=column(lambda r: r.last_step_end),
            stalled={},
            captures=_running(rows),
            dropped=np.array([r.dropped for r in rows], np.int64),
            rate_hz=column(lambda r: r.rate_hz),
            rejected={r.rank: dict(r.rejected) for r in rows if r.rejected},
            with_memory=np.array([r.memory is not None for r in rows], bool),
            with_throughput=np.array([r.throughput is not None for r in rows], bool),
            with_gpu=np.array([r.gpu is not None for r in rows], bool),
            gpu_sampled=np.array([r.gpu is not None and r.gpu.na is None for r in rows], bool),
            coords=[r.coords for r in rows],
            causes={i: list(r.causes) for i, r in enumerate(rows) if r.causes},
            last_arrivals=column(lambda r: r.last_arrivals),
            every=column(lambda r: r.every),
        )


class RankRows(Sequence[RankRow]):
    """The rows of a snapshot's ranks, in rank order, each built from the table on first access."""

    __slots__ = ("table", "_rows")

    def __init__(self, table: RankTable, rows: list[RankRow] | None = None) -> None:
        self.table = table
        self._rows: list[RankRow | None] = list(rows) if rows is not None else [None] * len(table)

    @classmethod
    def of(cls, rows: Sequence[RankRow], names: Sequence[str] = ()) -> RankRows:
        if isinstance(rows, RankRows):
            return rows
        ordered = sorted(rows, key=lambda r: r.rank)
        return cls(RankTable.of_rows(ordered, list(names)), ordered)

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> RankRow: ...
    @overload
    def __getitem__(self, i: slice) -> list[RankRow]: ...
    def __getitem__(self, i: int | slice) -> RankRow | list[RankRow]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self._rows)))]
        row = self._rows[i]
        if row is None:
            row = self._rows[i] = self._build(i if i >= 0 else i + len(self._rows))
        return row

    def __iter__(self) -> Iterator[RankRow]:
        for i in range(len(self._rows)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RankRows, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"RankRows({len(self)} ranks)"

    def row(self, rank: int) -> RankRow | None:
        i = self.table.index(rank)
        return None if i is None else self[i]

    def count(self, status: str) -> int:  # (Sequence.count counts equal rows)
        """How many ranks have this status."""
        return int(np.count_nonzero(self.table.status == STATUS_CODE[status]))

    def having(self, *statuses: str) -> list[int]:
        """The rank numbers with one of these statuses, ascending."""
        return self.table.rank[self.table.statuses(*statuses)].tolist()

    def _build(self, i: int) -> RankRow:
        t = self.table
        excess, culprit, status = float(t.excess_s[i]), int(t.culprit[i]), STATUSES[t.status[i]]
        stuck = t.stalled.get(int(t.rank[i]))
        step_s, comm = _none(t.step_s[i]), _none(t.collective_s[i])
        assert t.rest is not None, "a table made of rows was given every row"
        return build_rank_row(
            rank=int(t.rank[i]),
            host=t.host[i],
            step=int(t.step[i]),
            steps_seen=int(t.steps_seen[i]),
            missed=int(t.missed[i]),
            step_s=step_s,
            phases={name: float(v) for name, v in zip(t.names, t.phases[i])} if step_s is not None else {},
            score=float(t.score[i]),
            excess_s=excess,
            culprit_phase=t.names[culprit] if culprit >= 0 and status == "slow" else None,
            status=status,
            last_seen_s=float(t.last_seen_s[i]),
            collective_s=comm,
            compute_s=step_s - comm if step_s is not None and comm is not None else None,
            stalled_s=stuck.stuck_s if stuck else None,
            stalled_phase=stuck.phase if stuck else None,
            stalled_step=stuck.step if stuck else None,
            last_step_end=_none(t.last_step_end[i]),
            coords=t.coords[i],
            causes=t.causes.get(i, []),
            last_arrivals=_none(t.last_arrivals[i]) if t.last_arrivals is not None else None,
            every=_none(t.every[i]) if t.every is not None else None,
            **t.rest(i),
        )


def message_fields(state: State, meta: RankInfo | None, capture_summary: tuple[str, CaptureSummary] | None) -> dict[str, Any]:
    """What a rank's row reads of its hello (``meta``) and its last state (both typed at decode)."""
    rate = state.rate_hz if state.rate_hz is not None else meta.rate_hz if meta is not None else None
    return {
        "local_rank": meta.local_rank if meta is not None else -1,
        "pid": meta.pid if meta is not None else -1,
        "dropped": state.dropped or 0,
        "collective": msgspec.to_builtins(state.collective) if state.collective is not None else None,  # as --json prints it
        "capture": capture_status(state, capture_summary),
        "rejected": dict(state.rejected or {}),  # commands it refused, by reason (forged, replayed, ...)
        "rate_hz": _float(rate),
    }


def capture_status(state: State, kept: tuple[str, CaptureSummary] | None) -> CaptureStatus | None:
    """A rank's latest capture (typed at decode, wire/messages.py: Capture), with the summary it sent once
    (as a plain map, as ``--json`` prints it and the capture screen reads it)."""
    cap = state.cap
    if cap is None:
        return None
    summary = cap.sum
    if summary is None and kept is not None and kept[0] == cap.id:
        summary = kept[1]
    return CaptureStatus(
        id=cap.id,
        kind=cap.kind,
        state=cap.st,
        start=cap.start,
        steps=cap.steps,
        folder=cap.dir,
        at=cap.at,
        path=cap.path,
        error=cap.err,
        summary=msgspec.to_builtins(summary) if summary is not None else None,
    )


def _running(rows: list[RankRow]) -> dict[str, list[int]]:
    running: dict[str, list[int]] = {}
    for r in rows:
        if r.capture is not None and r.capture.state in wire_capture.RUNNING:
            running.setdefault(r.capture.id, []).append(r.rank)
    return running


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _none(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _nan(value: float | None) -> float:
    return np.nan if value is None else value


def host_ids(host: list[str]) -> np.ndarray:
    """Each rank's host as a small whole number (0 for the first host named, 1 for the next, ...): what slow-host
    counting bins by, for a snapshot made of rows (the engine keeps every rank's as a column:
    watch/engine/rank_scalars.py ``RankScalars.note_host``)."""
    ids: dict[str, int] = {}
    return np.fromiter((ids.setdefault(h, len(ids)) for h in host), np.int64, len(host))
