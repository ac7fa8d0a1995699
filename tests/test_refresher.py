"""Snapshots are taken on the refresher's thread, at the refresh rate, never piling up."""

import threading
import time

from ranktop.watch.refresher import Refresher
from ranktop.watch.snapshot import EMPTY


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
    time.sleep(1.0)
    refresher.stop()
    assert 2 <= len(delivered) <= 5  # one at a time, whatever the rate asks for
