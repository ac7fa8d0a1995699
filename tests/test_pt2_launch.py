"""Compiled jobs under ``ranktop launch`` (issues 29 and 51), real ones: 4 torchrun ranks on gloo, the model compiled
as trainers compile it (tests/jobs/compiled_ranks.py), rank 3 slowed by 15 ms per micro-batch inside its
compiled forward. Before issue 29 the fullgraph layouts died at their first forward (dynamo met automatic
mode's hooks); now each trains, and rank 3 is named first and alone, slow in forward. Read with
``ranktop watch --json``.

``torch.compile(DDP(model))`` slowed in its compiled *backward* (issue 51): DDP's forward is traced into the
region there, so its waits are seen from the compiled wrapper's eager call; before, the job had no collective
rows, the fast rank's wait for the slow one stayed in its backward, and nobody was named.
"""

import re

import pytest
from support import LaunchedJobs, assert_named_first_and_alone, brief

pytest.importorskip("torch")

LAYOUTS = ("ddp-fullgraph", "compile-ddp", "fsdp2-blocks")


@pytest.fixture
def jobs(rdv, tmp_path):
    launched = LaunchedJobs(tmp_path)
    yield launched
    launched.close()


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_compiled_job_under_launch_names_its_slow_rank_first_and_alone_in_forward(jobs, layout):
    doc = jobs.launch("pt2-slow", "compiled_ranks.py", "--layout", layout, "--slow-rank", "3", "--slow-ms", "15")
    log = jobs.log("pt2-slow")
    assert "Unsupported" not in log and "graph break" not in log.lower(), log[-3000:]
    slow = assert_named_first_and_alone(doc, 3, "forward", "rank 3 slow in forward: +")
    assert 0.040 < slow["excess_s"] < 0.090, slow  # 4 micro-batches of 15 ms
    for row in doc["ranks"]:  # every phase seen from the eager boundary of the compiled region
        assert {"data", "forward", "backward", "optimizer"} <= set(row["phases"]), row


@pytest.mark.slow
@pytest.mark.parametrize("micro_batches", ("4", "1"), ids=("no_sync-accumulation", "every-backward-synchronised"))
def test_compile_around_ddp_shows_its_waits_and_names_a_rank_slow_in_backward_alone(jobs, micro_batches):
    """Issue 51's job: a 2-rank ``torch.compile(DDP(model))`` (inductor; DDPOptimizer splits the graph at buckets),
    rank 1 slowed 8 ms in every micro-batch's compiled backward, with ``no_sync`` over 4 micro-batches and without
    accumulation. Its steps/s is the rate the script prints."""
    doc = jobs.launch("ddp-bwd", "compiled_ranks.py", "--layout", "compile-ddp", "--micro-batches", micro_batches,
                      "--slow-rank", "1", "--slow-ms", "8", "--slow-phase", "backward", "--backend", "inductor", ranks=2)  # fmt: skip
    log = jobs.log("ddp-bwd")
    assert "Unsupported" not in log, log[-3000:]
    ops = {row["op"] for row in doc["collectives"]}
    assert "ddp_allreduce" in ops, doc["collectives"]  # before issue 51: no collective row at all
    assert all(row["collective_s"] for row in doc["ranks"]), [brief(r) for r in doc["ranks"]]
    slow = assert_named_first_and_alone(doc, 1, "backward", "rank 1 slow in backward: +")
    expected = 0.008 * int(micro_batches)
    assert 0.5 * expected < slow["excess_s"] < 2.5 * expected, brief(slow)
    printed = [float(x) for x in re.findall(r"rate ([0-9.]+) steps/s", jobs.log("ddp-bwd"))]
    assert printed, log[-3000:]
    assert doc["steps_per_s"] == pytest.approx(printed[-1], rel=0.25), (doc["steps_per_s"], printed)
