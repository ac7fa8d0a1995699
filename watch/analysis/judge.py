"""The judge: a snapshot from a gathered view of the job, and the memory its verdicts keep between snapshots.

One :class:`Judge` per aggregator: ``snapshot = judge(store.gather(...), extras)``. It judges what the rank store
gathered under the lock (watch/engine/rank_store.py :class:`JobView`, the collective sums included) and what the
aggregator adds of its own books (:class:`Extras`: the relays' facts, replies, errors, links): it reads no window
and takes no lock of the aggregator's, so the receiver goes on while it runs. What it keeps between snapshots
(who is compared with whom, each rank's excess when healthy, the arrivals' grid, the pauses' shares, the job's own
pace and evidence, what the job paid each rank at its collectives, the last collective rows) is its own, behind its
one lock: snapshots taken at once judge in turn. It says, too, what the next gather is to carry for it
(:meth:`Judge.asks`). Whether a relay is lost, the job's life (with the silent ranks of an older process not back)
and every rank's memory creep (read when a row is built: watch/analysis/resources.py, memory_creep.py) are judged
here, not in the engine.

Everything per rank is a numpy operation; a rank's :class:`~ranktop.watch.model.rank_row.RankRow` is built later,
if read (watch/model/rank_table.py). The job medians it works out ride in the snapshot (``median_step_s``), so the
verdict and the screens do not work them out again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from ranktop.watch.analysis import (arrivals, causes, class_growth, intermittent, job_pace, node_groups, pauses, slow_links,
                                    stragglers)  # fmt: skip
from ranktop.watch.analysis.peers import PeerClasses, Peers
from ranktop.watch.analysis.relays import endpoint_rows
from ranktop.watch.analysis.silence import silent_ranks
from ranktop.watch.analysis.stalls import StallPolicy, stall_report
from ranktop.watch.analysis.collectives import RANKS_THAT_MATTER, collective_rows, ranks_that_matter, rows_shown
from ranktop.watch.engine.endpoints import RelayFacts
from ranktop.watch.engine.rank_store import JobView
from ranktop.watch.engine.step_columns import RECENT_STEPS
from ranktop.watch.model.life import JobLife
from ranktop.watch.engine.link_book import NO_LINKS, LinkColumns
from ranktop.watch.model.rank_table import STATUS_CODE, RankRows, RankTable, message_fields, phase_medians
from ranktop.watch.analysis.resources import job_throughput, rank_throughput, row_fields
from ranktop.watch.model.answers import Answer, RequestStatus
from ranktop.watch.model.endpoint import EndpointRows
from ranktop.watch.model.rank_row import Throughput
from ranktop.watch.model.snapshot import CollectiveStat, JobSlower, Snapshot, Stage
from ranktop.watch.model.stall import StallReport
from ranktop.watch.statuses import OK, SILENT, SLOW, STALLED
from ranktop.wire.names import COMM_PHASE, PAUSE_PHASES
from ranktop.wire.pacing import OPS_EVERY_S, slow_factor

#: Past this many ranks the snapshot's per-rank collective rows are those of the ranks that matter only
#: (watch/analysis/collectives.py ranks_that_matter: flagged, waited for, the extremes of wait).
PER_RANK_ROWS_UP_TO = 64
#: From this many ranks on, the collective rows are worked out again this often only (or as seldom as the
#: job's relays send a rank's collectives, where that is less often: wire/pacing.py slow_factor).
COLLECTIVES_CACHED_FROM = 512
COLLECTIVES_EVERY_S = 2.0


@dataclass(frozen=True)
class Extras:
    """What a snapshot says beyond the ranks, from the aggregator's own books: facts, which the judge words."""

    job: str | None
    elapsed_s: float
    behind_s: float
    relays: RelayFacts | None = None  # the relays known (None: none), judged lost past ``lost_after_s`` quiet
    lost_after_s: float = 0.0
    replies: list[Answer] = field(default_factory=list)
    requests: list[RequestStatus] = field(default_factory=list)
    dropped: int = 0
    errors: list[str] = field(default_factory=list)
    links: LinkColumns = NO_LINKS  # the links the relays measured (watch/engine/link_book.py)


@dataclass(frozen=True)
class Asks:
    """What the judge asks the next gather to carry (watch/engine/rank_store.py ``gather``'s arguments)."""

    recent: int = RECENT_STEPS  # each rank's last steps' waits: as many as the arrivals' grid needs
    collectives: bool = True  # the collective sums: due (a big job's rows are reworked every few seconds only)
    every_rank_up_to: int = PER_RANK_ROWS_UP_TO  # up to this many ranks, every rank gets collective rows of its own
    watch: np.ndarray | None = None  # ranks whose window's means per phase it carries (watch/analysis/intermittent.py)


@dataclass
class _Ranks:
    """One snapshot's working columns, passed from step to step of the judging (per live rank unless said)."""

    n: int  # ranks in the view
    silent: np.ndarray  # per rank
    stalls: StallReport
    peers: Peers
    live: np.ndarray  # per rank: scored and not silent
    idx: np.ndarray  # the live ranks' rows
    at: slice | np.ndarray  # how to take the live ranks' columns (every rank: the view's own)
    class_ids: np.ndarray | None
    ranks: np.ndarray
    keys: np.ndarray
    reference: np.ndarray = field(default_factory=lambda: np.zeros(0))
    differences: np.ndarray = field(default_factory=lambda: np.zeros(0))
    found: np.ndarray = field(default_factory=lambda: np.zeros(0))
    worst: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    slow_above: np.ndarray = field(default_factory=lambda: np.zeros(0))
    median_step: float | None = None
    by_class: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    by_node: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    judged_slow: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    last: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per rank
    every: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per rank
    excess: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per rank
    culprit: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per rank
    status: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # per rank
    slow: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # per rank: status slow


class Judge:
    """The judging of a job's snapshots and its memory between them, behind one lock.

    ``judge(view, extras)`` makes the snapshot of ``view`` in named steps, each a part of the verdict: who is
    silent or stalled and who is compared with whom (:meth:`_peers_of`), each rank's excess over its peers, its
    class's and its node's past (:meth:`_score`), the last arrivals that back or veto it (:meth:`_weigh_arrivals`),
    the spikes no median shows (:meth:`_weigh_margins`), the size told and kept (:meth:`_remember`), the statuses
    (:meth:`_statuses`), the causes (:meth:`_causes`), the job against its own past (:meth:`_job_pace`), the rows
    of its collectives (:meth:`_collective_rows`), and the snapshot itself. Its books keep their own locks too:
    their unit tests drive them alone (tests/test_arrivals.py, test_slow_policy.py, ...), and under the judge's
    lock those are never contended (a few hundred nanoseconds a snapshot). A job that restarts keeps its judge:
    the books follow a rank's new process by the view's ``roster`` (watch/engine/rank_store.py), as they did."""

    def __init__(self, policy: StallPolicy = StallPolicy()) -> None:
        self._lock = threading.Lock()  # the judging as a whole: snapshots taken at once judge in turn
        self._policy = policy
        self._peer_classes = PeerClasses()  # who is compared with whom, kept while the layout and the ranks stay (peers.py)
        self._history = stragglers.ExcessHistory()  # each rank's excess when last seen healthy (stragglers.py)
        self._arrivals = arrivals.ArrivalBook()  # who arrives last, its grid of steps kept (arrivals.py)
        self._pauses = pauses.PauseBook()  # checkpoints' and evaluations' shares of the job's time (pauses.py)
        self._pace = job_pace.JobPace()  # the job's own baseline step (job_pace.py)
        self._evidence = causes.JobEvidence()  # ... and its evidence, for why it is slower (causes.py)
        self._margins = intermittent.MarginBook()  # what the job paid each rank at its collectives (intermittent.py)
        self._collectives: tuple[float, list[CollectiveStat]] | None = None  # (when, rows) of the last collective rows

    @property
    def policy(self) -> StallPolicy:
        """When a rank that stopped is stalled (watch/analysis/stalls.py)."""
        return self._policy

    def asks(self, now: float, ranks: int, world: int | None) -> Asks:
        """What the next gather is to carry for this judge, ``ranks`` heard of a job of ``world``: as few of each
        rank's last steps as the arrivals' grid needs, the ranks whose spikes it watches, and the collective sums
        when their rows are due (a big job's every :func:`collectives_every` seconds: they cost O(ranks x ops)).
        Read under the aggregator's lock, as the gather is: each a value the judging replaces whole."""
        cached = self._collectives
        due = cached is None or ranks < COLLECTIVES_CACHED_FROM or now - cached[0] >= collectives_every(world or ranks)
        return Asks(self._arrivals.slots, due, PER_RANK_ROWS_UP_TO, self._margins.watch)

    def __call__(self, view: JobView, extras: Extras) -> Snapshot:
        """The snapshot of ``view`` (gathered as :meth:`asks` said) and ``extras``; its memory updated."""
        with self._lock:
            return self._judge(view, extras)

    def _judge(self, view: JobView, extras: Extras) -> Snapshot:
        """The steps in their order: each rank judged (the later steps weigh what the earlier found), then the
        job's figures and the snapshot; the collective rows worked out afresh kept for the views that gather none."""
        r = self._peers_of(view)
        self._score(view, r)
        self._weigh_arrivals(view, r)
        self._weigh_margins(view, r)
        self._remember(view, r)
        self._statuses(view, r)
        snap = self._snapshot(view, extras, r, _table(view, r, self._causes(view, r)))
        if view.collectives is not None:
            self._collectives = (view.now, snap.collectives)
        return snap

    def _snapshot(self, view: JobView, extras: Extras, r: _Ranks, table: RankTable) -> Snapshot:
        """The job's figures from the ranks as judged (the ranking, pauses, its pace against its past, slow hosts,
        stages, slow links, its life, its relays) and the snapshot that carries them with the rows' table."""
        ranking = stragglers.ranking(table, r.stalls.waiting_for)
        median_step = r.median_step
        paused = pauses.of_view(view, r.silent, self._policy.limit(median_step), self._pauses)
        rates = view.rate[r.live]
        rates = rates[~np.isnan(rates) & (rates != 0)]
        medians = phase_medians(view.names, view.phases, r.live)
        slower = self._job_pace(view, r, medians, rates)
        hosts_slow = stragglers.slow_hosts(table)
        stage_rows = _stages(view, r.live, r.peers.stage_ids) if r.peers.stage_ids is not None else []
        life = _life(view, r.silent)
        slow_nodes = slow_links.of_job(extras.links, view.comm_s, r.live, median_step, view.host, r.slow)
        return Snapshot(
            job=extras.job,
            world_size=view.world,
            elapsed_s=extras.elapsed_s,
            global_step=int(view.step.max()) if r.n else -1,
            steps_per_s=float(np.median(rates)) if len(rates) else None,
            phase_names=view.names,
            ranks=RankRows(table),
            stragglers=ranking,
            endpoints=_relays(extras),
            behind_s=extras.behind_s or None,
            state=life.state,
            ended_at=life.ended_at,
            restarts=life.restarts,
            restarted_at=life.restarted_at,
            not_back=list(life.not_back),
            failed_ranks=list(life.failed),
            replies=extras.replies,
            requests=extras.requests,
            dropped_messages=extras.dropped,
            errors=extras.errors,
            collectives=self._collective_rows(view, table, r.stalls),
            waiting_for=r.stalls.waiting_for,
            diagnosis=r.stalls.diagnosis,
            slow_hosts=hosts_slow,
            node_causes=causes.of_nodes(view.states, view.host, hosts_slow, r.slow, r.live, view.step_s, r.excess, view.host_id)
            if hosts_slow
            else {},
            device_time_ranks=view.rank[view.device].tolist(),
            throughput=_throughput(view, r.silent),
            layout_roles=list(r.peers.layout.roles),
            stages=stage_rows,
            imbalance=stragglers.imbalance(stage_rows, median_step),
            median_step_s=median_step,
            median_phases=medians,
            pauses=paused,
            links=slow_links.shown(extras.links, slow_nodes),
            slow_links=slow_nodes,
            job_slower=slower,
        )

    def _peers_of(self, view: JobView) -> _Ranks:
        """Who is silent, who is stalled, who is compared with whom, and which ranks are judged (the live ones):
        a rank is compared only with peers doing the same work (peers.py), and a silent one is not judged slow."""
        n = len(view.rank)
        silent = silent_ranks(view)
        report = stall_report(view, silent, self._policy)
        peers = self._peer_classes.of(view)
        live = view.scored & ~silent
        idx = np.flatnonzero(live)
        # The live ranks' columns; when every rank is live (the usual case), the view's own (it hands out copies, and
        # nothing here writes into them): a copy of 16,384 ranks' last steps and waits is megabytes a snapshot.
        at: slice | np.ndarray = slice(None) if len(idx) == n else idx
        # Which class each is in, for good (the levels kept against a class are dropped when a rank changes class):
        # from every rank's class, not the live ones', so that a member falling silent does not make it another.
        return _Ranks(n=n, silent=silent, stalls=report, peers=peers, live=live, idx=idx, at=at,
                      class_ids=peers.class_ids[at] if peers.class_ids is not None else None, ranks=view.rank[at],
                      keys=peers.class_keys[at])  # fmt: skip

    def _score(self, view: JobView, r: _Ranks) -> None:
        """Each live rank's excess and its phase: against its class's healthy peer per phase, past its own noise
        and its level when healthy (stragglers.py); a whole class grown against its own past (class_growth.py);
        half a class slow, against a healthy node (node_groups.py). A checkpoint's save or an evaluation is no
        rank's own work (pauses.py): left out of the scoring."""
        at, names, history = r.at, view.names, self._history
        work = pauses.without(view.phases[at], names)
        r.reference = class_growth.references(work, names, r.class_ids)
        r.differences = work - r.reference
        found, worst, r.slow_above, r.median_step = stragglers.score_columns(
            work, view.step_s[at], names, r.class_ids, view.own_sd[at], view.window_steps[at], history.before(r.ranks),
            pauses.without(view.phase_sd[at], names), history.differences_before(r.ranks, len(names), r.keys), r.reference,
            history.wander(), history.drift())  # fmt: skip
        # A whole class slower than it was against the other classes (a node that is a pipeline stage): its members
        # are each other's healthy peers, so only their class's own past tells (watch/analysis/class_growth.py).
        grown, grown_in, grown_above = class_growth.class_excess(
            r.reference, history.reference_before(r.ranks, len(names), r.keys), r.class_ids, view.own_sd[at],
            view.window_steps[at])  # fmt: skip
        by_class = grown > grown_above
        worst = np.where(by_class & (grown > found), grown_in, worst)
        found = np.where(by_class, found + grown, found)
        # Half or more of a class slow (a node of two): the class's median is then no healthy peer, a healthy node is
        # (its fastest coherent group: watch/analysis/node_groups.py); its every rank is slow with the node's excess.
        node_found, node_in, node_above = node_groups.node_excess(
            work, names, r.class_ids, view.host_id[at], view.own_sd[at], view.window_steps[at], ~np.isnan(view.comm_s[at])
        )
        r.by_node = node_found > node_above
        r.worst = np.where(r.by_node & (node_found > found), node_in, worst)
        r.found = np.where(r.by_node, np.maximum(found, node_found), found)
        r.by_class = by_class | r.by_node

    def _weigh_arrivals(self, view: JobView, r: _Ranks) -> None:
        """Who arrived last at the collectives (arrivals.py): a rank flagged by its phase times but never the last
        to arrive over many steps holds nobody back (its excess is spent where nobody waits, or is noise), and is
        not judged slow. Where the waits say nothing, no veto."""
        at, idx, found = r.at, r.idx, r.found
        r.last = np.full(r.n, np.nan)
        counted = np.zeros(r.n, np.int64)
        r.last[idx], counted[idx] = self._arrivals.shares(view.recent_steps[at], view.recent_waits[at], r.class_ids, r.ranks,
                                                          view.roster)  # fmt: skip
        vetoed = (r.last[idx] == 0.0) & (counted[idx] >= arrivals.VETO_AFTER)
        if r.by_node.any():  # a slow node's ranks share its last arrivals (16 ranks: each last at 1 step in 16): the node's
            nodes = view.host_id[at]  # veto is that none of them is ever last
            lasting = np.unique(nodes[r.by_node & (np.nan_to_num(r.last[idx]) > 0)])
            vetoed &= ~(r.by_node & np.isin(nodes, lasting))
        vetoed &= ~_masked(found, (found > r.slow_above) | r.by_class, vetoed, r.last[idx], r.class_ids)
        r.judged_slow = ((found > r.slow_above) | r.by_class) & ~vetoed

    def _weigh_margins(self, view: JobView, r: _Ranks) -> None:
        """Slow on some steps only, which no median shows: what the job paid it at the collectives, on average,
        more than its peers' noise allows (intermittent.py); its phase, where its window's mean passes its median."""
        at, idx = r.at, r.idx
        r.every = np.full(r.n, np.nan)
        if not len(idx):
            return
        paid = self._margins.judge(view.recent_steps[at], view.recent_waits[at], r.class_ids, r.ranks, view.roster, r.median_step)
        spiky = paid.found & ~r.judged_slow
        # A rank slow at every step of its newest run of steps, which its windows' medians hold only in part yet
        # (at 1 step a second, for tens of seconds): what the job paid it over that run is its size.
        r.found = np.where(paid.streak & r.judged_slow, np.maximum(r.found, paid.cost_s), r.found)
        if spiky.any():
            r.found = np.where(spiky, paid.cost_s, r.found)
            # (slow on some steps, or at every step of a run its medians do not hold yet: where its window's mean
            # passes its median; at every step its medians say it)
            r.worst = _spiky_phase(view, idx, view.names, r.worst, spiky & (~np.isnan(paid.every) | paid.streak))
            r.judged_slow = r.judged_slow | spiky
            r.every[idx[spiky]] = paid.every[spiky]

    def _remember(self, view: JobView, r: _Ranks) -> None:
        """What was judged, the veto included, kept for the next snapshots (a vetoed rank's level follows its
        excess), and the size told: a slow rank's excess averaged while it stays slow (a window's median moves
        with the noise)."""
        # (what a class or a phase does is kept once its window holds half a window of steps: the job's first
        # steps, warm-up and lazy initialization, say little of it)
        steps = view.window_steps[r.at]
        settled = (steps >= min(class_growth.SETTLED_STEPS, int(steps.max())))[:, None] if len(steps) else np.zeros((0, 1), bool)
        own = _own_columns(view.names)
        work = r.reference[:, own].sum(axis=1)
        rise = stragglers.level_rise(work, steps, view.step_s[r.at])
        # (how far ranks are apart says how they wander in classes of a few at least: of two, the faster is the
        # reference, and their difference is what is judged)
        sizes = np.bincount(r.class_ids)[r.class_ids] if r.class_ids is not None else np.full(len(work), len(work))
        with np.errstate(invalid="ignore", divide="ignore"):
            strays = np.where(settled[:, 0] & (work > 0) & (sizes >= WANDER_CLASS), r.differences[:, own].sum(axis=1) / work, np.nan)
            # (and how far its window's median of it is off by noise alone: stragglers.ExcessHistory.drift)
            noise = stragglers.MEDIAN_ERROR * np.nan_to_num(view.own_sd[r.at]) / np.sqrt(np.maximum(steps, 1)) / work
        self._history.note(r.ranks, r.found, r.judged_slow, view.now, np.where(settled, r.reference, np.nan),
                           np.where(settled, r.differences, np.nan), r.keys, rise, strays, noise)  # fmt: skip
        told = self._history.size(r.ranks, r.found, r.judged_slow, view.now)
        r.excess = np.zeros(r.n)
        r.culprit = np.full(r.n, -1, np.int64)
        r.excess[r.idx], r.culprit[r.idx] = told, r.worst

    def _statuses(self, view: JobView, r: _Ranks) -> None:
        """Each rank's status, the worst said last: slow (once the job has a median step), stalled, silent."""
        r.status = np.full(r.n, STATUS_CODE[OK], np.int8)
        if r.median_step is not None:
            r.status[r.idx[r.judged_slow]] = STATUS_CODE[SLOW]
        if r.stalls.stalled:
            r.status[np.isin(view.rank, r.stalls.stalled_ranks())] = STATUS_CODE[STALLED]
        r.status[r.silent] = STATUS_CODE[SILENT]
        r.slow = r.status == STATUS_CODE[SLOW]

    def _causes(self, view: JobView, r: _Ranks) -> dict[int, Any]:
        """Why each slow rank is slow, from its evidence against its peers' (causes.py; an expert's load against
        its class's healthy routing spread, learned from the job's past), and a stalled rank's: its stack now."""
        load_ratio = self._evidence.load_ratios(view.states, r.live & ~r.slow, r.slow, r.peers.class_keys, view.now) if len(r.idx) else None
        why: dict[int, Any] = (
            causes.of_ranks(
                view.states,
                view.step_s,
                r.excess,
                r.slow,
                r.live,
                r.peers.class_ids,
                view.evidence,
                culprit=r.culprit,
                names=view.names,
                phases=view.phases,
                comm_s=view.comm_s,
                load_ratio=load_ratio,
            )  # fmt: skip
            if r.slow.any()
            else {}
        )
        if r.stalls.stalled:  # a stalled rank's cause: what its stack is in now (causes.of_stalls)
            why.update(causes.of_stalls(view.states, r.status == STATUS_CODE[STALLED]))
        return why

    def _job_pace(self, view: JobView, r: _Ranks, medians: dict[str, float], rates: np.ndarray) -> JobSlower | None:
        """The job against its own past (job_pace.py), and its evidence for why it is slower (causes.py): every
        rank slower alike is nobody's straggler, yet the job is slower."""
        if not len(r.idx):
            return None
        live, names = r.live, view.names
        steps_held = float(np.median(view.window_steps[r.idx]))
        slower = self._pace.judge(r.median_step, medians, job_pace.phase_errors(names, view.phase_sd, view.window_steps, live),
                                  steps_held >= job_pace.SETTLED_STEPS, view.now, view.wall,
                                  float(np.median(rates)) if len(rates) else None)  # fmt: skip
        said = self._evidence.note(view.states, live, view.step_s, view.comm_s, view.now, slower)
        return replace(slower, causes=said) if slower is not None else None

    def _collective_rows(self, view: JobView, table: RankTable, report: StallReport) -> list[CollectiveStat]:
        """The collective rows shown: worked out from this view's sums for the job and the ranks that matter, or,
        where this view gathered none (a big job's rows are due every few seconds), the rows worked out last."""
        waiting_for = report.waiting_for
        if view.collectives is not None:
            rows = collective_rows(view.collectives.of([n for n, _ in ranks_that_matter(table, waiting_for, RANKS_THAT_MATTER)]))
        else:
            rows = self._collectives[1] if self._collectives is not None else []
        return rows_shown(rows, table, waiting_for)


def collectives_every(world: int) -> float:
    """Seconds between two workings out of a big job's collective rows (:data:`COLLECTIVES_CACHED_FROM` ranks
    up): what they say moves slowly, and they cost O(ranks x ops); no more often than the job's relays send a
    rank's collectives (wire/pacing.py)."""
    return max(COLLECTIVES_EVERY_S, OPS_EVERY_S * slow_factor(world))


def _relays(extras: Extras) -> EndpointRows:
    """The relay rows: each waiting (never heard), connected, or lost (quiet past the silence limit, or its
    connection dropped: relays.py)."""
    return endpoint_rows(extras.relays, extras.lost_after_s) if extras.relays is not None else EndpointRows()


def _table(view: JobView, r: _Ranks, why: dict[int, Any]) -> RankTable:
    """Every rank's columns as judged: the snapshot's rows are built from it only when read."""
    median_step = r.median_step
    return RankTable(
        names=view.names,
        rank=view.rank,
        status=r.status,
        host=view.host,
        host_id=view.host_id,
        step=view.step,
        steps_seen=view.steps_seen,
        missed=view.missed,
        step_s=view.step_s,
        phases=view.phases,
        score=r.excess / median_step if median_step else np.zeros(r.n),
        excess_s=r.excess,
        culprit=r.culprit,
        last_seen_s=view.now - view.last_seen,
        collective_s=view.comm_s,
        last_step_end=view.last_step_end,
        stalled=r.stalls.stalled,
        captures=view.captures,
        rest=_messages(view),
        causes=why,
        last_arrivals=r.last,
        every=r.every,
        **_message_columns(view, r.peers),
    )


#: Ranks' spread about their class's reference tells how they wander (stragglers.ExcessHistory.wander) in classes
#: of this many ranks at least.
WANDER_CLASS = 4


def _own_columns(names: list[str]) -> np.ndarray:
    """Which of ``names`` are a rank's own work (its waits, checkpoints and evaluations left out)."""
    return np.array([name != COMM_PHASE and name not in PAUSE_PHASES for name in names], bool)


def _spiky_phase(view: JobView, idx: np.ndarray, names: list[str], worst: np.ndarray, spiky: np.ndarray) -> np.ndarray:
    """Per live rank: for those ``spiky`` (intermittent stragglers) whose window's means the view carries, the phase
    where its mean passes its median most (its few slow steps' phase); ``worst`` otherwise."""
    out = worst.copy()
    own = _own_columns(names)
    for i in np.flatnonzero(spiky).tolist():
        at = np.flatnonzero(view.watched == idx[i])
        if len(at):
            j = intermittent.phase_of(view.watched_means[at[0]], view.phases[idx[i]], own)
            if j >= 0:
                out[i] = j
    return out


#: A rank flagged but never last is not vetoed while a slower flagged rank of its class is last at this share of
#: its steps at least: that one arrives after it at every collective, which hides its own lateness.
MASKED_BY = 0.5


def _masked(found: np.ndarray, flagged: np.ndarray, vetoed: np.ndarray, last: np.ndarray,
            class_ids: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """Per rank: flagged, vetoed (never last), and outdone by a costlier rank of its class that is flagged, not
    vetoed and last at MASKED_BY of its steps or more. Two stragglers in different phases: the larger arrives last
    at every step, and the smaller, whose own excess is measured, would be dropped by the veto (issue 46, item 3);
    the last arrivals say who is last, not who else is late."""
    out = np.zeros(len(found), bool)
    if not (flagged & vetoed).any():
        return out
    leading = flagged & ~vetoed & (np.nan_to_num(last) >= MASKED_BY)
    for members, _ in stragglers.peer_groups(class_ids, len(found)):
        ahead = found[members][leading[members]]
        if len(ahead):
            out[members] = flagged[members] & vetoed[members] & (found[members] < float(ahead.max()))
    return out


def _messages(view: JobView) -> Callable[[int], dict[str, Any]]:
    """Row i's fields read from its messages and resources: called only for the rows built. It holds what they read,
    not the view (a snapshot kept for its rows keeps no more of the view: its collective sums are megabytes)."""
    metas, states, captures, resources, rates, wall = view.metas, view.states, view.capture_summaries, view.resources, view.rate, view.wall

    def rest(i: int) -> dict[str, Any]:
        meta = metas[i]
        rate = rates[i]
        return {
            **message_fields(states[i], meta, captures[i]),
            **row_fields(resources[i], meta, None if np.isnan(rate) else float(rate), wall),
        }

    return rest


def _life(view: JobView, silent: np.ndarray) -> JobLife:
    """The job's life as its state told it, with the ranks of an older process that are silent counted not back."""
    life = view.life
    if not life.older:
        return life
    quiet = set(view.rank[silent].tolist())
    return replace(life, not_back=tuple(sorted({*life.not_back, *(r for r in life.older if r in quiet)})))


def _message_columns(view: JobView, peers: Peers) -> dict[str, Any]:
    """What the screens count over every rank of its messages, as columns: no row is built for them."""
    return {
        "dropped": view.dropped,
        "rate_hz": view.rate_hz,
        "rejected": view.rejected,
        "with_memory": view.with_memory,  # (columns the job state keeps: no pass over every rank's resources)
        "with_throughput": view.works & ~np.isnan(view.rate) & (np.nan_to_num(view.rate) != 0),
        "with_gpu": view.with_gpu,
        "coords": peers.coords,
        "gpu_sampled": view.gpu_sampled,
    }


def _stages(view: JobView, live: np.ndarray, stage_ids: np.ndarray) -> list[Stage]:
    at = live & (stage_ids >= 0)
    waits = np.nan_to_num(view.comm_s[at])
    return stragglers.stage_columns(stage_ids[at], view.step_s[at] - waits, waits)


def _throughput(view: JobView, silent: np.ndarray) -> Throughput | None:
    """The job's work per second: sums over the ranks not silent that say their work per step."""
    per_rank: list[Throughput | None] = []
    for i in np.flatnonzero(view.works & ~silent).tolist():
        rate = view.rate[i]
        meta = view.metas[i]
        per_rank.append(rank_throughput(meta.work if meta is not None else None, None if np.isnan(rate) else float(rate)))
    return job_throughput(per_rank)
