"""A snapshot from a gathered view of the job: silence, stalls, peers, scores, statuses, ranking, the job's figures.

:func:`build` judges what the job state gathered under the lock
(watch/engine/rank_store.py :class:`JobView`, the collective sums included) and what
the aggregator adds (relays, replies, errors): it reads no window and takes no lock, so
the receiver goes on while it runs. The only state it keeps between snapshots is
the caches it is handed (the peer classes, watch/analysis/peers.py; the excess history; the arrivals' grid).
Everything per rank is a numpy operation;
a rank's :class:`~ranktop.watch.model.rank_row.RankRow` is built later, if read
(watch/model/rank_table.py). The job medians it works out ride in the snapshot
(``median_step_s``), so the verdict and the screens do not work them out again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from ranktop.watch.analysis import (arrivals, causes, class_growth, intermittent, job_pace, node_groups, pauses, slow_links,
                                    stragglers)  # fmt: skip
from ranktop.watch.analysis.peers import PeerClasses, Peers
from ranktop.watch.analysis.silence import silent_ranks
from ranktop.watch.analysis.stalls import StallPolicy, stall_report
from ranktop.watch.analysis.collectives import RANKS_THAT_MATTER, collective_rows, ranks_that_matter, rows_shown
from ranktop.watch.engine.rank_store import JobView
from ranktop.watch.model.life import JobLife
from ranktop.watch.engine.link_book import NO_LINKS, LinkColumns
from ranktop.watch.model.rank_table import STATUS_CODE, RankRows, RankTable, message_fields, phase_medians
from ranktop.watch.analysis.resources import job_throughput, rank_throughput, row_fields
from ranktop.watch.model.answers import Answer, RequestStatus
from ranktop.watch.model.endpoint import EndpointRows
from ranktop.watch.model.rank_row import Throughput
from ranktop.watch.model.snapshot import CollectiveStat, Snapshot, Stage
from ranktop.watch.statuses import OK, SILENT, SLOW, STALLED
from ranktop.wire.names import COMM_PHASE, PAUSE_PHASES


@dataclass(frozen=True)
class Extras:
    """What a snapshot says beyond the ranks, from the aggregator's own books."""

    job: str | None
    elapsed_s: float
    behind_s: float
    endpoints: EndpointRows = field(default_factory=EndpointRows)
    replies: list[Answer] = field(default_factory=list)
    requests: list[RequestStatus] = field(default_factory=list)
    dropped: int = 0
    errors: list[str] = field(default_factory=list)
    collectives: list[CollectiveStat] = field(default_factory=list)  # rows worked out before, shown while a view gathers no sums
    links: LinkColumns = NO_LINKS  # the links the relays measured (watch/engine/link_book.py)


def build(view: JobView, extras: Extras, policy: StallPolicy = StallPolicy(), peer_classes: PeerClasses | None = None,
          history: stragglers.ExcessHistory | None = None, arrival_book: arrivals.ArrivalBook | None = None,
          pause_book: pauses.PauseBook | None = None, pace: job_pace.JobPace | None = None,
          job_evidence: causes.JobEvidence | None = None,
          margin_book: intermittent.MarginBook | None = None) -> Snapshot:  # fmt: skip
    """The snapshot of ``view``; ``peer_classes``: the cache of the peers of the views before (None: worked out);
    ``history``: each rank's excess when last seen healthy, kept from the views before (None: not known, a rank
    is judged on this view alone); ``arrival_book``: who arrived last, its grid kept from the views before (None:
    worked out from this view's steps alone); ``pause_book``: the checkpoints' and evaluations' shares of the job's
    time kept from the views before (None: this view's alone); ``pace``: the job's own baseline step, kept from the
    views before (None: the job is not judged against its past); ``job_evidence``: the job's evidence against its
    own past, for the causes of a job slower than itself (None: none said); ``margin_book``: what the job paid each
    rank at its collectives, kept from the views before (None: no intermittent straggler is told)."""
    n = len(view.rank)
    names = view.names
    silent = silent_ranks(view)
    stalls = stall_report(view, silent, policy)
    peers = (peer_classes or PeerClasses()).of(view)
    live = view.scored & ~silent
    idx = np.flatnonzero(live)
    # The live ranks' columns; when every rank is live (the usual case), the view's own (it hands out copies, and
    # nothing here writes into them): a copy of 16,384 ranks' last steps and waits is megabytes a snapshot.
    at = slice(None) if len(idx) == n else idx
    excess = np.zeros(n)
    culprit = np.full(n, -1, np.int64)
    class_ids = peers.class_ids[at] if peers.class_ids is not None else None
    ranks = view.rank[at]
    # Which class each is in, for good (the levels kept against a class are dropped when a rank changes class):
    # from every rank's class, not the live ones', so that a member falling silent does not make it another.
    keys = peers.class_keys[at]
    # Each class's reference per phase (what its healthy peer does), and each rank's time beyond it, kept between
    # snapshots: whether one phase grew past its own noise (stragglers.py), whether a class grew (class_growth.py).
    # A checkpoint's save or an evaluation is no rank's own work (watch/analysis/pauses.py): left out of the scoring.
    work = pauses.without(view.phases[at], names)
    reference = class_growth.references(work, names, class_ids)
    differences = work - reference
    found, worst, slow_above, median_step = stragglers.score_columns(
        work, view.step_s[at], names, class_ids, view.own_sd[at], view.window_steps[at],
        history.before(ranks) if history is not None else None, pauses.without(view.phase_sd[at], names),
        history.differences_before(ranks, len(names), keys) if history is not None else None, reference)  # fmt: skip
    # A whole class slower than it was against the other classes (a node that is a pipeline stage): its members
    # are each other's healthy peers, so only their class's own past tells (watch/analysis/class_growth.py).
    grown, grown_in, grown_above = class_growth.class_excess(
        reference, history.reference_before(ranks, len(names), keys) if history is not None else None, class_ids,
        view.own_sd[at], view.window_steps[at])  # fmt: skip
    by_class = grown > grown_above
    worst = np.where(by_class & (grown > found), grown_in, worst)
    found = np.where(by_class, found + grown, found)
    # Half or more of a class slow (a node of two): the class's median is then no healthy peer, a healthy node is
    # (its fastest coherent group: watch/analysis/node_groups.py); its every rank is slow with the node's excess.
    node_found, node_in, node_above = node_groups.node_excess(
        work, names, class_ids, view.host_id[at], view.own_sd[at], view.window_steps[at], ~np.isnan(view.comm_s[at])
    )
    by_node = node_found > node_above
    worst = np.where(by_node & (node_found > found), node_in, worst)
    found = np.where(by_node, np.maximum(found, node_found), found)
    by_class = by_class | by_node
    last = np.full(n, np.nan)
    counted = np.zeros(n, np.int64)
    last[idx], counted[idx] = (
        arrivals.shares(view.recent_steps[at], view.recent_waits[at], class_ids)
        if arrival_book is None
        else arrival_book.shares(view.recent_steps[at], view.recent_waits[at], class_ids, ranks, view.roster)
    )
    # Flagged by its phase times but never the last to arrive at a collective over many steps: it holds nobody
    # back (its excess is spent where nobody waits for it, or is noise). Where the waits say nothing, no veto.
    vetoed = (last[idx] == 0.0) & (counted[idx] >= arrivals.VETO_AFTER)
    if by_node.any():  # a slow node's ranks share its last arrivals (16 ranks: each last at 1 step in 16): the node's
        nodes = view.host_id[at]  # veto is that none of them is ever last
        lasting = np.unique(nodes[by_node & (np.nan_to_num(last[idx]) > 0)])
        vetoed &= ~(by_node & np.isin(nodes, lasting))
    vetoed &= ~_masked(found, (found > slow_above) | by_class, vetoed, last[idx], class_ids)
    judged_slow = ((found > slow_above) | by_class) & ~vetoed
    # Slow on some steps only, which no median shows: what the job paid it at the collectives, on average, more than
    # its peers' noise allows (watch/analysis/intermittent.py).
    every = np.full(n, np.nan)
    if margin_book is not None and len(idx):
        paid = margin_book.judge(view.recent_steps[at], view.recent_waits[at], class_ids, ranks, view.roster, median_step)
        spiky = paid.found & ~judged_slow
        if spiky.any():
            found = np.where(spiky, paid.cost_s, found)
            # (slow on some steps: where its window's mean passes its median; at every step its medians say it)
            worst = _spiky_phase(view, idx, names, worst, spiky & ~np.isnan(paid.every))
            judged_slow = judged_slow | spiky
            every[idx[spiky]] = paid.every[spiky]
    if history is not None:  # what was judged, the veto included: a vetoed rank's level follows its excess
        # (what a class or a phase does is kept once its window holds half a window of steps: the job's first
        # steps, warm-up and lazy initialization, say little of it)
        steps = view.window_steps[at]
        settled = (steps >= min(class_growth.SETTLED_STEPS, int(steps.max())))[:, None] if len(steps) else np.zeros((0, 1), bool)
        history.note(ranks, found, judged_slow, view.now, np.where(settled, reference, np.nan),
                     np.where(settled, differences, np.nan), keys)  # fmt: skip
    # The size told: a slow rank's excess averaged while it stays slow (a window's median moves with the noise).
    told = history.size(ranks, found, judged_slow, view.now) if history is not None else found
    excess[idx], culprit[idx] = told, worst
    score = excess / median_step if median_step else np.zeros(n)

    status = np.full(n, STATUS_CODE[OK], np.int8)
    if median_step is not None:
        status[idx[judged_slow]] = STATUS_CODE[SLOW]
    stalled = stalls.stalled
    if stalled:
        status[np.isin(view.rank, stalls.stalled_ranks())] = STATUS_CODE[STALLED]
    status[silent] = STATUS_CODE[SILENT]
    slow = status == STATUS_CODE[SLOW]
    # each class's healthy routing spread, learned from the job's past (an expert's load is judged against it)
    load_ratio = (job_evidence.load_ratios(view.states, live & ~slow, slow, peers.class_keys, view.now)
                  if job_evidence is not None and len(idx) else None)  # fmt: skip
    why = (
        causes.of_ranks(
            view.states,
            view.step_s,
            excess,
            slow,
            live,
            peers.class_ids,
            view.evidence,
            culprit=culprit,
            names=names,
            phases=view.phases,
            comm_s=view.comm_s,
            load_ratio=load_ratio,
        )  # fmt: skip
        if slow.any()
        else {}
    )
    if stalled:  # a stalled rank's cause: what its stack is in now (causes.of_stalls)
        why.update(causes.of_stalls(view.states, status == STATUS_CODE[STALLED]))

    table = RankTable(
        names=names,
        rank=view.rank,
        status=status,
        host=view.host,
        host_id=view.host_id,
        step=view.step,
        steps_seen=view.steps_seen,
        missed=view.missed,
        step_s=view.step_s,
        phases=view.phases,
        score=score,
        excess_s=excess,
        culprit=culprit,
        last_seen_s=view.now - view.last_seen,
        collective_s=view.comm_s,
        last_step_end=view.last_step_end,
        stalled=stalled,
        captures=view.captures,
        rest=_messages(view),
        causes=why,
        last_arrivals=last,
        every=every,
        **_message_columns(view, peers),
    )
    ranking = stragglers.ranking(table, stalls.waiting_for)
    paused = pauses.of_view(view, silent, policy.limit(median_step), pause_book)
    rates = view.rate[live]
    rates = rates[~np.isnan(rates) & (rates != 0)]
    medians = phase_medians(names, view.phases, live)
    slower = None
    if pace is not None and len(idx):  # the job against its own past (watch/analysis/job_pace.py)
        steps_held = float(np.median(view.window_steps[idx]))
        slower = pace.judge(median_step, medians, job_pace.phase_errors(names, view.phase_sd, view.window_steps, live),
                            steps_held >= job_pace.SETTLED_STEPS, view.now, view.wall,
                            float(np.median(rates)) if len(rates) else None)  # fmt: skip
    if job_evidence is not None and len(idx):  # the job's evidence against its own past: why it is slower
        said = job_evidence.note(view.states, live, view.step_s, view.comm_s, view.now, slower)
        slower = replace(slower, causes=said) if slower is not None else None
    hosts_slow = stragglers.slow_hosts(table)
    stage_rows = _stages(view, live, peers.stage_ids) if peers.stage_ids is not None else []
    life = _life(view, silent)
    slow_nodes = slow_links.of_job(extras.links, view.comm_s, live, median_step, view.host, slow)
    return Snapshot(
        job=extras.job,
        world_size=view.world,
        elapsed_s=extras.elapsed_s,
        global_step=int(view.step.max()) if n else -1,
        steps_per_s=float(np.median(rates)) if len(rates) else None,
        phase_names=names,
        ranks=RankRows(table),
        stragglers=ranking,
        endpoints=extras.endpoints,
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
        collectives=rows_shown(
            collective_rows(view.collectives.of([n for n, _ in ranks_that_matter(table, stalls.waiting_for, RANKS_THAT_MATTER)]))
            if view.collectives is not None
            else extras.collectives,
            table,
            stalls.waiting_for,
        ),
        waiting_for=stalls.waiting_for,
        diagnosis=stalls.diagnosis,
        slow_hosts=hosts_slow,
        node_causes=causes.of_nodes(view.states, view.host, hosts_slow, slow, live, view.step_s, excess, view.host_id)
        if hosts_slow
        else {},
        device_time_ranks=view.rank[view.device].tolist(),
        throughput=_throughput(view, silent),
        layout_roles=list(peers.layout.roles),
        stages=stage_rows,
        imbalance=stragglers.imbalance(stage_rows, median_step),
        median_step_s=median_step,
        median_phases=medians,
        pauses=paused,
        links=slow_links.shown(extras.links, slow_nodes),
        slow_links=slow_nodes,
        job_slower=slower,
    )


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
