"""The stall verdict over columns says what the verdict over one Position per rank said, word for word.

watch/analysis/stalls.py judges a hang as numpy masks over columns the job state
keeps of each rank's state (watch/engine/rank_scalars.py: ``take_state``), so that
16,384 stuck ranks cost a snapshot a few operations, not a Python pass each. The
reference here is the verdict as it was written over a list of positions (a
copy, kept only to hold the columns to it); random small jobs, fed through the
real aggregator where the columns come from, must get the same stalled ranks,
the same ranks waited for and the same line.
"""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest

from ranktop.watch import format as fmt
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis import causes, stalls
from ranktop.watch.analysis.silence import silent_ranks
from ranktop.watch.analysis.stacks import common_place
from ranktop.watch.analysis.stalls import Position, StallPolicy, StallReport, assess
from ranktop.watch.format import ranks_text
from ranktop.watch.model.rank_table import median_of
from ranktop.wire.names import STANDARD_PHASES
import messages

PHASES = [None, "forward", "backward", "optimizer", "data", "comm", "custom"]
OPS = ["all_reduce", "all_gather", "broadcast", 7, None]


# -- the reference: the verdict over positions, as it was before the columns ------------------------


def reference(positions, policy=StallPolicy(), world=None) -> StallReport:
    positions = sorted(positions, key=lambda p: p.rank)
    job_median = median_of(p.median_step_s for p in positions if p.median_step_s is not None)
    stalled = {}
    for p in positions:
        if p.silent:
            continue
        median = p.median_step_s if p.median_step_s is not None else job_median
        if p.last < 0 and median is None:
            continue
        if p.stuck_s > policy.limit(median):
            stalled[p.rank] = p
    if not stalled:
        return StallReport({}, [], None)
    culprits, how = _culprits(positions, stalled)
    everyone = len(stalled) == sum(1 for p in positions if not p.silent)
    if (not culprits or (everyone and how in ("behind", "collective", "phase"))) and world is not None:
        heard = {p.rank for p in positions}
        unheard = [n for n in range(world) if n not in heard] if len(heard) < world else []
        if unheard:
            group = list(stalled.values())
            text = (
                f"{ranks_text(stalled)} stalled {where_text(group)} for {fmt.ago(max(p.stuck_s for p in group))}, "
                f"waiting for {ranks_text(unheard)}: never heard from (silent since this viewer started)"
            )
            return StallReport(stalled, unheard, text)
    return StallReport(stalled, [p.rank for p in culprits], _diagnosis(stalled, culprits, how, everyone))


def _culprits(positions, stalled):
    silent = [p for p in positions if p.silent]
    if silent:
        return silent, "silent"
    live = [p for p in positions if not p.silent]
    front = max(p.step for p in stalled.values())
    behind = [p for p in live if p.step < front]
    if behind:
        return behind, "behind"
    at_front = [p for p in live if p.step == front]
    inside = [p for p in at_front if p.inside_collective]
    outside = [p for p in at_front if not p.inside_collective]
    if inside and outside and any(p.rank in stalled for p in inside):
        return outside, "outside"
    seqs = {p.rank: p.collective.get("seq") for p in at_front if p.collective and isinstance(p.collective.get("seq"), int)}
    if seqs and len(seqs) == len(at_front):
        latest = max(seq for rank, seq in seqs.items() if rank in stalled) if set(seqs) & set(stalled) else None
        missing = [p for p in at_front if latest is not None and seqs[p.rank] < latest]
        if missing and len(missing) < len(at_front):
            return missing, "collective"
    phases = collections.Counter(p.phase for p in at_front if p.rank in stalled)
    if len({p.phase for p in at_front}) > 1 and phases:
        (top, count), *rest = phases.most_common()
        odd = [p for p in at_front if p.phase != top]
        if count > len(odd):
            return odd, "phase"
        order = {name: i for i, name in enumerate(STANDARD_PHASES)}
        if all(p.phase in order for p in at_front):
            first = min(order[p.phase] for p in at_front)
            earliest = [p for p in at_front if order[p.phase] == first]
            if len(earliest) < len(at_front):
                return earliest, "phase"
    return [], ""


def where_text(positions):
    phases, steps, coll = common_place(positions)
    parts = [f"in {phase}" if (phase := phases.pop()) else "between phases"] if len(phases) == 1 else []
    parts.append(f"at step {steps.pop()}" if len(steps) == 1 else f"at steps {min(steps)}-{max(steps)}")
    if coll:
        parts.append(f"({coll})")
    return " ".join(parts)


def _diagnosis(stalled, culprits, how, everyone):
    culprit_ranks = {p.rank for p in culprits}
    waiting = [p for p in stalled.values() if p.rank not in culprit_ranks]
    if not culprits:
        group = list(stalled.values())
        text = f"{ranks_text(stalled)} stalled {where_text(group)} for {fmt.ago(max(p.stuck_s for p in group))}"
        return text + ("; no rank stands out (all at the same place)" if everyone else "")
    if how == "silent":
        what = f"silent, last seen {where_text(culprits)}"
    else:
        what = where_text(culprits)
        if how == "outside":
            what += ", not in a collective"
        elif how == "collective":
            what += ", never entered the others' last collective"
    if not waiting:
        return f"{ranks_text(culprit_ranks)} stalled {what}"
    longest = max(p.stuck_s for p in waiting)
    return (
        f"{ranks_text(p.rank for p in waiting)} stalled {where_text(waiting)} for {fmt.ago(longest)}, "
        f"waiting for {ranks_text(culprit_ranks)}: {what}"
    )


def same(new: StallReport, old: StallReport) -> None:
    assert dict(new.stalled) == old.stalled
    assert list(new.stalled) == sorted(old.stalled)
    assert new.stalled_ranks().tolist() == sorted(old.stalled)
    assert new.waiting_for == old.waiting_for
    assert new.diagnosis == old.diagnosis


# -- random small jobs ----------------------------------------------------------------------------


def random_collective(rng: random.Random) -> dict | None:
    kind = rng.random()
    if kind < 0.15:
        return None
    if kind < 0.2:
        return {}
    coll: dict = {"op": rng.choice(OPS), "inside": rng.choice([True, False, 1, 0, None])}
    if rng.random() < 0.85:
        coll["seq"] = rng.choice([40, 41, 42, 42, True, "x", 2.5])
    if rng.random() < 0.7:
        coll["b"] = rng.choice([0, 4_000_000, 2_000_000, -3, True, 1.5])
    return coll


def random_positions(rng: random.Random, n: int) -> list[Position]:
    front = rng.randint(3, 6)
    out = []
    for rank in rng.sample(range(n + 3), n):
        last = rng.choice([front - 1, front - 1, front - 2, -1])
        in_step = rng.random() < 0.7
        out.append(Position(
            rank=rank, silent=rng.random() < 0.08, step=last + 1 if not in_step or rng.random() < 0.8 else last + 2,
            last=last, in_step=in_step, phase=rng.choice(PHASES), stuck_s=rng.choice([0.1, 1.0, 3.0, 9.0, 30.0, 130.0]),
            median_step_s=rng.choice([None, None, 0.05, 0.5, 1.0]), collective=random_collective(rng),
        ))  # fmt: skip
    return out


@pytest.mark.parametrize("seed", range(400))
def test_the_verdict_over_columns_is_the_verdict_over_positions(seed):
    rng = random.Random(seed)
    positions = random_positions(rng, rng.randint(1, 9))
    world = rng.choice([None, None, max(p.rank for p in positions) + rng.randint(1, 3)])
    policy = rng.choice([StallPolicy(), StallPolicy(2.0, 0.5)])
    same(assess(positions, policy, world), reference(positions, policy, world))


def random_hang(rng: random.Random, n: int) -> list[Position]:
    """Every rank live and at one step, as in a hang: the cases told apart by collectives and phases."""
    phases = rng.sample(PHASES, rng.randint(1, 3))
    seqs = rng.choice([[42], [41, 42], [41, 42, None]])
    inside = rng.choice([0.0, 1.0, 0.6])
    out = []
    for rank in rng.sample(range(n + 2), n):
        coll = {"op": rng.choice(["all_reduce", "all_gather"]), "inside": rng.random() < inside, "b": 4_000_000}
        if (seq := rng.choice(seqs)) is not None:
            coll["seq"] = seq
        out.append(Position(rank=rank, silent=False, step=7, last=6, in_step=True, phase=rng.choice(phases),
                            stuck_s=rng.choice([1.0, 30.0, 30.0, 60.0]), median_step_s=0.5, collective=coll))  # fmt: skip
    return out


@pytest.mark.parametrize("seed", range(300))
def test_a_hang_over_columns_names_whom_the_positions_named(seed):
    rng = random.Random(seed)
    positions = random_hang(rng, rng.randint(2, 9))
    world = rng.choice([None, max(p.rank for p in positions) + rng.randint(1, 2)])
    same(assess(positions, StallPolicy(), world), reference(positions, StallPolicy(), world))


def test_where_text_over_columns_reads_as_before():
    rng = random.Random(7)
    for _ in range(300):
        positions = sorted(random_positions(rng, rng.randint(1, 6)), key=lambda p: p.rank)
        assert stalls.where_text(positions) == where_text(positions)


# -- through the aggregator: the columns the job state keeps of each state ----------------------------


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def random_state(rng: random.Random, front: int) -> dict:
    last = rng.choice([front - 1, front - 1, front - 2, None])
    in_step = rng.choice([True, True, False, None])
    st = {"last": last, "in_step": in_step, "phase": rng.choice(PHASES), "step": rng.choice([None, front, front + 1]),
          "step_age": rng.choice([None, 0.5, 4.0, 40.0]), "median_step_s": rng.choice([None, 0.05, 1.0])}  # fmt: skip
    coll = random_collective(rng)
    if coll is not None:
        st["collective"] = {k: v for k, v in coll.items() if v is not None}
    if rng.random() < 0.5:
        st["ev"] = {"win": 5.0, **{k: rng.choice([0.001, 0.2]) for k in ("gc", "runq", "nvcsw") if rng.random() < 0.7}}
    return {k: v for k, v in st.items() if v is not None}


def view_of(agg: Aggregator):
    now = agg.now()
    with agg._lock:
        relays = agg._endpoints.view(now)
        return agg.store.gather(now, now, relays, agg._endpoints, True)


def positions_of(view, now, silent):
    """The positions of a view's ranks, one Python call per rank (as the verdict read them before the columns)."""
    out = []
    for i, state in enumerate(view.states):
        median = float(view.median_wall[i])
        p = stalls.position(
            int(view.rank[i]), state, now=now, state_at=float(view.state_at[i]), progress_at=float(view.progress_at[i]),
            silent=bool(silent[i]), window_median_s=None if median != median else median, stepped_at=float(view.stepped_at[i]),
        )  # fmt: skip
        if p is not None:
            out.append(p)
    return out


@pytest.mark.parametrize("seed", range(60))
def test_a_jobs_columns_give_the_verdict_its_states_give(seed):
    rng = random.Random(seed)
    clock = Clock()
    world = rng.randint(2, 10)
    agg = Aggregator("j", clock=clock, wall_clock=clock)
    heard = rng.sample(range(world), rng.randint(1, world))
    for rank in heard:
        agg.ingest(messages.hello(rank, world))
    for rounds in range(rng.randint(1, 4)):
        clock.now += rng.choice([0.5, 2.0, 5.0])
        for rank in heard:
            if rng.random() < 0.8:
                agg.ingest(messages.heartbeat(rank, random_state(rng, 5), world=world))
    clock.now += rng.choice([0.1, 2.5, 12.0])
    view = view_of(agg)
    silent = silent_ranks(view)
    policy = StallPolicy()
    now = view.now - view.relays.behind_s
    new = stalls.assess_places(stalls.places(view, now, silent), policy, world)
    old = reference(positions_of(view, now, silent), policy, world)
    same(new, old)
    for rank, p in old.stalled.items():
        assert new.stalled.where(rank) == (p.phase, p.stuck_s, p.step)
    for field in ("gc", "runq", "nvcsw"):  # the evidence columns: what a pass over the states read
        np.testing.assert_array_equal(view.evidence[field], causes.figures(view.states, field))


def test_a_hang_of_thousands_of_ranks_builds_the_positions_it_is_asked_for_only():
    """16,384 stuck ranks: the report names them all, and a Position is made for the rows read."""
    clock = Clock()
    world = 2048
    agg = Aggregator("j", clock=clock, wall_clock=clock)
    for rank in range(world):
        agg.ingest(messages.hello(rank, world))
    for rank in range(world):
        coll = {"op": "all_reduce", "seq": 41 if rank == 77 else 42, "inside": rank != 77}
        agg.ingest(messages.heartbeat(rank, {"last": 9, "step": 10, "in_step": True, "phase": "backward", "step_age": 1.0,
                                             "collective": coll}, world=world))  # fmt: skip
    clock.now += 30.0
    report = stalls.stall_report(view_of(agg), np.zeros(world, bool), StallPolicy())
    assert isinstance(report.stalled, stalls.StalledPositions) and len(report.stalled) == world
    assert report.waiting_for == [77]
    assert report.diagnosis.endswith("waiting for rank 77: in backward at step 10 (last: all_reduce #41), not in a collective")
    assert report.stalled[77].collective["seq"] == 41 and report.stalled[5].phase == "backward"
    assert len(report.stalled._built) == 2  # (only the two read)
    assert 5000 not in report.stalled and report.stalled.get(5000) is None and "5" not in report.stalled
    for rank in (5, 77, 2047):  # what the history reads of each without building its Position
        p = report.stalled[rank]
        assert report.stalled.where(rank) == (p.phase, p.stuck_s, p.step)
