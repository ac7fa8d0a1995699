"""probe/evidence.py: the rates a rank's state carries, from the garbage collector and the scheduler."""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from ranktop.probe import evidence
from ranktop.wire.messages import Evidence, State


def test_only_the_training_threads_collections_are_timed():
    timer = evidence.GcTimer(threading.get_ident())
    timer.install()
    try:
        gc.collect()
        own = timer.collections
        other = threading.Thread(target=gc.collect)
        other.start()
        other.join()
    finally:
        timer.remove()
    assert own == 1 and timer.seconds > 0
    assert timer.collections == own  # the other thread's collection is not the step's
    assert timer not in gc.callbacks


def test_the_rates_are_over_the_window_and_fit_the_wire():
    clock = [100.0]
    ev = evidence.Evidence(clock=lambda: clock[0])
    assert ev.sample() is None  # one reading: no rate yet
    ev.gc.seconds, ev.gc.collections = 0.5, 10
    clock[0] += 2.0
    rates = ev.sample()
    assert rates["win"] == 2.0 and rates["gc"] == pytest.approx(0.25) and rates["gc_n"] == pytest.approx(5.0)
    clock[0] += 0.1
    assert ev.sample() is rates  # read at most every SAMPLE_EVERY_S
    for _ in range(40):  # the oldest readings leave the window
        clock[0] += 1.0
        rates = ev.sample()
    assert rates["win"] <= evidence.WINDOW_S + 1.0 and rates["gc"] == 0.0
    State(ev=Evidence(**rates))  # the wire's type takes it as it is


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/task is Linux's")
def test_the_training_threads_run_queue_wait_and_involuntary_switches_are_read():
    sched = evidence.read_sched(threading.get_native_id())
    assert sched is not None and sched[0] >= 0 and sched[1] >= 0
    assert evidence.read_sched(2**31 - 1) is None  # no such thread: nothing, no error
