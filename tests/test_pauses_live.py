"""Checkpoints and evaluations on real torchrun/gloo jobs started as a user starts them (``ranktop launch``, no
ranktop in the script: tests/jobs/pausing_ranks.py): the job that waits for them is waiting, never stalled, and
the verdict says what it spends its time on (watch/analysis/pauses.py)."""

from __future__ import annotations

import time

import pytest

from support import JOBS, TORCHRUN4

from ranktop.watch.model.verdict import verdict
from ranktop.watch.session import WatchSession, resolve

pytestmark = pytest.mark.slow


@pytest.fixture
def launch(launched):
    """launch(job, *args): tests/jobs/pausing_ranks.py on 2 ranks under ``ranktop launch -- torchrun`` (conftest's
    ``launched``: a rendezvous folder of the test's own), once every rank trains."""

    def start(name: str, *args: str, ranks: int = 2, script: str = "pausing_ranks.py"):
        torchrun = [*TORCHRUN4[:-1], f"--nproc_per_node={ranks}"]
        launched(name, *torchrun, str(JOBS / script), *args, ranks=ranks)

    return start


def watched(job: str, seconds: float) -> list:
    """(verdict, snapshot) every quarter of a second for ``seconds``, as a viewer's screen shows them."""
    seen = []
    with WatchSession(resolve([job])) as session:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            snap = session.snapshot()
            seen.append((verdict(snap), snap))
            time.sleep(0.25)
    return seen


def stalls(seen: list) -> list[str]:
    """What a failed assertion says of the stalled snapshots: the verdict and where each rank was."""
    return [
        f"{answer.text} | " + "; ".join(f"{r.rank} {r.status} in {r.stalled_phase} {r.stalled_s}" for r in snap.ranks)
        for answer, snap in seen
        if answer.kind == "stalled" or "stalled" in statuses(snap)
    ][:3]


def statuses(snap) -> set[str]:
    return {r.status for r in snap.ranks}


def test_a_checkpoint_to_slow_storage_while_the_others_wait_in_a_barrier_is_a_checkpoint_not_a_stall(launch):
    # 2.5 s to save every 15 steps of about 25 ms: the others wait in dist.barrier() past the stall limit (2 s)
    launch("ckpt", "--checkpoint-every", "15", "--checkpoint-s", "2.5")
    seen = watched("ckpt", 14)
    kinds = [answer.kind for answer, _ in seen]
    assert "stalled" not in kinds and not any("stalled" in statuses(snap) for _, snap in seen), stalls(seen)
    assert not any("slow" in statuses(snap) for _, snap in seen), [a.text for a, s in seen if "slow" in statuses(s)]
    # while rank 0 saves (past the stall limit): it, the others waiting
    holding = [answer for answer, _ in seen if answer.kind == "checkpoint" and "the others wait" in answer.text]
    assert holding and all(a.ranks == [0] for a in holding), kinds
    assert holding[0].text.startswith("rank 0 saving a checkpoint for "), holding[0].text
    # and between saves, what they cost: most of the job's time
    told = [answer for answer, _ in seen[len(seen) // 2 :] if answer.kind == "checkpoint" and "the others wait" not in answer.text]
    assert told, kinds
    last = told[-1]
    assert last.ranks == [0] and last.phase == "checkpoint" and last.loss > 0.5, last
    assert last.text.startswith("rank 0 saving a checkpoint: 2.") and " every 1" in last.text, last.text
    assert last.text.endswith("of its time in checkpoints"), last.text


def test_an_evaluation_loop_is_evaluation_not_a_stall(launch):
    # every 20 steps, 40 batches of 75 ms each: 3 s of evaluation on every rank
    launch("evals", "--eval-every", "20", "--eval-batches", "40", "--eval-batch-s", "0.075")
    seen = watched("evals", 14)
    kinds = [answer.kind for answer, _ in seen]
    assert "stalled" not in kinds and not any("stalled" in statuses(snap) for _, snap in seen), kinds
    during = [answer for answer, _ in seen if answer.kind == "eval" and answer.text.startswith("evaluating for ")]
    assert during, kinds
    after = [answer for answer, _ in seen[len(seen) // 2 :] if answer.kind == "eval"]
    assert after and after[-1].loss > 0.3 and "of its time in evaluation" in after[-1].text, after[-1:]
