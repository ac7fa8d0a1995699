"""What writing a memory capture costs the training thread: its longest stall while the snapshot is pickled.

A memory capture's writer thread pickles the CUDA allocator's snapshot for memory_viz. ``pickle.dump`` is one C
call that holds the GIL throughout: a Python training loop stands still that long. ranktop writes the same stream a
piece at a time (probe/memory_dump.py). This runs both on a snapshot of realistic shape and size (tests/fake_cuda.py
``allocator_snapshot``: no GPU needed) beside a thread that does small steps of Python work, as a training loop
does between kernel launches, and prints that thread's longest stall and the capture's own ``cost_s`` meter.
Target: under 50 ms for a 10,000-event history. torch's own ``_snapshot()`` call (one C++ call that builds the
objects, under the GIL) is not in these figures: on a GPU it is reported as the capture's ``snapshot_s``.

    python benchmarks/memory_snapshot_cost.py [--events 10000] [--repeat 3] [--distinct-frames]
"""

from __future__ import annotations

import argparse
import io
import pickle
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the fake snapshot is the tests'

from fake_cuda import allocator_snapshot  # noqa: E402

from ranktop.probe import memory_dump  # noqa: E402

TARGET_S = 0.050


def longest_stall(write) -> tuple[float, float, float]:
    """(the training-like thread's longest gap between two of its steps, the meter's, the write's duration)."""
    stop = threading.Event()
    gaps = [0.0]

    def training() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            sum(range(200))  # a few microseconds of Python, as between two kernel launches
            now = time.perf_counter()
            gaps[0] = max(gaps[0], now - last)
            last = now

    thread = threading.Thread(target=training, daemon=True)
    thread.start()
    time.sleep(0.05)
    gaps[0] = 0.0
    with memory_dump.StallMeter() as meter:
        began = time.perf_counter()
        write()
        took = time.perf_counter() - began
    stop.set()
    thread.join()
    return gaps[0], meter.longest, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--distinct-frames", action="store_true", help="each entry with frame dicts of its own (no dedup)")
    args = parser.parse_args()
    snapshot = allocator_snapshot(events=args.events, shared_frames=not args.distinct_frames)
    size = len(pickle.dumps(snapshot, 2))
    print(f"snapshot: {args.events:,} events, pickle {size / 1e6:.1f} MB")
    print(f"{'writer':<22} {'write ms':>9} {'training stall ms':>18} {'cost_s meter ms':>16}")
    worst = {}
    for name, write in (
        ("pickle.dump (before)", lambda f: pickle.dump(snapshot, f, 2)),
        ("memory_dump.dump", lambda f: memory_dump.dump(snapshot, f)),
    ):
        for _ in range(args.repeat):
            stall, meter, took = longest_stall(lambda: write(io.BytesIO()))
            worst[name] = max(worst.get(name, 0.0), stall)
            print(f"{name:<22} {took * 1000:>9.1f} {stall * 1000:>18.1f} {meter * 1000:>16.1f}")
    ok = worst["memory_dump.dump"] < TARGET_S
    print(f"target: training stall under {TARGET_S * 1000:.0f} ms with memory_dump.dump: {'met' if ok else 'NOT met'} "
          f"({worst['memory_dump.dump'] * 1000:.1f} ms worst of {args.repeat})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
