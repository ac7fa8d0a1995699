"""Rolling per-rank windows and the statistics the TUI shows: pure Python, no sockets, no terminal.

The receiver thread feeds decoded messages in with :meth:`Aggregator.ingest`;
the UI (or ``--json``) takes a :class:`~ranktop.tui.snapshot.Snapshot` at its own
pace. One lock guards both, held only for dictionary updates and for computing
a snapshot, so a burst of telemetry delays at most one frame.

Straggler scoring. In synchronous data-parallel training every rank's step
takes the same wall time: the slow rank computes longer and the others wait for
it inside a collective, so their wait lands in whichever phase holds the
collective (backward under DDP). Comparing step times therefore finds nothing.
Instead each phase of each rank is compared with the median of that phase
across ranks: the slow rank stands out in the phase it is slow in, while the
waiting ranks, being the majority, *are* the median of the phase they wait in.
A rank's slowdown is the sum of its phases' excess over those medians (only
the positive part: time it spent that others did not), and the phase with the
largest excess is named as the culprit. Medians over a window make one slow
step count for nothing: only a persistent slowdown scores. A rank is *slow*
when its slowdown exceeds a floor (5% of the median step, 1 ms) and a robust
spread of everyone's slowdown (3 × MAD), so noise on a healthy job flags no one.
"""

from __future__ import annotations

import collections
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ranktop.wire import schema

from .snapshot import OK, SILENT, SLOW, Endpoint, RankRow, Reply, Snapshot

DEFAULT_WINDOW = 64
DEFAULT_SILENT_AFTER_S = 3.0
MIN_STEPS_TO_SCORE = 3
SLOW_FLOOR_FRACTION = 0.05
SLOW_FLOOR_S = 0.001
MAX_REPLIES = 256
MAX_ERRORS = 8


@dataclass
class _Rank:
    rank: int
    steps: collections.deque  # (n, t, w, phases) of the last `window` steps
    meta: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    last_seen: float = 0.0
    steps_seen: int = 0
    last_step: int = -1


@dataclass
class _Endpoint:
    url: str
    host: str | None
    added: float
    last_heard: float | None = None


class Aggregator:
    def __init__(
        self,
        job: str | None = None,
        *,
        window: int = DEFAULT_WINDOW,
        silent_after_s: float = DEFAULT_SILENT_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._job = job
        self._window = window
        self._silent_after = silent_after_s
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._ranks: dict[int, _Rank] = {}
        self._endpoints: dict[str, _Endpoint] = {}
        self._replies: collections.deque[Reply] = collections.deque(maxlen=MAX_REPLIES)
        self._sent: dict[str, float] = {}
        self._errors: list[str] = []
        self._dropped = 0

    # -- input (receiver thread) ----------------------------------------------

    def add_endpoint(self, url: str, host: str | None = None) -> None:
        with self._lock:
            if url not in self._endpoints:
                self._endpoints[url] = _Endpoint(url, host, self._clock())

    def ingest_frames(self, frames: list[bytes], endpoint: str | None = None) -> dict | None:
        """Decode and ingest one message; malformed or foreign frames are dropped and counted."""
        try:
            msg = schema.decode(frames)
        except schema.VersionMismatch as exc:
            self.note_dropped(f"{endpoint or 'a peer'}: {exc}")
            return None
        except schema.WireError:
            self.note_dropped()
            return None
        if msg["k"] not in schema.TELEMETRY_KINDS:
            self.note_dropped()
            return None
        self.ingest(msg, endpoint)
        return msg

    def ingest(self, msg: dict[str, Any], endpoint: str | None = None) -> None:
        now = self._clock()
        with self._lock:
            if self._job is None:
                self._job = msg["job"]
            elif msg["job"] != self._job:
                self._dropped += 1  # another job's traffic on a shared endpoint
                return
            if endpoint is not None and endpoint in self._endpoints:
                self._endpoints[endpoint].last_heard = now
            rank = self._ranks.get(msg["rank"])
            if rank is None:
                rank = self._ranks[msg["rank"]] = _Rank(msg["rank"], collections.deque(maxlen=self._window))
            rank.last_seen = now
            kind = msg["k"]
            if "state" in msg and isinstance(msg["state"], dict):
                rank.state = msg["state"]
            if kind == schema.HELLO:
                rank.meta = {k: v for k, v in msg.items() if k not in ("v", "k", "job", "rank", "ts")}
            elif kind == schema.STEPS:
                for rec in msg["steps"]:
                    rank.steps.append((rec["n"], rec["t"], rec["w"], rec["p"]))
                    rank.steps_seen += 1
                    rank.last_step = max(rank.last_step, rec["n"])
            elif kind == schema.REPLY:
                sent = self._sent.get(msg["id"])
                result = msg.get("result") if isinstance(msg.get("result"), dict) else {}
                self._replies.append(
                    Reply(msg["id"], msg["cmd"], msg["rank"], msg["ok"], result, None if sent is None else now - sent)
                )

    def note_sent(self, command_id: str) -> None:
        with self._lock:
            self._sent[command_id] = self._clock()
            if len(self._sent) > MAX_REPLIES:
                self._sent.pop(next(iter(self._sent)))

    def note_dropped(self, error: str | None = None) -> None:
        with self._lock:
            self._dropped += 1
            if error:
                self._note_error_locked(error)

    def note_error(self, error: str) -> None:
        with self._lock:
            self._note_error_locked(error)

    def _note_error_locked(self, error: str) -> None:
        if error not in self._errors:
            self._errors.append(error)
            del self._errors[:-MAX_ERRORS]

    def relay_controls(self) -> list[str]:
        """Control endpoints the relays announced in their hellos (for endpoints given by URL)."""
        with self._lock:
            return [r.meta["relay"]["control"] for r in self._ranks.values() if isinstance(r.meta.get("relay"), dict)]

    # -- output (UI thread) ---------------------------------------------------

    def snapshot(self) -> Snapshot:
        now = self._clock()
        with self._lock:
            return self._snapshot_locked(now)

    def _snapshot_locked(self, now: float) -> Snapshot:
        names = _phase_names(self._ranks.values())
        stats = {r.rank: _rank_stats(r, names) for r in self._ranks.values()}
        scored = {k: v for k, v in stats.items() if v is not None}
        silent = {r.rank for r in self._ranks.values() if now - r.last_seen > self._silent_after}
        live = {k: v for k, v in scored.items() if k not in silent}
        excess = _excess(live, names)
        spread = _mad([e for e, _ in excess.values()]) if len(excess) >= 3 else 0.0
        median_step = statistics.median(v["step"] for v in live.values()) if live else None

        rows = []
        for r in sorted(self._ranks.values(), key=lambda x: x.rank):
            st = scored.get(r.rank)
            ex, culprit = excess.get(r.rank, (0.0, None))
            score = ex / median_step if median_step else 0.0
            if r.rank in silent:
                status = SILENT
            elif median_step and ex > max(SLOW_FLOOR_S, SLOW_FLOOR_FRACTION * median_step, 3 * spread):
                status = SLOW
            else:
                status = OK
            rows.append(
                RankRow(
                    rank=r.rank,
                    host=str(r.meta.get("host", "?")),
                    local_rank=int(r.meta.get("local_rank", -1)),
                    pid=int(r.meta.get("pid", -1)),
                    step=r.last_step,
                    steps_seen=r.steps_seen,
                    step_s=st["step"] if st else None,
                    phases=st["phases"] if st else {},
                    score=score,
                    excess_s=ex,
                    culprit_phase=culprit if status == SLOW else None,
                    status=status,
                    last_seen_s=now - r.last_seen,
                    dropped=int(r.state.get("dropped", 0) or 0),
                )
            )
        order = {SILENT: 0, SLOW: 1, OK: 2}
        stragglers = [
            row.rank
            for row in sorted(rows, key=lambda row: (order[row.status], -row.score, row.rank))
            if row.step_s is not None or row.status == SILENT
        ]
        rates = [v["rate"] for v in live.values() if v["rate"]]
        worlds = [r.meta.get("world") for r in self._ranks.values() if isinstance(r.meta.get("world"), int)]
        return Snapshot(
            job=self._job,
            world_size=max(worlds) if worlds else None,
            elapsed_s=now - self._started,
            global_step=max((r.last_step for r in self._ranks.values()), default=-1),
            steps_per_s=statistics.median(rates) if rates else None,
            phase_names=names,
            ranks=rows,
            stragglers=stragglers,
            endpoints=[self._endpoint_view(e, now) for e in self._endpoints.values()],
            replies=list(self._replies),
            dropped_messages=self._dropped,
            errors=list(self._errors),
        )

    def _endpoint_view(self, e: _Endpoint, now: float) -> Endpoint:
        if e.last_heard is None:
            return Endpoint(e.url, e.host, "waiting", now - e.added)
        quiet = now - e.last_heard
        return Endpoint(e.url, e.host, "lost" if quiet > self._silent_after else "connected", quiet)


def _phase_names(ranks) -> list[str]:
    seen = set()
    for r in ranks:
        for _, _, _, phases in r.steps:
            seen.update(phases)
    standard = [p for p in schema.STANDARD_PHASES if p in seen]
    custom = sorted(seen - set(schema.STANDARD_PHASES) - {schema.OTHER_PHASE})
    return standard + custom + [schema.OTHER_PHASE]


def _rank_stats(r: _Rank, names: list[str]) -> dict[str, Any] | None:
    if len(r.steps) < MIN_STEPS_TO_SCORE:
        return None
    steps = list(r.steps)
    phases = {}
    for name in names:
        if name == schema.OTHER_PHASE:
            phases[name] = statistics.median(max(0.0, w - sum(p.values())) for _, _, w, p in steps)
        else:
            phases[name] = statistics.median(p.get(name, 0.0) for _, _, _, p in steps)
    first, last = steps[0], steps[-1]
    span = last[1] - first[1]
    rate = (last[0] - first[0]) / span if span > 0 else None
    return {"step": statistics.median(w for _, _, w, _ in steps), "phases": phases, "rate": rate}


def _excess(stats: dict[int, dict[str, Any]], names: list[str]) -> dict[int, tuple[float, str | None]]:
    """Per rank: seconds spent beyond the cross-rank median, summed over phases, and the worst phase."""
    if len(stats) < 2:
        return {rank: (0.0, None) for rank in stats}
    medians = {name: statistics.median(s["phases"].get(name, 0.0) for s in stats.values()) for name in names}
    out = {}
    for rank, s in stats.items():
        diffs = {name: s["phases"].get(name, 0.0) - medians[name] for name in names}
        total = sum(d for d in diffs.values() if d > 0)
        culprit = max(diffs, key=diffs.get) if diffs else None
        out[rank] = (total, culprit if culprit is not None and diffs[culprit] > 0 else None)
    return out


def _mad(values: list[float]) -> float:
    if not values:
        return 0.0
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values)
