"""The answer first: who holds the job back, in which phase, and what it costs, as one line.

A pure function of a :class:`~ranktop.watch.model.snapshot.Snapshot`, so the TUI's
verdict line, ``--json`` and the tests read the same answer. The checks go
from the worst news to the best, and the first that applies is the verdict:

1. ``stalled``: ranks stopped finishing steps; name the rank(s) they wait for
   when one stands out (``snapshot.waiting_for``).
2. ``silent``: ranks stopped talking while the others go on; a whole node
   silent is named as the node.
   ``checkpoint`` / ``eval`` / ``compile``: a checkpoint's save, an evaluation or a torch.compile compilation
   under way for longer than a stall would take, which the job waits for (never ``stalled``:
   watch/analysis/pauses.py).
3. ``slow_link``: a node's network (or one pair's link) is slow and costs the job 5% or more
   (``snapshot.slow_links``, watch/analysis/slow_links.py): named before the slow ranks unless the top one costs
   the job more (a slow node's ranks, whose own work would explain the waits, are never named as a link).
4. ``slow_node``: every rank of a node is slow (``snapshot.slow_hosts``): the
   node is the suspect, not one rank; its cause is its worst rank's, when half its slow ranks share its kind.
5. ``slow_rank``: the top straggler, with its culprit phase, and why when its evidence says
   (", because it spends 12 ms per step in Python's garbage collector, ...": watch/analysis/causes.py): "because"
   for a cause that explains half its excess or more, "partly because" from a fifth, and "cause unknown: not
   GC, CPU contention, ..." when none does, listing what its evidence ruled out.
   ``checkpoint`` / ``eval`` / ``compile`` instead, when the job spends a greater share of its time saving
   checkpoints, evaluating or compiling than the top straggler costs it.
6. ``checkpoint`` / ``eval`` / ``compile``: nobody is flagged, and the job spends 5% of its time or more saving
   checkpoints, evaluating or compiling ("rank 0 saving a checkpoint: 3.0 s every 20 steps, the job spends 90% of its time in
   checkpoints").
   ``job_slower``: nobody is flagged, but the job's step grew 10% or more against its own baseline of the last
   minutes, past its noise, for seconds (watch/analysis/job_pace.py): "the job is 55% slower since 14:02:10:
   forward +20 ms on every rank".
7. ``imbalanced``: nobody is flagged, but the pipeline's stages are unbalanced
   (``snapshot.imbalance``): a finding about the model's split, never a rank's.
8. ``warming_up``: no rank has steps enough to be scored yet.
9. ``healthy``: nobody is flagged.

On a job whose layout is known a rank is named with its coordinates:
"rank 3 (pp 1, dp 1) slow in forward: ...".
``waiting``: no rank has reported at all. ``ended``: every rank exited cleanly (checked first).

What a straggler costs. In synchronous training every rank waits for the
slowest inside a collective, so the job's step is the median step, and the
straggler's excess (its own time beyond a healthy peer's: the lower median of
its peers, summed over phases) is the share of that step the job loses: ``excess_s / median step``, which is
the straggler's ``score``. The job waits for the worst one, so the cost is the
worst flagged rank's, not a sum.
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ranktop.watch.model.rank_row import BECAUSE, UNKNOWN_CAUSE, named_cause
from ranktop.watch.model.rank_row import Cause, RankRow
from ranktop.watch.model.snapshot import JobSlower, Pause, SlowLink, Snapshot
from ranktop.watch.statuses import SILENT, SLOW, STALLED
from ranktop.watch import format as fmt
from ranktop.watch.format import ago as _ago
from ranktop.watch.format import ranks_text


# Kinds, worst first.
STALLED_JOB = "stalled"
SILENT_RANKS = "silent"
SLOW_LINK = "slow_link"
SLOW_NODE = "slow_node"
SLOW_RANK = "slow_rank"
CHECKPOINT = "checkpoint"  # the job spends its time saving checkpoints, or waits for one now (wire/names.py)
EVAL = "eval"  # ... evaluating
COMPILE = "compile"  # ... torch.compile compiling (a recompilation, which the others wait for)
JOB_SLOWER = "job_slower"  # every rank slower alike: the job against its own past
IMBALANCED = "imbalanced"
WARMING_UP = "warming_up"
HEALTHY = "healthy"
WAITING = "waiting"
ENDED_JOB = "ended"  # every rank exited cleanly (watch/engine/lifecycle.py): its ranks are silent because they are done
KINDS = (
    STALLED_JOB,
    SILENT_RANKS,
    SLOW_LINK,
    SLOW_NODE,
    SLOW_RANK,
    CHECKPOINT,
    EVAL,
    COMPILE,
    JOB_SLOWER,
    IMBALANCED,
    WARMING_UP,
    HEALTHY,
    WAITING,
    ENDED_JOB,
)

# How bad it is, for the colour of the line.
BAD, WARN, GOOD, IDLE = "bad", "warn", "good", "idle"


@dataclass(frozen=True)
class Verdict:
    """The one line that answers "who holds the job back"; the fields say the same for programs."""

    kind: str  # one of KINDS
    severity: str  # bad | warn | good | idle
    text: str  # the line itself, e.g. "rank 3071 slow in forward: +38 ms per step, the job loses 41%"
    ranks: list[int]  # the ranks it names (the culprits), most suspicious first
    host: str | None = None  # the node it names (slow_node, a silent node)
    phase: str | None = None  # the culprit phase (slow) or the phase a stalled culprit is in
    excess_s: float | None = None  # what the culprit adds to every step
    loss: float | None = None  # the share of the job's step time lost to it (0.41 = 41%)
    others: int = 0  # further ranks flagged the same way, not named
    cause: Cause | None = None  # why the culprit is slow, when its evidence says (watch/analysis/causes.py); kind
    # "unknown" when its evidence rules causes out and none explains a fifth of its excess
    last_arrivals: float | None = None  # the culprit's share of its last steps it arrived last at the collectives
    every: float | None = (
        None  # an intermittent straggler (slow_rank): slow on one step in this many; checkpoint, eval: one in this many steps
    )
    hosts: list[str] | None = None  # slow_link: the pair's two ends, when one pair's link is slow (else the node alone)
    since: float | None = None  # job_slower: when it began (unix seconds)


def verdict(snapshot: Snapshot) -> Verdict:
    """The verdict on a snapshot (see the module docstring for the order of the checks). It reads the
    snapshot's columns and builds the rows of the ranks it names only (watch/model/rank_table.py)."""
    rows = snapshot.ranks
    table = rows.table
    if not rows:
        job = f" of job {snapshot.job}" if snapshot.job else ""
        return Verdict(WAITING, IDLE, f"waiting for the ranks{job} to report", [])
    if snapshot.state == ENDED_JOB and snapshot.ended_at is not None:
        at = time.strftime("%H:%M:%S", time.localtime(snapshot.ended_at))
        return Verdict(ENDED_JOB, IDLE, f"job ended at {at}: every rank exited cleanly, after step {snapshot.global_step}", [])
    stalled = _with_status(snapshot, STALLED)
    if stalled:
        return _stalled(snapshot, stalled)
    silent = _with_status(snapshot, SILENT)
    if silent:
        return _silent(snapshot, silent)
    paused = sorted((p for p in snapshot.pauses if p.costly), key=lambda p: (not p.holding, -p.share))
    if paused and paused[0].holding:
        return _paused(paused[0])
    slow = _slow_in_order(snapshot)
    if snapshot.slow_links and not (slow and slow[0].score > snapshot.slow_links[0].loss):  # the costlier first
        return _slow_link(snapshot)
    if slow and not (paused and paused[0].share > max(r.score for r in slow)):
        return _slow_node(snapshot, slow) if snapshot.slow_hosts else _slow_rank(slow, snapshot)
    if paused:
        return _paused(paused[0])
    if snapshot.job_slower is not None:
        return _job_slower(snapshot.job_slower)
    if snapshot.imbalance:
        return Verdict(IMBALANCED, WARN, snapshot.imbalance, [])
    scored = np.flatnonzero(~np.isnan(table.step_s))
    if not len(scored):
        seen = int(table.steps_seen.max()) if len(table) else 0
        return Verdict(WARMING_UP, IDLE, f"warming up: {_count(len(rows), 'rank')} reporting, {seen} steps seen so far", [])
    median = snapshot.median_step()
    assert median is not None  # a rank is scored: there is a median step
    worst = rows[int(scored[np.argmax(table.excess_s[scored])])]
    text = f"healthy: no straggler among {_count(len(rows), 'rank')}, median step {fmt.ms_brief(median)} ms"
    if worst.excess_s * 1000 >= 0.05:
        text += f", worst rank {worst.rank} +{fmt.ms_brief(worst.excess_s)} ms"
    missing = _never_reported(snapshot)
    if missing:
        text += f"; {ranks_text(missing[:8])}{' …' if len(missing) > 8 else ''} never reported"
    return Verdict(HEALTHY, WARN if missing else GOOD, text, [])


#: What a pause's rank is doing, and what the job spends its time in, by kind.
_PAUSE_WORDS = {
    CHECKPOINT: ("saving a checkpoint", "checkpoints"),
    EVAL: ("evaluating", "evaluation"),
    COMPILE: ("compiling (torch.compile)", "compilation"),
}


def _paused(pause: Pause) -> Verdict:
    """ "rank 0 saving a checkpoint: 3.0 s every 20 steps, the job spends 90% of its time in checkpoints";
    "evaluating for 12s"; "rank 0 saving a checkpoint for 14s, the others wait"; "rank 3 compiling (torch.compile)
    for 4s, the others wait"."""
    checkpoint = pause.kind == CHECKPOINT
    doing, spent = _PAUSE_WORDS.get(pause.kind, _PAUSE_WORDS[EVAL])
    if pause.everyone:
        who = "every rank saving a checkpoint" if checkpoint else "every rank compiling" if pause.kind == COMPILE else "evaluating"
    else:
        who = f"{ranks_text(pause.ranks)}{' …' if pause.count > len(pause.ranks) else ''} {doing}"
    if pause.under_way_s is not None and pause.holding:
        text = f"{who} for {_ago(pause.under_way_s)}" + ("" if pause.everyone else ", the others wait")
    else:
        text = who
        if pause.each_s is not None:
            text += f": {_seconds(pause.each_s)} s"
            text += f" every {pause.every:.0f} steps" if pause.every is not None else " each"
    if pause.share >= 0.005:
        text += f"{';' if pause.holding else ','} the job spends {fmt.percent(pause.share)} of its time in {spent}"
    return Verdict(pause.kind, WARN, text, pause.ranks, host=pause.host, phase=pause.kind, excess_s=pause.each_s,
                   loss=pause.share, others=max(0, pause.count - len(pause.ranks)), every=pause.every)  # fmt: skip


def _job_slower(slower: JobSlower) -> Verdict:
    """ "the job is 55% slower since 14:02:10: forward +20 ms on every rank"."""
    at = time.strftime("%H:%M:%S", time.localtime(slower.since))
    text = f"the job is {fmt.percent(slower.share)} slower since {at}"
    if slower.phase is not None and slower.phase_excess_s is not None and slower.phase_excess_s > 0:
        text += f": {slower.phase} +{fmt.ms_brief(slower.phase_excess_s)} ms on every rank"
    else:
        text += f": +{fmt.ms_brief(slower.excess_s)} ms per step on every rank"
    cause, said = _why(slower.causes)
    text += said
    return Verdict(JOB_SLOWER, WARN, text, [], phase=slower.phase, excess_s=slower.excess_s, loss=slower.share,
                   since=slower.since, cause=cause)  # fmt: skip


def _seconds(value: float) -> str:
    """A pause's length in a sentence: 0.35, 3.0, 42."""
    return f"{value:.2f}" if value < 1 else f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _with_status(snapshot: Snapshot, status: str) -> list[RankRow]:
    rows = snapshot.ranks
    return [rows[i] for i in np.flatnonzero(rows.table.statuses(status)).tolist()]


def _slow_in_order(snapshot: Snapshot) -> list[RankRow]:
    """Slow ranks, most suspicious first: the aggregator's order, then any it did not list, by score."""
    slow = {r.rank: r for r in _with_status(snapshot, SLOW)}
    listed = [slow[n] for n in dict.fromkeys(snapshot.stragglers) if n in slow]
    named = {r.rank for r in listed}
    rest = sorted((r for r in slow.values() if r.rank not in named), key=lambda r: (-r.score, r.rank))
    return listed + rest


def _cost(row: RankRow) -> str:
    average = " on average" if row.every is not None else ""  # an intermittent straggler: what it costs on average
    return f"+{fmt.ms_brief(row.excess_s)} ms per step{average}, the job loses {fmt.percent(row.score)}"


def _slow_rank(slow: list[RankRow], snapshot: Snapshot) -> Verdict:
    top = slow[0]
    phase = f" in {top.culprit_phase}" if top.culprit_phase else ""
    where = snapshot.where(top)
    often = f" on 1 step in {top.every:.0f}" if top.every is not None else ""  # slow on some steps only
    text = f"rank {top.rank}{f' ({where})' if where else ''} slow{phase}{often}: {_cost(top)}"
    if len(slow) > 1:
        text += f" (+{len(slow) - 1} more slow: {_names(r.rank for r in slow[1:4])}{' …' if len(slow) > 4 else ''})"
    text += _arrivals(top.last_arrivals, top.score)
    cause, said = _why(top.causes)
    text += said
    return Verdict(SLOW_RANK, BAD, text, [r.rank for r in slow[:8]], host=top.host, phase=top.culprit_phase,
                   excess_s=top.excess_s, loss=top.score, others=len(slow) - 1, cause=cause,
                   last_arrivals=top.last_arrivals, every=top.every)  # fmt: skip


def _why(causes: list[Cause]) -> tuple[Cause | None, str]:
    """The cause the verdict names and how it says it (watch/analysis/causes.py orders them, measured first):
    ", because ..." for the first that explains :data:`BECAUSE` of the excess, else ", partly because ..." for the
    first from a fifth (``PARTLY``); when none does but the rank's evidence ruled causes out, ", cause unknown: not GC, ..."."""
    cause = named_cause(causes)  # one that explains half first, whatever its basis
    if cause is not None:
        return cause, f"{_said(cause)}{cause.text}"
    unknown = next((c for c in causes if c.kind == UNKNOWN_CAUSE), None)
    if unknown is not None:
        return unknown, f", cause unknown: {unknown.text}"
    return None, ""


def _said(cause: Cause) -> str:
    """The words :func:`_why` put before a cause's text."""
    if cause.kind == UNKNOWN_CAUSE:
        return ", cause unknown: "
    return ", because " if cause.explains >= BECAUSE else ", partly because "


def _said_brief(cause: Cause) -> str:
    """The cause by its name alone, for :func:`brief`."""
    if cause.kind == UNKNOWN_CAUSE:
        return ", cause unknown"
    return f", {'because' if cause.explains >= BECAUSE else 'partly'}: {cause.kind.replace('_', ' ')}"


#: A culprit last at the collectives of this share of its steps is corroborated by its peers' waits.
CORROBORATES = 0.5
#: A culprit costing the job this much is expected to arrive last at some of its collectives, whatever the noise.
EXPECTED_LAST_FROM = 0.10


def brief(answer: Verdict, room: int = 0) -> str:
    """The verdict for a narrow screen, in ``room`` characters where it can be (0: the first brief form).

    Shortened step by step, each step only where the one before does not fit: the cause by its name alone and
    the arrivals left out (a rank's detail says both); "ms per step" as "ms/step"; "the job loses" as "job
    loses"; the other slow ranks as their count; the rank's place in the layout written tight, then left out.
    Who, where, how much and why stay, so that the answer fits in 80 columns with the longest cause's name;
    past the last form the screen cuts it."""
    text = answer.text
    cause = answer.cause
    said = _said(cause) + cause.text if cause is not None else ""
    if said and text.endswith(said):
        text = text[: -len(said)]
    elif cause is not None and text.endswith(cause.text):  # ", because on 4 of them: ..." (a node's, a stall's)
        head = text[: -len(cause.text)]
        cut = max(head.rfind(", because "), head.rfind(", partly because "), head.rfind(", cause unknown"))
        text = text[:cut] if cut >= 0 else text
    text = _SAID_OF_ARRIVALS.sub("", text)
    why = _said_brief(cause) if cause is not None else ""
    for shorten in _SHORTER:
        if not room or len(text) + len(why) <= room:
            break
        text = shorten(text)
    return text + why


def _compact_place(text: str) -> str:
    """ "rank 3071 (pp 5, tp 7, dp 63) slow ..." as "rank 3071 (pp5 tp7 dp63) slow ..."."""
    match = re.match(r"rank \d+ \(([^)]*)\)", text)
    if match is None:
        return text
    place = re.sub(r"([a-z]+) (\d+)", r"\1\2", match.group(1)).replace(", ", " ")
    return text[: match.start(1)] + place + text[match.end(1) :]


#: Each step of :func:`brief` past the first, in order.
_SHORTER = (
    lambda text: text.replace(" ms per step, ", " ms/step, ", 1).replace(" ms per step on average, ", " ms/step avg, ", 1),
    lambda text: text.replace(", the job loses ", ", job loses ", 1),
    lambda text: text.replace(", the job spends ", ", ", 1).replace("; the job spends ", "; ", 1).replace(" of its time in ", " in ", 1),
    lambda text: re.sub(r" \(\+(\d+) more slow: [^)]*\)", r" (+\1 more slow)", text, count=1),
    _compact_place,
    lambda text: re.sub(r"^(rank \d+) \([^)]*\)", r"\1", text, count=1),
    # a slow link: "node-c's network slow: out 3.03 MB/s vs 1.64 GB/s, job loses 89%"
    lambda text: re.sub(r" against ([^,]+) elsewhere,", r" vs \1,", text, count=1),
    lambda text: re.sub(
        r"'s network is slow: its links (?:(out|in) )?at ", lambda m: f"'s network slow: {m.group(1) or 'links'} ", text, count=1
    ),  # fmt: skip
)


def _arrivals(share: float | None, loss: float) -> str:
    """The second signal beside the phase times (watch/analysis/arrivals.py): the peers' waits corroborate the
    culprit when it arrives last at most of its steps' collectives; when a culprit that costs the job a tenth
    of its step is never last, the phase times are doubted aloud (its excess holds nobody back there)."""
    if share is None:
        return ""
    if share >= CORROBORATES:
        return f", and arrives last at {fmt.percent(share)} of its steps' collectives"
    if share == 0.0 and loss >= EXPECTED_LAST_FROM:
        return ", though it is never the last to arrive at its collectives"
    return ""


#: What :func:`_arrivals` adds, as :func:`brief` takes it out again.
_SAID_OF_ARRIVALS = re.compile(
    r", and arrives last at [^,]+ of its steps' collectives|, though it is never the last to arrive at its collectives"
)


def _slow_node(snapshot: Snapshot, slow: list[RankRow]) -> Verdict:
    hosts = set(snapshot.slow_hosts)
    on_nodes = [r for r in slow if r.host in hosts]
    worst = on_nodes[0] if on_nodes else slow[0]
    host = worst.host
    table = snapshot.ranks.table
    members = sorted(int(table.rank[i]) for i, h in enumerate(table.host) if h == host)
    phases = collections.Counter(r.culprit_phase for r in on_nodes if r.host == host and r.culprit_phase)
    phase = phases.most_common(1)[0][0] if phases else None
    where = f" in {phase}" if phase else ""
    text = f"node {host} slow{where} ({ranks_text(members)}): {_cost(worst)}"
    if len(hosts) > 1:
        others = sorted(hosts - {host})
        text += (
            f" (+{len(others)} more slow node{'s' if len(others) > 1 else ''}: {', '.join(others[:3])}{' …' if len(others) > 3 else ''})"
        )
    cause, said = _why(snapshot.node_causes.get(host, []))
    if cause is None:
        cause, said = _node_why([r for r in on_nodes if r.host == host], worst)
    text += said
    return Verdict(SLOW_NODE, BAD, text, members, host=host, phase=phase, excess_s=worst.excess_s, loss=worst.score,
                   others=len(hosts) - 1, cause=cause)  # fmt: skip


def _node_why(slow_here: list[RankRow], worst: RankRow) -> tuple[Cause | None, str]:
    """A slow node's cause: its worst rank's named cause, when half its slow ranks or more are named with the
    same kind (", because on ranks 40 and 5 more of its ranks: it spends ..."); else nothing said."""
    cause = named_cause(worst.causes)
    if cause is None:
        return None, ""
    alike = [r for r in slow_here if (c := named_cause(r.causes)) is not None and c.kind == cause.kind]
    if 2 * len(alike) < len(slow_here):
        return None, ""
    more = len(alike) - 1
    who = f"rank {worst.rank}" + (f" and {more} more of its ranks" if more else "")
    return cause, f"{_said(cause).rstrip()} on {who}: {cause.text}"


def _slow_link(snapshot: Snapshot) -> Verdict:
    """The costliest slow link (watch/analysis/slow_links.py says why and how it is costed); nobody's own work."""
    worst, *more = snapshot.slow_links
    text = worst.text
    if more:
        text += f" (+{len(more)} more slow link{'s' if len(more) > 1 else ''}: {', '.join(_link_name(m) for m in more[:3])})"
    # No rank is named: its network is slow, not its ranks' work (``host``/``hosts`` say where).
    return Verdict(SLOW_LINK, BAD, text, [], host=worst.host, excess_s=worst.excess_s, loss=worst.loss,
                   others=len(more), hosts=list(worst.hosts) if worst.host is None else None)  # fmt: skip


def _link_name(link: SlowLink) -> str:
    return link.host if link.host is not None else "–".join(link.hosts)


def _stalled(snapshot: Snapshot, stalled: list[RankRow]) -> Verdict:
    longest = max(r.stalled_s or 0.0 for r in stalled)
    steps = {r.stalled_step for r in stalled if r.stalled_step is not None}
    at = f" at step {steps.pop()}" if len(steps) == 1 else ""
    head = f"job stalled{at} for {_ago(longest)}"
    culprits = [row for n in snapshot.waiting_for if (row := snapshot.row(n)) is not None]
    unheard = [n for n in snapshot.waiting_for if snapshot.row(n) is None]
    if unheard and not culprits:
        text = f"{head}: waiting for {ranks_text(unheard[:8])}{' …' if len(unheard) > 8 else ''} (never reported)"
        return Verdict(STALLED_JOB, BAD, text, unheard[:8], others=max(0, len(unheard) - 8))
    if not culprits:
        phases = {r.stalled_phase for r in stalled}
        where = f" in {phases.pop()}" if len(phases) == 1 and None not in phases else ""
        text = f"{head}: {_count(len(stalled), 'rank')} stuck{where}, no rank stands out"
        cause, said = _stall_why(stalled)
        text += said + " (press t for stacks)"
        return Verdict(STALLED_JOB, BAD, text, [r.rank for r in stalled[:8]], others=max(0, len(stalled) - 8), cause=cause)
    first = culprits[0]
    if first.status == SILENT:
        what = f"silent {_ago(first.last_seen_s)}"
        phase = None
    else:
        phase = first.stalled_phase
        what = f"in {phase}" if phase else "outside every phase"
        if first.stalled_step is not None and not at:
            what += f" at step {first.stalled_step}"
    names = ranks_text(r.rank for r in culprits[:8])
    text = f"{head}: waiting for {names} on {first.host} ({what})"
    cause, said = _why(first.causes)
    text += said
    return Verdict(STALLED_JOB, BAD, text, [r.rank for r in culprits[:8]], host=first.host, phase=phase,
                   others=max(0, len(culprits) - 8), cause=cause)  # fmt: skip


def _stall_why(stalled: list[RankRow]) -> tuple[Cause | None, str]:
    """A stall no rank stands out in: the cause its stuck ranks' stacks share, when half of them or more say the
    same (", because on 4 of them: its training thread is compiling ..."); else nothing said."""
    kinds = collections.Counter((c.kind, c.text) for r in stalled if (c := named_cause(r.causes)) is not None)
    if not kinds:
        return None, ""
    (kind, _), count = kinds.most_common(1)[0]
    if 2 * count < len(stalled):
        return None, ""
    cause = next(c for r in stalled if (c := named_cause(r.causes)) is not None and c.kind == kind)
    who = "every one of them" if count == len(stalled) else f"{count} of them"
    return cause, f"{_said(cause).rstrip()} on {who}: {cause.text}"


def _silent(snapshot: Snapshot, silent: list[RankRow]) -> Verdict:
    table = snapshot.ranks.table
    by_host: dict[str, list[int]] = {}
    for i, host in enumerate(table.host):
        by_host.setdefault(host, []).append(i)
    quiet = table.statuses(SILENT)
    gone = sorted({r.host for r in silent if quiet[by_host[r.host]].all()})
    longest = max(r.last_seen_s for r in silent)
    if gone and len(by_host) > 1:
        host = gone[0]
        members = sorted(int(table.rank[i]) for i in by_host[host])
        more = f" (+{len(gone) - 1} more silent nodes)" if len(gone) > 1 else ""
        text = f"node {host} silent for {_ago(longest)} ({ranks_text(members)}): dead, frozen or cut off{more}"
        return Verdict(SILENT_RANKS, BAD, text, members[:8], host=host, others=len(silent) - min(8, len(members)))
    first = max(silent, key=lambda r: r.last_seen_s)
    named = sorted(r.rank for r in silent)
    text = f"{ranks_text(named[:8])}{' …' if len(named) > 8 else ''} silent for {_ago(longest)} (on {first.host}): dead, frozen or cut off"
    return Verdict(SILENT_RANKS, BAD, text, named[:8], host=first.host, others=max(0, len(named) - 8))


def _never_reported(snapshot: Snapshot) -> list[int]:
    world = snapshot.world_size
    if world is None or len(snapshot.ranks) >= world:
        return []
    heard = set(snapshot.ranks.table.rank.tolist())
    return [n for n in range(world) if n not in heard]


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'s' if n != 1 else ''}"


def _names(ranks: Iterable[int]) -> str:
    return ", ".join(str(n) for n in ranks)
