"""Snapshots are taken on the refresher's thread, at the refresh rate, never piling up.

What the refresher promises is a floor on the time between snapshots, which a busy machine cannot break: the
k-th snapshot no sooner than k periods after the start, the next after a slow one no sooner than BUSY_RATIO times
its length. That it goes on taking them is waited for, however slowly a loaded machine lets its thread run.
"""

import threading
import time

from support import wait_for

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
        delivered.append((snapshot, error, time.monotonic()))

    started = time.monotonic()
    refresher = Refresher(take, 20.0, deliver)
    refresher.start()
    wait_for(lambda: len(delivered) >= 4, 10, "the refresher stopped taking snapshots", seen=lambda: f"{len(delivered)} delivered")
    refresher.stop()
    assert threads == {"ranktop-refresher"}
    assert delivered[0][:2] == (EMPTY, None)
    assert delivered[1][0] is None and str(delivered[1][1]) == "aggregator exploded"
    assert delivered[2][:2] == (EMPTY, None)  # an error ends nothing: the next is taken as ever
    # never faster than 20 Hz: the k-th no sooner than k twentieths of a second after the start
    early = [(k, round(at - started, 3)) for k, (_, _, at) in enumerate(delivered, 1) if at < started + k / 20.0]
    assert not early, f"snapshots (number, seconds after the start) sooner than 20 Hz allows: {early}"


def test_a_slow_snapshot_delays_the_next_instead_of_queueing_them():
    takes: list[tuple[float, float]] = []  # each snapshot's start and end, as the snapshot itself saw them

    def take():
        began = time.monotonic()
        time.sleep(0.2)
        takes.append((began, time.monotonic()))
        return EMPTY

    refresher = Refresher(take, 50.0, lambda snapshot, error: None)
    refresher.start()
    wait_for(lambda: len(takes) >= 3, 15, "the refresher stopped taking snapshots", seen=lambda: f"{len(takes)} taken")
    refresher.stop()
    # one at a time, whatever the rate asks for, and a third of the time at most: the receiver needs the rest
    # (the refresher's own measure of a snapshot holds this one's, so the floor is its end plus twice its length)
    soon = [(round(b0 - a1, 3), round(a1 - a0, 3)) for (a0, a1), (b0, _) in zip(takes, takes[1:]) if b0 < a1 + BUSY_RATIO * (a1 - a0)]
    assert not soon, f"(seconds before the next snapshot, the slow one's length) sooner than BUSY_RATIO allows: {soon}"
