"""Torch-free ranks that step in lockstep, one of which can hang: a hang as synchronous training has it.

Each step's ``backward`` ends in a barrier made of files (every rank writes
``<step>.<rank>`` in a shared folder, then waits until all ranks have), so when
``--hang-rank R`` stops inside ``forward`` at ``--hang-at-step S``, every other
rank waits in ``backward`` of that step, as DDP ranks wait in the gradient
all-reduce. Run several with RANK/WORLD_SIZE/... and RANKTOP_JOB set. ``--hang-in checkpoint``: the hung rank hangs inside
``torch.save``, a checkpoint's write that never ends.
"""

import argparse
import os
import time
from pathlib import Path

from ranktop import probe

parser = argparse.ArgumentParser()
parser.add_argument("--barrier-dir", required=True)
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--hang-rank", type=int, default=-1)
parser.add_argument("--hang-at-step", type=int, default=20)
parser.add_argument(
    "--hang-in",
    choices=("sleep", "checkpoint"),
    default="sleep",
    help="checkpoint: it hangs inside torch.save, writing to a file that never takes the bytes",
)
args = parser.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
folder = Path(args.barrier_dir)
folder.mkdir(parents=True, exist_ok=True)


def all_reduce(step):
    (folder / f"{step}.{rank}").touch()
    nap = 0.001
    while not all((folder / f"{step}.{r}").exists() for r in range(world)):
        time.sleep(nap)
        nap = min(0.1, nap * 2)  # a long wait is spent asleep, where a stack dump finds it


def hang_forever():
    if args.hang_in == "checkpoint":
        import torch  # (only here: the job is torch-free otherwise)

        class Stuck:
            """A checkpoint's file on storage that never answers: every write waits."""

            def write(self, data):
                while True:
                    time.sleep(0.1)

            def flush(self):
                pass

        torch.save({"w": torch.zeros(4)}, Stuck())
    while True:
        time.sleep(0.1)


probe.init()
for n in range(args.steps):
    with probe.step():
        with probe.phase("data"):
            time.sleep(0.002)
        with probe.phase("forward"):
            if rank == args.hang_rank and n >= args.hang_at_step:
                hang_forever()
            time.sleep(0.004)
        with probe.phase("backward"):
            time.sleep(0.004)
            all_reduce(n)
probe.shutdown()
