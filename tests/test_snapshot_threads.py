"""Snapshots taken on one thread while the job changes on another are each whole: nothing half-written.

The receiver thread ingests messages under the aggregator's lock; the UI thread takes snapshots, gathering
under the same lock and building with it released (watch/aggregator.py). Nothing the built snapshot reads may
be a live window another thread is writing. Here a feeder ingests a DDP-like job as fast as it can, with the
interpreter switching threads every few microseconds, while snapshots are taken in a loop; every snapshot must
hold together: the job's collective totals are the sum of its ranks', every rank's counts agree with its steps.

The feeder feeds in rounds and, between them, holds back until a snapshot begun after the round has been judged
(_Pacer): that snapshots were taken while the job changed is true by construction, on a machine of any speed, not
a count a fast machine happens to reach before the feed ends.
"""

from __future__ import annotations

import sys
import threading

import messages

from ranktop.probe.process_groups import state_layout
from ranktop.watch.aggregator import Aggregator
from ranktop.wire import schema
from ranktop.wire import names

WORLD = 8
STEPS = 400
OPS = ("ddp_allreduce", "all_gather_into_tensor")


def _bodies(world: int, steps: int) -> list[tuple[int, dict]]:
    """Each rank's steps messages, one step each with two collectives of different ops, as plain bodies."""
    out = []
    seq = 0
    for n in range(steps):
        for r in range(world):
            calls = []
            for i, op in enumerate(OPS):
                seq += 1
                calls.append({"op": op, "seq": seq, "b": 1024 << i, "dt": "float32", "g": world, "d": 0.002,
                              "n": n, "ph": "backward", "t0": 10.0 + n + i * 0.003})  # fmt: skip
            p = {"forward": 0.010, "backward": 0.015}
            body = {"steps": [{"n": n, "t": 100.0 + n, "w": 0.03, "p": p}], **messages.collectives(calls),
                    "state": {"step": n + 1, "last": n, "in_step": False, "phase": None}}  # fmt: skip
            out.append((r, body))
    return out


def _check(snap) -> None:
    """What must hold in any snapshot of the job, however far along it is."""
    by_key = {(c.rank, c.op): c for c in snap.collectives}
    for op in OPS:
        job = by_key.get((-1, op))
        if job is None:
            continue
        ranks = [c for (rank, o), c in by_key.items() if o == op and rank >= 0]
        assert job.calls == sum(c.calls for c in ranks), (op, job.calls, [c.calls for c in ranks])
        assert job.bytes == sum(c.bytes for c in ranks)
    for row in snap.ranks:
        assert row.steps_seen == row.step + 1 and row.missed == 0  # one step a message, in order, none lost


class _Pacer:
    """Between the feeder's rounds, a snapshot judged: the feeder waits (fed) until a watcher has judged a snapshot
    it began once the round was in (begin, judged). A watcher that failed stops the pacing, so the feeder finishes
    and the test reports the failure rather than hanging."""

    WAIT_S = 60.0  # a round's snapshot takes milliseconds on a quiet machine; far past any load

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.taken = 0  # snapshots judged in all
        self._rounds = 0  # rounds fed so far
        self._seen = -1  # the most rounds a judged snapshot had been begun after
        self._stopped = False

    def begin(self) -> int:
        """The rounds fed before a snapshot begins: what the snapshot about to be taken has seen at least."""
        with self._cond:
            return self._rounds

    def judged(self, rounds: int) -> None:
        with self._cond:
            self.taken += 1
            self._seen = max(self._seen, rounds)
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def fed(self) -> None:
        """A round is in: wait until a snapshot begun after it has been judged."""
        with self._cond:
            self._rounds += 1
            got = self._cond.wait_for(lambda: self._seen >= self._rounds or self._stopped, self.WAIT_S)
            assert got, f"no snapshot judged after round {self._rounds} in {self.WAIT_S} s ({self.taken} judged in all)"


def _race(*targets) -> None:
    """Run each target on a thread of its own, switching threads every few bytecodes: any window read unlocked
    shows."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=t) for t in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(interval)


def test_snapshots_taken_while_the_job_changes_each_hold_together():
    agg = Aggregator("j")
    for r in range(WORLD):
        agg.ingest(messages.hello(r, WORLD, "h", pid=r))
    decoded = [messages.decoded(names.STEPS, r, body, world=WORLD, pid=r) for r, body in _bodies(WORLD, STEPS)]
    done = threading.Event()
    pacer = _Pacer()
    failures: list[BaseException] = []

    def feed() -> None:  # ingest, not ingest_batch: no holding back while a snapshot is built, the lock alone
        try:
            for i, msg in enumerate(decoded):
                agg.ingest(msg, "tcp://h:1")
                if i % 100 == 99:  # every so often, a snapshot begun since judged before going on
                    pacer.fed()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failures.append(exc)
        finally:
            done.set()

    def watch() -> None:
        try:
            while not done.is_set():
                rounds = pacer.begin()
                _check(agg.snapshot())
                pacer.judged(rounds)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failures.append(exc)
            pacer.stop()

    _race(feed, watch)
    assert not failures, failures[0]
    assert pacer.taken >= len(decoded) // 100  # snapshots really were taken while it changed
    snap = agg.snapshot()
    _check(snap)
    assert {r.steps_seen for r in snap.ranks} == {STEPS}
    assert {(c.rank, c.op): c.calls for c in snap.collectives if c.rank < 0} == {(-1, op): WORLD * STEPS for op in OPS}


def _layout_hello(rank: int, dims: str, pid: int):
    """A hello of an init_device_mesh job of ``dims`` (e.g. "pp=2,dp=4"), as rank ``rank``'s process ``pid``."""
    groups = [dict(entry, desc="mesh_" + entry["role"], role="") for entry in state_layout(dims, rank, WORLD)]
    body = {"job": "j", "rank": rank, "ts": 1.0, "host": f"h{rank // 4}", "world": WORLD, "local_rank": rank % 4,
            "pid": pid, "groups": groups}  # fmt: skip
    return schema.decode(messages.raw(names.HELLO, body))


def _check_judged(snap, restarts_before: int) -> int:
    """What the analysis side works out of a gathered view must agree with itself: the peers and stages with the
    layout learned, the life with the ranks, the statuses with the stalls."""
    roles = set(snap.layout_roles)
    assert len(snap.ranks) <= WORLD
    for row in snap.ranks:
        assert row.coords is None or set(row.coords) <= roles, (row.rank, row.coords, roles)
        assert row.missed == 0 and row.steps_seen <= row.step + 1
    if snap.stages:
        assert "pp" in roles and sum(s.ranks for s in snap.stages) <= WORLD
        assert {s.stage for s in snap.stages} <= {row.coords["pp"] for row in snap.ranks if row.coords and "pp" in row.coords}
    assert snap.restarts >= restarts_before  # counted, never forgotten
    assert set(snap.not_back) <= set(range(WORLD)) and set(snap.failed_ranks) == set()
    assert set(snap.waiting_for) <= set(range(WORLD))
    return snap.restarts


def test_judging_a_job_whose_layout_and_processes_change_under_it_holds_together():
    """The feeder restarts ranks (new processes, fresh windows) and changes the job's layout (the hellos' groups:
    two pipeline stages, then four) while snapshots are judged on another thread with the lock released: every
    snapshot's peers, stages and life agree with its own ranks."""
    agg = Aggregator("j")
    feed_rounds: list[list] = []
    for k in range(24):
        dims = "pp=2,dp=4" if k % 2 == 0 else "pp=4,dp=2"
        pid = 1000 + k // 6  # every sixth round, every rank a new process: a restart
        feed_rounds.append(feed_msgs := [])
        for r in range(WORLD):
            feed_msgs.append(_layout_hello(r, dims, pid))
            for n in range(k * 8, k * 8 + 8):
                p = {"forward": 0.010 * (1 + r // 4), "backward": 0.015}
                feed_msgs.append(messages.decoded(names.STEPS, r, {"steps": [{"n": n, "t": 100.0 + n, "w": 0.03, "p": p}],
                                                                      "state": {"step": n + 1, "last": n, "in_step": False, "phase": None}},
                                                  world=WORLD, pid=pid))  # fmt: skip
    done = threading.Event()
    pacer = _Pacer()
    failures: list[BaseException] = []

    def feed() -> None:
        try:
            for k, round_msgs in enumerate(feed_rounds):
                for msg in round_msgs:
                    agg.ingest(msg, "tcp://h:1")
                if k % 4 == 3 and k < len(feed_rounds) - 1:  # every fourth round but the last, a snapshot judged
                    pacer.fed()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failures.append(exc)
        finally:
            done.set()

    def watch() -> None:
        restarts = 0
        try:
            while not done.is_set():
                rounds = pacer.begin()
                restarts = _check_judged(agg.snapshot(), restarts)
                pacer.judged(rounds)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failures.append(exc)
            pacer.stop()

    _race(feed, watch, watch)
    assert not failures, failures[0]
    assert pacer.taken >= 4  # snapshots really were judged while it changed
    snap = agg.snapshot()
    _check_judged(snap, 0)
    assert len(snap.ranks) == WORLD and snap.restarts == 3 and snap.layout_roles == ["pp", "dp"] and len(snap.stages) == 4
