"""A torch-free rank for tests: the real probe, phases made of sleeps.

Run several with RANK/LOCAL_RANK/WORLD_SIZE/LOCAL_WORLD_SIZE/RANKTOP_JOB set, as a
launcher would. ``--slow-rank R --slow-ms MS --slow-phase P`` makes one rank slow.
``--slow-ranks 4,5,6,7`` makes several ranks slow alike (a slow node). ``--slow-every N`` makes it slow on one step in
N only (an intermittent straggler). ``--also-rank R --also-ms MS --also-phase P`` makes a second straggler.
``--slow-all`` makes every rank slow alike, ``--slow-from-s S`` only from S seconds after it started (the job slower
than itself); ``--slow-by gc``: the slowdown is a full garbage collection over a heap, not a sleep.
``--gloo`` (under torchrun): backward ends in a gloo all_reduce where the ranks wait for the slowest, as
in data-parallel training, while their own work stays sleeps (no compute competing for the machine's cores,
so a test reads how ranktop measures a slowdown, not the machine's noise).
"""

import argparse
import gc
import os
import time

from ranktop import probe

PHASES = {"data": 0.002, "forward": 0.004, "backward": 0.006, "optimizer": 0.002}

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10_000)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-ms", type=float, default=0.0)
parser.add_argument("--slow-ranks", type=lambda s: {int(r) for r in s.split(",")}, default=set())
parser.add_argument("--slow-phase", default="forward")
parser.add_argument("--slow-every", type=int, default=1)
parser.add_argument("--slow-all", action="store_true")
parser.add_argument("--slow-from-s", type=float, default=0.0)
parser.add_argument("--gloo", action="store_true")
parser.add_argument(
    "--slow-by",
    choices=("sleep", "gc"),
    default="sleep",
    help="gc: the slowdown is a full garbage collection over a heap of 400,000 tracked lists, not a sleep",
)
parser.add_argument("--also-rank", type=int, default=-1)
parser.add_argument("--also-ms", type=float, default=0.0)
parser.add_argument("--also-phase", default="data")
args = parser.parse_args()

rank = int(os.environ.get("RANK", "0"))
probe.init()
all_reduce = None
if args.gloo:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    grads = torch.ones(1024)
    all_reduce = lambda: dist.all_reduce(grads)  # noqa: E731
began = time.monotonic()
heap: list = []
for n in range(args.steps):
    with probe.step():
        for name, seconds in PHASES.items():
            with probe.phase(name):
                slowed = (
                    rank == args.slow_rank or rank in args.slow_ranks or args.slow_all
                ) and time.monotonic() - began >= args.slow_from_s
                slowed = slowed and name == args.slow_phase and n % args.slow_every == args.slow_every - 1
                extra = args.slow_ms / 1000 if slowed else 0.0
                extra += args.also_ms / 1000 if rank == args.also_rank and name == args.also_phase else 0.0
                if slowed and args.slow_by == "gc":
                    heap = heap or [[i] for i in range(400_000)]  # (built once, when it starts: what a collection walks)
                    gc.collect()
                    extra = 0.0
                time.sleep(seconds + extra)
                if name == "backward" and all_reduce is not None:
                    all_reduce()
probe.shutdown()
