"""Faults done to a live job and to ranktop around it: the job loses no step, and ranktop says what happened.

One 2-rank demo job (torchrun, DDP over gloo) is shared by the scenarios that
do not change it for good; a witness (tests/faults.py ``StepLog``) that no
fault touches keeps every step record the ranks send. Each scenario then reads
off the steps the job ran while the fault lasted: a record of every one of
them arrived (no step lost, the probes dropped none), the job's own step rate
during the fault is at least 40% of what it was before (a loose bound:
benchmarks/faults.py measures it closely), and a real ``ranktop`` process
shows the right thing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from faults import DemoJob, Throttle, Window, connected_to, expired_commands, file_size_limit, flood, forged_commands, frozen
from faults import kill_relay, malformed_commands, relay_pid, valid_command
from support import RANKTOP, run_cli, wait_for

from ranktop.watch.engine.receiver import connect_url
from ranktop.watch.statuses import CONNECTED, LOST, SILENT
from ranktop.transport import rendezvous

pytestmark = pytest.mark.slow

RANKS = [0, 1]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The shared job, in a rendezvous folder of its own; its rank 0 logs nothing while it runs
    (the disk scenario limits the size of every file the ranks write, their log included)."""
    tmp = tmp_path_factory.mktemp("faults")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RANKTOP_DIR", str(tmp / "rdv"))
        env.delenv("RANKTOP_SECRET", raising=False)
        env.delenv("RANKTOP_JOB", raising=False)
        demo = DemoJob("faults", len(RANKS), tmp, "--log-every", "1000000").start()
        try:
            yield demo
        finally:
            demo.stop()


def quiet_stretch(job, seconds: float = 1.5) -> float:
    """Let the job run undisturbed a moment; returns when that stretch began."""
    job.wait_steps(3)
    began = time.time()
    time.sleep(seconds)
    return began


def assert_no_step_lost(job, window: Window) -> None:
    assert window.steps_lost(job.log, RANKS) == {}
    assert all(job.log.numbers(r, window.start, window.end) for r in RANKS), "the job ran no step during the fault"
    assert [r.dropped for r in job.snapshot().ranks] == [0, 0]


def assert_rate_kept(job, window: Window) -> None:
    """A loose bound: over a few seconds a shared 2-core machine swings the rate by a quarter with no fault
    at all (benchmarks/faults.py's first row); a fault that cost the job its pace would halve it or worse."""
    before, during = window.rates(job.log)
    assert before and during and during >= 0.4 * before, (before, during)


def viewer(job, duration: float) -> subprocess.Popen:
    """A real viewer: ``ranktop watch JOB --json`` printing one snapshot after ``duration`` seconds."""
    return subprocess.Popen(
        [RANKTOP, "watch", job.job, "--json", "--duration", str(duration)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_viewer_killed_frozen_or_far_too_slow_costs_the_job_nothing_and_catches_up(job):
    killed, stopped, slow = viewer(job, 60), viewer(job, 10), viewer(job, 10)
    try:
        port = int(rendezvous.read_nodes(job.job)[0].telemetry.rsplit(":", 1)[1])
        wait_for(
            lambda: all(connected_to(v.pid, port) for v in (killed, stopped, slow)), 60, "the viewers never dialled the relay"
        )  # they start and attach (their first steps are checked below)
        before = quiet_stretch(job)
        start = time.time()
        killed.send_signal(signal.SIGKILL)
        with frozen(stopped.pid), Throttle(slow.pid, share=0.1):
            time.sleep(3)
        end = time.time()
        outs = {name: v.communicate(timeout=30) for name, v in (("frozen", stopped), ("slow", slow))}
        after = time.time()
    finally:
        for v in (killed, stopped, slow):
            if v.poll() is None:
                v.kill()
    window = Window(before, start, end, after)

    assert_no_step_lost(job, window)
    assert_rate_kept(job, window)
    assert killed.wait() == -signal.SIGKILL
    for name, (out, err) in outs.items():
        doc = json.loads(out)
        assert [r["rank"] for r in doc["ranks"]] == RANKS, (name, err)
        assert doc["diagnosis"] is None, (name, doc["diagnosis"])  # no hang, no silent rank: the job is fine
        assert all(r["status"] in ("ok", "slow") for r in doc["ranks"]), (name, doc["ranks"])
        for row in doc["ranks"]:
            first = row["step"] - row["steps_seen"] - row["missed"] + 1
            assert first <= job.log.step_at(row["rank"], start), (
                name,
                "attached after the fault began",
                row,
                job.log.step_at(row["rank"], before),
                job.log.step_at(row["rank"], end),
            )
            # caught up: it ends with the steps the job ran just before it printed (every 250 ms a message) ...
            assert row["step"] >= job.log.step_at(row["rank"], after - 1.5), (name, row["step"])
            # ... and the relay kept what it could not take meanwhile: a record it missed would be counted here
            assert row["missed"] == 0, (name, row["missed"])


def test_a_flood_of_forged_replayed_expired_and_malformed_commands_is_refused_and_counted(job):
    secret = rendezvous.read_secret(job.job)
    node = rendezvous.read_nodes(job.job)[0]
    control = connect_url(node.control, node.host)
    genuine_id, genuine = valid_command(secret, job.job)
    out = run_cli("watch", job.job, "--json", "--duration", "1")
    rejected_before = {r["rank"]: r["rejected"] for r in json.loads(out.stdout)["ranks"]}
    before = quiet_stretch(job)
    start = time.time()
    result = flood(
        control,
        {
            "genuine": [genuine],  # sent once: every copy after the first is a replay
            "replayed": [genuine] * 50,
            "forged": forged_commands(job.job, 50),
            "expired": expired_commands(secret, job.job, 50),
            "malformed": malformed_commands() * 10,
        },
        rate=10_000,
        seconds=2.5,
        secret=secret,
    )  # past the encryption, as a viewer with the key
    end = time.time()
    time.sleep(1.5)  # the ranks work through what is queued
    window = Window(before, start, end, time.time())

    assert result.rate > 5_000, result
    assert_no_step_lost(job, window)
    assert_rate_kept(job, window)
    snap = job.snapshot()
    # The genuine ping was answered once per rank; nothing else was obeyed.
    assert sorted(r.rank for r in snap.replies if r.id == genuine_id) == RANKS
    assert {r.id for r in snap.replies} <= {genuine_id}
    out = run_cli("watch", job.job, "--json", "--duration", "1")
    doc = json.loads(out.stdout)
    assert doc["diagnosis"] is None and all(r["status"] in ("ok", "slow") for r in doc["ranks"])
    for row in doc["ranks"]:
        counted = {k: v - rejected_before[row["rank"]].get(k, 0) for k, v in row["rejected"].items()}
        # Checked up to 200 a second (malformed ones fail the MAC: forged); the rest counted unread, as a flood.
        assert set(counted) == {"forged", "replayed", "expired", "flood"}, counted
        assert all(n > 0 for n in counted.values()), counted
        assert sum(counted.values()) <= result.total - 1  # the genuine one was obeyed; nothing is counted twice
        assert counted["flood"] > 10 * (counted["forged"] + counted["replayed"] + counted["expired"]), counted


def test_a_capture_onto_a_full_disk_fails_cleanly_on_every_rank_and_the_next_one_works(job):
    before = quiet_stretch(job)
    start = time.time()
    pids = job.pids()
    with file_size_limit(list(pids.values()), 256 << 10):
        limits = {pid: Path(f"/proc/{pid}/limits").read_text().splitlines()[2:4] for pid in pids.values()}
        out = run_cli("capture", job.job, "--timeout", "60", timeout=90)
    end = time.time()
    again = run_cli("capture", job.job, "--timeout", "60", timeout=90)
    window = Window(before, start, end, time.time())

    assert out.returncode == 1, (out.stdout + out.stderr, pids, limits)
    failures = [line for line in out.stdout.splitlines() if ": failed: " in line]
    assert sorted(line.split(":")[0] for line in failures) == ["rank 0", "rank 1"], out.stdout  # as they finish
    for line in failures:
        assert "writing failed: torch.profiler could not write the trace in " in line, line
        assert "may write files of 262,144 bytes at most (ulimit -f)" in line, line
    folder = failures[0].split("could not write the trace in ")[1].split(":")[0]
    assert sorted(p.name for p in Path(folder).iterdir()) == []  # no partial file, no temporary
    assert again.returncode == 0, again.stdout + again.stderr
    done = [line for line in again.stdout.splitlines() if ": done: " in line]
    assert sorted(line.split(":")[0] for line in done) == ["rank 0", "rank 1"], again.stdout
    assert_no_step_lost(job, window)
    assert_rate_kept(job, window)


def test_the_relay_killed_is_restarted_the_ranks_reconnect_and_the_viewer_shows_the_node_lost_then_back(job):
    before = quiet_stretch(job)
    killed = relay_pid(job.job)
    seen = []  # what a viewer showed, every 100 ms: its relays' states and its ranks' statuses

    def look():
        snap = job.snapshot()
        seen.append(({e.state for e in snap.endpoints}, {r.status for r in snap.ranks}))
        return snap

    start = time.time()
    kill_relay(job.job)
    wait_for(lambda: (look() or True) and relay_pid(job.job) != killed, 20, "no new relay")
    wait_for(
        lambda: (
            (snap := look()).endpoints
            and {e.state for e in snap.endpoints} == {CONNECTED}
            and {r.status for r in snap.ranks} <= {"ok", "slow"}
            and time.sleep(0.1) is None
        ),
        20,
        "the ranks never came back",
    )
    end = time.time()
    job.wait_steps(10)
    window = Window(before, start, end, time.time())

    lost_at = next(i for i, (relays, ranks) in enumerate(seen) if LOST in relays)
    assert seen[lost_at][1] == {SILENT}, seen  # its ranks cut off with it ...
    assert all("stalled" not in ranks for _, ranks in seen), [x for x in seen if x != seen[lost_at]]  # ... not taken for a hang
    assert any(relays == {CONNECTED} and SILENT not in ranks for relays, ranks in seen[lost_at:]), seen
    # While no relay ran, the ranks' records had nowhere to go; the job went on all the same:
    # its steps after the outage are numbered on from those before, at its usual pace.
    before_rate, across = job.log.rate(window.before, window.start), job.log.rate(window.before, window.after)
    assert across >= 0.5 * before_rate, (before_rate, across)
    assert [r.dropped for r in job.snapshot().ranks] == [0, 0]
    out = run_cli("watch", job.job, "--json", "--duration", "1")
    doc = json.loads(out.stdout)
    assert doc["diagnosis"] is None and [e["state"] for e in doc["endpoints"]] == [CONNECTED]
    assert [r["rank"] for r in doc["ranks"]] == RANKS


def test_local_rank_0_frozen_leaves_the_other_ranks_visible_and_waiting_for_it(job):
    watching = viewer(job, 9)  # a user watching the job when rank 0 freezes
    before = quiet_stretch(job, 2.5)
    rank0 = job.pids()[0]
    start = time.time()
    try:
        with frozen(rank0):
            out, err = watching.communicate(timeout=30)  # it prints while rank 0 is still frozen
            end = time.time()
    finally:
        if watching.poll() is None:
            watching.kill()
    job.wait_steps(10)
    window = Window(before, start, end, time.time())

    doc = json.loads(out)
    assert doc["waiting_for"] == [0], doc["diagnosis"]
    assert [(r["rank"], r["status"]) for r in doc["ranks"]] == [(0, SILENT), (1, "stalled")]
    assert "waiting for rank 0" in doc["diagnosis"], doc["diagnosis"]
    assert [e["state"] for e in doc["endpoints"]] == [CONNECTED]  # the node's relay did not freeze with rank 0
    assert window.steps_lost(job.log, RANKS) == {}
    assert [r.dropped for r in job.snapshot().ranks] == [0, 0]
