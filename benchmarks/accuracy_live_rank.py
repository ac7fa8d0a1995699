"""One rank of the live accuracy row's jobs (benchmarks/accuracy_live.py): the real probe, DDP-like steps over gloo
(backward ends in a real all_reduce, where every rank waits for the slowest), own work of sleeps or of real compute
(``--compute``: matrix products), and one family's fault, sized as the share of the job's healthy step it loses.

Run under ``ranktop launch -- torchrun``. Rank 0 prints when the fault starts and what the job's step was (``ONSET
<epoch> <step_s>``), and each healthy event as it begins (``BEGIN <epoch>``) and ends (``EVENT <start> <end>``), for
the benchmark to score against.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

from ranktop import probe

PHASES = {"data": 0.004, "forward": 0.010, "backward": 0.014, "optimizer": 0.004}
OWN_S = sum(PHASES.values())

p = argparse.ArgumentParser()
p.add_argument("--fault", default="none", choices=("none", "slow", "intermittent", "multiplicative", "two", "stall",
                                                   "checkpoint", "eval", "job_slower", "rotating", "recompile"))  # fmt: skip
p.add_argument("--culprits", default="1", help="comma-separated ranks")
p.add_argument("--size", type=float, default=0.0, help="share of the job's healthy step it loses")
p.add_argument("--phase", default="forward", choices=tuple(PHASES))
p.add_argument("--every", type=int, default=1)
p.add_argument("--onset-s", type=float, default=8.0, help="seconds after the first step")
p.add_argument("--lasts-s", type=float, default=0.0, help="0: to the end")
p.add_argument("--event-s", type=float, default=3.0, help="a checkpoint's, evaluation's or recompilation's length")
p.add_argument("--compute", action="store_true", help="forward and backward are matrix products, not sleeps")
p.add_argument("--run-s", type=float, default=900.0, help="at most (the benchmark ends the job sooner)")
args = p.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
culprits = [int(r) for r in args.culprits.split(",") if r != ""]
torch.set_num_threads(1)
probe.init()
dist.init_process_group("gloo")
grads = torch.ones(4096)
a = torch.randn(96, 96)


def work(name: str, seconds: float, factor: float = 1.0) -> None:
    if args.compute and name in ("forward", "backward"):
        end = time.perf_counter() + seconds * factor  # real compute, as long as the phase's share
        while time.perf_counter() < end:
            torch.mm(a, a)
    else:
        time.sleep(seconds * factor)


def say(*words) -> None:
    if rank == 0:
        print(*words, flush=True)


began = time.time()
healthy: list[float] = []
added = 0.0  # seconds the fault adds to this rank's step (fixed at the onset)
events = [args.onset_s, args.onset_s + 15.0] if args.fault == "checkpoint" else [args.onset_s]
armed = False
n = 0
while time.time() - began < args.run_s:  # (the benchmark ends the job: ranks that stop on their own clocks would not agree)
    t = time.time() - began
    start = time.perf_counter()
    faulted = (
        args.fault not in ("none", "checkpoint", "eval", "recompile")
        and t >= args.onset_s
        and (not args.lasts_s or t < args.onset_s + args.lasts_s)
    )
    if faulted and not armed:
        armed = True
        # every rank works the step out alike: the median of its steps before the fault (the first 2 s left out)
        steps = sorted(healthy) or [OWN_S]
        added = args.size * steps[len(steps) // 2]
        say("ONSET", time.time(), steps[len(steps) // 2])
    event = args.fault in ("checkpoint", "eval", "recompile") and bool(events) and t >= events[0]
    if event:
        events.pop(0)
        begun = time.time()
        say("BEGIN", begun)
        if args.fault == "eval":  # every rank evaluates, outside the training step
            time.sleep(args.event_s)
    with probe.step():
        for name, seconds in PHASES.items():
            with probe.phase(name):
                factor, extra = 1.0, 0.0
                if faulted and rank in culprits:
                    i = culprits.index(rank)
                    if args.fault == "slow" and name == args.phase:
                        extra = added
                    elif args.fault == "two" and name == (args.phase if i == 0 else "optimizer" if args.phase != "optimizer" else "data"):
                        extra = added * (1.0 if i == 0 else 0.6)
                    elif args.fault == "intermittent" and name == args.phase and n % args.every == 0:
                        extra = added * args.every
                    elif args.fault == "multiplicative":
                        factor = 1.0 + added / OWN_S
                    elif args.fault == "stall" and name == args.phase:
                        time.sleep(3600)  # stops making progress: the others wait in the all_reduce
                if faulted and args.fault == "job_slower" and name == args.phase:
                    extra = added
                if faulted and args.fault == "rotating" and name == args.phase and rank == (n * 7919) % world:
                    extra = added
                if event and args.fault == "recompile" and rank == culprits[0] and name == "forward":
                    extra = args.event_s  # a recompilation on one rank; the others wait in the all_reduce
                work(name, seconds, factor)
                if extra:
                    time.sleep(extra)
                if name == "backward":
                    dist.all_reduce(grads)
        if event and args.fault == "checkpoint" and rank == culprits[0]:
            time.sleep(args.event_s)  # rank 0 saves after its step's all_reduce; the others wait at the next one
    if event:
        say("EVENT", begun, time.time())
    if 2.0 <= t < args.onset_s:
        healthy.append(time.perf_counter() - start)
    n += 1
