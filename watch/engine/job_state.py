"""The job as the viewer knows it: every rank's window, updated as messages arrive, gathered into a view.

:class:`JobState` owns the per-rank windows (watch/engine/rank_window.py), the
job-wide step columns they write their steps into (watch/engine/step_columns.py),
the ranks' memory and GPU samples (watch/engine/resource_samples.py), the job's
collective sums (watch/engine/collective_sums.py) and its life
(watch/engine/lifecycle.py). The aggregator calls :meth:`JobState.take` for
each decoded message and :meth:`JobState.view` for each snapshot, both under
its lock. A view *gathers* only: arrays copied by index, the messages' frozen
Structs, never a live window. Judging it (which ranks are silent or stalled,
the parallel layout and peer classes, scores, statuses) is the analysis
side's (watch/analysis/), with the lock released: this module imports none of it.

A view is O(ranks) but in C where it counts: a handful of fancy indexes
gather the ranks' scalars, and the medians of every rank with new steps are
worked out in a few vectorised sorts.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Callable

import numpy as np

from ranktop.watch.engine.collective_sums import JobCollectives, add_collectives, add_digest_collectives
from ranktop.watch.engine.step_columns import MIN_STEPS_TO_SCORE, RECENT_STEPS, StepColumns
from ranktop.watch.engine.endpoints import Endpoints, EndpointsView
from ranktop.watch.engine.lifecycle import Lifecycle, fresh_window
from ranktop.watch.model.life import JobLife
from ranktop.watch.engine.resource_samples import Resources, ResourceTracker
from ranktop.watch.engine.rank_scalars import WHERE, RankScalars
from ranktop.watch.engine.rank_window import RankWindow
from ranktop.wire import capture as wire_capture
from ranktop.wire import step_block
from ranktop.wire.messages import (
    Heartbeat,
    Hello,
    Node,
    NodeRank,
    NodeSteps,
    RankInfo,
    RankMessage,
    Reply,
    Steps,
)
from ranktop.wire.names import COMM_PHASE, PAUSE_PHASES


@dataclass(frozen=True, eq=False)
class JobView:
    """What one snapshot reads of the job, gathered under the lock: arrays in rank order (copies), immutable
    messages. Nothing in it is judged yet, and nothing in it changes after."""

    now: float
    wall: float
    names: list[str]  # phase columns of ``phases``
    rank: np.ndarray
    host: list[str]
    host_id: np.ndarray  # int64: each rank's host as a number (rank_scalars.RankScalars.note_host)
    step: np.ndarray
    steps_seen: np.ndarray
    missed: np.ndarray
    scored: np.ndarray  # bool: enough steps for medians
    step_s: np.ndarray  # medians over the window (NaN: not scored)
    median_wall: np.ndarray  # the median step time as last worked out, scored or not (NaN: none yet)
    phases: np.ndarray  # (ranks, names)
    own_sd: np.ndarray  # how much its own time varies from step to step, a robust SD over its window (NaN: not scored)
    phase_sd: np.ndarray  # (ranks, names): the same per phase (0: a phase it never had)
    window_steps: np.ndarray  # int64: steps in its window
    # what its window's checkpoints and evaluations cost (wire/names.py PAUSE_PHASES, in that order; zeros where no
    # rank named one): seconds in each, how many of its steps had some, and the window's wall seconds
    pause_s: np.ndarray  # (ranks, len(PAUSE_PHASES))
    pause_steps: np.ndarray  # (ranks, len(PAUSE_PHASES)) int64
    window_s: np.ndarray
    rate: np.ndarray
    comm_s: np.ndarray  # NaN: no collective wait seen
    recent_steps: np.ndarray  # int64 (ranks, RECENT_STEPS or as asked): its last steps' numbers, newest first (-1: none, or no wait seen)
    recent_waits: np.ndarray  # (ranks, RECENT_STEPS): ... their collective waits, s
    last_seen: np.ndarray
    last_step_end: np.ndarray
    relay: np.ndarray  # int64: the relay each rank was last heard through, an index of ``relay_urls``
    relay_urls: tuple[str | None, ...]
    relays: EndpointsView
    silent_after_s: float
    sure: bool  # long enough since the viewer started, and every relay settled: ranks never heard of may be named
    stated: np.ndarray  # bool: it sent a state
    step_age: np.ndarray  # its state's age of the step in progress (NaN: between steps, or none said)
    state_at: np.ndarray  # when its state arrived, and when its progress last did, on the viewer's clock
    progress_at: np.ndarray
    stepped_at: np.ndarray  # when its last step was heard of
    device: np.ndarray  # bool: its steps carry device (GPU) times
    # where its state says it is and its last collective (rank_scalars.WHERE -> column: NO_STEP where not said;
    # ``phase`` and ``coll_op`` index ``state_names``), its evidence and its GPU's SM clock (name -> column, NaN where
    # not said: watch/analysis/causes.py reads them, not its state)
    where: dict[str, np.ndarray]
    state_names: tuple[str | None, ...]
    evidence: dict[str, np.ndarray]
    # Object arrays, one element a rank (read an element at a time: a list of 16,384 made each snapshot cost a
    # millisecond and a half; the gather alone is a tenth of that)
    states: np.ndarray  # State | None, immutable, as decoded
    metas: np.ndarray  # RankInfo | None
    dropped: np.ndarray  # int64: records its probe could not send (read of its state as it came: RankWindow.take_state)
    rate_hz: np.ndarray  # the telemetry rate it says it sends at (NaN: not said)
    rejected: dict[int, dict[str, int]]  # rank -> commands it refused, by reason (those that refused any)
    works: np.ndarray  # bool: its hello says its work per step
    capture_summaries: np.ndarray  # tuple[str, CaptureSummary] | None (an object array, as states)
    resources: Resources  # each rank's ResourceView, made when read (resources[i])
    with_memory: np.ndarray  # bool: a memory sample came (its row has ``memory``)
    with_gpu: np.ndarray  # bool: GPU gauges, or why there are none, came (its row has ``gpu``)
    gpu_sampled: np.ndarray  # bool: ... gauges NVML read
    life: JobLife  # not_back: those of an older process that ended; ``restarted``: those that may not be back
    world: int | None
    roster: int  # changes when a rank comes or restarts
    groups: int  # changes when some rank's hello names other process groups
    captures: dict[str, list[int]]


class JobState:
    def __init__(self, window: int, silent_after_s: float, on_news: Callable[[], None]):
        self._window = window
        self._silent_after = silent_after_s
        self._on_news = on_news  # the job's size became known or grew: commands waiting for it can go
        self.columns = StepColumns(window)
        self.collectives = JobCollectives()  # the job's sums per op, kept as the ranks' come and go
        self.ranks: dict[int, RankWindow] = {}
        self._sorted: list[RankWindow] | None = None  # the windows in rank order, until one comes or goes
        self.world: int | None = None  # the largest world size any hello gave
        self.resources = ResourceTracker()  # memory history and creep, GPU gauges (watch/engine/resource_samples.py)
        self.lifecycle = Lifecycle()  # restarts and the job's end (watch/engine/lifecycle.py)
        self._roster = 0  # ranks come or restart: a view's rank order (and what is learned of it) changes
        self._groups = 0  # some rank's hello named other groups: the layout is learned again (watch/analysis/peers.py)
        self.scalars = RankScalars()  # every rank's figures a view reads, by its row of the step columns
        self._row_of: dict[int, int] = {}  # rank -> its row (of the columns and the scalars)
        self._by_row: list[RankWindow | None] = []  # row -> its rank's window
        self._order: tuple[np.ndarray, np.ndarray] | None = None  # (ranks, rows) in rank order, with _sorted
        # ranks_by_endpoint's last answer: (the ranks in order, the relays' urls, each rank's relay then, the answer)
        self._by_endpoint: tuple[np.ndarray, tuple[str | None, ...], np.ndarray, dict[str, tuple[int, ...]]] | None = None
        self._pending: list[tuple[NodeSteps, str | None, float, str]] = []  # digests' steps not yet written (settle)

    # -- messages (the receiver thread) -------------------------------------------------------

    def take(self, msg: RankMessage | Node, endpoint: str | None, now: float, wall: float) -> None:
        """One decoded telemetry message of this job."""
        if isinstance(msg, Node):
            for entry in msg.ranks:
                self._take_digest(entry, endpoint, now, wall)
            if msg.steps is not None:  # written with the other digests' taken in the same go (settle)
                self._pending.append((msg.steps, endpoint, now, msg.host))
            return
        rank = self._window_of(msg.rank, endpoint, now)
        state = msg.state  # typed at decode (wire/messages.py)
        if state is not None:
            rank.note_state(state, now)
            self.resources.note(msg.rank, state, now)
        if isinstance(msg, Hello):
            self._note_hello(rank, msg.info(), now, wall)
        elif isinstance(msg, Steps):
            rank.raw_at = now
            add_collectives(rank, msg, now, self.collectives)
            for rec in msg.steps:
                rank.add_step(rec)
            if msg.steps:
                rank.stepped_at = now
        elif isinstance(msg, Reply):
            return  # its answer is the request book's; its state is noted above
        elif isinstance(msg, Heartbeat):
            rank.raw_at = now
            if msg.exit is not None:  # its last word: the process is ending (watch/engine/lifecycle.py)
                self.lifecycle.note_exit(msg.rank, msg.exit, wall)

    def _window_of(self, number: int, endpoint: str | None, now: float) -> RankWindow:
        rank = self.ranks.get(number)
        if rank is None:
            rank = self.ranks[number] = RankWindow(number, self._window, columns=self.columns, scalars=self.scalars)
            self._placed(rank)
        views, row = self.scalars.views, rank.row
        views["last_seen"][row] = now
        if endpoint is not None:
            views["endpoint"][row] = self.scalars.url_id(endpoint)
        return rank

    def _note_hello(self, rank: RankWindow, meta: RankInfo, now: float, wall: float) -> RankWindow:
        if self.lifecycle.note_hello(rank.rank, meta.pid, wall):
            self.settle()  # the old process's steps still waiting go in before its window empties
            self.collectives.forget(rank.row)
            rank = self.ranks[rank.rank] = fresh_window(rank, now)  # a new process of the rank: a restart
            self._placed(rank)
            self.resources.forget(rank.rank)
        if meta.groups != (rank.meta.groups if rank.meta is not None else None):
            self._groups += 1  # hellos repeat; their groups seldom change: a compare of a few small maps
        rank.take_hello(meta)
        world = meta.world
        if world > (self.world or 0):
            self.world = world
            self._on_news()
        return rank

    def _take_digest(self, entry: NodeRank, endpoint: str | None, now: float, wall: float) -> None:
        """One rank's entry in its node's digest (relay/digest_fold.py). A rank whose own messages this viewer
        also hears (it switched to digests a moment ago) is taken from those, not counted twice."""
        rank = self._window_of(entry.r, endpoint, now)
        state = entry.state
        if state is not None:
            rank.note_state(state, now)
            self.resources.note(entry.r, state, now)
        if entry.hello is not None and entry.hello != rank.meta:  # (it rides every few seconds, mostly the same)
            rank = self._note_hello(rank, entry.hello, now, wall)
        if entry.exit is not None:  # its last word, passed on by its node's relay (watch/engine/lifecycle.py)
            self.lifecycle.note_exit(entry.r, entry.exit, wall)
        if (entry.ops or entry.cx) and now - rank.raw_at >= self._silent_after:
            add_digest_collectives(rank, entry.ops or {}, entry.cx or (), now, self.collectives)

    def _placed(self, rank: RankWindow) -> None:
        """A window new to its row (a new rank, or its new process)."""
        self._row_of[rank.rank] = rank.row
        self._by_row.extend([None] * (rank.row + 1 - len(self._by_row)))
        self._by_row[rank.row] = rank
        self._sorted = self._order = None
        self._roster += 1

    def settle(self, now: float | None = None) -> None:
        """Write the steps of the node digests taken since the last call (the aggregator calls this after each
        message, or after all it took in one go; a view calls it first). A go of digests from different nodes
        is written in one :meth:`_take_digest_steps`: ranks counted and their intervals stored in a few dozen
        numpy operations for all of them, rather than a Python loop per digest. ``now`` (the viewer's clock;
        None: the latest message's): in a big job the next run of ranks' medians is worked out too
        (watch/engine/step_columns.py ``work_ahead``)."""
        if now is None and self._pending:
            now = self._pending[-1][2]
        self.collectives.settle()
        pending, self._pending = self._pending, []
        group: list[tuple[NodeSteps, str | None, float, str]] = []
        hosts: set[str] = set()
        for item in pending:
            if item[3] in hosts:  # two digests of one node (the same ranks) go in one after the other
                self._take_digest_steps(group)
                group, hosts = [], set()
            group.append(item)
            hosts.add(item[3])
        if group:
            self._take_digest_steps(group)
        if now is not None:
            self.columns.work_ahead(now, MIN_STEPS_TO_SCORE)

    def _take_digest_steps(self, digests: list[tuple[NodeSteps, str | None, float, str]]) -> None:
        """The steps of node digests' ranks, as their packed columns (wire/step_block.py; after their entries: a
        hello there may have started a rank afresh): the ranks heard of now, and the intervals of those with new
        steps into the job's step columns (each interval a record, with its mean times, counted as the steps it
        stands for). A rank heard through its own messages lately is taken from those. The digests' columns
        are joined as bytes and read by numpy, with no Python number made on the way."""
        steps = [d[0] for d in digests]
        ranks = _column(steps, "r")
        if len(digests) > 1 and len(np.unique(ranks)) < len(ranks):  # a rank in two nodes' digests (it moved)
            for digest in digests:
                self._take_digest_steps([digest])
            return
        sizes = [step_block.size(s) for s in steps]
        numbers = ranks.tolist()
        try:
            rows = np.array(itemgetter(*numbers)(self._row_of) if len(numbers) > 1 else [self._row_of[numbers[0]]], np.int64)
        except KeyError:  # ranks first heard of now
            at = 0
            for size, (_, endpoint, now, _) in zip(sizes, digests):
                for number in numbers[at : at + size]:
                    if number not in self.ranks:
                        self._window_of(number, endpoint, now)
                at += size
            rows = np.array([self._row_of[r] for r in numbers], np.int64)
        now_of = np.repeat([d[2] for d in digests], sizes)
        sc = self.scalars
        sc.last_seen[rows] = now_of
        sc.endpoint[rows] = np.repeat([sc.url_id(d[1]) for d in digests], sizes)
        fresh = now_of - sc.raw_at[rows] >= self._silent_after
        if any(s.g is not None for s in steps):
            device = np.frombuffer(b"".join([s.g if s.g is not None else bytes(k) for s, k in zip(steps, sizes)]), np.uint8) != 0
            sc.device_times[rows[fresh & device]] = True
        last = _column(steps, "n")
        new = fresh & (last > sc.last_step[rows])
        if not new.any():
            return
        taken = rows[new]
        last, count = last[new], _column(steps, "c")[new]
        first = sc.first_step[taken]
        sc.first_step[taken] = np.where(first < 0, last - count + 1, first)
        sc.steps_seen[taken] += count
        sc.last_step[taken] = last
        sc.stepped_at[taken] = now_of[new]
        if self.columns.raw_rows:  # ranks that sent their own steps lately: those records are not redone
            for row in self.columns.raw_rows.intersection(taken.tolist()):
                window = self._by_row[row]
                if window is not None and window.own is not None:
                    window.own.forget_raw()
        names, figures = _figures(steps, sizes)
        figures = figures[new]
        own = {name: figures[:, step_block.LEADING + j] for j, name in enumerate(names)}
        waited = np.repeat([COMM_PHASE in s.p for s in steps], sizes)[new]
        self.columns.add_block(taken, last, figures[:, 0], figures[:, 1], own, waited)

    # -- a snapshot's view (the UI's thread, under the aggregator's lock) ------------------------

    def windows(self) -> list[RankWindow]:
        if self._sorted is None:
            self._sorted = [self.ranks[r] for r in sorted(self.ranks)]
        return self._sorted

    def view(self, now: float, wall: float, relays: EndpointsView, endpoints: Endpoints, sure_after: bool,
             recent: int = RECENT_STEPS) -> JobView:  # fmt: skip
        """The job now, gathered for a snapshot. ``sure_after``: long enough since the viewer started that ranks
        never heard from may be named (once every relay is settled too); ``recent``: how many of each rank's last
        steps' waits it carries (who arrived last needs fewer where it kept its grid: watch/analysis/arrivals.py)."""
        self.settle(now)
        ws = self.windows()
        n = len(ws)
        rank, rows = self._ordered()
        sc = self.scalars

        cols = self.columns
        cols.refresh(rows, MIN_STEPS_TO_SCORE, fresh_only=cols.working_ahead)
        names = cols.phase_names()
        scored = (cols.count[rows] >= MIN_STEPS_TO_SCORE) & (cols.stats_at[rows] >= 0)
        index = cols.columns_of(names)
        phases = np.zeros((n, len(names)))
        phase_sd = np.zeros((n, len(names)))
        for j, c in enumerate(index):
            if c is not None:
                phases[:, j] = cols.median_own[rows, c]
                phase_sd[:, j] = cols.phase_sd[rows, c]
        comm = index[names.index(COMM_PHASE)] if COMM_PHASE in names else None
        waited = cols.waited[rows] & scored
        comm_s = np.where(waited, cols.median_own[rows, comm], np.nan) if comm is not None else np.full(n, np.nan)
        step_s = np.where(scored, cols.median_wall[rows], np.nan)
        recent_steps, recent_waits = cols.recent_waits(rows, recent)
        pause_s, pause_steps, window_s = cols.window_sums(rows, PAUSE_PHASES)
        last = sc.last_step[rows]
        seen = sc.steps_seen[rows]
        first = sc.first_step[rows]
        missed = np.where(first >= 0, np.maximum(0, last - first + 1 - seen), 0)
        worlds = max(self.world or 0, 0) or None
        hosts, host_id = self._hosts(rows, endpoints)
        resources = self.resources.views(rank)
        return JobView(
            now=now,
            wall=wall,
            names=names,
            rank=rank,
            host=hosts,
            host_id=host_id,
            step=last,
            steps_seen=seen,
            missed=missed,
            scored=scored,
            step_s=step_s,
            median_wall=np.where(cols.stats_at[rows] >= 0, cols.median_wall[rows], np.nan),
            phases=phases,
            own_sd=np.where(scored, cols.own_sd[rows], np.nan),
            phase_sd=phase_sd,
            window_steps=cols.count[rows],
            pause_s=pause_s,
            pause_steps=pause_steps,
            window_s=window_s,
            rate=np.where(scored, cols.rate[rows], np.nan),
            comm_s=comm_s,
            recent_steps=recent_steps,
            recent_waits=recent_waits,
            last_seen=sc.last_seen[rows],
            last_step_end=cols.last_end[rows],
            relay=sc.endpoint[rows],
            relay_urls=tuple(sc.urls),
            relays=relays,
            silent_after_s=self._silent_after,
            sure=bool(worlds and sure_after and relays.settled),
            stated=sc.stated[rows],
            step_age=sc.step_age[rows],
            state_at=sc.state_at[rows],
            progress_at=sc.progress_at[rows],
            stepped_at=sc.stepped_at[rows],
            device=sc.device_times[rows],
            where={name: getattr(sc, name)[rows] for name in WHERE},
            state_names=tuple(sc.names),
            evidence={"gc": sc.ev_gc[rows], "runq": sc.ev_runq[rows], "nvcsw": sc.ev_nvcsw[rows], "sm_mhz": sc.gpu_sm_mhz[rows]},
            states=sc.state[rows],
            metas=sc.meta[rows],
            dropped=sc.dropped[rows],
            rate_hz=sc.rate_hz[rows],
            rejected={ws[i].rank: dict(ws[i].rejected or {}) for i in np.flatnonzero(sc.refused[rows]).tolist()},
            works=sc.works[rows],
            capture_summaries=sc.capture_summary[rows],
            resources=resources,
            with_memory=resources.with_memory,
            with_gpu=resources.with_gpu,
            gpu_sampled=resources.gpu_sampled,
            life=self.lifecycle.view(worlds, bool(ws)),
            world=worlds,
            roster=self._roster,
            groups=self._groups,
            captures=_captures([ws[i] for i in np.flatnonzero(sc.capturing[rows]).tolist()]),
        )

    def _ordered(self) -> tuple[np.ndarray, np.ndarray]:
        """The ranks in rank order, and their rows (worked out again when a rank comes or restarts)."""
        if self._order is None:
            ws = self.windows()
            self._order = (np.fromiter((w.rank for w in ws), np.int64, len(ws)),
                           np.fromiter((w.row for w in ws), np.int64, len(ws)))  # fmt: skip
        return self._order

    def _hosts(self, rows: np.ndarray, endpoints: Endpoints) -> tuple[list[str], np.ndarray]:
        """Each of ``rows``' host, and the hosts as small whole numbers (the same for ranks of one host): by its
        hello; until that comes, the host of the node's relay it was heard through (it may change). Read off the
        scalars' column, not in a Python pass over the windows: at 16,384 ranks, while their hellos came in over
        the first seconds, that pass cost each snapshot 10 to 14 ms."""
        sc = self.scalars
        ids = sc.host_id[rows]
        missing = ids < 0
        if missing.any():
            by_relay = np.fromiter((sc.id_of_host(_host_named(endpoints.host_of(url))) for url in sc.urls), np.int64,
                                   len(sc.urls))  # fmt: skip
            ids[missing] = by_relay[sc.endpoint[rows[missing]]]
        return np.array(sc.hosts, object)[ids].tolist(), ids  # (a host apiece: a few thousand at most)

    def ranks_by_endpoint(self, view: JobView) -> dict[str, tuple[int, ...]]:
        """The ranks last heard through each relay (a lost relay is shown with the ranks it took with it)."""
        rank, rows = self._ordered()  # (those of the view, taken under the same hold of the lock)
        eid = self.scalars.endpoint[rows]
        kept = self._by_endpoint
        urls = tuple(self.scalars.urls)
        if kept is not None and kept[0] is rank and kept[1] == urls and np.array_equal(kept[2], eid):
            return kept[3]  # no rank moved: the last answer (a snapshot of 16,384 ranks on 2,048 relays spent 8 ms on it)
        out = self._group_by_endpoint(rank, eid)
        self._by_endpoint = (rank, urls, eid, out)
        return out

    def _group_by_endpoint(self, rank: np.ndarray, eid: np.ndarray) -> dict[str, tuple[int, ...]]:
        order = np.argsort(eid, kind="stable")
        ids, ranks = eid[order].tolist(), rank[order].tolist()
        urls = self.scalars.urls
        out: dict[str, tuple[int, ...]] = {}
        if not ids:
            return out
        start = 0
        for end in (np.flatnonzero(np.diff(ids)) + 1).tolist() + [len(ids)]:
            url = urls[ids[start]]
            if url is not None:
                out[url] = tuple(ranks[start:end])
            start = end
        return out


def _host_named(host: str | None) -> str:
    return str(host) if host is not None else "?"


def _column(steps: list[NodeSteps], key: str) -> np.ndarray:
    """A packed column of every digest of a go, end to end (wire/step_block.py's types)."""
    return np.frombuffer(b"".join([getattr(s, key) for s in steps]), step_block.DTYPES[key])


def _figures(steps: list[NodeSteps], sizes: list[int]) -> tuple[list[str], np.ndarray]:
    """The phases, and every rank's figures of a go of digests (start, mean wall, mean own time per phase) as
    one matrix, a row per rank. Digests whose ranks spent time in other phases are widened to every phase
    of the go, 0.0 where a rank spent nothing."""
    names = steps[0].p
    if all(s.p == names for s in steps):
        return names, _column(steps, "f").reshape(-1, step_block.LEADING + len(names))
    names = list(dict.fromkeys(name for s in steps for name in s.p))
    where = {name: step_block.LEADING + j for j, name in enumerate(names)}
    out = np.zeros((sum(sizes), step_block.LEADING + len(names)))
    at = 0
    for s, k in zip(steps, sizes):
        block = np.frombuffer(s.f, step_block.DTYPES["f"]).reshape(k, -1)
        out[at : at + k, : step_block.LEADING] = block[:, : step_block.LEADING]
        out[at : at + k, [where[name] for name in s.p]] = block[:, step_block.LEADING :]
        at += k
    return names, out


def _captures(ws: list[RankWindow]) -> dict[str, list[int]]:
    """Captures not yet done or failed: id -> the ranks at them (one capture at a time per job); ``ws``: the
    windows whose state says a capture runs at them."""
    running: dict[str, list[int]] = {}
    for w in ws:
        cap = w.state.cap
        if cap is not None and cap.st in wire_capture.RUNNING:
            running.setdefault(cap.id, []).append(w.rank)
    return running
