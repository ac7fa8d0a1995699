"""The job as the viewer knows it: every rank's window, updated as messages arrive, read into a view.

:class:`JobState` owns the per-rank windows (watch/window.py), the job-wide
step columns they write their steps into (watch/columns.py), the ranks'
memory and GPU samples (watch/resources.py), the job's life
(watch/lifecycle.py) and its parallel layout (watch/layout.py). The
aggregator calls :meth:`JobState.take` for each decoded message and
:meth:`JobState.view` for each snapshot, both under its lock; what a view
holds is copied or immutable, so the snapshot is built from it
(watch/snapshot_builder.py) with the lock released.

A view is O(ranks) but in C where it counts: a handful of list
comprehensions over the windows gather their scalars into arrays, and the
medians of every rank with new steps are worked out in a few vectorised sorts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ranktop.watch import layout as layouts
from ranktop.watch import stalls
from ranktop.watch.collectives import JobCollectives, add_collectives, add_digest_collectives
from ranktop.watch.columns import StepColumns
from ranktop.watch.endpoints import Endpoints, EndpointsView
from ranktop.watch.lifecycle import JobLife, Lifecycle, fresh_window
from ranktop.watch.resources import ResourceTracker, ResourceView
from ranktop.watch.stragglers import MIN_STEPS_TO_SCORE
from ranktop.watch.window import RankWindow
from ranktop.wire import capture as wire_capture
from ranktop.wire import schema


@dataclass(frozen=True, eq=False)
class JobView:
    """What one snapshot reads of the job, gathered under the lock: arrays in rank order, immutable messages."""

    now: float
    wall: float
    names: list[str]  # phase columns of ``phases``
    windows: list[RankWindow]  # in rank order: for what is read of a few ranks only (collective rows)
    rank: np.ndarray
    host: list[str]
    step: np.ndarray
    steps_seen: np.ndarray
    missed: np.ndarray
    scored: np.ndarray  # bool: enough steps for medians
    step_s: np.ndarray  # medians over the window (NaN: not scored)
    phases: np.ndarray  # (ranks, names)
    rate: np.ndarray
    comm_s: np.ndarray  # NaN: no collective wait seen
    last_seen: np.ndarray
    last_step_end: np.ndarray
    silent: np.ndarray  # bool
    device: np.ndarray  # bool: its steps carry device (GPU) times
    states: list[dict]
    metas: list[dict]
    dropped: np.ndarray  # int64: records its probe could not send (read of its state as it came: RankWindow.take_state)
    rate_hz: np.ndarray  # the telemetry rate it says it sends at (NaN: not said)
    rejected: dict[int, dict[str, int]]  # rank -> commands it refused, by reason (those that refused any)
    works: np.ndarray  # bool: its hello says its work per step
    capture_summaries: list
    resources: list[ResourceView | None]
    coords: list[dict[str, int] | None]
    class_ids: np.ndarray | None  # peer classes (None: one class)
    stage_ids: np.ndarray | None  # pipeline stage per rank (-1: none; None: no pipeline known)
    stalls: stalls.StallReport
    life: JobLife
    world: int | None
    layout: layouts.Layout
    captures: dict[str, list[int]]


class JobState:
    def __init__(self, window: int, stall: stalls.StallPolicy, silent_after_s: float, on_news: Callable[[], None]):
        self._window = window
        self._stall = stall
        self._silent_after = silent_after_s
        self._on_news = on_news  # the job's size became known or grew: commands waiting for it can go
        self.columns = StepColumns(window)
        self.collectives = JobCollectives()  # the job's sums per op, kept as the ranks' come and go
        self.ranks: dict[int, RankWindow] = {}
        self._sorted: list[RankWindow] | None = None  # the windows in rank order, until one comes or goes
        self.world: int | None = None  # the largest world size any hello gave
        self.resources = ResourceTracker()  # memory history and creep, GPU gauges (watch/resources.py)
        self.lifecycle = Lifecycle()  # restarts and the job's end (watch/lifecycle.py)
        self.layout = layouts.EMPTY  # coordinates and peer classes, learned from the hellos' groups
        self._layout_stale = False  # some rank's groups changed since it was learned
        self._classes: tuple | None = None  # (layout, windows, class ids, stage ids) of the last view

    # -- messages (the receiver thread) -------------------------------------------------------

    def take(self, msg: dict[str, Any], endpoint: str | None, now: float, wall: float) -> None:
        """One decoded telemetry message of this job."""
        kind = msg["k"]
        if kind == schema.NODE:
            for entry in msg["ranks"]:
                self._take_digest(entry, endpoint, now, wall)
            if "steps" in msg:
                self._take_digest_steps(msg["steps"], endpoint, now)
            return
        rank = self._window_of(msg["rank"], endpoint, now)
        state = msg.get("state")  # a map or None: typed at decode (wire/messages.py)
        if state is not None:
            rank.note_state(state, now)
            self.resources.note(msg["rank"], state, now)
        if kind == schema.HELLO:
            self._note_hello(rank, {k: v for k, v in msg.items() if k not in ("v", "k", "job", "rank", "ts")}, now, wall)
        elif kind == schema.STEPS:
            rank.raw_at = now
            add_collectives(rank, msg, now, self.collectives)
            for rec in msg["steps"]:
                rank.add_step(rec)
        elif kind == schema.REPLY:
            return  # its answer is the request book's; its state is noted above
        else:
            rank.raw_at = now
            if "exit" in msg:  # its last word: the process is ending (watch/lifecycle.py)
                self.lifecycle.note_exit(msg["rank"], msg["exit"], wall)

    def _window_of(self, number: int, endpoint: str | None, now: float) -> RankWindow:
        rank = self.ranks.get(number)
        if rank is None:
            rank = self.ranks[number] = RankWindow(number, self._window, columns=self.columns)
            self._sorted = None
        rank.last_seen = now
        if endpoint is not None:
            rank.endpoint = endpoint
        return rank

    def _note_hello(self, rank: RankWindow, meta: dict[str, Any], now: float, wall: float) -> RankWindow:
        if self.lifecycle.note_hello(rank.rank, meta.get("pid"), wall):
            self.collectives.forget(rank)
            rank = self.ranks[rank.rank] = fresh_window(rank, now)  # a new process of the rank: a restart
            self._sorted = None
            self.resources.forget(rank.rank)
        if meta.get("groups") != rank.meta.get("groups"):
            self._layout_stale = True  # hellos repeat; their groups seldom change: a compare of a few small maps
        rank.take_hello(meta)
        world = meta.get("world")
        if isinstance(world, int) and not isinstance(world, bool) and world > (self.world or 0):
            self.world = world
            self._on_news()
        return rank

    def _take_digest(self, entry: dict[str, Any], endpoint: str | None, now: float, wall: float) -> None:
        """One rank's entry in its node's digest (wire/node_digest.py). A rank whose own messages this viewer
        also hears (it switched to digests a moment ago) is taken from those, not counted twice."""
        rank = self._window_of(entry["r"], endpoint, now)
        state = entry.get("state")
        if state is not None:
            rank.note_state(state, now)
            self.resources.note(entry["r"], state, now)
        if "hello" in entry:
            rank = self._note_hello(rank, entry["hello"], now, wall)
        if "exit" in entry:  # its last word, passed on by its node's relay (watch/lifecycle.py)
            self.lifecycle.note_exit(entry["r"], entry["exit"], wall)
        if now - rank.raw_at < self._silent_after:
            return
        if "ops" in entry or "cx" in entry:
            add_digest_collectives(rank, entry.get("ops", {}), entry.get("cx", ()), now, self.collectives)

    def _take_digest_steps(self, steps: dict[str, Any], endpoint: str | None, now: float) -> None:
        """The steps of a node's ranks, as its digest's columns (after its entries: a hello there may have
        started a rank afresh). Each rank's counts in a short loop, the figures of those with new steps into
        the job's columns at once. A rank heard through its own messages lately is taken from those."""
        numbers, last, count, start, wall = steps["r"], steps["n"], steps["c"], steps["t"], steps["w"]
        device = steps.get("g")
        rows, taken = [], []
        for i, number in enumerate(numbers):
            rank = self._window_of(number, endpoint, now)
            if now - rank.raw_at < self._silent_after:
                continue
            if device is not None and device[i]:
                rank.device_times = True
            if rank.take_interval(last[i], count[i], start[i] + wall[i]):
                rows.append(rank.own.row)
                taken.append(i)
        if not rows:
            return
        own = steps["p"]
        if len(taken) < len(numbers):  # a few ranks left out: their positions too
            last, start, wall = ([column[i] for i in taken] for column in (last, start, wall))
            own = {name: [column[i] for i in taken] for name, column in own.items()}
        self.columns.add_block(rows, last, start, wall, own)

    # -- a snapshot's view (the UI's thread, under the aggregator's lock) ------------------------

    def windows(self) -> list[RankWindow]:
        if self._sorted is None:
            self._sorted = [self.ranks[r] for r in sorted(self.ranks)]
        return self._sorted

    def view(self, now: float, wall: float, relays: EndpointsView, endpoints: Endpoints, sure_after: bool) -> JobView:
        """The job now, for a snapshot. ``sure_after``: long enough since the viewer started that ranks never
        heard from may be named (once every relay is settled too)."""
        ws = self.windows()
        n = len(ws)
        behind = relays.behind_s
        rank = np.fromiter((w.rank for w in ws), np.int64, n)
        last_seen = np.fromiter((w.last_seen for w in ws), np.float64, n)
        silent = self._silent(ws, last_seen, now, relays)
        silent_ranks = set(rank[silent].tolist())

        cols = self.columns
        rows = np.fromiter((w.own.row for w in ws), np.int64, n)
        cols.refresh(rows, MIN_STEPS_TO_SCORE)
        names = cols.phase_names()
        scored = (cols.count[rows] >= MIN_STEPS_TO_SCORE) & (cols.stats_at[rows] >= 0)
        index = cols.columns_of(names)
        phases = np.zeros((n, len(names)))
        for j, c in enumerate(index):
            if c is not None:
                phases[:, j] = cols.median_own[rows, c]
        comm = index[names.index(schema.COMM_PHASE)] if schema.COMM_PHASE in names else None
        waited = cols.waited[rows] & scored
        comm_s = np.where(waited, cols.median_own[rows, comm], np.nan) if comm is not None else np.full(n, np.nan)
        step_s = np.where(scored, cols.median_wall[rows], np.nan)
        last = np.fromiter((w.last_step for w in ws), np.int64, n)
        seen = np.fromiter((w.steps_seen for w in ws), np.int64, n)
        first = np.fromiter((w.first_step if w.first_step is not None else -1 for w in ws), np.int64, n)
        missed = np.where(first >= 0, np.maximum(0, last - first + 1 - seen), 0)

        worlds = max(self.world or 0, 0) or None
        sure = bool(worlds and sure_after and relays.settled)
        stuck = stalls.stuck_columns(
            np.fromiter((np.nan if w.step_age is None else w.step_age for w in ws), np.float64, n),
            np.fromiter((w.state_at for w in ws), np.float64, n),
            np.fromiter((w.progress_at for w in ws), np.float64, n),
            now - behind,
        )
        with_state = np.fromiter((bool(w.state) for w in ws), np.bool_, n)
        if stalls.none_stuck(stuck[with_state & ~silent], self._stall):
            report = stalls.StallReport({}, [], None)
        else:
            positions = stalls.positions_of(ws, now - behind, silent_ranks)
            report = stalls.assess(positions, self._stall, world=worlds if sure else None)

        if self._layout_stale:
            self._layout_stale = False
            self.layout = layouts.learn({w.rank: w.meta.get("groups") for w in ws if w.meta.get("groups")})
            self._classes = None
        class_ids, stage_ids = self._peer_classes(ws, rank)
        return JobView(
            now=now,
            wall=wall,
            names=names,
            windows=ws,
            rank=rank,
            host=[self._host_of(w, endpoints) for w in ws],
            step=last,
            steps_seen=seen,
            missed=missed,
            scored=scored,
            step_s=step_s,
            phases=phases,
            rate=np.where(scored, cols.rate[rows], np.nan),
            comm_s=comm_s,
            last_seen=last_seen,
            last_step_end=np.fromiter((w.own.last_end if w.own.last_end is not None else np.nan for w in ws), np.float64, n),
            silent=silent,
            device=np.fromiter((w.device_times for w in ws), np.bool_, n),
            states=[w.state for w in ws],
            metas=[w.meta for w in ws],
            dropped=np.fromiter((w.dropped for w in ws), np.int64, n),
            rate_hz=np.fromiter((w.rate_hz for w in ws), np.float64, n),
            rejected={w.rank: dict(w.rejected) for w in ws if w.rejected},
            works=np.fromiter((w.works for w in ws), np.bool_, n),
            capture_summaries=[w.capture_summary for w in ws],
            resources=self.resources.views(rank.tolist(), now),
            coords=[self.layout.of(r) for r in rank.tolist()] if self.layout.known else [None] * n,
            class_ids=class_ids,
            stage_ids=stage_ids,
            stalls=report,
            life=self.lifecycle.view(worlds, bool(ws), silent_ranks),
            world=worlds,
            layout=self.layout,
            captures=_captures(ws),
        )

    def _silent(self, ws: list[RankWindow], last_seen: np.ndarray, now: float, relays: EndpointsView) -> np.ndarray:
        """A rank is silent when *it* stopped talking, not when this viewer is behind on the job's messages (a
        viewer behind on one relay is behind on them all: it serves them in turn); or when its relay is gone."""
        ids: dict[str | None, int] = {}
        eid = np.fromiter((ids.setdefault(w.endpoint, len(ids)) for w in ws), np.int64, len(ws))
        urls = list(ids)
        settling = np.array([u in relays.settling for u in urls], bool)
        down = np.array([bool(relays.links.get(u, (False, None))[0]) for u in urls], bool)
        dropped = np.array([_or_inf(relays.links.get(u, (False, None))[1]) for u in urls], np.float64)
        quiet = (now - last_seen > self._silent_after + relays.behind_s) & ~settling[eid]
        return quiet | down[eid] | (last_seen <= dropped[eid])

    def _peer_classes(self, ws: list[RankWindow], rank: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Peer class and pipeline stage of each rank, as small whole numbers; worked out again when the
        layout or the ranks change."""
        layout = self.layout
        if self._classes is not None and self._classes[0] is layout and self._classes[1] is ws:
            return self._classes[2], self._classes[3]
        classes = layout.classes(rank.tolist()) if layout.known else None
        class_ids = None
        if classes:
            keys: dict[tuple, int] = {}
            class_ids = np.fromiter((keys.setdefault(classes.get(r, ()), len(keys)) for r in rank.tolist()), np.int64, len(rank))
        stage_ids = None
        if layout.known:
            stage_ids = np.fromiter((_stage(layout.stage(r)) for r in rank.tolist()), np.int64, len(rank))
        self._classes = (layout, ws, class_ids, stage_ids)
        return class_ids, stage_ids

    def _host_of(self, w: RankWindow, endpoints: Endpoints) -> str:
        """The rank's host from its hello; until that arrives, the host of the node's relay it was heard through."""
        host = w.meta.get("host")
        if host is None:
            host = endpoints.host_of(w.endpoint)
        return str(host) if host is not None else "?"

    def ranks_by_endpoint(self, view: JobView) -> dict[str, tuple[int, ...]]:
        """The ranks last heard through each relay (a lost relay is shown with the ranks it took with it)."""
        out: dict[str, list[int]] = {}
        for w in view.windows:
            if w.endpoint is not None:
                out.setdefault(w.endpoint, []).append(w.rank)
        return {url: tuple(ranks) for url, ranks in out.items()}


def _captures(ws: list[RankWindow]) -> dict[str, list[int]]:
    """Captures not yet done or failed: id -> the ranks at them (one capture at a time per job)."""
    running: dict[str, list[int]] = {}
    for w in ws:
        cap = w.state.get("cap")
        if cap and cap["st"] in wire_capture.RUNNING:
            running.setdefault(cap["id"], []).append(w.rank)
    return running


def _stage(stage: int | None) -> int:
    return -1 if stage is None else stage


def _or_inf(value: float | None) -> float:
    return float("-inf") if value is None else value
