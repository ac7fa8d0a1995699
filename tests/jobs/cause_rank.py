"""A gloo job (run under torchrun) with one rank slow for a reason ranktop should name.

``--gc-rank R``: rank R keeps a large heap of Python objects and runs a full garbage collection in forward
every step (a script that calls ``gc.collect()`` per step, or builds cycles fast). ``--pin``: each rank pins
itself to CPU ``rank % cpus`` (a test then shares one rank's CPU with a busy process). ``--heavy-rank R``: rank
R's batches hold twice the tokens, so twice the compute (every rank says its tokens with ``probe.add_inputs``).
The phases compute (a fixed amount of CPU time) in forward and backward, sleep in data and optimizer; backward
ends in an all_reduce, where the ranks wait for the slowest, as in data-parallel training.
"""

import argparse
import gc
import os
import time

import torch
import torch.distributed as dist

from ranktop import probe

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--gc-rank", type=int, default=-1)
parser.add_argument("--pin", action="store_true")
parser.add_argument("--compute-ms", type=float, default=3.0)
parser.add_argument("--heavy-rank", type=int, default=-1)
args = parser.parse_args()

rank = int(os.environ["RANK"])
probe.init()
dist.init_process_group("gloo")
if args.pin:  # once torch and gloo are up (their start may set the thread's CPUs again)
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    print(f"rank {rank} on CPUs {sorted(os.sched_getaffinity(0))}", flush=True)
grads = torch.ones(1024)
heap = [[i] for i in range(400_000)] if rank == args.gc_rank else []  # tracked objects a full collection walks
tokens = 2 * 4096 if rank == args.heavy_rank else 4096
compute_s = args.compute_ms / 1000 * tokens / 4096


def spin(seconds: float) -> None:
    """Work of ``seconds`` of CPU (a fixed amount of work: on a shared CPU it takes longer, as real compute does)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


for n in range(args.steps):
    with probe.step():
        with probe.phase("data"):
            time.sleep(0.002)
        with probe.phase("forward"):
            probe.add_inputs(samples=8, tokens=tokens)
            spin(compute_s)
            if rank == args.gc_rank:
                gc.collect()
        with probe.phase("backward"):
            spin(compute_s)
            dist.all_reduce(grads)
        with probe.phase("optimizer"):
            time.sleep(0.002)
probe.shutdown()
