"""Collective stats: the arithmetic, the straggler it reveals, and exact counts from a real gloo job."""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from support import JOBS, wait_for

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.collectives import bus_factor, fit_alpha_beta, percentile
from ranktop.watch.session import WatchSession, resolve
from ranktop.transport import rendezvous
import messages


def test_bus_bandwidth_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert bus_factor("ddp_allreduce", 2) == 1.0
    assert bus_factor("all_gather_into_tensor", 4) == 3 / 4
    assert bus_factor("broadcast", 64) == 1.0


def gathered_rows(calls):
    """The job's rows of ``calls`` (the probe's raw records) after the wire, the viewer's store and its analysis."""
    from ranktop.watch.analysis.collectives import collective_rows
    from ranktop.watch.engine.collective_sums import JobCollectives, gather
    from ranktop.probe.collective_summary import summarise

    summaries, _ = summarise(calls)
    store = JobCollectives()
    for entry in summaries:
        store.add_ops(0, entry.ops, now=0.0)
    none = np.zeros(0, np.int64)  # (no rank's own rows: the job's)
    return {row.op: row for row in collective_rows(gather(store, none, none, now=10.0, every_rank=False).of())}


def call(seq, d, kd=None, b=1 << 30):
    record = {"op": "all_gather_into_tensor", "seq": seq, "b": b, "dt": "bfloat16", "g": 8, "gi": "", "k": "c",
              "d": d, "n": 0, "ph": "forward", "t0": float(seq)}  # fmt: skip
    if kd is not None:
        record["kd"] = kd
    return record


def test_the_bus_bandwidth_is_the_kernels_rate_not_bytes_over_the_stall():
    """On a GPU an all-gather FSDP2 prefetched waits 1 ms of its 100 ms kernel: bytes over that stall read 1 TB/s,
    a rate no link has. The bus bandwidth comes from the kernel time (10 GB/s x 7/8); the wait's rate is its own."""
    (row,) = gathered_rows([call(1, d=0.001, kd=0.1), call(2, d=0.001, kd=0.1)]).values()
    assert row.busbw_bps == pytest.approx((1 << 30) / 0.1 * 7 / 8)
    assert row.algbw_bps == pytest.approx((1 << 30) / 0.001)


def test_no_kernel_time_known_no_bus_bandwidth_and_only_timed_calls_count():
    (row,) = gathered_rows([call(1, d=0.001)]).values()  # DDP's finalize wait, a call with no event to be had
    assert row.busbw_bps is None and row.algbw_bps == pytest.approx((1 << 30) / 0.001)
    (row,) = gathered_rows([call(1, d=0.001), call(2, d=0.05, kd=0.2, b=1 << 20)]).values()
    assert row.busbw_bps == pytest.approx((1 << 20) / 0.2 * 7 / 8)


def test_percentile_interpolates_like_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile([7.0], 95) == 7.0


def test_alpha_beta_recovers_latency_and_bandwidth():
    alpha, beta = 20e-6, 10e9
    sizes = [1e3, 1e5, 1e6, 1e7]
    fit = fit_alpha_beta(sizes, [alpha + n / beta for n in sizes])
    assert fit.alpha_s == pytest.approx(alpha) and fit.beta_bps == pytest.approx(beta)
    assert fit_alpha_beta([1e3, 1e3, 1e6], [1.0, 1.0, 2.0]) is None  # two sizes cannot separate the terms


def ddp_stream(agg, world, slow_rank, slow_s, steps=20):
    """Synthetic DDP: backward computes 15 ms, then waits in the bucket all-reduce for the slowest rank."""
    for r in range(world):
        agg.ingest(messages.hello(r, world, "h", pid=r))
    seq = 0
    for n in range(steps):
        t = n * 1.0
        for r in range(world):
            compute = 0.015 + (slow_s if r == slow_rank else 0.0)
            done = t + 0.010 + 0.015 + slow_s + 0.001  # everyone leaves the all-reduce together
            start = t + 0.010 + compute  # and enters it when its own backward is done
            seq += 1
            call = {
                "op": "ddp_allreduce",
                "seq": seq,
                "b": 4 << 20,
                "dt": "float32",
                "g": world,
                "d": done - start,
                "n": n,
                "ph": "backward",
                "t0": start,
            }
            p = {"forward": 0.010, "backward": done - (t + 0.010), "optimizer": 0.003}
            agg.ingest(messages.steps(r, [{"n": n, "t": 100.0 + n, "w": sum(p.values()), "p": p}], calls=[call]))


def test_ddp_s_rows_say_what_their_wait_holds_in_the_json():
    """Without a comm hook DDP's finalize wait holds its copy of each bucket into the gradients (0.6 ms of one H100
    rank's record whose true wait was ~0): not separable from the probe, so the JSON's row says so (issue 48)."""
    from ranktop.watch.model.json_doc import document

    agg = Aggregator("j")
    ddp_stream(agg, 2, slow_rank=1, slow_s=0.010)
    doc = document(agg.snapshot())
    rows = [row for row in doc["collectives"] if row["op"] == "ddp_allreduce"]
    assert rows and all("copy of each bucket into the gradients" in row["wait_is"] for row in rows)


def test_a_slow_backward_under_ddp_is_found_through_collective_wait():
    agg = Aggregator("j")
    ddp_stream(agg, 4, slow_rank=1, slow_s=0.030)
    snap = agg.snapshot()
    assert "comm" in snap.phase_names
    top = snap.ranks[snap.stragglers[0]]
    assert (top.rank, top.status, top.culprit_phase) == (1, "slow", "backward")
    assert top.excess_s == pytest.approx(0.030, abs=0.002)
    # the slow rank waits least; the others wait for it
    assert top.collective_s < 0.005 and all(r.collective_s > 0.030 for r in snap.ranks if r.rank != 1)
    assert all(r.status == "ok" for r in snap.ranks if r.rank != 1)


def test_overlapping_buckets_count_once():
    agg = Aggregator("j")
    agg.ingest(messages.hello(0, 1, "h", pid=1))
    for n in range(3):
        calls = [
            {
                "op": "ddp_allreduce",
                "seq": 2 * n + i,
                "b": 100,
                "dt": "float32",
                "g": 1,
                "d": 0.010,
                "n": n,
                "ph": "backward",
                "t0": 5.0 + i * 0.005,
            }
            for i in range(2)
        ]
        agg.ingest(messages.steps(0, [{"n": n, "t": 1.0 + n, "w": 0.05, "p": {"backward": 0.03}}], calls=calls, world=1))
    row = agg.snapshot().ranks[0]
    assert row.collective_s == pytest.approx(0.015)  # [5.000, 5.010] and [5.005, 5.015]: 15 ms, not 20
    assert row.phases["backward"] == pytest.approx(0.015)


def collective_totals(script, job, tmp_path, op, at_least):
    """Run a 2-rank job that starts its collectives on a signal, and collect (rank, op) -> (calls, bytes) once
    both ranks were seen making ``at_least`` calls of ``op``."""
    go = tmp_path / "go"
    env = dict(os.environ, RANKTOP_JOB=job, GO_FILE=str(go), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(JOBS / script)]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: rendezvous.read_nodes(job), 90, "no relay")
        with WatchSession(resolve([job])) as session:
            # telemetry sent before anyone subscribes is dropped by design: attach, then start
            wait_for(lambda: len(session.snapshot().ranks) == 2, 60, "the ranks never reported")
            go.touch()

            def totals():
                rows = {(c.rank, c.op): (c.calls, c.bytes) for c in session.snapshot().collectives}
                return rows if all(rows.get((r, op), (0,))[0] >= at_least for r in (0, 1)) else None

            return wait_for(totals, 60, "the collectives never arrived")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


@pytest.mark.slow
def test_counts_and_bytes_of_a_known_sequence_of_collectives_match_exactly(rdv, tmp_path):
    rows = collective_totals("known_collectives.py", "coll-job", tmp_path, "barrier", at_least=5)
    for rank in (0, 1):
        assert rows[(rank, "all_reduce")] == (10, 5 * 4000 + 5 * 512)  # sync float32 + async float16
        assert rows[(rank, "broadcast")] == (5, 5 * 80)
        assert rows[(rank, "all_gather_into_tensor")] == (5, 5 * 800)  # the gathered buffer, as nccl-tests counts
        assert rows[(rank, "barrier")] == (5, 0)
        assert rows[(rank, "ddp_allreduce")] == (5, 5 * 220)  # one bucket of 55 float32, not counted twice
    assert rows[(-1, "all_reduce")] == (20, 2 * (5 * 4000 + 5 * 512))
    assert {op for rank, op in rows if rank == 0} == {"all_reduce", "broadcast", "all_gather_into_tensor", "barrier", "ddp_allreduce"}


@pytest.mark.slow
def test_fsdp2_all_gathers_and_reduce_scatters_are_counted(rdv, tmp_path):
    rows = collective_totals("fsdp2_collectives.py", "fsdp-job", tmp_path, "reduce_scatter_single", at_least=2)
    for rank in (0, 1):
        # the flat parameter (340 float32) is gathered for forward (and backward) and its gradient reduce-scattered
        calls, nbytes = rows[(rank, "all_gather_single")]
        assert calls >= 2 and nbytes == calls * 1360
        assert rows[(rank, "reduce_scatter_single")] == (2, 2 * 1360)


FUNCTIONAL_SCRIPT = r"""
import os, json
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], RANK="0", WORLD_SIZE="1")
import torch, torch.distributed as dist
dist.init_process_group("gloo")
from ranktop.probe import collectives
from ranktop.probe.collective_tracker import CollectiveTracker
from ranktop.probe.recorder import Recorder
tracker = CollectiveTracker(Recorder())
collectives.install(tracker)
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))
out = funcol.all_reduce(torch.ones(4, 8), "sum", (mesh, 0))  # as DTensor calls it: a (mesh, dim) group
out.view(32).sum()  # DTensor waits on a view of the AsyncCollectiveTensor
w = dist.all_reduce(torch.ones(3), async_op=True)
w.wait()  # a collective's Work.wait: timed from launch to completion, not again in its wait
print(json.dumps([{k: r[k] for k in ("op", "b", "k", "gi")} for r in tracker.drain()]))
"""


def test_a_functional_collective_is_timed_in_the_wait_on_a_view_of_its_output(tmp_path):
    import json as _json
    import random as _random

    env = dict(os.environ, PORT=str(_random.randint(20000, 40000)), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", FUNCTIONAL_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    records = _json.loads(out.stdout.strip().splitlines()[-1])
    # the 1-D mesh spans the world: its group is the default one, keyed by the bare op name
    assert [(r["op"], r["b"], r["k"]) for r in records] == [("all_reduce", 128, "f"), ("all_reduce", 12, "c")]
    assert records[0]["gi"] == records[1]["gi"] == "0"
