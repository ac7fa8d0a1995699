"""Drift is not a fault (issue 46, item 7): straggler episodes on a healthy job whose ranks wander slowly.

Eight simulated ranks of synchronous training (phases 5/20/30/5 ms, 3% gaussian noise per step, the others
waiting for the slowest in backward's all-reduce) whose speeds each wander as a sine of ±AMP over a period of
20 to 60 s (random phases), through a real Aggregator, read every half second of a simulated clock for
MINUTES. It counts the straggler episodes (a rank becoming ``slow``) and the looks whose verdict names a rank.
Figures for people; no test asserts them.

    python benchmarks/drift.py                       # ±2% and ±4%, 10 minutes each (about a minute)
    python benchmarks/drift.py --amp 0.04 --minutes 5
"""

from __future__ import annotations

import argparse
import functools
import math
import random

import msgspec


from ranktop.probe.recorder import Recorder
from ranktop.probe.sender import Sender
from ranktop.transport.identity import Identity
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.model.verdict import verdict
from ranktop.probe import collective_summary
from ranktop.wire import schema

BASE = {"data": 0.005, "forward": 0.020, "backward": 0.030, "optimizer": 0.005}


@functools.lru_cache(maxsize=None)
def _sender(rank: int, world: int) -> Sender:
    identity = Identity(job="drift", rank=rank, local_rank=rank, world=world, local_world=None, host="n0",
                        pid=100 + rank, launcher="torchrun")  # fmt: skip
    return Sender(identity, Recorder(), rate_hz=4.0, directory=None, on_fault=_raise)


def _raise(exc: BaseException) -> None:
    raise exc


def _steps(rank: int, world: int, step: dict, cs: list, cx: list):
    """One rank's steps message as the viewer decodes it off the wire (no state: the sender's own recorder never
    stepped, and would say the rank is stuck at step 0)."""
    s = _sender(rank, world)
    return schema.decode(s.message(msgspec.structs.replace(s.steps_message([step], cs, cx), state=None)))


def run(amp: float, minutes: float, world: int = 8, seed: int = 0) -> tuple[int, int, int]:
    """(straggler episodes, looks naming a rank, looks) of one run."""
    rng = random.Random(seed)
    now = [1000.0]
    agg = Aggregator("drift", clock=lambda: now[0], wall_clock=lambda: now[0], window=64)
    for r in range(world):
        s = _sender(r, world)
        agg.ingest(schema.decode(s.message(s.wire_hello())))
    phase = [rng.uniform(0, 2 * math.pi) for _ in range(world)]
    period = [rng.uniform(20, 60) for _ in range(world)]
    n, t, next_look, until = 0, 100.0, now[0] + 0.5, now[0] + 60 * minutes
    before: set[int] = set()
    episodes = naming = looks = 0
    while now[0] < until:
        own = []
        for r in range(world):
            f = 1 + amp * math.sin(2 * math.pi * (now[0] - 1000) / period[r] + phase[r])
            own.append({k: v * f * (1 + rng.gauss(0, 0.03)) for k, v in BASE.items()})
        totals = [sum(p.values()) for p in own]
        wall = max(totals) + 0.001
        for r, p in enumerate(own):
            waited = max(0.0, wall - 0.001 - totals[r])
            p = dict(p, backward=p["backward"] + waited)
            call = {"op": "all_reduce", "seq": n, "b": 4096, "dt": "float32", "g": world, "d": waited, "n": n,
                    "ph": "backward", "t0": t + totals[r]}  # fmt: skip
            summaries, sample = collective_summary.summarise([call])
            agg.ingest(_steps(r, world, {"n": n, "t": t, "w": wall, "p": p}, summaries, sample))
        n += 1
        t += wall
        now[0] += wall
        if now[0] >= next_look:
            next_look += 0.5
            snap = agg.snapshot()
            looks += 1
            naming += bool(verdict(snap).ranks) and verdict(snap).kind in ("slow_rank", "slow_node")
            slow = {r.rank for r in snap.ranks if r.status == "slow"}
            episodes += len(slow - before)
            before = slow
    return episodes, naming, looks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--amp", type=float, action="append", help="how far each rank wanders, a share (default 0.02 and 0.04)")
    p.add_argument("--minutes", type=float, default=10.0, help="simulated minutes per run (default 10)")
    args = p.parse_args()
    print("amp    episodes  looks naming a rank")  # (8 ranks, each MINUTES long)
    for amp in args.amp or [0.02, 0.04]:
        episodes, naming, looks = run(amp, args.minutes)
        print(f"±{amp:.0%}  {episodes:8d}  {naming} of {looks}")


if __name__ == "__main__":
    main()
