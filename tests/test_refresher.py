"""Snapshots are taken on the refresher's thread, at the refresh rate, never piling up."""

import threading
import time

from ranktop.watch.refresher import BUSY_RATIO, Refresher
from ranktop.watch.model.snapshot import EMPTY


def test_snapshots_are_taken_off_the_callers_thread_and_errors_are_handed_over_too():
    delivered, threads = [], set()
    calls = [0]

    def take():
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError("aggregator exploded")
        return EMPTY

    def deliver(snapshot, error):
        threads.add(threading.current_thread().name)
        delivered.append((snapshot, error))

    refresher = Refresher(take, 20.0, deliver)
    refresher.start()
    time.sleep(0.5)
    refresher.stop()
    assert threads == {"ranktop-refresher"}
    assert delivered[0] == (EMPTY, None)
    assert delivered[1][0] is None and str(delivered[1][1]) == "aggregator exploded"
    assert 4 <= len(delivered) <= 11  # about 20 Hz for half a second


def test_a_slow_snapshot_delays_the_next_instead_of_queueing_them():
    delivered = []

    def take():
        time.sleep(0.2)
        return EMPTY

    refresher = Refresher(take, 50.0, lambda snapshot, error: delivered.append(time.monotonic()))
    refresher.start()
    time.sleep(1.5)
    refresher.stop()
    # one at a time, whatever the rate asks for, and a third of the time at most: the receiver needs the rest
    gaps = [b - a for a, b in zip(delivered, delivered[1:])]
    assert len(delivered) >= 2 and all(gap >= 0.2 * (1 + BUSY_RATIO) - 0.05 for gap in gaps)
