"""Snapshots no faster than the data changes (watch/refresher.py: ``period_s``).

A job watched in node digests changes once per digest interval, which its relays pace by its size
(wire/pacing.py ``digest_hz``: once a second at 2,048 nodes); a snapshot between two digests costs as much as
any (a tenth of a second of CPU at 16,384 ranks) and shows the same steps. So a view refreshes at the screen's rate
or the job's digest pace, whichever is slower: small jobs, and jobs watched from their ranks' own messages, at
today's rate. The rule is pure and tested as such; so is what an aggregator says of its job's pace, the
refresher that follows it, and the App, whose keys answer meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import messages
from support import wait_for
from ranktop.tui.app import RanktopApp
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.model.snapshot import EMPTY, PacedSource
from ranktop.watch.refresher import Refresher, period_s
from ranktop.relay.digest_fold import NodeDigest
from ranktop.wire.pacing import digest_hz

# -- the rule --------------------------------------------------------------------------------


def test_the_screen_s_rate_holds_up_to_1024_nodes_and_the_digest_pace_beyond():
    assert period_s(2.0) == 0.5  # ranks' own messages: every message changes the picture
    assert period_s(2.0, 1 / digest_hz(16)) == 0.5  # 4 digests a second: faster than the screen
    assert period_s(2.0, 1 / digest_hz(1024)) == 0.5  # 8,192 ranks of 8: 2 a second, the screen's own pace
    assert period_s(2.0, 1 / digest_hz(2048)) == 1.0  # 16,384 ranks: a digest a second, a snapshot a second
    assert period_s(0.5, 1 / digest_hz(2048)) == 2.0  # a screen slower than the job keeps its own rate (--refresh 0.5)


# -- what an aggregator says of its job -------------------------------------------------------------


def record(n: int) -> dict:
    return {"n": n, "t": 100.0 + n * 0.1, "w": 0.1, "p": {"forward": 0.05}}


def digest_of(rank: int, n: int, host: str):
    """One node's digest with one rank's step, as its relay builds it."""
    digest = NodeDigest("j", host)
    digest.add(messages.steps(rank, [record(n)]))
    return digest.body(now=float(n), wall=1000.0 + n)


@pytest.mark.parametrize("nodes, every_s", [(16, 0.25), (1024, 0.5), (2048, 1.0), (4096, 1.0)])
def test_a_job_heard_in_digests_changes_once_per_interval_its_relays_pace_by_its_size(nodes, every_s):
    agg = Aggregator("j")
    urls = [f"tcp://node{i}:5555" for i in range(nodes)]
    for url in urls:
        agg.add_endpoint(url)
    agg.ingest(messages.steps(0, [record(1)]), urls[0])
    assert agg.changes_every_s() == 0.0  # its ranks' own messages: each may change the picture
    agg.ingest(digest_of(1, 1, "node1"), urls[1])
    assert agg.changes_every_s() == every_s == 1 / digest_hz(nodes)
    assert isinstance(agg, PacedSource)


# -- the refresher ----------------------------------------------------------------------------------


def test_the_refresher_takes_snapshots_no_faster_than_the_data_changes_and_follows_its_pace():
    """No faster than the job's pace by construction (the k-th snapshot no sooner than k paces after the start,
    however late a busy machine wakes the thread); back at the screen's rate once the pace drops, which shows as
    twenty snapshots in far less time than the old pace allows them."""
    pace = [0.3]
    taken: list[float] = []
    began = time.monotonic()
    refresher = Refresher(lambda: EMPTY, 100.0, lambda snapshot, error: taken.append(time.monotonic()), lambda: pace[0])
    assert refresher.period_s == 0.3
    refresher.start()
    wait_for(lambda: len(taken) >= 3, 5, "the refresher stopped taking snapshots", seen=lambda: f"{len(taken)} taken")
    pace[0] = 0.0  # the job turned out small (or the viewer went back to the ranks' own messages)
    changed = time.monotonic()
    slow = [at for at in taken if at < changed]
    early = [(k, round(at - began, 3)) for k, at in enumerate(slow, 1) if at < began + k * 0.3]
    assert not early, f"snapshots (number, seconds after the start) sooner than the job's pace (0.3 s) allows: {early}"
    assert refresher.period_s == 0.01
    wait_for(lambda: len(taken) >= len(slow) + 20, 30, "the refresher stopped taking snapshots", seen=lambda: f"{len(taken)} taken")
    refresher.stop()
    # at the screen's 100 Hz again: one more wait at the old pace, then 19 at 0.01 s (0.5 s), where the old pace
    # would need 5.7 s at the least; 2.5 s is five times the quiet machine's
    twentieth = taken[len(slow) + 19] - changed
    assert twentieth < 2.5, f"twenty snapshots took {twentieth:.2f} s after the pace dropped: still at the job's pace"


def test_a_refresher_without_a_pace_keeps_the_screen_s_rate():
    assert Refresher(lambda: EMPTY, 2.0, lambda snapshot, error: None).period_s == 0.5


# -- the App ----------------------------------------------------------------------------------


class PacedJob:
    """A source that says its data changes every ``every_s``, and notes each snapshot taken of it: when, and on
    which thread."""

    def __init__(self, every_s: float):
        self.every_s = every_s
        self.taken: list[tuple[float, str]] = []

    def snapshot(self):
        self.taken.append((time.monotonic(), threading.current_thread().name))
        return EMPTY

    def changes_every_s(self) -> float:
        return self.every_s


def test_the_app_refreshes_a_paced_job_at_its_pace_and_its_keys_answer_meanwhile():
    """Snapshots at the job's pace (the k-th by the refresher no sooner than k half seconds after the start), on the
    refresher's thread; a key redraws the snapshot on screen and never takes one on the App's loop."""
    job = PacedJob(0.5)

    async def main():
        app = RanktopApp(job, None, refresh_hz=20.0)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            deadline = time.monotonic() + 10  # two refreshes: a second on a quiet machine
            while len(refreshed()) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            before, on_loop = app.sort, on_the_loop()
            await pilot.press("s")  # a key redraws the snapshot on screen: it never waits for one
            assert app.sort != before and on_the_loop() == on_loop, "the key took a snapshot of its own"
        return on_loop

    def refreshed() -> list[float]:
        return [at for at, name in job.taken if name == "ranktop-refresher"]

    def on_the_loop() -> list[float]:
        return [at for at, name in job.taken if name != "ranktop-refresher"]

    began = time.monotonic()
    on_loop = asyncio.run(main())
    assert on_loop and len(refreshed()) >= 2, (len(on_loop), len(refreshed()))  # the first draw's, then the refresher's
    early = [(k, round(at - began, 3)) for k, at in enumerate(refreshed(), 1) if at < began + k * 0.5]
    assert not early, f"refreshes (number, seconds after the start) sooner than every 0.5 s, not 20 times a second: {early}"


def test_a_history_fed_once_a_second_a_little_early_or_late_keeps_every_sample():
    from ranktop.watch.analysis.history import History

    agg = Aggregator("j")
    for rank in range(2):
        agg.ingest(messages.hello(rank, world=2))
        agg.ingest(messages.steps(rank, [record(1), record(2)]))
    snap, history = agg.snapshot(), History()
    times = [0.0, 0.98, 2.01, 2.99, 3.97, 5.0]  # a snapshot a second, as the build of each took more or less
    for t in times:
        history.note(snap, t)
    assert [s.t for s in history.samples] == times
    history.note(snap, 5.5)  # two a second (the screen's 2 Hz): one kept a second, as before
    history.note(snap, 6.0)
    assert [s.t for s in history.samples][-2:] == [5.0, 6.0]
