"""Compiled jobs under ``ranktop launch`` (issue 29), real ones: 4 torchrun ranks on gloo, the model compiled
as trainers compile it (tests/jobs/compiled_ranks.py), rank 3 slowed by 15 ms per micro-batch inside its
compiled forward. Before issue 29 the fullgraph layouts died at their first forward (dynamo met automatic
mode's hooks); now each trains, and rank 3 is named first and alone, slow in forward. Read with
``ranktop watch --json``.
"""

import pytest
from support import LaunchedJobs, assert_named_first_and_alone

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
