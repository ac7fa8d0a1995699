"""One owner per rank (issue 50): the rank store keeps a rank in one row, a restart is one ``forget(row)``, a snapshot
gathers everything it reads (the collective sums included) in one hold of the lock, and the judge gets data, no
callback, and holds all the memory its verdicts keep: ``snapshot = judge(gather())`` (watch/engine/rank_store.py,
watch/aggregator.py, watch/analysis/judge.py)."""

from __future__ import annotations

import json
import threading
import typing

import messages
import pytest
from messages import Clock

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis import judge
from ranktop.watch.analysis.judge import COLLECTIVES_CACHED_FROM
from ranktop.watch.engine.rank_store import RankStore
from ranktop.watch.model.json_doc import document


class CountingLock:
    """A lock that counts how often it is taken (the aggregator's ``_lock`` swapped for one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> bool:
        self._lock.acquire()
        self.taken += 1
        return True

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def acquire(self, *args: typing.Any, **kwargs: typing.Any) -> bool:
        got = self._lock.acquire(*args, **kwargs)
        self.taken += bool(got)
        return got

    def release(self) -> None:
        self._lock.release()


def run(agg: Aggregator, world: int, steps: int, slow_rank: int = 1, first: int = 0, pid: int = 100, mem: bool = False) -> None:
    """A DDP-like job: every step ends in an all-reduce whose wait is the others' wait for the slow rank."""
    for r in range(world):
        agg.ingest(messages.hello(r, world, f"node{r // 8}", pid=pid + r))
    for n in range(first, first + steps):
        for r in range(world):
            slow = 0.02 if r == slow_rank else 0.0
            wait = 0.021 - slow
            call = {"op": "all_reduce", "seq": n + 1, "b": 1 << 20, "dt": "float32", "g": world, "d": wait, "n": n,
                    "ph": "backward", "t0": 100.0 + n}  # fmt: skip
            p = {"forward": 0.01 + slow, "backward": 0.03 + wait}
            state = {"step": n + 1, "last": n, "mem": {"rss": (1000 + n) << 20}} if mem else None
            agg.ingest(messages.steps(r, [{"n": n, "t": 100.0 + n, "w": sum(p.values()), "p": p}], calls=[call], state=state,
                                      world=world, pid=pid + r))  # fmt: skip


@pytest.mark.parametrize("world", [4, COLLECTIVES_CACHED_FROM])
def test_a_snapshot_takes_the_lock_once_and_its_collective_rows_come_from_that_hold(world):
    agg = Aggregator("j", clock=Clock())
    run(agg, world, 12)
    lock = agg._lock = CountingLock()
    snap = agg.snapshot()
    assert lock.taken == 1
    by_rank = {row.rank for row in snap.collectives}
    assert -1 in by_rank and 1 in by_rank  # the job's rows, and the slow rank's own (a rank that matters)
    assert snap.ranks[snap.stragglers[0]].rank == 1
    lock.taken = 0
    again = agg.snapshot()  # a big job's rows are reused for a while: still one hold
    assert lock.taken == 1 and {row.rank for row in again.collectives} == by_rank


def test_the_judge_takes_data_and_no_callback():
    hints = {**typing.get_type_hints(judge.Judge.__call__), **typing.get_type_hints(judge.Extras), **typing.get_type_hints(judge.Asks)}
    for name, hint in hints.items():
        assert hint is not typing.Any and "Callable" not in str(hint), name
    assert not any(callable(getattr(judge.Extras(job="j", elapsed_s=0.0, behind_s=0.0), f)) for f in judge.Extras.__dataclass_fields__)
    assert not any(callable(getattr(judge.Asks(), f)) for f in judge.Asks.__dataclass_fields__)


def same(a, b) -> bool:
    """Two snapshots say the same: their ``--json`` documents match (NaN as NaN)."""
    return json.dumps(document(a), sort_keys=True, default=str) == json.dumps(document(b), sort_keys=True, default=str)


def asked(j: judge.Judge, agg: Aggregator) -> tuple:
    a = j.asks(agg.now(), len(agg.store), agg.store.world)
    return a.recent, a.collectives, a.every_rank_up_to, None if a.watch is None else a.watch.tolist()


@pytest.mark.parametrize("world", [8, COLLECTIVES_CACHED_FROM])
def test_the_aggregator_s_snapshot_is_its_judge_of_its_gather(world):
    """The pipe, as a spec: ``snapshot = judge(gather())``. A second judge, fed only the aggregator's gathered views,
    says what the aggregator's snapshots say, snapshot after snapshot (a slow rank found, its excess kept and
    averaged, a big job's collective rows reused between workings out, then worked out again): all the memory the
    verdicts keep is the judge's, none of it the aggregator's. It asks the next gather the same too."""
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    twin = judge.Judge(agg.judge.policy)
    slow_seen = 0
    for k in range(4):
        run(agg, world, 12, first=12 * k)
        clock.now += 0.5
        assert asked(twin, agg) == asked(agg.judge, agg)
        view, extras = agg.gather()  # (at the same instant as the snapshot's own gather: the same view)
        snap = agg.snapshot()
        mine = twin(view, extras)
        assert same(mine, snap), k
        slow_seen += snap.ranks[snap.stragglers[0]].rank == 1 if snap.stragglers else 0
    assert slow_seen and snap.collectives  # (what was compared says something: a straggler, collective rows)


def test_snapshots_taken_at_once_judge_in_turn():
    """The judge's one lock is taken once a snapshot, around the whole judging (its books' memory moves together)."""
    agg = Aggregator("j", clock=Clock())
    run(agg, 4, 12)
    lock = agg.judge._lock = CountingLock()  # type: ignore[assignment]
    agg.snapshot()
    assert lock.taken == 1


def test_a_restart_is_one_forget_of_the_rank_s_row(monkeypatch):
    forgotten = []
    forget = RankStore.forget
    monkeypatch.setattr(RankStore, "forget", lambda self, row: (forgotten.append(row), forget(self, row))[1])
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    run(agg, 4, 12, mem=True)
    before = agg.snapshot()
    assert before.ranks[2].steps_seen == 12 and before.ranks[2].memory is not None
    assert any(row.rank == 2 for row in before.collectives)  # (a small job: every rank has rows of its own)
    row = agg.store.record(2).row
    clock.now += 1
    agg.ingest(messages.hello(2, 4, "node0", pid=902), "tcp://node0:1")  # rank 2 is back as a new process
    assert forgotten == [row]
    record = agg.store.record(2)
    assert (record.steps_seen, record.last_step, record.steps, record.first_step) == (0, -1, [], None)
    assert record.meta.pid == 902 and record.endpoint == "tcp://node0:1"  # what the new process said, and where from
    snap = agg.snapshot()
    assert snap.restarts == 1 and snap.ranks[2].steps_seen == 0 and snap.ranks[2].memory is None
    assert not [r for r in snap.collectives if r.rank == 2]  # its collective sums went with it
    assert [r.steps_seen for r in snap.ranks if r.rank != 2] == [12, 12, 12]  # the others' rows untouched
    agg.ingest(messages.hello(2, 4, "node0", pid=902))  # the same process's hello again: nothing forgotten
    assert forgotten == [row]


def test_forget_alone_empties_a_row_and_keeps_where_its_rank_is_heard():
    agg = Aggregator("j", clock=Clock())
    run(agg, 2, 8, mem=True)
    store = agg.store
    row = store.record(0).row
    with agg._lock:
        store.forget(row)
    record = store.record(0)
    assert (record.steps_seen, record.steps, record.last_step_end) == (0, [], None)
    snap = agg.snapshot()
    assert snap.ranks[0].memory is None and snap.ranks[0].steps_seen == 0 and snap.ranks[1].steps_seen == 8
    assert not [r for r in snap.collectives if r.rank == 0]
