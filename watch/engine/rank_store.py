"""Every rank the viewer knows, in one store: one row per rank, one write per message kind, one gather per snapshot.

A rank lives in one row of a few job-wide column sets, all keyed by that row (handed out when the rank is first
heard, kept for good: its new processes reuse it):

- its scalars: when it was last heard, its step counts, what its last state and hello said, the frozen Structs
  themselves (watch/engine/rank_scalars.py);
- its steps: its last ``window`` steps and their medians (watch/engine/step_columns.py), with the raw records a
  late wait redoes (watch/engine/step_window.py) and its collective waits by step (here);
- its collectives: per-op summaries as rings and its sample of raw calls (watch/engine/collective_sums.py);
- its resources: memory and GPU samples, memory history (watch/engine/resource_samples.py);
- its life: its process, restarts, its last word (watch/engine/lifecycle.py).

Nothing outside this module writes them. :meth:`RankStore.take` routes each decoded message to the one write
method of its kind (:meth:`hello`, :meth:`steps`, :meth:`heartbeat`, :meth:`reply`, :meth:`node`); a rank back as
a new process is one :meth:`forget` of its row; :meth:`gather` copies what a snapshot reads, the collective sums
included, in one hold of the aggregator's lock (watch/aggregator.py). A view *gathers* only: arrays copied by
index, the messages' frozen Structs, never a live row. Judging it is the analysis side's (watch/analysis/), with
the lock released: this module imports none of it.

Writes of one rank's figure are item stores (the column sets keep memoryviews for them: an item store through one
costs about half a numpy scalar store); writes of a node digest's ranks at once are numpy fancy indexes. A view is
O(ranks) in C: a handful of fancy indexes gather the ranks' columns, and the medians of every rank with new steps
are worked out in a few vectorised sorts.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable

import numpy as np

from ranktop.watch.engine.collective_sums import CollectiveSums, JobCollectives
from ranktop.watch.engine.collective_sums import gather as gather_collectives
from ranktop.watch.engine.endpoints import Endpoints, EndpointsView
from ranktop.watch.engine.lifecycle import LifeColumns
from ranktop.watch.model.life import JobLife
from ranktop.watch.engine.rank_scalars import WHERE, RankScalars
from ranktop.watch.engine.resource_samples import Resources, ResourceTracker
from ranktop.watch.engine.step_columns import MIN_STEPS_TO_SCORE, RECENT_STEPS, StepColumns
from ranktop.watch.engine.step_window import StepWindow
from ranktop.wire import step_block
from ranktop.wire.capture import RUNNING
from ranktop.wire.messages import (
    NO_STATE,
    CallSummary,
    Heartbeat,
    Hello,
    Node,
    NodeRank,
    NodeSteps,
    RankInfo,
    RankMessage,
    Reply,
    State,
    Step,
    Steps,
)
from ranktop.wire.names import COMM_PHASE, PAUSE_PHASES

NAN = float("nan")
#: Steps whose collective waits a rank keeps (a step's own times are worked out when it arrives; a few steps of
#: slack for waits that come after their step).
WAITS_KEPT = 16


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
    # the window's mean seconds per phase (``names``) of a few ranks asked for (watch/analysis/intermittent.py
    # MarginBook.watch: what a few long steps spend, which the medians hide): their indices in this view, their means
    watched: np.ndarray  # int64
    watched_means: np.ndarray  # (len(watched), names)
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
    dropped: np.ndarray  # int64: records its probe could not send (read of its state as it came)
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
    by_endpoint: dict[str, tuple[int, ...]]  # the ranks last heard through each relay (a lost relay keeps its ranks)
    # the job's collectives and every rank's, as columns (watch/engine/collective_sums.py); None: not gathered this
    # time (a big job's rows are worked out again every few seconds only: watch/aggregator.py)
    collectives: CollectiveSums | None
    # the step in which its state last named a pause phase (-1: none) and when that state came, viewer clock
    # (watch/analysis/stalls.py ``paying``); None: not gathered (a view made by hand)
    paused_step: np.ndarray | None = None
    paused_at: np.ndarray | None = None


@dataclass(frozen=True)
class RankRecord:
    """One rank's row read out, for a tool or a test (a snapshot reads :meth:`RankStore.gather` instead)."""

    rank: int
    row: int
    steps_seen: int
    first_step: int | None
    last_step: int
    steps: list[tuple[int, float, float]]  # (number, start, wall) of the steps in its window, oldest first
    last_step_end: float | None  # when its latest step ended, unix seconds by its clock
    endpoint: str | None
    state: State
    meta: RankInfo | None


class RankStore:
    """Every rank's row: its scalars, steps, collectives, resources and life (the module's docstring)."""

    def __init__(self, window: int, silent_after_s: float, on_news: Callable[[], None]):
        self._window = window
        self._silent_after = silent_after_s
        self._on_news = on_news  # the job's size became known or grew: commands waiting for it can go
        self.world: int | None = None  # the largest world size any hello gave
        self.scalars = RankScalars()
        self._steps = StepColumns(window)
        self._collectives = JobCollectives()
        self._resources = ResourceTracker()
        self._life = LifeColumns()
        # by row: its rank, its steps' writer, its collective waits by step, the commands it refused by reason
        self._rank: list[int] = []
        self._step_rows: list[StepWindow] = []
        self._waits: list[collections.OrderedDict[int, dict[str | None, float]]] = []
        self._rejected: list[dict[str, int] | None] = []
        self._row_of: dict[int, int] = {}  # rank -> its row
        self._order: tuple[np.ndarray, np.ndarray] | None = None  # (ranks, rows) in rank order, until one comes or restarts
        self._roster = 0  # ranks come or restart: a view's rank order (and what is learned of it) changes
        self._groups = 0  # some rank's hello named other groups: the layout is learned again (watch/analysis/peers.py)
        # the last ranks by relay: (the ranks in order, the relays' urls, each rank's relay then, the answer)
        self._by_endpoint: tuple[np.ndarray, tuple[str | None, ...], np.ndarray, dict[str, tuple[int, ...]]] | None = None
        self._pending: list[tuple[NodeSteps, str | None, float, str]] = []  # digests' steps not yet written (settle)
        self._writers: dict[type, Callable[[Any, str | None, float, float], None]] = {
            Hello: self.hello,
            Steps: self.steps,
            Heartbeat: self.heartbeat,
            Reply: self.reply,
            Node: self.node,
        }

    def __len__(self) -> int:
        """How many ranks have been heard from."""
        return len(self._rank)

    # -- writes: one per message kind (the receiver thread, under the aggregator's lock) ------------

    def take(self, msg: RankMessage | Node, endpoint: str | None, now: float, wall: float) -> None:
        """One decoded telemetry message of this job, to the write of its kind."""
        self._writers[type(msg)](msg, endpoint, now, wall)

    def hello(self, msg: Hello, endpoint: str | None, now: float, wall: float) -> None:
        row = self._row_for(msg.rank, endpoint, now)
        self._state(row, msg.state, now)
        self._hello(row, msg.info(), now, wall)

    def steps(self, msg: Steps, endpoint: str | None, now: float, wall: float) -> None:
        """A rank's steps, and the collectives they waited in (noted before the steps: a step's own times take its
        waits out)."""
        row = self._row_for(msg.rank, endpoint, now)
        self._state(row, msg.state, now)
        self.scalars.views["raw_at"][row] = now
        for entry in msg.cs or ():
            self._summary(row, entry, now)
        if msg.cx:
            self._collectives.add_calls(row, msg.cx, now)
        for rec in msg.steps:
            self._step(row, rec)
        if msg.steps:
            self.scalars.views["stepped_at"][row] = now

    def heartbeat(self, msg: Heartbeat, endpoint: str | None, now: float, wall: float) -> None:
        row = self._row_for(msg.rank, endpoint, now)
        self._state(row, msg.state, now)
        self.scalars.views["raw_at"][row] = now
        if msg.exit is not None:  # its last word: the process is ending (watch/engine/lifecycle.py)
            self._life.note_exit(row, msg.exit, wall)

    def reply(self, msg: Reply, endpoint: str | None, now: float, wall: float) -> None:
        """A rank's answer: its state here (the answer itself is the request book's, watch/engine/requests.py)."""
        row = self._row_for(msg.rank, endpoint, now)
        self._state(row, msg.state, now)

    def node(self, msg: Node, endpoint: str | None, now: float, wall: float) -> None:
        """A node's digest: its ranks' entries now, its steps with the other digests taken in the same go (settle)."""
        for entry in msg.ranks:
            self._entry(entry, endpoint, now, wall)
        if msg.steps is not None:
            self._pending.append((msg.steps, endpoint, now, msg.host))

    def forget(self, row: int) -> None:
        """The row's rank is back as a new process: the old process's steps, waits, collectives, resources and figures
        go (the digests' steps still waiting go in first: they are the old process's). Where it is heard through,
        when, and its latest hello and state (those came from the new process) stay."""
        self.settle()
        self._collectives.forget(row)
        self._resources.forget(row)
        self._step_rows[row].clear()
        self._waits[row] = collections.OrderedDict()
        sc = self.scalars
        kept = {name: sc.views[name][row] for name in ("endpoint", "last_seen", "raw_at", "state_at")}
        meta, state = sc.meta[row], sc.state[row]
        sc.reset(row)
        for name, value in kept.items():
            sc.views[name][row] = value
        if meta is not None:
            self._hello_fields(row, meta)
        self._state_fields(row, state)
        sc.views["progress_at"][row] = kept["last_seen"]  # (its new process's first word came now)
        self._order = None
        self._roster += 1

    def move_endpoint(self, old: str, new: str) -> None:
        """A node's relay came back elsewhere: the ranks last heard through the old one are counted through the new."""
        sc = self.scalars
        n = len(self._rank)
        at = sc.endpoint[:n] == sc.url_id(old)
        sc.endpoint[:n][at] = sc.url_id(new)

    def settle(self, now: float | None = None) -> None:
        """Write the steps of the node digests taken since the last call (the aggregator calls this after each
        message, or after all it took in one go; a gather calls it first). A go of digests from different nodes
        is written in one :meth:`_digest_steps`: ranks counted and their intervals stored in a few dozen
        numpy operations for all of them, rather than a Python loop per digest. ``now`` (the viewer's clock;
        None: the latest message's): in a big job the next run of ranks' medians is worked out too
        (watch/engine/step_columns.py ``work_ahead``)."""
        if now is None and self._pending:
            now = self._pending[-1][2]
        self._collectives.settle()
        pending, self._pending = self._pending, []
        group: list[tuple[NodeSteps, str | None, float, str]] = []
        hosts: set[str] = set()
        for item in pending:
            if item[3] in hosts:  # two digests of one node (the same ranks) go in one after the other
                self._digest_steps(group)
                group, hosts = [], set()
            group.append(item)
            hosts.add(item[3])
        if group:
            self._digest_steps(group)
        if now is not None:
            self._steps.work_ahead(now, MIN_STEPS_TO_SCORE)

    # -- the writes' parts ------------------------------------------------------------------

    def _row_for(self, rank: int, endpoint: str | None, now: float) -> int:
        """The rank's row (a new rank gets the next one), heard of now through ``endpoint``."""
        row = self._row_of.get(rank)
        if row is None:
            writer = StepWindow(self._window, self._steps)
            row = writer.row
            self.scalars.reset(row)
            self._life.ensure(row)
            self._rank.append(rank)
            self._step_rows.append(writer)
            self._waits.append(collections.OrderedDict())
            self._rejected.append(None)
            self._row_of[rank] = row
            self._order = None
            self._roster += 1
        views = self.scalars.views
        views["last_seen"][row] = now
        if endpoint is not None:
            views["endpoint"][row] = self.scalars.url_id(endpoint)
        return row

    def _state(self, row: int, state: State | None, now: float) -> None:
        """A new state (typed at decode, wire/messages.py): when it came, when the rank last finished a step."""
        if state is None:
            return
        sc = self.scalars
        views = sc.views
        if sc.state[row].last != state.last or not views["progress_at"][row]:
            views["progress_at"][row] = now
        views["state_at"][row] = now
        self._state_fields(row, state)
        cap = state.cap
        if cap is not None and cap.sum is not None:
            sc.capture_summary[row] = (cap.id, cap.sum)
        self._resources.note(row, state, now)

    def _state_fields(self, row: int, state: State) -> None:
        """Its state, and what a snapshot reads of it for every rank, read here once per state rather than once per
        snapshot (at 4,096 ranks a snapshot gathers these as columns)."""
        sc = self.scalars
        views = sc.views
        sc.state[row] = state
        sc.take_state(row, state)
        views["stated"][row] = state != NO_STATE
        age = state.step_age  # inside a step: how long it has been in it when the state was sent
        views["step_age"][row] = age if age is not None and state.in_step else NAN
        if state.in_step and state.phase in PAUSE_PHASES and state.step is not None:
            views["paused_step"][row] = state.step
            views["paused_at"][row] = views["state_at"][row]
        views["dropped"][row] = state.dropped or 0
        meta = sc.meta[row]
        rate = state.rate_hz if state.rate_hz is not None else meta.rate_hz if meta is not None else None
        views["rate_hz"][row] = NAN if rate is None else rate
        self._rejected[row] = state.rejected
        views["refused"][row] = bool(state.rejected)
        cap = state.cap
        views["capturing"][row] = cap is not None and cap.st in RUNNING

    def _hello(self, row: int, meta: RankInfo, now: float, wall: float) -> None:
        """Its hello (less the envelope): a hello from another process of a rank already heard is a restart."""
        if self._life.note_hello(row, meta.pid, wall):
            self.forget(row)
        old = self.scalars.meta[row]
        if meta.groups != (old.groups if old is not None else None):
            self._groups += 1  # hellos repeat; their groups seldom change: a compare of a few small maps
        self._hello_fields(row, meta)
        world = meta.world
        if world > (self.world or 0):
            self.world = world
            self._on_news()

    def _hello_fields(self, row: int, meta: RankInfo) -> None:
        sc = self.scalars
        sc.meta[row] = meta
        sc.note_host(row, str(meta.host))
        sc.views["works"][row] = meta.work is not None
        if sc.state[row].rate_hz is None:
            sc.views["rate_hz"][row] = NAN if meta.rate_hz is None else float(meta.rate_hz)

    def _step(self, row: int, record: Step) -> None:
        """One step record. Where it carries device times (``g``) they are the step's times: on a GPU the host
        only launches the work, and the rank's collective waits are timed on the device too."""
        views = self.scalars.views
        g = record.g
        wall, phases = (g.w, g.p) if g is not None else (record.w, record.p)
        if g is not None:
            views["device_times"][row] = True
        n = record.n
        self._step_rows[row].add(n, record.t, wall, phases, self._waits[row].get(n))
        views["steps_seen"][row] += 1
        first = views["first_step"][row]
        if first < 0 or n < first:
            views["first_step"][row] = n
        if n > views["last_step"][row]:
            views["last_step"][row] = n

    def _summary(self, row: int, entry: CallSummary, now: float) -> None:
        """One step-and-phase summary of a rank's collectives: counted exactly, its wait noted by step and phase."""
        self._collectives.add_ops(row, entry.ops, now)
        step = entry.n
        waits = self._waits[row]
        step_waits = waits.get(step)
        if step_waits is None:
            step_waits = waits[step] = {}
            while len(waits) > WAITS_KEPT:
                waits.popitem(last=False)
        # A step whose calls came in two messages (a late completion) adds up: they no longer overlap.
        step_waits[entry.ph] = step_waits.get(entry.ph, 0.0) + entry.w
        writer = self._step_rows[row]
        first = writer.first_number
        if first is not None and first <= step <= self.scalars.views["last_step"][row]:  # its step came first
            writer.rewait(step, step_waits)

    def _entry(self, entry: NodeRank, endpoint: str | None, now: float, wall: float) -> None:
        """One rank's entry in its node's digest (relay/digest_fold.py). A rank whose own messages this viewer
        also hears (it switched to digests a moment ago) is taken from those, not counted twice."""
        row = self._row_for(entry.r, endpoint, now)
        self._state(row, entry.state, now)
        if entry.hello is not None and entry.hello != self.scalars.meta[row]:  # (it rides every few seconds, mostly the same)
            self._hello(row, entry.hello, now, wall)
        if entry.exit is not None:  # its last word, passed on by its node's relay (watch/engine/lifecycle.py)
            self._life.note_exit(row, entry.exit, wall)
        if (entry.ops or entry.cx) and now - self.scalars.views["raw_at"][row] >= self._silent_after:
            if entry.ops:
                self._collectives.add_ops(row, entry.ops, now)
            if entry.cx:
                self._collectives.add_calls(row, entry.cx, now)

    def _digest_steps(self, digests: list[tuple[NodeSteps, str | None, float, str]]) -> None:
        """The steps of node digests' ranks, as their packed columns (wire/step_block.py; after their entries: a
        hello there may have started a rank afresh): the ranks heard of now, and the intervals of those with new
        steps into the job's step columns (each interval a record, with its mean times, counted as the steps it
        stands for). A rank heard through its own messages lately is taken from those. The digests' columns
        are joined as bytes and read by numpy, with no Python number made on the way."""
        steps = [d[0] for d in digests]
        ranks = _column(steps, "r")
        if len(digests) > 1 and len(np.unique(ranks)) < len(ranks):  # a rank in two nodes' digests (it moved)
            for digest in digests:
                self._digest_steps([digest])
            return
        sizes = [step_block.size(s) for s in steps]
        numbers = ranks.tolist()
        try:
            rows = np.array(itemgetter(*numbers)(self._row_of) if len(numbers) > 1 else [self._row_of[numbers[0]]], np.int64)
        except KeyError:  # ranks first heard of now
            at = 0
            for size, (_, endpoint, now, _) in zip(sizes, digests):
                for number in numbers[at : at + size]:
                    if number not in self._row_of:
                        self._row_for(number, endpoint, now)
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
        if self._steps.raw_rows:  # ranks that sent their own steps lately: those records are not redone
            for row in self._steps.raw_rows.intersection(taken.tolist()):
                self._step_rows[row].forget_raw()
        names, figures = _figures(steps, sizes)
        figures = figures[new]
        own = {name: figures[:, step_block.LEADING + j] for j, name in enumerate(names)}
        waited = np.repeat([COMM_PHASE in s.p for s in steps], sizes)[new]
        self._steps.add_block(taken, last, figures[:, 0], figures[:, 1], own, waited)

    # -- reads (under the aggregator's lock) -------------------------------------------------

    def gather(self, now: float, wall: float, relays: EndpointsView, endpoints: Endpoints, sure_after: bool,
               recent: int = RECENT_STEPS, collectives: bool = True, every_rank_up_to: int = 0,
               watch: np.ndarray | None = None) -> JobView:  # fmt: skip
        """Everything a snapshot reads of the job now, copied. ``sure_after``: long enough since the viewer started
        that ranks never heard from may be named (once every relay is settled too); ``recent``: how many of each
        rank's last steps' waits it carries (who arrived last needs fewer where it kept its grid:
        watch/analysis/arrivals.py); ``collectives``: gather the collective sums too (every rank's, as columns);
        ``every_rank_up_to``: up to this many ranks, every rank gets collective rows of its own; ``watch``: ranks
        whose window's mean per phase it carries too (watch/analysis/intermittent.py)."""
        self.settle(now)
        rank, rows = self._ordered()
        n = len(rank)
        sc = self.scalars
        cols = self._steps
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
        watched = np.zeros(0, np.int64)
        watched_means = np.zeros((0, len(names)))
        if watch is not None and len(watch) and n:
            at = np.clip(np.searchsorted(rank, watch), 0, n - 1)
            watched = np.unique(at[rank[at] == watch])
            sums, _, _ = cols.window_sums(rows[watched], names)
            watched_means = sums / np.maximum(cols.count[rows[watched]], 1)[:, None]
        last = sc.last_step[rows]
        seen = sc.steps_seen[rows]
        first = sc.first_step[rows]
        missed = np.where(first >= 0, np.maximum(0, last - first + 1 - seen), 0)
        worlds = max(self.world or 0, 0) or None
        hosts, host_id = self._hosts(rows, endpoints)
        resources = self._resources.views(rows)
        states = sc.state[rows]
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
            watched=watched,
            watched_means=watched_means,
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
            states=states,
            metas=sc.meta[rows],
            dropped=sc.dropped[rows],
            rate_hz=sc.rate_hz[rows],
            rejected={int(rank[i]): dict(self._rejected[int(rows[i])] or {}) for i in np.flatnonzero(sc.refused[rows]).tolist()},
            works=sc.works[rows],
            capture_summaries=sc.capture_summary[rows],
            resources=resources,
            with_memory=resources.with_memory,
            with_gpu=resources.with_gpu,
            gpu_sampled=resources.gpu_sampled,
            life=self._life.view(rank, rows, worlds),
            world=worlds,
            roster=self._roster,
            groups=self._groups,
            captures=_captures(rank, states, np.flatnonzero(sc.capturing[rows]).tolist()),
            by_endpoint=self._ranks_by_endpoint(rank, rows),
            collectives=gather_collectives(self._collectives, rank, rows, now, n <= every_rank_up_to) if collectives else None,
            paused_step=sc.paused_step[rows],
            paused_at=sc.paused_at[rows],
        )

    def ended(self) -> bool:
        """Every rank of the job (its world size, as the hellos say it) said it ended cleanly (cheap: what
        ``ranktop record`` polls)."""
        return self._life.ended(np.array(self._rank, np.int64), self.world)

    def record(self, rank: int) -> RankRecord:
        """One rank's row, read out (a KeyError for a rank never heard)."""
        row = self._row_of[rank]
        sc, writer = self.scalars, self._step_rows[row]
        first = int(sc.first_step[row])
        return RankRecord(rank, row, int(sc.steps_seen[row]), None if first < 0 else first, int(sc.last_step[row]),
                          writer.steps, writer.last_end, sc.urls[int(sc.endpoint[row])], sc.state[row], sc.meta[row])  # fmt: skip

    def ranks(self) -> list[int]:
        """The ranks heard, in rank order."""
        return self._ordered()[0].tolist()

    def _ordered(self) -> tuple[np.ndarray, np.ndarray]:
        """The ranks in rank order, and their rows (worked out again when a rank comes or restarts)."""
        if self._order is None:
            rank = np.array(self._rank, np.int64)
            rows = np.argsort(rank, kind="stable").astype(np.int64)
            self._order = (rank[rows], rows)
        return self._order

    def _hosts(self, rows: np.ndarray, endpoints: Endpoints) -> tuple[list[str], np.ndarray]:
        """Each of ``rows``' host, and the hosts as small whole numbers (the same for ranks of one host): by its
        hello; until that comes, the host of the node's relay it was heard through (it may change). Read off the
        scalars' column, not in a Python pass over the ranks: at 16,384 ranks, while their hellos came in over
        the first seconds, that pass cost each snapshot 10 to 14 ms."""
        sc = self.scalars
        ids = sc.host_id[rows]
        missing = ids < 0
        if missing.any():
            by_relay = np.fromiter((sc.id_of_host(_host_named(endpoints.host_of(url))) for url in sc.urls), np.int64,
                                   len(sc.urls))  # fmt: skip
            ids[missing] = by_relay[sc.endpoint[rows[missing]]]
        return np.array(sc.hosts, object)[ids].tolist(), ids  # (a host apiece: a few thousand at most)

    def _ranks_by_endpoint(self, rank: np.ndarray, rows: np.ndarray) -> dict[str, tuple[int, ...]]:
        """The ranks last heard through each relay (a lost relay is shown with the ranks it took with it)."""
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


def _captures(rank: np.ndarray, states: np.ndarray, capturing: list[int]) -> dict[str, list[int]]:
    """Captures not yet done or failed: id -> the ranks at them (one capture at a time per job); ``capturing``: the
    positions whose state says a capture runs at them."""
    running: dict[str, list[int]] = {}
    for i in capturing:
        cap = states[i].cap
        if cap is not None and cap.st in RUNNING:
            running.setdefault(cap.id, []).append(int(rank[i]))
    return running
