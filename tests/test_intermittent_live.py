"""An intermittent straggler on a real torchrun/gloo job under ``ranktop launch`` (tests/jobs/sleepy_rank.py --gloo:
rank 2 of 4 sleeps 100 ms more in data on one step in 10, the others wait for it in a real all_reduce), read as a
screen reads it: its median says nothing, what the job pays it at the collectives on average does
(watch/analysis/intermittent.py)."""

import sys
import time

import pytest
from support import JOBS

from ranktop.watch.model.verdict import verdict
from ranktop.watch.session import WatchSession, resolve

pytestmark = pytest.mark.slow


def test_a_rank_slow_on_one_step_in_ten_is_named_with_how_often_and_its_cost_on_average(launched):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
    launched("every-10th", *torchrun, str(JOBS / "sleepy_rank.py"), "--gloo", "--slow-rank", "2", "--slow-ms", "100",
             "--slow-phase", "data", "--slow-every", "10", ranks=4)  # fmt: skip
    seen = []
    with WatchSession(resolve(["every-10th"])) as session:  # a screen's snapshots, twice a second
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            snap = session.snapshot()
            seen.append((verdict(snap), snap))
            if len(seen) > 4 and all(a.kind == "slow_rank" and a.ranks[:1] == [2] and a.every for a, _ in seen[-4:]):
                break
            time.sleep(0.5)
    answer, snap = seen[-1]
    texts = [a.text for a, _ in seen[-6:]]
    rows = {r.rank: (r.status, r.every, round(r.excess_s * 1000, 1)) for r in snap.ranks}
    assert answer.kind == "slow_rank" and answer.ranks == [2] and answer.phase == "data", (texts, rows)
    # how often: of the order of one in 10 (a busy machine's sleeps make some of its other steps late too)
    assert 5 <= answer.every <= 16, (answer, rows)
    assert answer.excess_s == pytest.approx(0.010, rel=0.5), (answer, rows)  # 100 ms on 1 step in 10
    assert answer.text.startswith("rank 2 slow in data on 1 step in "), answer.text
    assert "ms per step on average, the job loses" in answer.text, answer.text
    assert snap.ranks[2].every == answer.every, rows
    assert [status for r, (status, _, _) in rows.items() if r != 2] == ["ok"] * 3, rows
