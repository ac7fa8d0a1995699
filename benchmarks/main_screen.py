"""What one refresh of the main screen costs the UI thread, side by side for terminal sizes and job sizes.

The TUI draws one Snapshot per refresh (2 Hz by default). This drives the real
App headless (Textual's ``run_test``) with hand-built snapshots of 4, 64, 512
and 4,096 ranks (8 per node, one slow rank, noise that changes every refresh so
no cell is unchanged) at 80x24, 120x40 and 200x60, and prints the median and
worst time of ``poll()`` plus the repaint that follows, per refresh. Only the
rendering is measured: building snapshots is the engine's cost
(benchmarks/scale.py on the scale branch).

Target: well under the 500 ms a 2 Hz refresh allows at 4,096 ranks on a
2-core machine, and growing with what is on screen rather than with ranks.

    python benchmarks/main_screen.py            # about a minute
    python benchmarks/main_screen.py --quick    # 80x24 and 4,096 ranks only, fewer refreshes
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from ranktop.tui.app import RanktopApp
from ranktop.watch.model.rank_row import RankRow
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.statuses import OK, SLOW

PHASES = ["data", "forward", "backward", "optimizer", "other"]
SHARES = {"data": 0.1, "forward": 0.3, "backward": 0.5, "optimizer": 0.05, "other": 0.05}


def snapshot(n: int, seed: int, slow_rank: int) -> Snapshot:
    rnd = random.Random(seed)
    rows = []
    for r in range(n):
        step = 0.093 + rnd.uniform(-0.001, 0.001)
        excess = abs(rnd.gauss(0, 0.0004))
        status, culprit = OK, None
        if r == slow_rank:
            excess, status, culprit = 0.038, SLOW, "forward"
        rows.append(RankRow(
            rank=r, host=f"node-{r // 8:03d}", local_rank=r % 8, pid=1000 + r, step=41 + seed, steps_seen=42 + seed,
            step_s=step, phases={p: share * step for p, share in SHARES.items()}, score=excess / 0.093,
            excess_s=excess, culprit_phase=culprit, status=status, last_seen_s=0.1, dropped=0,
        ))  # fmt: skip
    order = sorted(range(n), key=lambda r: (rows[r].status == OK, -rows[r].score))
    return Snapshot(job="bench", world_size=n, elapsed_s=60.0 + seed, global_step=41 + seed, steps_per_s=10.7,
                    phase_names=PHASES, ranks=rows, stragglers=order)  # fmt: skip


class Cycle:
    """A new snapshot at every refresh, as from a live job."""

    def __init__(self, snaps: list[Snapshot]):
        self.snaps, self.i = snaps, 0

    def snapshot(self) -> Snapshot:
        self.i += 1
        return self.snaps[self.i % len(self.snaps)]


async def measure(n: int, size: tuple[int, int], refreshes: int) -> list[float]:
    source = Cycle([snapshot(n, seed, slow_rank=n - 1 - n // 4) for seed in range(4)])
    app = RanktopApp(source, refresh_hz=0.01)  # the timer stays out of the way: we call poll()
    times = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for _ in range(refreshes + 1):
            started = time.process_time()
            app.poll()
            await pilot.pause()  # the repaint
            times.append(time.process_time() - started)
    return times[1:]  # the first one lays the screen out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="80x24 and 4,096 ranks only, 3 refreshes")
    args = parser.parse_args()
    sizes = [(80, 24)] if args.quick else [(80, 24), (120, 40), (200, 60)]
    ranks = [4096] if args.quick else [4, 64, 512, 4096]
    refreshes = 3 if args.quick else 8
    print(f"CPU ms per refresh (median / max of {refreshes}), poll() and repaint; CPU time, so a busy machine does not inflate it")
    print(f"{'ranks':>6}" + "".join(f"{f'{w}x{h}':>18}" for w, h in sizes))
    for n in ranks:
        cells = []
        for size in sizes:
            times = asyncio.run(measure(n, size, refreshes))
            cells.append(f"{statistics.median(times) * 1000:7.0f} / {max(times) * 1000:5.0f}")
        print(f"{n:>6}" + "".join(f"{c:>18}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
