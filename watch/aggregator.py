"""The viewer's picture of a job: rank windows updated as messages arrive, snapshots on demand.

The receiver thread feeds decoded messages in with :meth:`Aggregator.ingest`;
the UI (or ``--json``) takes a :class:`~ranktop.watch.snapshot.Snapshot` at its
own pace (the TUI on a thread of its own, watch/refresher.py). One lock guards
both; ingest holds it for dictionary updates and appends (O(1) per step: each
rank's window keeps its own-time columns, watch/step_window.py), a snapshot
only a slice of ranks at a time (their medians, recomputed when new steps came)
and builds the rest, O(ranks), outside it: the receiver never waits for a frame.

What a snapshot says comes from modules of their own, each reading the typed
rank windows (watch/window.py): straggler scores (watch/stragglers.py), stalls
and whom they wait for (watch/stalls.py), collective rows
(watch/collectives.py), memory, GPUs and throughput (watch/resources.py), and
the answers to our commands (watch/requests.py).
"""

from __future__ import annotations

import collections
import statistics
import threading
import time
from typing import Any, Callable

from ranktop.watch import layout as layouts
from ranktop.watch import stalls, stragglers
from ranktop.watch.collectives import add_collectives, add_digest_collectives, collective_rows
from ranktop.watch.endpoints import Endpoints
from ranktop.watch.lifecycle import Lifecycle, fresh_window
from ranktop.watch.requests import RequestBook
from ranktop.watch.resources import ResourceTracker, job_throughput
from ranktop.watch.snapshot import OK, SILENT, SLOW, STALLED, CaptureStatus, Reply, Snapshot, build_rank_row
from ranktop.watch.window import RankWindow
from ranktop.wire import schema

DEFAULT_WINDOW = 64
DEFAULT_SILENT_AFTER_S = 3.0
#: Latest replies kept for the snapshot, whoever sent the command (ours are all kept: watch/requests.py).
MAX_REPLIES = 256
MAX_ERRORS = 8
#: Kinds of malformed message named in the status line, at most (the decoder's fault texts are a small fixed set).
MAX_FAULTS = 64
#: Ranks whose statistics a snapshot works out per hold of the lock (about a millisecond's work).
STATS_SLICE = 64
#: Ranks whose medians one snapshot may work out again (those with new steps; the others keep theirs).
RESTATS_PER_SNAPSHOT = 1024
#: Past this many ranks the snapshot's per-rank collective rows are those of the first ranks of the ranking only.
PER_RANK_ROWS_UP_TO = 64
PER_RANK_ROWS_SHOWN = 16
#: From this many ranks on, the collective rows are worked out again this often only.
COLLECTIVES_CACHED_FROM = 512
COLLECTIVES_EVERY_S = 2.0


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
        requests: RequestBook | None = None,
        wall_clock: Callable[[], float] = time.time,
    ):
        self._job = job
        self._window = window
        self._silent_after = silent_after_s
        self._stall = stalls.StallPolicy(stall_factor, stall_floor_s)
        self._clock = clock
        self._wall_clock = wall_clock  # a replay's virtual time (watch/replay.py); the ranks' own timestamps are wall time
        self.requests = requests if requests is not None else RequestBook(clock)  # our commands and every answer
        self._started = clock()
        self._lock = threading.Lock()
        self._ranks: dict[int, RankWindow] = {}
        self._world: int | None = None  # the largest world size any hello gave
        self._endpoints = Endpoints()  # the relays it hears the job through (watch/endpoints.py)
        self._replies: collections.deque[Reply] = collections.deque(maxlen=MAX_REPLIES)
        self._errors: list[str] = []
        self._dropped = 0
        self._collectives: tuple[float, list] | None = None  # (when, rows) of the last collective rows
        self._faults: set[str] = set()  # kinds of malformed message already named (note_dropped)
        self._restat_from = 0  # where the next snapshot's share of medians to refresh begins
        self._resources = ResourceTracker()  # memory history and creep, GPU gauges, throughput (watch/resources.py)
        self.lifecycle = Lifecycle()  # restarts and the job's end (watch/lifecycle.py)
        self._layout = layouts.EMPTY  # coordinates and peer classes (watch/layout.py), learned from the hellos' groups
        self._layout_stale = False  # some rank's groups changed since it was learned

    @property
    def world_size(self) -> int | None:
        """The job's size as its hellos said it (cheap: no snapshot)."""
        return self._world

    @property
    def ranks_heard(self) -> int:
        """How many ranks have been heard from (cheap: no snapshot)."""
        return len(self._ranks)

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
            self._endpoints.add(url, host, self._clock())

    def endpoint_urls(self) -> list[str]:
        """The relays added so far (cheap: no snapshot)."""
        with self._lock:
            return self._endpoints.urls()

    def replace_endpoint(self, old: str, new: str, host: str | None = None) -> None:
        """A node's relay came back elsewhere (a new port): its old endpoint goes, its ranks follow the new one."""
        with self._lock:
            self._endpoints.replace(old, new, host, self._clock())
            for w in self._ranks.values():  # cut off until they are heard through it: silent, not stalled
                if w.endpoint == old:
                    w.endpoint = new

    def note_link(self, url: str, up: bool) -> None:
        """The receiver's word on a relay's connection: dropped (its ranks go silent at once: they
        are cut off, not stalled) or made again."""
        with self._lock:
            self._endpoints.note_link(url, up, self._clock())

    def ingest_frames(self, frames: list[bytes], endpoint: str | None = None) -> dict | None:
        """Decode and ingest one message; malformed or foreign frames are dropped and counted."""
        try:
            msg = schema.decode(frames)
        except schema.VersionMismatch as exc:
            self.note_dropped(f"{endpoint or 'a peer'}: {exc}")
            return None
        except schema.WireError as exc:
            self.note_dropped(fault=malformed(frames, exc))
            return None
        if msg["k"] not in schema.TELEMETRY_KINDS:
            self.note_dropped()
            return None
        try:
            self.ingest(msg, endpoint)
        except Exception as exc:  # a check decode lacks: the message is lost, never the viewer (benchmarks/fuzz.py hunts these)
            self.note_dropped(fault=f"dropped {msg['k']} messages the viewer could not read: {exc.__class__.__name__}")
            return None
        return msg

    def ingest(self, msg: dict[str, Any], endpoint: str | None = None) -> None:
        now = self._clock()
        with self._lock:
            if self._job is None:
                self._job = msg["job"]
                self.requests.poke()  # a command waiting for the job's name can go
            elif msg["job"] != self._job:
                self._dropped += 1  # another job's traffic on a shared endpoint
                return
            if endpoint is not None:
                self._endpoints.heard(endpoint, now, self._wall_clock() - msg["ts"])
            kind = msg["k"]
            if kind == schema.NODE:
                for entry in msg["ranks"]:
                    self._ingest_digest(entry, endpoint, now)
                return
            rank = self._window_of(msg["rank"], endpoint, now)
            state = msg.get("state")  # a map or None: typed at decode (wire/messages.py)
            if state is not None:
                rank.note_state(state, now)
                self._resources.note(msg["rank"], state, now)
            if kind == schema.HELLO:
                self._note_hello(rank, {k: v for k, v in msg.items() if k not in ("v", "k", "job", "rank", "ts")}, now)
            elif kind == schema.STEPS:
                rank.raw_at = now
                add_collectives(rank, msg, now, self._window)
                for rec in msg["steps"]:
                    rank.add_step(rec)
            elif kind == schema.REPLY:
                result = msg.get("result") or {}  # a plain map or None, checked at decode
                self._replies.append(self.requests.note_reply(msg["id"], msg["cmd"], msg["rank"], msg["ok"], result))
            else:
                rank.raw_at = now
                if "exit" in msg:  # its last word: the process is ending (watch/lifecycle.py)
                    self.lifecycle.note_exit(msg["rank"], msg["exit"], self._wall_clock())

    def _window_of(self, number: int, endpoint: str | None, now: float) -> RankWindow:
        rank = self._ranks.get(number)
        if rank is None:
            rank = self._ranks[number] = RankWindow(number, self._window)
        rank.last_seen = now
        if endpoint is not None:
            rank.endpoint = endpoint
        return rank

    def _note_hello(self, rank: RankWindow, meta: dict[str, Any], now: float) -> RankWindow:
        if self.lifecycle.note_hello(rank.rank, meta.get("pid"), self._wall_clock()):
            rank = self._ranks[rank.rank] = fresh_window(rank, now)  # a new process of the rank: a restart
            self._resources.forget(rank.rank)
        if meta.get("groups") != rank.meta.get("groups"):
            self._layout_stale = True  # hellos repeat; their groups seldom change: a compare of a few small maps
        rank.meta = meta
        world = meta.get("world")
        if isinstance(world, int) and not isinstance(world, bool) and world != self._world and world > (self._world or 0):
            self._world = world
            self.requests.poke()  # a command waiting for the job's size can go
        return rank

    def _ingest_digest(self, entry: dict[str, Any], endpoint: str | None, now: float) -> None:
        """One rank's part of its node's digest (wire/node_digest.py). A rank whose own messages this viewer
        also hears (it switched to digests a moment ago) is taken from those, not counted twice."""
        rank = self._window_of(entry["r"], endpoint, now)
        state = entry.get("state")
        if state is not None:
            rank.note_state(state, now)
            self._resources.note(entry["r"], state, now)
        if "hello" in entry:
            rank = self._note_hello(rank, entry["hello"], now)
        if "exit" in entry:  # its last word, passed on by its node's relay (watch/lifecycle.py)
            self.lifecycle.note_exit(entry["r"], entry["exit"], self._wall_clock())
        if now - rank.raw_at < self._silent_after:
            return
        if "ops" in entry or "cx" in entry:
            add_digest_collectives(rank, entry.get("ops", {}), entry.get("cx", ()), now)
        if "s" in entry:
            rank.add_interval(entry["s"])
        if entry.get("dev"):
            rank.device_times = True

    def replies_to(self, command_id: str) -> list[Reply]:
        """Every rank's answer to one of our last commands, by rank (``snapshot.replies`` keeps only the latest)."""
        return self.requests.replies_to(command_id)

    def note_sent(self, command_id: str, cmd: str = "") -> None:
        """A command this viewer sent (watch/requests.py does it for the commands it sends)."""
        self.requests.note_sent(command_id, cmd)

    def note_dropped(self, error: str | None = None, *, fault: str | None = None) -> None:
        """One message dropped; ``error`` goes to the status line, ``fault`` (a kind of fault, a fixed text)
        only the first time it is seen: a peer sending a malformed message four times a second is named once."""
        with self._lock:
            self._dropped += 1
            if error:
                self._note_error_locked(error)
            if fault and fault not in self._faults and len(self._faults) < MAX_FAULTS:
                self._faults.add(fault)
                self._note_error_locked(fault)

    def note_error(self, error: str) -> None:
        with self._lock:
            self._note_error_locked(error)

    def _note_error_locked(self, error: str) -> None:
        if error not in self._errors:
            self._errors.append(error)
            del self._errors[:-MAX_ERRORS]

    # -- output (UI thread) ---------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The job now. Built mostly outside the lock the receiver takes: the per-rank work (statistics
        recomputed for ranks with new steps, resource gauges) under it a slice of ranks at a time, so
        ingest never waits more than about a millisecond; the cross-rank part, O(ranks), outside it."""
        now = self._clock()
        with self._lock:
            windows = sorted(self._ranks.values(), key=lambda x: x.rank)
            names = stragglers.phase_names(windows)
        stats: dict[int, stragglers.RankStats | None] = {}
        resources: dict[int, dict] = {}
        wall = self._wall_clock()
        # A big job's medians are refreshed a share at a time, in turn: each rank's at least every
        # len(windows) / RESTATS_PER_SNAPSHOT refreshes (every 2 s at 4,096 ranks and 2 Hz).
        count = len(windows)
        first = self._restat_from % count if count else 0
        fresh = {windows[(first + k) % count].rank for k in range(min(count, RESTATS_PER_SNAPSHOT))}
        self._restat_from = first + len(fresh)
        for i in range(0, count, STATS_SLICE):
            with self._lock:
                for w in windows[i : i + STATS_SLICE]:
                    st = stats[w.rank] = stragglers.rank_stats(w, names, refresh=w.rank in fresh)
                    w.own.median_wall(refresh=w.rank in fresh)  # kept for the stall check below
                    resources[w.rank] = self._resources.row_fields(w.rank, w.meta, st.rate if st else None, wall)
        return self._build(now, windows, names, stats, resources)

    def _build(self, now: float, windows: list[RankWindow], names: list[str], stats: dict, resources: dict) -> Snapshot:
        with self._lock:
            relays = self._endpoints.view(now)
        behind, settling, settled = relays.behind_s, relays.settling, relays.settled

        # A rank is silent when *it* stopped talking, not when this viewer is behind on the job's messages (a
        # viewer behind on one relay is behind on them all: it serves them in turn); or when its relay is gone.
        silent = {
            w.rank for w in windows
            if (now - w.last_seen > self._silent_after + behind and w.endpoint not in settling) or relays.cut_off(w.endpoint, w.last_seen)
        }
        worlds = [w.meta.get("world") for w in windows if isinstance(w.meta.get("world"), int)]
        # The job as far as we have heard: a viewer behind on its messages must not see a stall in its own lag.
        if stalls.none_stuck(windows, now - behind, silent, self._stall):
            verdict = stalls.StallReport({}, [], None)
        else:
            # ranks never heard count once it is sure: a while after it started, and every node it knows is settled
            sure = worlds and now - self._started > self._silent_after + behind and settled
            verdict = stalls.assess(stalls.positions_of(windows, now - behind, silent), self._stall, world=max(worlds) if sure else None)
        live = {rank: s for rank, s in stats.items() if s is not None and rank not in silent}
        if self._layout_stale:
            self._layout_stale = False
            self._layout = layouts.learn({w.rank: w.meta.get("groups") for w in windows if w.meta.get("groups")})
        layout = self._layout
        scores = stragglers.score(live, names, layout.classes(live))
        stage_rows = stragglers.stages(live, layout.stage) if layout.known else []

        rows = []
        for w in windows:
            st = stats[w.rank]
            local_rank, pid, dropped, collective, capture, rejected, rate_hz = _row_fields(w)
            excess, culprit = scores.of(w.rank)
            stuck = verdict.stalled.get(w.rank)
            if w.rank in silent:
                status = SILENT
            elif stuck is not None:
                status = STALLED
            elif scores.is_slow(w.rank):
                status = SLOW
            else:
                status = OK
            rows.append(
                build_rank_row(
                    rank=w.rank,
                    host=self._host_of(w),
                    local_rank=local_rank,
                    pid=pid,
                    step=w.last_step,
                    steps_seen=w.steps_seen,
                    missed=w.missed,
                    step_s=st.step_s if st else None,
                    phases=st.phases if st else {},
                    score=scores.score(w.rank),
                    excess_s=excess,
                    culprit_phase=culprit if status == SLOW else None,
                    status=status,
                    last_seen_s=now - w.last_seen,
                    dropped=dropped,
                    collective_s=st.comm_s if st else None,
                    compute_s=st.step_s - st.comm_s if st and st.comm_s is not None else None,
                    stalled_s=stuck.stuck_s if stuck else None,
                    stalled_phase=stuck.phase if stuck else None,
                    stalled_step=stuck.step if stuck else None,
                    collective=collective,
                    capture=capture,
                    rejected=rejected,
                    rate_hz=rate_hz,
                    last_step_end=w.last_step_end,
                    coords=layout.of(w.rank),
                    **resources[w.rank],
                )
            )
        rates = [s.rate for s in live.values() if s.rate]
        ranks_by_endpoint: dict[str, tuple[int, ...]] = {}
        for w in windows:
            if w.endpoint is not None:
                ranks_by_endpoint[w.endpoint] = ranks_by_endpoint.get(w.endpoint, ()) + (w.rank,)
        ranking = stragglers.ranking(rows, verdict.waiting_for)
        with self._lock:
            endpoints = self._endpoints.rows(now, ranks_by_endpoint, self._silent_after + behind)
            replies, dropped, errors = list(self._replies), self._dropped, list(self._errors)
            life = self.lifecycle.view(max(worlds) if worlds else None, bool(windows), silent)
        return Snapshot(
            job=self._job,
            world_size=max(worlds) if worlds else None,
            elapsed_s=now - self._started,
            global_step=max((w.last_step for w in windows), default=-1),
            steps_per_s=statistics.median(rates) if rates else None,
            phase_names=names,
            ranks=rows,
            stragglers=ranking,
            endpoints=endpoints,
            behind_s=behind or None,
            state=life.state,
            ended_at=life.ended_at,
            restarts=life.restarts,
            restarted_at=life.restarted_at,
            not_back=list(life.not_back),
            failed_ranks=list(life.failed),
            replies=replies,
            requests=self.requests.statuses(),
            dropped_messages=dropped,
            errors=errors,
            collectives=self._collective_rows(windows, now, ranking),
            waiting_for=verdict.waiting_for,
            diagnosis=verdict.diagnosis,
            slow_hosts=stragglers.slow_hosts(rows),
            device_time_ranks=sorted(w.rank for w in windows if w.device_times),
            throughput=job_throughput([row.throughput for row in rows if row.status != SILENT]),
            layout_roles=list(layout.roles),
            stages=stage_rows,
            imbalance=stragglers.imbalance(stage_rows, scores.median_step_s),
        )

    def _collective_rows(self, windows: list[RankWindow], now: float, ranking: list[int]) -> list:
        """The collectives pane's rows; past :data:`COLLECTIVES_CACHED_FROM` ranks worked out again every
        :data:`COLLECTIVES_EVERY_S` only (what they say moves slowly; the rows cost O(ranks x ops))."""
        cached = self._collectives
        if len(windows) >= COLLECTIVES_CACHED_FROM and cached is not None and now - cached[0] < COLLECTIVES_EVERY_S:
            return cached[1]
        rows = collective_rows(windows, now, ranking[:PER_RANK_ROWS_SHOWN] if len(windows) > PER_RANK_ROWS_UP_TO else None)
        self._collectives = (now, rows)
        return rows

    def _host_of(self, r: RankWindow) -> str:
        """The rank's host from its hello; until that arrives, the host of the node's relay it was heard through."""
        host = r.meta.get("host")
        if host is None:
            host = self._endpoints.host_of(r.endpoint)
        return str(host) if host is not None else "?"


def malformed(frames: list[bytes], exc: Exception) -> str:
    """The status line's name of a kind of fault: ``"dropped malformed steps messages: collective record lacks phase"``."""
    topic = frames[0] if frames else b""
    kind = next((k for k in schema.KINDS if topic == k.encode()), None)
    detail = str(exc)
    if kind is not None and detail.startswith(f"{kind}: "):
        detail = detail[len(kind) + 2 :]
    return f"dropped malformed {kind + ' ' if kind else ''}messages: {detail}"


def _row_fields(w: RankWindow) -> tuple:
    """What a rank's row reads of its hello and its state, worked out again only when either is a new one
    (or the capture summary kept apart): a rank's state comes about once a second, snapshots more often."""
    cache = w.row_cache
    if cache is not None and cache[0] is w.state and cache[1] is w.meta and cache[2] is w.capture_summary:
        return cache[3]
    state, meta = w.state, w.meta
    collective = state.get("collective")
    fields = (
        int(meta.get("local_rank", -1)),
        int(meta.get("pid", -1)),
        _count(state.get("dropped")),
        collective if isinstance(collective, dict) else None,
        _capture_status(w),
        _rejected(state.get("rejected")),
        _rate(state.get("rate_hz", meta.get("rate_hz"))),
    )
    w.row_cache = (state, meta, w.capture_summary, fields)
    return fields


def _capture_status(r: RankWindow) -> CaptureStatus | None:
    cap = r.state.get("cap")  # typed at decode (wire/messages.py: Capture): read as it is
    if not cap:
        return None
    summary = cap.get("sum")
    if summary is None and r.capture_summary is not None and r.capture_summary[0] == cap["id"]:
        summary = r.capture_summary[1]
    return CaptureStatus(
        id=cap["id"], kind=cap["kind"], state=cap["st"], start=cap["start"], steps=cap["steps"], folder=cap.get("dir"),
        at=cap.get("at"), path=cap.get("path"), error=cap.get("err"), summary=summary,
    )


def _count(value: int | None) -> int:
    return value or 0


def _rejected(value: dict[str, int] | None) -> dict[str, int]:
    """Commands the rank refused, by reason (forged, replayed, expired, ...), as its state counts them."""
    return dict(value) if value else {}


def _rate(value: float | None) -> float | None:
    return None if value is None else float(value)
