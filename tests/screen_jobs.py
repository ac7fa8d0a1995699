"""Deterministic jobs for the screen snapshot tests (tests/test_screen_snapshots.py) and for looking at screens.

Two jobs, the ones a new user meets first:

- :func:`demo_job`: what ``make demo ARGS="--slow-rank 2 --slow-ms 40"`` shows, 4 CPU ranks with collectives,
  RSS memory and no GPU, built by hand (tests/test_main_screen.py);
- :func:`simulated_job`: what ``make demo ARGS="--simulate 4096 --pp 8 --tp 8 --slow-rank 3071 --slow-phase
  forward"`` shows: the simulator's job (demo/simulate.py, seeded) replayed on a clock of its own through the
  real wire encoding into a real Aggregator, as tests/test_scale.py does. Same seed, same clock: the same
  snapshot, to the digit, on every machine.
"""

from __future__ import annotations

import dataclasses
import functools
from unittest import mock

import test_main_screen

from ranktop.demo.simulate import Scenario, Simulator
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.model.endpoint import Endpoint
from ranktop.watch.model.snapshot import Snapshot

START = 1.0e9


def demo_job() -> Snapshot:
    """The 4-rank demo with rank 2 slow in data, connected to its relay as the real one is (the status line's fact)."""
    relay = Endpoint("tcp://vm:45815", "vm", "connected", 0.1, (0, 1, 2, 3))
    return dataclasses.replace(test_main_screen.demo_job(), endpoints=[relay])


SIMULATED_S = 5.0


@functools.cache
def simulated_job() -> Snapshot:
    """4,096 ranks laid out pp 8 x tp 8 x dp 64, rank 3071 slow in forward, after 5 s (about 3 s of CPU, once)."""
    scenario = Scenario(job="sim4096", ranks=4096, nodes=512, pp=8, tp=8, slow_rank=3071, slow_phase="forward")
    clock = [START]
    agg = Aggregator("sim4096", clock=lambda: clock[0], wall_clock=lambda: clock[0])
    with mock.patch("os.getpid", return_value=4242):  # the ranks' hellos carry a pid: the drill-down shows it
        for now, frames in Simulator(scenario).replay(SIMULATED_S, START, digests=True):
            clock[0] = now
            for message in frames:
                agg.ingest_frames(message)
    return agg.snapshot()
