"""Multi-dimensional parallel jobs, real ones: 4 torchrun ranks on gloo under ``ranktop launch``.

- data x pipeline, stage 1 with twice stage 0's layers, gradients all-reduced
  over the DeviceMesh's data group: a hand-written GPipe schedule
  (tests/jobs/pipeline_gpipe.py: isend/irecv and send/recv over the mesh's
  pipeline group, ``torch.autograd.backward(outputs, grads)``), and the same
  with ``torch.distributed.pipelining``'s ``ScheduleGPipe``
  (tests/jobs/pipeline_schedule.py);
- data x tensor (tests/jobs/tensor_dtensor.py): DTensor Colwise/Rowwise
  parallel on a 2x2 mesh, its all-reduces functional collectives; gradients
  all-reduced by hand over the data dimension, or FSDP2 over it (FSDP2 + TP).

Each healthy (nobody flagged, the imbalance of the stages shown as the
pipeline's, not a rank's) and with rank 3 slowed in forward (named first and
alone, in forward, with its coordinates). Read with ``ranktop watch --json``.
"""

import pytest
from support import assert_named_first_and_alone, brief
from support import job_ops as _job_ops


#: The pipeline jobs (script and options), and the point-to-point ops each must show.
PIPELINES = {
    "gpipe": (["pipeline_gpipe.py"], {"isend@pp", "irecv@pp", "send@pp", "recv@pp", "all_reduce@dp"}),
    # no mesh, no pipeline group: the stages are learned from who sends to whom, the data groups have no name
    "gpipe-default-group": (["pipeline_gpipe.py", "--default-group"], {"isend", "irecv", "send", "recv", "all_reduce@g2"}),
    "pipelining": (["pipeline_schedule.py"], {"isend@pp", "irecv@pp", "all_reduce@dp"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", PIPELINES)
def test_a_healthy_data_x_pipeline_job_flags_nobody_and_shows_the_stage_imbalance(job, variant):
    command, ops = PIPELINES[variant]
    doc = job("pp-ok", *command)
    if variant == "gpipe-default-group":
        assert doc["layout_roles"] == ["pp"]
        assert [r["coords"] for r in doc["ranks"]] == [{"pp": r // 2} for r in range(4)]
    else:
        assert doc["layout_roles"] == ["pp", "dp"]
        assert [r["coords"] for r in doc["ranks"]] == [{"pp": r // 2, "dp": r % 2} for r in range(4)]
    assert [r["status"] for r in doc["ranks"]] == ["ok"] * 4, doc["ranks"]
    verdict = doc["verdict"]
    assert verdict["ranks"] == [] and verdict["kind"] == "imbalanced", verdict
    assert verdict["text"].startswith("stage 1 does ") and "the work of stage 0" in verdict["text"]
    stage0, stage1 = doc["stages"]
    assert 1.5 < stage1["work_s"] / stage0["work_s"] < 2.6  # twice the layers
    assert stage0["wait_s"] > stage1["wait_s"]  # the first stage waits for the second's backward: its bubble
    for row in doc["ranks"][:2]:  # that wait is communication, not the first stage's "other" or own phases
        assert row["phases"]["comm"] > row["phases"]["forward"] + row["phases"]["backward"], row
        assert row["phases"]["other"] < 0.010, row
    assert ops <= _job_ops(doc)


@pytest.mark.slow
@pytest.mark.parametrize("variant", PIPELINES)
def test_a_slow_last_stage_rank_is_named_with_its_coordinates_not_the_ranks_it_holds_up(job, variant):
    doc = job("pp-slow", *PIPELINES[variant][0], "--slow-rank", "3", "--slow-ms", "15")
    where = "pp 1" if variant == "gpipe-default-group" else "pp 1, dp 1"
    slow = assert_named_first_and_alone(doc, 3, "forward", f"rank 3 ({where}) slow in forward: +")
    assert 0.040 < slow["excess_s"] < 0.090  # 4 micro-batches of 15 ms


#: The data x tensor jobs (their options), and the ops each must show.
TENSOR_PARALLEL = {
    "ddp-by-hand": ([], {"all_reduce@tp", "all_reduce@dp"}),
    "fsdp2": (["--fsdp"], {"all_reduce@tp", "all_gather_single@dp", "reduce_scatter_single@dp"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", TENSOR_PARALLEL)
def test_a_healthy_data_x_tensor_job_flags_nobody_and_shows_its_tensor_parallel_traffic(job, variant):
    options, ops = TENSOR_PARALLEL[variant]
    doc = job("tp-ok", "tensor_dtensor.py", *options)
    assert doc["layout_roles"] == ["tp", "dp"]
    assert [r["coords"] for r in doc["ranks"]] == [{"dp": r // 2, "tp": r % 2} for r in range(4)]
    assert [r["status"] for r in doc["ranks"]] == ["ok"] * 4, doc["ranks"]
    assert doc["verdict"]["kind"] == "healthy" and doc["verdict"]["ranks"] == [], doc["verdict"]
    assert ops <= _job_ops(doc)


@pytest.mark.slow
@pytest.mark.parametrize("variant", TENSOR_PARALLEL)
def test_a_slow_tensor_parallel_rank_is_named_not_its_partner_waiting_in_the_functional_all_reduce(job, variant):
    # 10 s rather than 6: four ranks of two tensor-parallel pairs share these two cores, and a step's noise there
    # can be as large as the 15 ms slowdown; the noise test (watch/analysis/stragglers.py) then wants more steps
    doc = job("tp-slow", "tensor_dtensor.py", *TENSOR_PARALLEL[variant][0], "--slow-rank", "3", "--slow-ms", "15", listen_s=10)
    assert doc["stragglers"][0] == 3, doc["stragglers"]
    slow, partner = doc["ranks"][3], doc["ranks"][2]
    assert slow["status"] == "slow" and slow["culprit_phase"] == "forward", [brief(r) for r in doc["ranks"]]
    assert [r["status"] for r in doc["ranks"][:3]] == ["ok"] * 3, [brief(r) for r in doc["ranks"]]
    assert doc["verdict"]["text"].startswith("rank 3 (tp 1, dp 1) slow in forward: +"), doc["verdict"]
    # its partner's wait for it is a wait (DTensor's functional all-reduce), not the partner's own forward
    assert partner["phases"]["forward"] < slow["phases"]["forward"] - 0.010
