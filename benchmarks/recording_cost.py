"""What the flight recorder costs, side by side: the receiver's time per frame, the viewer's snapshot, the disk.

Frames are the probe's own messages (wire/schema.encode) shaped like the demo's:
a steps message every 1/4 s per rank carrying that quarter second's step records
(four phases, one allreduce each, folded as the probe folds them: a summary per
step and a sample of raw calls once a second) and the rank's state (memory, last
collective, GPU gauges), and a hello every 2 s. Timestamps and durations are noisy floats, as
real ones are (they are what limits compression).

Measured, for 64 ranks, with and without a FlightRecorder on the receiver's path:

- the receiver's time per frame (``FlightRecorder.tap`` + ``Aggregator.ingest_frames``
  against ``ingest_frames`` alone);
- the viewer's snapshot time while frames stream in and the writer thread
  compresses (the recording must not slow the refresh);
- compressed bytes per rank per day at 1, 4 and 12 steps/s, and the writer
  thread's CPU time per second of recorded job.

    python benchmarks/recording_cost.py          # about 30 s
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.offline.recording import FlightRecorder, read
from ranktop.probe import collective_summary
from ranktop.wire import schema
from ranktop.wire.messages import Hello, Steps

RANKS = 64
MSG_HZ = 4.0
PHASES = {"data": 0.004, "forward": 0.006, "backward": 0.009, "optimizer": 0.001}


def job_frames(
    seconds: float, steps_per_s: float, ranks: int = RANKS, seed: int = 1, msg_hz: float = MSG_HZ
) -> list[tuple[float, list[bytes]]]:
    """(t, frames) of a job of ``ranks`` ranks for ``seconds``, in arrival order."""
    rng = random.Random(seed)
    out = []
    step_s = 1.0 / steps_per_s
    n = [0] * ranks
    carry = [0.0] * ranks
    t0 = 1_795_000_000.0
    sample_every = max(1, round(msg_hz * collective_summary.SAMPLE_EVERY_S))  # messages between two samples
    for tick in range(int(seconds * msg_hz)):
        t = tick / msg_hz
        for r in range(ranks):
            carry[r] += steps_per_s / msg_hz
            recs, colls = [], []
            while carry[r] >= 1:
                carry[r] -= 1
                phases = {k: v * rng.uniform(0.8, 1.3) for k, v in PHASES.items()}
                recs.append({"n": n[r], "t": t0 + n[r] * step_s + rng.random() * 1e-3, "w": step_s * rng.uniform(0.95, 1.05), "p": phases})
                colls.append(
                    {
                        "op": "ddp_allreduce",
                        "seq": n[r],
                        "b": 547840,
                        "dt": "float32",
                        "g": ranks,
                        "d": rng.uniform(0.01, 0.05),
                        "n": n[r],
                        "ph": "backward",
                        "t0": 800 + n[r] * step_s + rng.random(),
                    }
                )
                n[r] += 1
            state = {
                "step": n[r],
                "last": n[r] - 1,
                "in_step": True,
                "phase": "backward",
                "step_age": rng.random() * step_s,
                "dropped": 0,
                "rejected": {},
                "rate_hz": msg_hz,
                "median_step_s": step_s * rng.uniform(0.99, 1.01),
                "collective": {"op": "ddp_allreduce", "seq": n[r], "b": 547840, "dt": "float32", "g": ranks, "inside": False, "age": 0.0},
                "mem": {"rss": 350_000_000 + rng.randrange(1 << 20)},
                "gpu": {"na": "no NVML binding"},
                "cap": None,
            }
            summaries, sample = collective_summary.summarise(colls) if colls else ([], [])
            steps = msgspec.convert({"job": "bench", "rank": r, "ts": t0 + t, "steps": recs, "state": state}, Steps)
            steps = msgspec.structs.replace(steps, cs=summaries or None, cx=sample if colls and tick % sample_every == 0 else None)
            out.append((t, schema.encode(steps)))
            if tick % max(1, int(2 * msg_hz)) == 0:
                out.append((t, schema.encode(Hello(job="bench", rank=r, ts=t0 + t, host=f"node{r // 8:03d}", pid=1000 + r, world=ranks,
                                                   local_rank=r % 8, local_world=8, rate_hz=msg_hz, device="cuda",
                                                   work={"batch": 8, "tokens": 4096, "flops": 4e12, "peak_tflops": 989.0}))))  # fmt: skip
    return out


def per_frame_us(frames, recorder: FlightRecorder | None) -> float:
    agg = Aggregator("bench")
    start = time.perf_counter()
    for _, f in frames:
        if recorder is not None:
            recorder.tap(f, "tcp://node000:5555")
        agg.ingest_frames(f, "tcp://node000:5555")
    return (time.perf_counter() - start) / len(frames) * 1e6


def snapshot_ms_while_streaming(frames, recorder: FlightRecorder | None, seconds: float = 6.0) -> float:
    """Median snapshot time of a viewer while another thread receives (and records) the job's frames at its real rate."""
    agg = Aggregator("bench")
    warm = len(frames) // 4
    for _, f in frames[:warm]:
        agg.ingest_frames(f)
    done = threading.Event()
    rate = RANKS * MSG_HZ * 1.1  # frames a second from 64 ranks at 4 Hz, hellos included

    def feed():
        start = time.perf_counter()
        for i, (_, f) in enumerate(frames[warm : warm + int(rate * seconds)]):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            if recorder is not None:
                recorder.tap(f, "e")
            agg.ingest_frames(f, "e")
        done.set()

    threading.Thread(target=feed, daemon=True).start()
    times = []
    while not done.is_set():
        s = time.perf_counter()
        agg.snapshot()
        times.append((time.perf_counter() - s) * 1000)
        time.sleep(0.05)
    return statistics.median(times)


def tapped(path: Path, frames: list) -> FlightRecorder:
    """A recorder into ``path`` that has been handed ``frames`` ((seconds into the job, frames) pairs) on their
    own clock, as the receiver would hand them; not started."""
    rec = FlightRecorder(path, queue_frames=len(frames) + 1)
    fake = iter(t for t, _ in frames)
    rec.clock = lambda: 1e9 + next(fake)
    for _, f in frames:
        rec.tap(f, "tcp://node000:5555")
    return rec


def disk(seconds: float, steps_per_s: float, ranks: int, msg_hz: float) -> tuple[float, float]:
    """(compressed bytes per rank per day, writer CPU seconds per recorded second)."""
    frames = job_frames(seconds, steps_per_s, ranks, msg_hz=msg_hz)
    with tempfile.TemporaryDirectory() as d:
        rec = tapped(Path(d) / "x.rec", frames)
        t0 = time.process_time()
        rec.start().close(timeout=600)
        cpu = time.process_time() - t0
        size = sum(p.stat().st_size for p in Path(d).iterdir())
        assert len(read(Path(d) / "x.rec").entries) == len(frames)
    return size / ranks / seconds * 86400, cpu / seconds


def replay_and_report_s(seconds: float = 60.0) -> tuple[float, float, float]:
    """(seconds to read, to seek to the end of, and to report on) a recording of 64 ranks at 4 steps/s."""
    from ranktop.watch.offline.replay import Replay
    from ranktop.watch.offline.report import build

    frames = job_frames(seconds, 4.0)
    with tempfile.TemporaryDirectory() as d:
        tapped(Path(d) / "r.rec", frames).start().close(timeout=600)
        t0 = time.perf_counter()
        recording = read(Path(d) / "r.rec")
        t1 = time.perf_counter()
        Replay(recording, start_s=seconds, clock=lambda: 0.0).snapshot()
        t2 = time.perf_counter()
        build(recording)
        t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


def main() -> int:
    frames = job_frames(20, 4.0)
    print(
        f"{RANKS} ranks, {MSG_HZ:g} messages/s each, 4 steps/s: {len(frames)} frames, "
        f"{sum(len(b) for _, f in frames for b in f) / len(frames):.0f} B per frame\n"
    )
    # interleaved (A B A B A B), medians: drift of a shared machine hits both alike
    per_frame = {False: [], True: []}
    snaps = {False: [], True: []}
    dropped = 0
    with tempfile.TemporaryDirectory() as d:
        for i in range(3):
            for recording in (False, True):
                rec = FlightRecorder(Path(d) / f"a{i}.rec").start() if recording else None
                per_frame[recording].append(per_frame_us(frames, rec))
                if rec is not None:
                    rec.close()
                rec = FlightRecorder(Path(d) / f"b{i}.rec").start() if recording else None
                snaps[recording].append(snapshot_ms_while_streaming(frames, rec))
                if rec is not None:
                    rec.close()
                    dropped += rec.stats.dropped
    with tempfile.TemporaryDirectory() as d:
        idle = FlightRecorder(Path(d) / "t.rec", queue_frames=len(frames) + 1)  # no writer yet: the receiver's own cost
        start = time.perf_counter()
        for _, f in frames:
            idle.tap(f, "e")
        tap_us = (time.perf_counter() - start) / len(frames) * 1e6
        idle.start().close()
    print(f"FlightRecorder.tap alone, on the receiver thread: {tap_us:.1f} µs per frame\n")
    print(f"{'viewer side (median of 3, interleaved; 64 ranks streaming at 4 Hz)':<40}")
    print(f"{'':<40}{'without':>12}{'with recorder':>16}")
    print(
        f"{'  receiver flat out: tap + ingest (µs/frame)':<40}"
        f"{statistics.median(per_frame[False]):>12.1f}{statistics.median(per_frame[True]):>16.1f}"
    )
    print(f"{'  snapshot while streaming (ms)':<40}{statistics.median(snaps[False]):>12.2f}{statistics.median(snaps[True]):>16.2f}")
    print(f"  frames dropped by the recorder's queue: {dropped}\n")
    print(f"{'disk, lzma chunks':<28}{'per rank/day':>14}{'64 ranks/day':>14}{'writer CPU, 64 ranks':>24}")
    for msg_hz in (4.0, 1.0):
        for steps in (1.0, 4.0, 12.0):
            per_rank, cpu = disk(30, steps, 16, msg_hz)
            label = f"  {steps:g} steps/s, {msg_hz:g} msg/s"
            print(f"{label:<28}{per_rank / 1e6:>11.1f} MB{per_rank * 64 / 1e9:>11.2f} GB{cpu * 4 * 100:>20.1f} %")
    read_s, seek_s, report_s = replay_and_report_s()
    print(f"\n64 ranks, 60 s recorded: read {read_s:.1f} s, replay seek to the end {seek_s:.1f} s, report {report_s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
