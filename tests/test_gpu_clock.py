"""Device time where it exists: on a GPU the host only launches the work, so the viewer scores the ranks that
send device times (``g``) on those, and says which clock its figures are on."""

import json

import pytest
from support import run_cli

from ranktop.tui.panes.header import header_text
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.model.verdict import verdict
from ranktop.watch.model.json_doc import document
from ranktop.wire.names import STEPS

import messages


class Clock:
    now = 1000.0

    def __call__(self):
        return self.now


def gpu_step(n, rank, slow_rank, with_g=True):
    """The host launches every rank's step in about the same 3 ms; on the device rank ``slow_rank``'s forward
    takes 40 ms more, and the others wait for it in backward (the all-reduce)."""
    host = {"data": 0.0005, "forward": 0.001, "backward": 0.001, "optimizer": 0.0005}
    dev = {"data": 0.002, "forward": 0.010, "backward": 0.015, "optimizer": 0.003}
    if rank == slow_rank:
        dev["forward"] += 0.040
    else:
        dev["backward"] += 0.040
    record = {"n": n, "t": 100.0 + n * 0.06, "w": sum(host.values()), "p": host}
    if with_g:
        record["g"] = {"w": sum(dev.values()), "p": dev}
    return record


def waits(n, rank, slow_rank):
    """The collective summary of one step: the fast ranks waited 40 ms (on the device) in backward."""
    w = 0.001 if rank == slow_rank else 0.041
    return {"n": n, "ph": "backward", "w": w, "ops": {"ddp_allreduce": [4, 1 << 20, w, w, w, 8, "bfloat16"]}}


def feed(agg, world=8, slow_rank=5, steps=30, gpu_ranks=None):
    for r in range(world):
        agg.ingest(messages.hello(r, world))
    for n in range(steps):
        for r in range(world):
            body = {"steps": [gpu_step(n, r, slow_rank, gpu_ranks is None or r in gpu_ranks)], "cs": [waits(n, r, slow_rank)]}
            agg.ingest(messages.decoded(STEPS, r, body, world=world))


def test_ranks_that_send_gpu_times_are_scored_on_them_and_the_header_names_the_clock():
    agg = Aggregator("j", clock=Clock())
    feed(agg)
    snap = agg.snapshot()
    top = snap.ranks[snap.stragglers[0]]
    assert top.rank == 5 and top.status == "slow" and top.culprit_phase == "forward"
    assert 0.035 < top.excess_s < 0.045
    assert abs(snap.ranks[0].phases["forward"] - 0.010) < 0.001  # bars drawn in GPU time
    assert snap.clock == "gpu"
    assert "bars: GPU time (CUDA events)" in header_text(snap, title="ranktop", paused=False).plain
    doc = json.loads(json.dumps(document(snap)))
    assert doc["clock"] == "gpu" and doc["verdict"]["clock"] == "gpu" and doc["device_time_ranks"] == list(range(8))
    assert verdict(snap).ranks == [5]


def test_a_job_where_only_some_ranks_send_gpu_times_says_so():
    agg = Aggregator("j", clock=Clock())
    feed(agg, gpu_ranks={0, 1, 2, 3})
    snap = agg.snapshot()
    assert snap.clock == "mixed"
    assert "GPU time on 4 ranks, CPU wall time on 4" in header_text(snap, title="ranktop", paused=False).plain


def test_without_device_times_the_bars_are_cpu_wall_time():
    agg = Aggregator("j", clock=Clock())
    feed(agg, gpu_ranks=set())
    snap = agg.snapshot()
    assert snap.clock == "host" and "bars: CPU wall time" in header_text(snap, title="ranktop", paused=False).plain


@pytest.mark.slow
def test_a_demo_job_in_step_mode_sends_device_times_and_the_viewer_says_its_clock(torchrun, monkeypatch):
    """probe.init() + probe.step() (the demo) with device timing on host-clock events (RANKTOP_DEVICE_TIMING=cpu:
    the CUDA code path, pool, marks and the sender's resolution, on a machine with no GPU)."""
    monkeypatch.setenv("RANKTOP_DEVICE_TIMING", "cpu")
    torchrun("gpu-clock", 2, "--slow-rank", "1", "--slow-ms", "40", "--slow-phase", "forward")
    out = run_cli("watch", "gpu-clock", "--json", "--duration", "5", timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["device_time_ranks"] == [0, 1] and doc["clock"] == "gpu" and doc["verdict"]["clock"] == "gpu"
    assert doc["ranks"][1]["phases"]["forward"] > 0.03
