"""Rolling per-rank windows and the statistics the TUI shows: pure Python, no sockets, no terminal.

The receiver thread feeds decoded messages in with :meth:`Aggregator.ingest`;
the UI (or ``--json``) takes a :class:`~ranktop.watch.snapshot.Snapshot` at its own
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

from ranktop.watch.collectives import bus_factor, fit_alpha_beta, percentile
from ranktop.watch import stalls
from ranktop.watch.resources import ResourceTracker, job_throughput
from ranktop.watch.snapshot import OK, SILENT, SLOW, STALLED, CaptureStatus, CollectiveStat, Endpoint, RankRow, Reply, Snapshot

DEFAULT_WINDOW = 64
DEFAULT_SILENT_AFTER_S = 3.0
MIN_STEPS_TO_SCORE = 3
SLOW_FLOOR_FRACTION = 0.05
SLOW_FLOOR_S = 0.001
MAX_REPLIES = 256
MAX_COMMANDS_KEPT = 8  # our own commands whose replies are all kept (stacks replies of a big job exceed MAX_REPLIES)
CALL_WINDOW = 512  # collective calls per rank kept for latency and bandwidth statistics
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
    device_times: bool = False  # some of its step records carry GPU (device) times
    # collectives: recent calls (arrival, record), exact totals per op, and per step the
    # (start, end) intervals of waiting, by phase
    calls: collections.deque = field(default_factory=lambda: collections.deque(maxlen=CALL_WINDOW))
    call_totals: dict[str, list[int]] = field(default_factory=dict)
    waits: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    state_at: float = 0.0  # when its last state arrived, and when that state's last step changed (tui/stalls.py)
    progress_at: float = 0.0
    capture_summary: tuple[str, dict] | None = None  # (capture id, summary): kept after the rank stops sending it
    endpoint: str | None = None  # the relay it was last heard through: a lost relay is shown with its ranks


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
        stall_factor: float = stalls.DEFAULT_STALL_FACTOR,
        stall_floor_s: float = stalls.DEFAULT_STALL_FLOOR_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ):
        self._job = job
        self._window = window
        self._silent_after = silent_after_s
        self._stall = stalls.StallPolicy(stall_factor, stall_floor_s)
        self._by_command: collections.OrderedDict[str, dict[int, Reply]] = collections.OrderedDict()
        self._clock = clock
        self._wall_clock = wall_clock  # a replay's virtual time (watch/replay.py); the ranks' own timestamps are wall time
        self._started = clock()
        self._lock = threading.Lock()
        self._ranks: dict[int, _Rank] = {}
        self._endpoints: dict[str, _Endpoint] = {}
        self._replies: collections.deque[Reply] = collections.deque(maxlen=MAX_REPLIES)
        self._sent: dict[str, float] = {}
        self._errors: list[str] = []
        self._dropped = 0
        self._resources = ResourceTracker()  # memory history and creep, GPU gauges, throughput (tui/rank_resources.py)

    @property
    def job(self) -> str | None:
        """The job watched: as named, or as the first message named it."""
        return self._job

    def now(self) -> float:
        """The aggregator's clock (virtual in a replay): the time its snapshots are taken at."""
        return self._clock()

    # -- input (receiver thread) ----------------------------------------------

    def add_endpoint(self, url: str, host: str | None = None) -> None:
        with self._lock:
            if url not in self._endpoints:
                self._endpoints[url] = _Endpoint(url, host, self._clock())

    def replace_endpoint(self, old: str, new: str, host: str | None = None) -> None:
        """A node's relay came back elsewhere (a new port): its old endpoint goes, its ranks follow the new one."""
        with self._lock:
            self._endpoints.pop(old, None)
            if new not in self._endpoints:
                self._endpoints[new] = _Endpoint(new, host, self._clock())

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
            if endpoint is not None:
                rank.endpoint = endpoint
            kind = msg["k"]
            if "state" in msg and isinstance(msg["state"], dict):
                stalls.note_state(rank, msg["state"], now)
                rank.state = msg["state"]
                cap = rank.state.get("cap")
                if isinstance(cap, dict) and isinstance(cap.get("sum"), dict):
                    rank.capture_summary = (cap["id"], cap["sum"])
                self._resources.note(msg["rank"], msg["state"], now)
            if kind == schema.HELLO:
                rank.meta = {k: v for k, v in msg.items() if k not in ("v", "k", "job", "rank", "ts")}
            elif kind == schema.STEPS:
                for call in msg.get("coll", ()):
                    _add_call(rank, call, now, self._window)
                for rec in msg["steps"]:
                    if "g" in rec:
                        rank.device_times = True
                    rank.steps.append((rec["n"], rec["t"], rec["w"], rec["p"]))
                    rank.steps_seen += 1
                    rank.last_step = max(rank.last_step, rec["n"])
            elif kind == schema.REPLY:
                sent = self._sent.get(msg["id"])
                result = msg.get("result") if isinstance(msg.get("result"), dict) else {}
                reply = Reply(msg["id"], msg["cmd"], msg["rank"], msg["ok"], result, None if sent is None else now - sent)
                self._replies.append(reply)
                if sent is not None:  # every rank's answer to our own commands, however many ranks answer
                    self._by_command.setdefault(reply.id, {})[reply.rank] = reply
                    self._by_command.move_to_end(reply.id)
                    while len(self._by_command) > MAX_COMMANDS_KEPT:
                        self._by_command.popitem(last=False)

    def replies_to(self, command_id: str) -> list[Reply]:
        """Every rank's answer to one of our last commands, by rank (``snapshot.replies`` keeps only the latest)."""
        with self._lock:
            return sorted(self._by_command.get(command_id, {}).values(), key=lambda r: r.rank)

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
        if any(r.waits for r in self._ranks.values()):
            names.insert(len(names) - 1, schema.COMM_PHASE)
        stats = {r.rank: _rank_stats(r, names) for r in self._ranks.values()}
        scored = {k: v for k, v in stats.items() if v is not None}
        silent = {r.rank for r in self._ranks.values() if now - r.last_seen > self._silent_after}
        verdict = stalls.assess(stalls.positions_of(self._ranks.values(), now, silent), self._stall)
        live = {k: v for k, v in scored.items() if k not in silent}
        excess = _excess(live, names)
        spread = _mad([e for e, _ in excess.values()]) if len(excess) >= 3 else 0.0
        median_step = statistics.median(v["step"] for v in live.values()) if live else None

        rows = []
        for r in sorted(self._ranks.values(), key=lambda x: x.rank):
            st = scored.get(r.rank)
            ex, culprit = excess.get(r.rank, (0.0, None))
            score = ex / median_step if median_step else 0.0
            stuck = verdict.stalled.get(r.rank)
            if r.rank in silent:
                status = SILENT
            elif stuck is not None:
                status = STALLED
            elif median_step and ex > max(SLOW_FLOOR_S, SLOW_FLOOR_FRACTION * median_step, 3 * spread):
                status = SLOW
            else:
                status = OK
            rows.append(
                RankRow(
                    rank=r.rank,
                    host=self._host_of(r),
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
                    collective_s=st["comm"] if st else None,
                    compute_s=st["step"] - st["comm"] if st and st["comm"] is not None else None,
                    stalled_s=stuck.stuck_s if stuck else None,
                    stalled_phase=stuck.phase if stuck else None,
                    stalled_step=stuck.step if stuck else None,
                    collective=r.state.get("collective") if isinstance(r.state.get("collective"), dict) else None,
                    capture=_capture_status(r),
                    **self._resources.row_fields(r.rank, r.meta, st["rate"] if st else None, self._wall_clock()),
                )
            )
        order = {SILENT: 0, STALLED: 1, SLOW: 2, OK: 3}
        waited_for = set(verdict.waiting_for)
        stragglers = [
            row.rank
            for row in sorted(rows, key=lambda row: (row.rank not in waited_for, order[row.status], -row.score, row.rank))
            if row.step_s is not None or row.status in (SILENT, STALLED)
        ]
        rates = [v["rate"] for v in live.values() if v["rate"]]
        ranks_by_endpoint: dict[str, tuple[int, ...]] = {}
        for r in sorted(self._ranks.values(), key=lambda x: x.rank):
            if r.endpoint is not None:
                ranks_by_endpoint[r.endpoint] = ranks_by_endpoint.get(r.endpoint, ()) + (r.rank,)
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
            endpoints=[self._endpoint_view(e, now, ranks_by_endpoint.get(e.url, ())) for e in self._endpoints.values()],
            replies=list(self._replies),
            dropped_messages=self._dropped,
            errors=list(self._errors),
            collectives=collective_rows(self._ranks.values(), now),
            waiting_for=verdict.waiting_for,
            diagnosis=verdict.diagnosis,
            slow_hosts=slow_hosts(rows),
            device_time_ranks=sorted(r.rank for r in self._ranks.values() if r.device_times),
            throughput=job_throughput([row.throughput for row in rows if row.status != SILENT]),
        )

    def _host_of(self, r: _Rank) -> str:
        """The rank's host from its hello; until that arrives, the host of the node's relay it was heard through."""
        host = r.meta.get("host")
        if host is None and r.endpoint is not None:
            endpoint = self._endpoints.get(r.endpoint)
            host = endpoint.host if endpoint is not None else None
        return str(host) if host is not None else "?"

    def _endpoint_view(self, e: _Endpoint, now: float, ranks: tuple[int, ...]) -> Endpoint:
        if e.last_heard is None:
            return Endpoint(e.url, e.host, "waiting", now - e.added, ranks)
        quiet = now - e.last_heard
        return Endpoint(e.url, e.host, "lost" if quiet > self._silent_after else "connected", quiet, ranks)


def _capture_status(r: _Rank) -> CaptureStatus | None:
    cap = r.state.get("cap")
    if not isinstance(cap, dict):
        return None
    summary = cap.get("sum")
    if summary is None and r.capture_summary is not None and r.capture_summary[0] == cap["id"]:
        summary = r.capture_summary[1]
    return CaptureStatus(
        id=cap["id"], kind=cap["kind"], state=cap["st"], start=cap["start"], steps=cap["steps"], folder=cap.get("dir"),
        at=cap.get("at"), path=cap.get("path"), error=cap.get("err"), summary=summary,
    )


def slow_hosts(rows: list[RankRow]) -> list[str]:
    """Hosts whose every rank is slow, when the job spans several hosts: then the node is the suspect."""
    by_host: dict[str, list[RankRow]] = {}
    for row in rows:
        if row.status != SILENT and row.step_s is not None:
            by_host.setdefault(row.host, []).append(row)
    if len(by_host) < 2:
        return []
    return sorted(host for host, members in by_host.items() if all(r.status == SLOW for r in members))


def _phase_names(ranks) -> list[str]:
    seen = set()
    for r in ranks:
        for _, _, _, phases in r.steps:
            seen.update(phases)
    standard = [p for p in schema.STANDARD_PHASES if p in seen]
    custom = sorted(seen - set(schema.STANDARD_PHASES) - {schema.OTHER_PHASE})
    return standard + custom + [schema.OTHER_PHASE]


def _rank_stats(r: _Rank, names: list[str]) -> dict[str, Any] | None:
    """Medians over the window. With collectives seen, each phase counts only this rank's
    own time: the wait in collectives is taken out of the phase it happened in and shown
    as the ``comm`` phase."""
    if len(r.steps) < MIN_STEPS_TO_SCORE:
        return None
    steps = list(r.steps)
    per_step = [_own_times(n, w, p, r.waits.get(n)) for n, _, w, p in steps]
    phases = {name: statistics.median(times.get(name, 0.0) for times in per_step) for name in names}
    first, last = steps[0], steps[-1]
    span = last[1] - first[1]
    rate = (last[0] - first[0]) / span if span > 0 else None
    comm = statistics.median(times.get(schema.COMM_PHASE, 0.0) for times in per_step) if r.waits else None
    return {"step": statistics.median(w for _, _, w, _ in steps), "phases": phases, "rate": rate, "comm": comm}


def _own_times(n: int, wall: float, phases: dict[str, float], waits: dict | None) -> dict[str, float]:
    out = dict(phases)
    out[schema.OTHER_PHASE] = max(0.0, wall - sum(phases.values()))
    if waits:
        total = 0.0
        for phase, intervals in waits.items():
            waited = _union(intervals)
            name = phase if phase in out else schema.OTHER_PHASE
            out[name] = max(0.0, out[name] - waited)
            total += waited
        out[schema.COMM_PHASE] = min(total, wall)
    return out


def _union(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by possibly overlapping intervals (DDP's buckets overlap each other)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _add_call(rank: _Rank, call: dict[str, Any], now: float, window: int) -> None:
    rank.calls.append((now, call))
    totals = rank.call_totals.setdefault(call["op"], [0, 0])
    totals[0] += 1
    totals[1] += call["b"]
    step_waits = rank.waits.get(call["n"])
    if step_waits is None:
        step_waits = rank.waits[call["n"]] = {}
        while len(rank.waits) > 2 * window:
            rank.waits.popitem(last=False)
    step_waits.setdefault(call["ph"], []).append((call["t0"], call["t0"] + call["d"]))


def collective_rows(ranks, now: float) -> list[CollectiveStat]:
    """Per op for the whole job (rank -1), then per rank and op."""
    by_key: dict[tuple[int, str], list] = {}
    totals: dict[tuple[int, str], list[int]] = {}
    for r in ranks:
        for arrived, call in r.calls:
            for key in ((-1, call["op"]), (r.rank, call["op"])):
                by_key.setdefault(key, []).append((arrived, call))
        for op, (calls, nbytes) in r.call_totals.items():
            for key in ((-1, op), (r.rank, op)):
                t = totals.setdefault(key, [0, 0])
                t[0] += calls
                t[1] += nbytes
    rows = []
    for (rank, op), calls in sorted(by_key.items()):
        durations = [c["d"] for _, c in calls]
        sizes = [c["b"] for _, c in calls]
        busy = sum(durations)
        span = now - min(a for a, _ in calls)
        group = calls[-1][1]["g"]
        algbw = sum(sizes) / busy if busy > 0 and sum(sizes) else None
        fit = fit_alpha_beta([float(b) for b in sizes], durations)
        dev = None
        if fit is not None:
            recent = calls[-5:]
            predicted = statistics.fmean(fit.predict(c["b"]) for _, c in recent)
            if predicted > 0:
                dev = statistics.fmean(c["d"] for _, c in recent) / predicted - 1
        rows.append(
            CollectiveStat(
                rank=rank,
                op=op,
                group_size=group,
                dtype=calls[-1][1]["dt"],
                calls=totals[(rank, op)][0],
                bytes=totals[(rank, op)][1],
                calls_per_s=len(calls) / span if span >= 1.0 else None,
                bytes_per_s=sum(sizes) / span if span >= 1.0 else None,
                mean_s=statistics.fmean(durations),
                p95_s=percentile(durations, 95),
                algbw_bps=algbw,
                busbw_bps=algbw * bus_factor(op, group) if algbw else None,
                alpha_s=fit.alpha_s if fit else None,
                beta_bps=fit.beta_bps if fit else None,
                fit_dev=dev,
            )
        )
    return rows


def _excess(stats: dict[int, dict[str, Any]], names: list[str]) -> dict[int, tuple[float, str | None]]:
    """Per rank: seconds spent beyond the cross-rank median, summed over phases, and the worst phase."""
    if len(stats) < 2:
        return {rank: (0.0, None) for rank in stats}
    names = [name for name in names if name != schema.COMM_PHASE]  # waiting is not this rank's own work
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
