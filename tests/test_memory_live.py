"""Memory creep, RSS, throughput and the GPU pane's fallback on real torchrun jobs of the demo (DDP, gloo)."""

import time

import pytest

from ranktop.watch.session import WatchSession, resolve

pytestmark = pytest.mark.slow

# The `torchrun` fixture (a real multi-rank demo job) is in conftest.py.


def watch(job, seconds, until=None, each=None):
    """Snapshots of a job for up to ``seconds``; ``each`` sees every one, ``until`` ends early."""
    with WatchSession(resolve([job])) as session:
        deadline = time.monotonic() + seconds
        snap = session.snapshot()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            snap = session.snapshot()
            if each is not None:
                each(snap)
            if until is not None and until(snap):
                break
        return snap


def test_a_leaking_rank_is_flagged_within_a_minute_and_only_that_rank(torchrun):
    started = time.monotonic()
    torchrun("leak", 3, "--leak-mb-per-step", "0.1", "--leak-rank", "1")
    wrongly_flagged = set()

    def others_clean(snap):
        wrongly_flagged.update(r.rank for r in snap.ranks if r.rank != 1 and r.memory is not None and r.memory.creep)

    def flagged(snap):
        return any(r.rank == 1 and r.memory is not None and r.memory.creep for r in snap.ranks)

    snap = watch("leak", 60 - (time.monotonic() - started), until=flagged, each=others_clean)
    assert flagged(snap), [(r.rank, r.memory) for r in snap.ranks]
    assert not wrongly_flagged
    leak = snap.ranks[1].memory
    assert leak.tracked == "rss" and leak.creep_mb_per_min > 30
    for row in snap.ranks:  # RSS and throughput for every rank
        assert row.memory.rss_bytes > 50 * 2**20 and row.throughput.samples_per_s > 0
        assert row.throughput.tokens_per_s == pytest.approx(row.throughput.samples_per_s * 64)


def test_a_healthy_job_is_never_flagged_and_reports_throughput_flops_and_no_gpu(torchrun):
    torchrun("healthy", 2)
    flagged = set()
    snap = watch("healthy", 30, each=lambda s: flagged.update(r.rank for r in s.ranks if r.memory and r.memory.creep))
    assert not flagged
    assert all(r.memory.creep_mb_per_min is not None for r in snap.ranks)  # measured, just not a creep
    for row in snap.ranks:
        t = row.throughput
        assert t.tflops > 0 and t.mfu is None  # a CPU: achieved TFLOP/s, MFU unknown
        assert t.tflops == pytest.approx(t.samples_per_s / 8 * 402_653_184 / 1e12)  # the demo's FLOPs per step
        assert row.gpu.na  # no NVIDIA GPU (or no NVML) here: said, not a crash
    job = snap.throughput
    assert job.samples_per_s == pytest.approx(sum(r.throughput.samples_per_s for r in snap.ranks))
