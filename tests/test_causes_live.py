"""The cause beside the culprit, on real torchrun/gloo jobs started as a user starts them: a rank that spends its
steps in the garbage collector, a rank that shares its CPU with a busy process, and healthy jobs that name none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import JOBS, RANKTOP, LaunchedJobs, assert_named_first_and_alone, run_cli, start_job

pytestmark = pytest.mark.slow


@pytest.fixture
def jobs(tmp_path):
    launched = LaunchedJobs(tmp_path)
    yield launched
    launched.close()


def assert_no_cause(doc: dict) -> None:
    assert doc["verdict"]["cause"] is None, doc["verdict"]
    assert [r["causes"] for r in doc["ranks"]] == [[]] * len(doc["ranks"]), doc["ranks"]


def test_a_rank_that_collects_its_garbage_every_step_is_named_with_gc_pause(jobs):
    doc = jobs.launch("gc-heavy", "cause_rank.py", "--gc-rank", "2", "--compute-ms", "0")
    row = assert_named_first_and_alone(doc, 2, "forward", "rank 2 slow in forward")
    cause = doc["verdict"]["cause"]
    assert cause is not None and cause["kind"] == "gc_pause", doc["verdict"]
    assert ", because it spends " in doc["verdict"]["text"] and doc["verdict"]["text"].endswith("(gc pause)")
    assert row["causes"][0] == cause and cause["value"] >= 2 * cause["peers"]
    # the time it loses there is most of what it adds to the job's step
    assert cause["extra_s"] >= 0.5 * row["excess_s"], (cause, row["excess_s"])
    assert [r["causes"] for r in doc["ranks"] if r["rank"] != 2] == [[]] * 3


def test_a_healthy_job_names_no_cause(jobs):
    doc = jobs.launch("no-cause", "cause_rank.py", "--compute-ms", "0")
    assert doc["verdict"]["kind"] == "healthy", doc["verdict"]
    assert_no_cause(doc)


def _cpus_busy(over_s: float = 2.0) -> float:
    """How many CPUs' worth of work the machine did over the last ``over_s`` seconds (/proc/stat), now."""

    def ticks() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle, iowait
        return sum(fields) - idle, sum(fields)

    busy0, total0 = ticks()
    time.sleep(over_s)
    busy1, total1 = ticks()
    return (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1)


def _wait_for_a_quiet_machine(within_s: float = 60.0) -> None:
    """Other load on the machine evens out both ranks' waits: the scheduler moves it onto rank 0's CPU as the busy
    processes fill rank 1's, and both ranks then wait alike (seen on a shared 2-core machine: 47 ms for 20 ms of
    work on each). So the test waits, at its start (not at collection, when the test run's own start-up still
    weighs on the load average), until the machine does less than a third of a CPU's work, and skips if it never does."""
    deadline = time.monotonic() + within_s
    while (busy := _cpus_busy()) > 0.33:
        if time.monotonic() > deadline:
            pytest.skip(f"needs a quiet machine: other load ({busy:.1f} CPUs busy) evens out both ranks' waits for a CPU")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2, reason="needs Linux and 2 CPUs")
def test_a_rank_sharing_its_cpu_with_a_busy_process_is_named_with_cpu_contention(tmp_path):
    # Two ranks, each pinned to a CPU of its own (rank r to CPU r); busy processes pinned to rank 1's: three, so
    # that its share stands out on a machine whose other load already makes both ranks wait for their CPUs.
    _wait_for_a_quiet_machine()
    busy = "import os\nos.sched_setaffinity(0, {1})\nwhile True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", busy]) for _ in range(3)]
    job = None
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
        command = [RANKTOP, "launch", "--job", "shared-cpu", "--", *torchrun, str(JOBS / "cause_rank.py"), "--pin", "--compute-ms", "20"]
        job = start_job(command, "shared-cpu", 2, tmp_path, env)
        out = run_cli("watch", "shared-cpu", "--json", "--duration", "8", timeout=90)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        if job is not None:
            job.terminate()
            job.wait(30)
    verdict = doc["verdict"]
    assert verdict["kind"] == "slow_rank" and verdict["ranks"] == [1], verdict
    cause = verdict["cause"]
    assert cause is not None and cause["kind"] == "cpu_contention", verdict
    # the figure that names it: the run-queue wait, seconds a second (its preemptions may be fewer and longer than its
    # peers'); `extra_s` is seconds a step, a different unit: it was compared with `peers` here, which held only while
    # the peer's own wait was under its step's share of it
    assert cause["value"] > cause["peers"] and cause["extra_s"] > 0, cause
    assert verdict["text"].endswith("(cpu contention)") and ", because its training thread waits " in verdict["text"]
    assert doc["ranks"][0]["causes"] == []


def test_a_rank_that_hosts_a_hot_expert_is_named_with_expert_load(jobs):
    # 70% of every rank's tokens go to the expert on rank 3: it receives about 2.7x the all-to-all rows of its peers
    doc = jobs.launch("hot-expert", "moe_experts.py", "--hot-rank", "3")
    row = assert_named_first_and_alone(doc, 3, "forward", "rank 3 slow in forward")
    cause = doc["verdict"]["cause"]
    assert cause is not None and cause["kind"] == "expert_load", doc["verdict"]
    assert ", because it receives " in doc["verdict"]["text"] and doc["verdict"]["text"].endswith("(expert load)")
    assert row["causes"][0] == cause and cause["ratio"] >= 2.0, cause
    assert [r["causes"] for r in doc["ranks"] if r["rank"] != 3] == [[]] * 3


def test_a_healthy_expert_parallel_job_names_nobody(jobs):
    doc = jobs.launch("even-experts", "moe_experts.py")
    assert doc["verdict"]["kind"] == "healthy", doc["verdict"]
    assert_no_cause(doc)


def test_a_rank_given_twice_the_tokens_of_its_peers_is_named_with_input_imbalance(jobs):
    # every rank says what it takes in (probe.add_inputs); rank 1's batches hold 8,192 tokens, the others' 4,096
    doc = jobs.launch("heavy-inputs", "cause_rank.py", "--heavy-rank", "1", "--compute-ms", "6")
    verdict = doc["verdict"]
    # rank 1 named first; the cause is what this test is about. Under load a second rank was flagged beside it in 2 runs
    # of about 15 since several culprits are kept (issue 46): a detection question, left open there (docs/detection.md)
    assert verdict["kind"] == "slow_rank" and verdict["ranks"][:1] == [1], (verdict["ranks"], verdict["text"], doc["ranks"])
    cause = verdict["cause"]
    assert cause is not None and cause["kind"] == "input_imbalance" and 1.95 <= cause["ratio"] <= 2.05, verdict
    # per step over the window: the step in progress when the counters are read puts it a step's worth off at most
    assert 0.9 * 4096 <= cause["peers"] <= 1.1 * 4096 and 0.9 * 8192 <= cause["value"] <= 1.1 * 8192, cause
    assert ", because it takes in 2.0x the tokens of its peers, " in verdict["text"] and verdict["text"].endswith("(input imbalance)")
    assert [r["causes"] for r in doc["ranks"] if r["rank"] != 1] == [[]] * 3


def test_a_rank_that_reads_a_mapped_file_cold_every_step_is_named_with_page_faults(tmp_path):
    """benchmarks/causes_rank.py's ``faults``: rank 1 reads 256 pages of a file through a fresh mapping each step,
    the file's pages dropped from the page cache first (a major fault each, its training thread blocked on the
    disk): named with page faults, its cost the time blocked and in the kernel beyond its peers'."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    try:
        import causes as bench
    finally:
        sys.path.pop(0)
    outcome = bench.run(bench.Job("faults", "page_faults"), tmp_path)
    assert outcome["named"] == "page_faults", outcome
    assert outcome["explains"] >= 0.2 and "major page faults a second" in outcome["verdict"], outcome


def test_a_job_stalled_on_a_rank_stuck_writing_a_checkpoint_says_so_and_a_plain_hang_says_no_cause(launch_ranks, tmp_path):
    """tests/jobs/hanging_ranks.py: rank 2 hangs at step 20, inside ``torch.save`` (its file never takes the bytes),
    or in a sleep of its own; the others wait at the barrier. The stall's cause is what rank 2's stack is in."""
    from support import wait_for

    for job, hang_in in (("stuck-ckpt", "checkpoint"), ("stuck-sleep", "sleep")):
        folder = tmp_path / f"{job}-barrier"
        launch_ranks(job, 4, "--barrier-dir", str(folder), "--hang-rank", "2", "--hang-at-step", "20", "--hang-in", hang_in,
                     script=JOBS / "hanging_ranks.py")  # fmt: skip
        wait_for(lambda: all((folder / f"20.{r}").exists() for r in (0, 1, 3)), 60, "the ranks never reached the hang step")  # noqa: B023
        out = run_cli("watch", job, "--json", "--duration", "5")
        assert out.returncode == 0, out.stderr
        verdict = json.loads(out.stdout)["verdict"]
        assert verdict["kind"] == "stalled" and verdict["ranks"] == [2], verdict
        if hang_in == "checkpoint":
            assert verdict["cause"] is not None and verdict["cause"]["kind"] == "checkpoint_write", verdict
            assert verdict["text"].endswith(
                ", because its training thread is writing or reading a checkpoint "
                "(its stack is in torch.save/load or a distributed checkpoint)"
            ), verdict["text"]
        else:
            assert verdict["cause"] is None, verdict


def test_every_rank_collecting_its_garbage_from_some_moment_is_the_job_slower_because_of_gc(launched):
    """tests/jobs/sleepy_rank.py --slow-all --slow-by gc: from 40 s in, every rank runs a full garbage collection over
    a heap of 400,000 lists in forward: nobody stands out, the job is slower than itself, and its ranks' evidence
    against the job's own past (watch/analysis/causes.py JobEvidence) says why."""
    from ranktop.watch.model.verdict import verdict
    from ranktop.watch.session import WatchSession, resolve

    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    launched("pace-gc", *torchrun, str(JOBS / "sleepy_rank.py"), "--gloo", "--slow-all", "--slow-phase", "forward",
             "--slow-by", "gc", "--slow-from-s", "40")  # fmt: skip
    seen = []
    with WatchSession(resolve(["pace-gc"])) as session:  # a screen's snapshots, twice a second, from before it
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            answer = verdict(session.snapshot())
            seen.append(answer)
            if answer.kind == "job_slower" and answer.cause is not None and answer.cause.kind != "unknown":
                break
            time.sleep(0.5)
    told = [a for a in seen if a.kind == "job_slower"]
    assert told, [a.text for a in seen[-4:]]
    assert told[-1].cause is not None and told[-1].cause.kind == "gc_pause", [a.text for a in told[-4:]]
    assert ", because every rank spends " in told[-1].text and told[-1].text.endswith("(gc pause)"), told[-1].text
