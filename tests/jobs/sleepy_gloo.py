"""A gloo job whose own work is sleeps: every step data, forward, backward and optimizer sleep, and backward ends
in an all_reduce where the ranks wait for the slowest. ``--slow-rank R --slow-ms MS --slow-phase P`` slows one.

Sleeps make each rank's own time what the script says (no compute competing for this machine's two cores), so a
test reads how ranktop measures a slowdown, not the machine's noise.
"""

import argparse
import time

import torch
import torch.distributed as dist

from ranktop import probe

PHASES = {"data": 0.004, "forward": 0.012, "backward": 0.016, "optimizer": 0.004}

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-ms", type=float, default=0.0)
parser.add_argument("--slow-phase", default="forward")
args = parser.parse_args()

probe.init()
dist.init_process_group("gloo")
rank = dist.get_rank()
grads = torch.ones(1024)
for n in range(args.steps):
    with probe.step():
        for name, seconds in PHASES.items():
            with probe.phase(name):
                time.sleep(seconds + (args.slow_ms / 1000 if rank == args.slow_rank and name == args.slow_phase else 0.0))
                if name == "backward":
                    dist.all_reduce(grads)
probe.shutdown()
