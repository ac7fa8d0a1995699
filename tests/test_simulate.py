"""``ranktop demo --simulate``: a simulated job that ranktop's commands watch and command like any other.

Its relays, rendezvous records, wire messages and signed commands are the real
ones, so these tests run the installed commands against it as a user would.
"""

import json
import os
import signal
import subprocess

import pytest

from support import RANKTOP, run_cli, wait_for
from ranktop.transport import rendezvous


@pytest.fixture
def simulated(rdv):
    """A 32-rank job on 4 simulated nodes, rank 20 slow in forward, rank 9 stalling 8 s in."""
    job = "sim-test"
    proc = subprocess.Popen(
        [RANKTOP, "demo", "--simulate", "32", "--nodes", "4", "--no-tui", "--job", job,
         "--slow-rank", "20", "--slow-ms", "20", "--slow-phase", "forward", "--stall-rank", "9", "--stall-at-s", "8"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: len(rendezvous.read_nodes(job)) == 4 or proc.poll() is not None, 60, "the simulated relays never came up")
        assert proc.poll() is None, proc.stderr.read()
        yield job, proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    # the simulator runs in a session of its own: stopping `ranktop demo` stops it, its relays' records go
    wait_for(lambda: not rendezvous.read_nodes(job), 30, "the simulator outlived ranktop demo")


@pytest.mark.slow
def test_a_simulated_job_is_watched_pinged_and_dumped_like_a_real_one(simulated):
    job, proc = simulated
    doc = json.loads(run_cli("watch", job, "--json", "--duration", "5").stdout)
    assert doc["world_size"] == 32 and doc["connected"] == 32
    assert sorted({r["host"] for r in doc["ranks"]}) == ["sim0000", "sim0001", "sim0002", "sim0003"]
    top = next(r for r in doc["ranks"] if r["rank"] == doc["stragglers"][0])
    assert (top["rank"], top["status"], top["culprit_phase"]) == (20, "slow", "forward")
    assert any(c["rank"] == -1 and c["op"] == "all_gather_into_tensor" for c in doc["collectives"])

    ping = run_cli("ping", job, "--timeout", "10")
    assert ping.returncode == 0, ping.stderr
    assert sum("pong" in line for line in ping.stdout.splitlines()) == 32

    # past 8 s the job hangs: rank 9 waits for data, the 31 others inside a collective
    wait_for(lambda: "waiting for rank 9" in (json.loads(run_cli("watch", job, "--json", "--duration", "1").stdout)["diagnosis"] or ""),
             30, "the hang was never diagnosed")  # fmt: skip
    stacks = run_cli("stacks", job, "--json", "--timeout", "10")
    assert stacks.returncode == 0, stacks.stderr
    groups = [g["ranks"] for g in json.loads(stacks.stdout)["groups"]]
    assert groups == [[r for r in range(32) if r != 9], [9]]


def test_a_bad_simulation_option_is_one_line(rdv):
    out = run_cli("demo", "--simulate", "16", "--no-tui", "--slow-rank", "99")
    assert out.returncode == 2 and "--slow-rank 99 is not a rank of a job of 16" in out.stderr and "Traceback" not in out.stderr
    out = run_cli("demo", "--simulate", "16", "--no-tui", "--slow-node", "nope")
    assert out.returncode == 2 and "is not a node of this job (sim0000 to sim0001)" in out.stderr


@pytest.mark.slow
def test_a_closed_terminal_stops_the_demo_and_its_job(rdv):
    """The terminal of `ranktop demo` goes away (an SSH drop, tmux kill-server): SIGHUP, and every write to it
    fails. The viewer and the job it started end, rather than a simulator of 512 ranks spinning on, orphaned."""
    import pty
    import select
    import time

    job = "sim-hangup"
    pid, master = pty.fork()
    if pid == 0:  # the child: the demo in the pty's terminal, 80x24
        os.environ.update(COLUMNS="80", LINES="24", TERM="xterm-256color")
        os.execv(RANKTOP, [RANKTOP, "demo", "--simulate", "512", "--job", job])
    try:
        deadline, drawn = time.monotonic() + 60, 0
        while time.monotonic() < deadline and (len(rendezvous.read_nodes(job)) < 64 or drawn < 400_000):
            if select.select([master], [], [], 0.2)[0]:
                drawn += len(os.read(master, 65536))  # the TUI drawing the job
        assert len(rendezvous.read_nodes(job)) == 64, "the simulated job never came up"
        time.sleep(2)  # the TUI keeps drawing; nobody reads the terminal any more
        os.close(master)
        master = None
        os.kill(pid, signal.SIGHUP)
        wait_for(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, 20, "ranktop demo outlived its terminal")
        wait_for(lambda: not rendezvous.read_nodes(job), 20, "the simulated job outlived its viewer's terminal")
    finally:
        if master is not None:
            os.close(master)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _replayed(**layout):
    """A simulated job replayed into an aggregator on a clock of its own (no sockets), and its snapshot."""
    from ranktop.demo.simulate import Scenario, Simulator
    from ranktop.watch.aggregator import Aggregator

    ranks = layout.pop("ranks")
    s = Scenario(job="sim-layout", ranks=ranks, nodes=ranks // 8, **layout)
    clock = [0.0]
    agg = Aggregator(s.job, clock=lambda: clock[0], wall_clock=lambda: clock[0])
    for now, frames in Simulator(s, directory=os.environ["RANKTOP_DIR"]).replay(10, digests=True):
        clock[0] = now
        for f in frames:
            agg.ingest_frames(f)
    return agg.snapshot()


def test_a_simulated_3d_job_shows_its_stage_imbalance_and_flags_nobody(rdv):
    from ranktop.watch.model.verdict import verdict

    snap = _replayed(ranks=512, pp=4, tp=8)  # dp 16; the last stage 1.6x the others' forward and backward
    assert snap.layout_roles == ["pp", "tp", "dp"]
    assert snap.row(300).coords == {"pp": 2, "tp": 4, "dp": 5}  # 300 = 2*128 + 5*8 + 4: laid out pp, dp, tp
    assert not [r.rank for r in snap.ranks if r.status == "slow"]
    answer = verdict(snap)
    assert answer.kind == "imbalanced" and answer.ranks == []
    assert answer.text.startswith("stage 3 does 1.4x the work of stage 0: the pipeline idles ")
    assert {c.op for c in snap.collectives if c.rank == -1} == {"recv@pp", "reduce_scatter_tensor@dp"}


@pytest.mark.slow
def test_a_slow_rank_of_a_4096_rank_3d_job_is_named_with_its_coordinates_and_alone(rdv):
    from ranktop.watch.model.verdict import verdict

    snap = _replayed(ranks=4096, pp=8, tp=8, slow_rank=3071, slow_phase="forward")
    answer = verdict(snap)
    assert answer.kind == "slow_rank" and answer.ranks == [3071] and answer.others == 0, answer
    assert answer.text.startswith("rank 3071 (pp 5, tp 7, dp 63) slow in forward: +")
    assert snap.stragglers[0] == 3071


def test_a_layout_that_does_not_divide_the_job_is_one_line(rdv):
    out = run_cli("demo", "--simulate", "64", "--pp", "3", "--no-tui")
    assert out.returncode == 2 and "--pp 3 x --tp 1 x --ep 1 does not divide the 64 ranks" in out.stderr
    out = run_cli("demo", "--simulate", "64", "--pp", "4", "--stage-costs", "1,2", "--no-tui")
    assert out.returncode == 2 and "--stage-costs gives 2 stages, --pp 4" in out.stderr


def test_a_simulator_that_kept_up_says_nothing_and_one_that_fell_behind_says_how(tmp_path):
    from ranktop.demo.simulate import Scenario, Simulator

    sim = Simulator(Scenario(job="behind", ranks=16, nodes=2), str(tmp_path))
    sim.sends, sim.late_s, sim.latest_s = 1000, 20.0, 0.4  # 20 ms late on average: the loop's own tick
    assert sim.behind() is None
    sim.skipped_s, sim.late_s, sim.latest_s, sim.dropped = 4.25, 600.0, 1.9, 12
    assert sim.behind() == (
        "the machine could not keep up with the simulated job: 4.2 s of it skipped; its nodes' sends went out 0.60 s late "
        "on average (at worst 1.9 s); 12 messages dropped at the source (a relay's queue was full)"
    )


@pytest.mark.slow
def test_a_live_job_of_32_relays_says_who_arrives_last_at_every_rank(rdv):
    """256 simulated ranks on 32 nodes, watched through their live relays' digests (each relay sends at its own
    moment: their intervals end at different steps): every rank's last arrivals are counted, and the slowed rank
    is the one the others wait for (before, no step was every node's: every rank's figure was null, and the
    veto of the phase times never acted on a big job)."""
    job = "sim-arrivals"
    proc = subprocess.Popen(
        [RANKTOP, "demo", "--simulate", "256", "--nodes", "32", "--no-tui", "--job", job,
         "--slow-rank", "77", "--slow-ms", "20", "--slow-phase", "forward"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: len(rendezvous.read_nodes(job)) == 32 or proc.poll() is not None, 60, "the simulated relays never came up")
        assert proc.poll() is None, proc.stderr.read()
        doc = json.loads(run_cli("watch", job, "--json", "--duration", "12").stdout)
        assert doc["world_size"] == 256 and doc["connected"] == 256
        shares = {r["rank"]: r["last_arrivals"] for r in doc["ranks"]}
        assert None not in shares.values(), [r for r, s in shares.items() if s is None][:8]
        assert shares[77] > 0.9 and max(s for r, s in shares.items() if r != 77) < 0.1
        assert doc["stragglers"][0] == 77
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    wait_for(lambda: not rendezvous.read_nodes(job), 30, "the simulator outlived ranktop demo")


def _checkpointing(save_s: float, every: int, **scenario):
    """A simulated job whose rank 0 saves a checkpoint of ``save_s`` at the end of every ``every``-th step (the
    others wait for it at the next step's first collective), its snapshots every half second while it runs: the
    benchmark's checkpoint family (benchmarks/accuracy.py) in small."""
    import dataclasses

    from ranktop.demo.sim_model import PHASES, JobModel
    from ranktop.demo.simulate import Scenario, Simulator
    from ranktop.watch.aggregator import Aggregator

    class Checkpointing(JobModel):
        def step(self, n, start):
            if n % every != every - 1:
                return super().step(n, start)
            self.extra = {0: [0.0] * len(PHASES) + [save_s]}  # at the end of its step, after the collectives
            try:
                return dataclasses.replace(super().step(n, start), pauses={0: ("checkpoint", save_s)})
            finally:
                self.extra = {}

    s = Scenario(job="sim-checkpoint", **scenario)
    sim = Simulator(s, directory=os.environ["RANKTOP_DIR"])
    sim.model = Checkpointing(s)
    clock = [0.0]
    agg = Aggregator(s.job, clock=lambda: clock[0], wall_clock=lambda: clock[0])
    digests = s.ranks >= 128
    if not digests:
        agg.ingest_batch([(frames, None) for frames in sim.hellos(0.0)])
    snaps, next_look = [], 0.5
    for now, frames in sim.replay(30, start=0.0, digests=digests):
        clock[0] = now
        agg.ingest_batch([(f, None) for f in frames])
        if now >= next_look:
            next_look += 0.5
            snaps.append(agg.snapshot())
    return snaps


@pytest.mark.parametrize("ranks", [16, 256])  # each rank's own messages; nodes' digests
def test_a_simulated_checkpoint_is_sent_as_the_probe_times_it_and_read_as_one(rdv, ranks):
    """Rank 0 saves 4 s every 160 steps (10 s at 16 steps/s): its steps carry the phase ``checkpoint`` and, while
    it saves, its state says so, as automatic mode's probe does (probe/auto.py); so the viewer tells a checkpoint,
    never a stalled job, and nobody is slow for it."""
    from ranktop.watch.model.verdict import verdict

    snaps = _checkpointing(4.0, 160, ranks=ranks, nodes=ranks // 8)
    kinds = [verdict(snap).kind for snap in snaps]
    assert "checkpoint" in kinds, kinds
    assert not {"stalled", "slow_rank", "slow_node"} & set(kinds), kinds
    assert not any(r.status in ("stalled", "slow") for snap in snaps for r in snap.ranks)
    pause = next(p for snap in snaps for p in snap.pauses if p.kind == "checkpoint")
    assert pause.ranks[:1] == [0]


@pytest.mark.parametrize("cause, digests", [("gc_pause", False), ("data_loader", True), ("unknown", False)])
def test_a_simulated_straggler_s_evidence_says_its_cause_through_the_engine(cause, digests, rdv):
    """``Scenario.evidence``: every rank's state carries a probe's cause evidence, the slow rank's its cause's field
    carrying its extra time (demo/sim_model.py JobModel.evidence), sent as ranks' states or folded into their
    nodes' digests; the verdict names the cause, or none for ``unknown`` (nothing measured says a sleep)."""
    from ranktop.demo.simulate import Scenario, Simulator
    from ranktop.watch.aggregator import Aggregator
    from ranktop.watch.model.verdict import verdict

    ranks = 128 if digests else 16
    s = Scenario(job="sim-cause", ranks=ranks, nodes=ranks // 8, slow_rank=5, slow_ms=15.0, slow_phase="forward",
                 evidence=True, slow_cause=cause)  # fmt: skip
    sim = Simulator(s, directory=os.environ["RANKTOP_DIR"])
    clock = [0.0]
    agg = Aggregator(s.job, clock=lambda: clock[0], wall_clock=lambda: clock[0])
    if not digests:
        agg.ingest_batch([(frames, None) for frames in sim.hellos(0.0)])
    for now, frames in sim.replay(15, start=0.0, digests=digests):
        clock[0] = now
        agg.ingest_batch([(f, None) for f in frames])
    answer = verdict(agg.snapshot())
    assert answer.kind == "slow_rank" and answer.ranks[0] == 5, answer.text
    assert answer.cause is not None, answer.text
    assert answer.cause.kind == cause, answer.text
    if cause != "unknown":
        assert answer.cause.explains >= 0.5 and ", because " in answer.text
