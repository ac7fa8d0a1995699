"""Restarts and the end of a job, as the aggregator hears them: messages from the probe's own code, no sockets."""

from __future__ import annotations

import time

import messages
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.engine.lifecycle import ENDED, RUNNING, WAITING, life_line, ordinal
from ranktop.wire import schema
from ranktop.wire.names import HEARTBEAT
from ranktop.watch.model.json_doc import document


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def step(n, wall=0.02):
    return {"n": n, "t": 100.0 + n * wall, "w": wall, "p": {"forward": wall / 2, "backward": wall / 2}}


def run(agg, clock, world, first, count, pid=None, wall=0.02):
    """``count`` steps of every rank of a job of ``world``, each rank the process ``pid + rank`` when given."""
    who = {} if pid is None else None
    for r in range(world):
        extra = {} if who is not None else {"pid": pid + r}
        agg.ingest(messages.hello(r, world, **extra))
    for n in range(first, first + count):
        clock.now += wall
        for r in range(world):
            extra = {} if who is not None else {"pid": pid + r}
            agg.ingest(messages.steps(r, [step(n, wall)], world=world, **extra))


def bye(rank, how="clean", world=2, **who):
    return messages.decoded(HEARTBEAT, rank, {"exit": how}, world=world, **who)


def started_three_times(clock):
    """A job of 2 ranks, 3 steps, started three times (processes 10-11, then 20-21, then 30-31): two restarts."""
    agg = Aggregator("j", clock=clock)
    for pid in (10, 20, 30):
        run(agg, clock, 2, 0, 3, pid=pid)
    return agg


def both_end_cleanly(agg, pid):
    """Ranks 0 and 1, the processes ``pid`` and ``pid + 1``, each say they ended cleanly."""
    agg.ingest(bye(0, pid=pid))
    agg.ingest(bye(1, pid=pid + 1))


def test_a_job_is_waiting_then_running():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    assert agg.snapshot().state == WAITING
    run(agg, clock, 2, 0, 5)
    snap = agg.snapshot()
    assert snap.state == RUNNING and snap.restarts == 0 and snap.ended_at is None


def test_every_rank_saying_it_ended_cleanly_ends_the_job_and_keeps_its_rows():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    run(agg, clock, 2, 0, 10)
    agg.ingest(bye(0))
    assert agg.snapshot().state == RUNNING  # one rank left: the job still runs
    assert not agg.ended()
    before = time.time()
    agg.ingest(bye(1))
    snap = agg.snapshot()
    assert snap.state == ENDED and before <= snap.ended_at <= time.time()
    assert agg.ended()
    assert [r.rank for r in snap.ranks] == [0, 1] and all(r.step == 9 for r in snap.ranks)
    assert document(snap)["state"] == "ended"
    assert life_line(snap.state, snap.ended_at, snap.restarts, snap.restarted_at, snap.not_back).startswith("ended at ")


def test_a_rank_that_died_of_an_exception_does_not_end_the_job():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    run(agg, clock, 2, 0, 5)
    agg.ingest(bye(0))
    agg.ingest(bye(1, "error"))
    snap = agg.snapshot()
    assert snap.state == RUNNING and snap.failed_ranks == [1]


def test_ranks_back_as_new_processes_are_a_restart_with_fresh_windows():
    clock = Clock()
    agg = Aggregator("j", clock=clock, window=16)
    run(agg, clock, 2, 0, 40, pid=500, wall=0.05)  # slow steps before
    assert agg.snapshot().ranks[0].step_s == 0.05
    agg.ingest(messages.hello(0, 2, pid=700))  # rank 0 is back first, as a new process
    snap = agg.snapshot()
    assert snap.restarts == 1 and snap.restarted_at is not None and snap.not_back == []  # rank 1 still talks
    clock.now += 5  # rank 1's old process went silent; rank 0's new one talks
    agg.ingest(messages.hello(0, 2, pid=700))
    snap = agg.snapshot()
    assert snap.not_back == [1]
    assert snap.ranks[0].steps_seen == 0 and snap.ranks[0].pid == 700  # its window starts afresh
    assert snap.ranks[1].steps_seen == 40  # rank 1's old process: as it was, until it comes back
    line = life_line(snap.state, snap.ended_at, snap.restarts, snap.restarted_at, snap.not_back)
    assert line.startswith("restarted at ") and "(1st restart)" in line and line.endswith("rank 1 not back")
    agg.ingest(messages.hello(1, 2, pid=701))
    for n in range(0, 5):  # step numbers start again from 0: the new processes' own
        for r in range(2):
            agg.ingest(messages.steps(r, [step(n, 0.01)], world=2, pid=700 + r))
    snap = agg.snapshot()
    assert snap.restarts == 1 and snap.not_back == [] and snap.state == RUNNING
    assert [r.steps_seen for r in snap.ranks] == [5, 5] and all(r.step_s == 0.01 for r in snap.ranks)
    assert all(r.missed == 0 for r in snap.ranks)  # no gap counted across the two processes


def test_a_restarted_rank_s_memory_history_is_its_new_process_s():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    agg.ingest(messages.hello(0, 1, pid=10))
    for i in range(30):  # the old process grows 10 MB a second
        clock.now += 1
        agg.ingest(messages.steps(0, [step(i)], state={"step": i, "last": i, "mem": {"rss": (1000 + 10 * i) << 20}}, world=1, pid=10))
    assert agg.snapshot().ranks[0].memory.rss_bytes == 1290 << 20
    agg.ingest(messages.hello(0, 1, pid=11))
    assert agg.snapshot().ranks[0].memory is None  # nothing of the old process's memory is the new one's
    clock.now += 1
    agg.ingest(messages.steps(0, [step(0)], state={"step": 0, "last": 0, "mem": {"rss": 800 << 20}}, world=1, pid=11))
    memory = agg.snapshot().ranks[0].memory
    assert memory.rss_bytes == 800 << 20 and memory.creep_mb_per_min is None


def test_a_second_restart_is_counted_once_for_the_whole_job_and_a_job_that_ended_can_come_back():
    clock = Clock()
    agg = started_three_times(clock)
    assert agg.snapshot().restarts == 2
    both_end_cleanly(agg, pid=30)
    assert agg.snapshot().state == ENDED
    run(agg, clock, 2, 0, 3, pid=40)  # requeued: the same ranks again
    snap = agg.snapshot()
    assert snap.state == RUNNING and snap.restarts == 3 and snap.ended_at is None


def test_a_simulated_node_coming_back_restarts_only_its_ranks_and_names_those_that_do_not():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    for r in range(4):
        agg.ingest(messages.hello(r, 4, host=f"node{r // 2}", pid=100 + r))
    clock.now += 5
    agg.ingest(messages.hello(2, 4, host="node1", pid=900))  # node1 back: rank 2 new, rank 3 not (yet)
    for r in (0, 1):
        agg.ingest(messages.hello(r, 4, host="node0", pid=100 + r))  # node0's ranks never stopped
    snap = agg.snapshot()
    assert snap.restarts == 1 and snap.not_back == [3]
    assert {r.rank: r.status for r in snap.ranks}[3] == "silent"


def test_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "101st",
        "111th",
    ]


def test_an_unknown_exit_is_refused_by_the_wire():
    import pytest

    frames = messages.frames(HEARTBEAT, 0, {"exit": "maybe"})
    with pytest.raises(schema.WireError, match="heartbeat: .*exit"):
        schema.decode(frames)


def test_the_header_says_the_restart_and_the_end_and_the_waiting_pane_the_jobs_there_are():
    import dataclasses

    from ranktop.tui.panes.header import header_text
    from ranktop.tui.panes.waiting import waiting_text
    from ranktop.watch.model.snapshot import EMPTY

    clock = Clock()
    agg = started_three_times(clock)
    snap = agg.snapshot()
    at = time.strftime("%H:%M:%S", time.localtime(snap.restarted_at))
    assert f"restarted at {at} (2nd restart)" in header_text(snap, title="ranktop", paused=False).plain
    both_end_cleanly(agg, pid=30)
    snap = agg.snapshot()
    assert "ended at " in header_text(snap, title="ranktop", paused=False).plain
    from ranktop.watch.model.verdict import verdict

    answer = verdict(snap)
    assert answer.kind == "ended" and answer.text.startswith("job ended at ") and answer.text.endswith("after step 2")
    waiting = dataclasses.replace(EMPTY, job="typo", waiting="job 'typo' has not started under /r (running jobs: real)")
    assert "job 'typo' has not started under /r (running jobs: real)" in waiting_text(waiting).plain


def test_a_viewer_of_node_digests_learns_the_end_from_the_ranks_last_heartbeats():
    """A job of 16 nodes or more is watched through its relays' digests: each rank's last word rides in its
    node's digest, so such a viewer says the job ended as one of a small job does."""
    from ranktop.relay.digest_fold import NodeDigest

    clock = Clock()
    agg = Aggregator("j", clock=clock)
    digest = NodeDigest("j", "node0")
    for r in range(2):
        digest.add(messages.hello(r, 2, host="node0", pid=50 + r))
        for n in range(4):
            digest.add(messages.steps(r, [step(n)], world=2, host="node0", pid=50 + r))
    agg.ingest(schema.decode(schema.encode(digest.body(1.0, 100.0))))
    assert agg.snapshot().state == RUNNING
    for r in range(2):
        digest.add(bye(r, host="node0", pid=50 + r))
    body = digest.body(2.0, 101.0)
    assert [e.exit for e in body.ranks] == ["clean", "clean"]
    agg.ingest(schema.decode(schema.encode(body)))
    assert agg.snapshot().state == ENDED
    assert digest.body(3.0, 102.0) is None  # said once: nothing more to say
