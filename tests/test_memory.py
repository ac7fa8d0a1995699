"""Memory sampling in the probe, creep detection and throughput in the aggregator: no sockets, no terminal."""

import random

import msgpack
import msgspec
import pytest

from ranktop.probe import memory
from ranktop.watch.engine import memory_history as memory_stats
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis.memory_creep import MB, creep
from ranktop.wire import schema

from test_aggregator import Clock, hello, steps
import messages


# -- the probe's side ------------------------------------------------------------


def test_rss_is_read_from_proc_and_grows_with_touched_memory():
    before = memory.read_rss()
    block = bytearray(64 * MB)  # zero-filled: every page touched
    after = memory.read_rss()
    assert before and after - before > 48 * MB
    del block


def test_without_proc_rss_falls_back_to_getrusage_or_none(tmp_path):
    rss = memory.read_rss(str(tmp_path / "no-such-statm"))
    assert rss is None or rss > 0


def test_the_sampler_reports_rss_only_without_cuda_and_reuses_a_fresh_sample():
    now = [0.0]
    sampler = memory.MemorySampler(0, clock=lambda: now[0])
    first = sampler.sample()
    assert set(first) == {"rss"} and first["rss"] > 0  # torch is not imported by these tests: no "cuda"
    assert sampler.sample() is first
    now[0] += 1.0
    assert sampler.sample() is not first


# -- creep -------------------------------------------------------------------------


def series(seconds, rate_mb_per_min=0.0, noise_mb=0.0, base_mb=500.0, every=0.5, seed=0, shape=None):
    rng = random.Random(seed)
    out = []
    for i in range(int(seconds / every)):
        t = i * every
        y = base_mb + rate_mb_per_min * t / 60 + rng.gauss(0, noise_mb)
        if shape is not None:
            y = shape(t)
        out.append((t, y * MB))
    return out


def test_a_steady_leak_is_creep_with_its_rate():
    verdict = creep(series(30, rate_mb_per_min=120, noise_mb=2))
    assert verdict.flagged and 100 < verdict.mb_per_min < 140


def test_a_flat_noisy_rank_is_not_creep():
    for seed in range(20):
        assert not creep(series(60, noise_mb=8, seed=seed)).flagged


def test_a_warm_up_that_levels_off_is_not_creep():
    # +300 MB over the first 8 s (caches, allocator pools), then flat.
    def warm_up(t):
        return 500 + min(t, 8.0) / 8.0 * 300

    assert not creep(series(40, shape=warm_up)).flagged
    # ... nor a single jump halfway (a checkpoint buffer, a bigger batch).
    assert not creep(series(40, shape=lambda t: 500 if t < 20 else 900)).flagged


def test_too_few_samples_or_too_slow_a_climb_is_not_creep():
    assert not creep(series(8, rate_mb_per_min=600)).flagged  # 16 samples over 8 s
    assert not creep(series(60, rate_mb_per_min=3)).flagged  # below the floor
    assert creep(series(8, rate_mb_per_min=600)).mb_per_min > 500  # the slope is still reported


# -- the aggregator ----------------------------------------------------------------


def heartbeat(rank, mem):
    return messages.heartbeat(rank, {"step": 1, "mem": mem})


def test_the_aggregator_flags_creep_on_the_leaking_rank_only():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    rng = random.Random(3)
    for r in range(4):
        agg.ingest(hello(r))
    for i in range(100):  # 25 s at the probes' 4 Hz
        clock.now += 0.25
        for r in range(4):
            rss = 400 * MB + rng.randint(-4, 4) * MB + (i * 2 * MB if r == 2 else 0)  # rank 2: +8 MB/s
            agg.ingest(heartbeat(r, {"rss": rss}))
    rows = agg.snapshot().ranks
    assert [r.memory.creep for r in rows] == [False, False, True, False]
    assert 400 < rows[2].memory.creep_mb_per_min < 560 and rows[2].memory.tracked == "rss"
    assert len(rows[2].memory.history_mb) == 25 / memory_stats.SAMPLE_EVERY_S  # one kept per half second


def test_cuda_memory_is_tracked_when_present_with_fragmentation():
    agg = Aggregator("j", clock=Clock())
    cuda = {"dev": 1, "alloc": 6 << 30, "resv": 8 << 30, "peak": 7 << 30, "retries": 2, "ooms": 0, "cap": 80 << 30}
    agg.ingest(heartbeat(0, {"rss": 3 << 30, "cuda": cuda}))
    mem = agg.snapshot().ranks[0].memory
    assert mem.tracked == "cuda" and mem.cuda_device == 1 and mem.capacity == 80 << 30
    assert mem.fragmentation == pytest.approx(0.25) and mem.alloc_retries == 2 and mem.peak == 7 << 30


def test_throughput_and_mfu_per_rank_and_for_the_job():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    for r in range(2):
        work = {"dtype": "bf16", "batch": 8, "tokens": 8 * 2048, "flops": 2e12}
        if r == 0:
            work.update(device="NVIDIA H100 80GB HBM3", peak_tflops=989.4)
        agg.ingest(msgspec.structs.replace(hello(r, world=2), work=work))
    for n in range(20):  # 10 steps per second
        for r in range(2):
            agg.ingest(steps(r, [{"n": n, "t": 100.0 + n * 0.1, "w": 0.09, "p": {"forward": 0.05}}]))
    snap = agg.snapshot()
    t0, t1 = snap.ranks[0].throughput, snap.ranks[1].throughput
    assert t0.samples_per_s == pytest.approx(80) and t0.tokens_per_s == pytest.approx(163840)
    assert t0.tflops == pytest.approx(20) and t0.mfu == pytest.approx(20 / 989.4)
    assert t1.tflops == pytest.approx(20) and t1.mfu is None  # no known peak: MFU unknown
    job = snap.throughput
    assert job.samples_per_s == pytest.approx(160) and job.tflops == pytest.approx(40) and job.mfu is None


def test_no_work_per_step_no_throughput():
    agg = Aggregator("j", clock=Clock())
    agg.ingest(hello(0, world=1))
    for n in range(5):
        agg.ingest(steps(0, [{"n": n, "t": 100.0 + n, "w": 0.5, "p": {}}]))
    snap = agg.snapshot()
    assert snap.ranks[0].throughput is None and snap.throughput is None and snap.ranks[0].memory is None


# -- the wire ----------------------------------------------------------------------


def frames(kind, body):
    return [kind.encode(), msgpack.packb(dict(messages.plain(body), v=[1, 1], k=kind))]


def test_memory_and_gpu_state_pass_the_wire_and_bad_ones_are_dropped():
    good = messages.plain(heartbeat(0, {"rss": 1 << 30, "cuda": {"dev": 0, "alloc": 1, "resv": 2}}))
    good["state"]["gpu"] = {"na": "no NVIDIA GPU"}
    assert schema.decode(frames("heartbeat", good)).state.mem.rss == 1 << 30
    assert schema.decode(frames("heartbeat", heartbeat(0, {"rss": None})))  # no /proc
    for bad in ({"rss": "lots"}, {"rss": 1, "cuda": {"alloc": "x"}}, [1, 2]):
        with pytest.raises(schema.WireError):
            schema.decode(frames("heartbeat", heartbeat(0, bad)))
    with pytest.raises(schema.WireError):
        schema.decode(frames("hello", dict(messages.plain(hello(0)), work={"batch": [8]})))
    # A 1.1 peer sends none of these: its messages still decode.
    assert schema.decode(frames("heartbeat", {"job": "j", "rank": 0, "ts": 0.0, "state": {"step": 3}}))
