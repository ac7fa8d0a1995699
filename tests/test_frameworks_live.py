"""The big frameworks' own layouts, learned from their own groups: real training jobs on 4 CPU ranks (gloo)
under ``ranktop launch``, read with ``ranktop watch --json``.

- Megatron-Core (tests/jobs/megatron_gpt.py): its GPTModel, DDP, optimizer and pipeline schedules, tensor
  parallel 2 x pipeline parallel 2, with 1F1B and with the interleaved schedule (two virtual stages per rank,
  one direction of whose pipeline traffic goes on the default group).
- DeepSpeed's pipeline engine (tests/jobs/deepspeed_pipeline.py): a ``PipelineModule`` of 2 stages x 2
  data-parallel replicas, ``engine.train_batch``; its groups have no description, ranktop reads its grid.
- torchtitan's way (tests/jobs/titan_3d.py, torch only, 8 ranks): a ("pp", "dp_shard", "tp") mesh of 2 x 2 x 2,
  DTensor tensor parallel, FSDP2 over dp_shard, ``torch.distributed.pipelining`` over pp.

The frameworks come with pyproject's ``frameworks`` extra, which ``make test`` installs where CI or SLOW is
set. Where one is missing a test skips and says so, except in CI, where a missing framework fails.
"""

import importlib
import os

import pytest
from support import assert_named_first_and_alone
from support import job_ops as _job_ops


def need(module: str) -> None:
    """Skip (fail in CI) where a framework is not installed."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        message = f"{module} is not installed ({exc}): `make test SLOW=1` installs pyproject's frameworks extra"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


#: Megatron-Core's schedules (the job's options), and the pipeline ops each must show.
MEGATRON = {
    "1f1b": ([], {"batch_isend_irecv@pp"}),
    # with pipeline groups of two, Megatron sends one direction on the default group: pipeline traffic still
    "interleaved": (["--interleaved"], {"isend@pp", "irecv@pp"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("schedule", MEGATRON)
def test_a_healthy_megatron_tp_x_pp_job_gives_every_rank_its_coordinates_and_flags_nobody(job, schedule):
    need("megatron.core")
    options, ops = MEGATRON[schedule]
    doc = job(f"mcore-{schedule}", "megatron_gpt.py", *options)
    assert not [e for e in doc["errors"] if "groups" in e or "malformed" in e], doc["errors"]  # no hello or group dropped
    assert doc["layout_roles"] == ["pp", "tp"]  # Megatron's dimensions of size 1 (dp, cp, ep) are no coordinate
    assert [r["coords"] for r in doc["ranks"]] == [{"pp": r // 2, "tp": r % 2} for r in range(4)]
    assert [r["status"] for r in doc["ranks"]] == ["ok"] * 4, doc["ranks"]
    assert doc["verdict"]["ranks"] == [], doc["verdict"]  # the last stage's loss head is its stage's work, no rank's
    assert [s["stage"] for s in doc["stages"]] == [0, 1]
    assert ops | {"all_reduce@tp"} <= _job_ops(doc), _job_ops(doc)
    assert not {"isend", "irecv", "batch_isend_irecv"} & _job_ops(doc)  # no pipeline traffic left unattributed


@pytest.mark.slow
@pytest.mark.parametrize("schedule", MEGATRON)
def test_a_megatron_rank_slowed_in_forward_is_named_first_and_alone_with_its_coordinates(job, schedule):
    need("megatron.core")
    doc = job(f"mcore-{schedule}-slow", "megatron_gpt.py", *MEGATRON[schedule][0], "--slow-rank", "3", "--slow-ms", "15")
    slow = assert_named_first_and_alone(doc, 3, "forward", "rank 3 (pp 1, tp 1) slow in forward: +")
    assert 0.040 < slow["excess_s"] < 0.110, slow  # 4 micro-batches of 15 ms


@pytest.mark.slow
def test_a_healthy_deepspeed_pipeline_job_is_learned_from_its_grid_and_flags_nobody(job):
    need("deepspeed")
    doc = job("ds-pipe", "deepspeed_pipeline.py")
    assert not [e for e in doc["errors"] if "groups" in e or "malformed" in e], doc["errors"]
    assert doc["layout_roles"] == ["pp", "dp"]  # DeepSpeed's pipe x data topology: pipe-major
    assert [r["coords"] for r in doc["ranks"]] == [{"pp": r // 2, "dp": r % 2} for r in range(4)]
    assert [r["status"] for r in doc["ranks"]] == ["ok"] * 4, doc["ranks"]
    assert doc["verdict"]["ranks"] == [] and doc["verdict"]["kind"] == "imbalanced", doc["verdict"]  # stage 1 costs twice
    assert {"send@pp", "recv@pp", "all_reduce@dp"} <= _job_ops(doc), _job_ops(doc)


@pytest.mark.slow
def test_a_deepspeed_pipeline_rank_slowed_in_forward_is_named_first_and_alone_with_its_coordinates(job):
    need("deepspeed")
    doc = job("ds-pipe-slow", "deepspeed_pipeline.py", "--slow-rank", "3", "--slow-ms", "15")
    slow = assert_named_first_and_alone(doc, 3, "forward", "rank 3 (pp 1, dp 1) slow in forward: +")
    assert 0.040 < slow["excess_s"] < 0.090, slow  # 4 micro-batches of 15 ms


#: A torchtitan-style mesh's coordinates, rank by rank: pp outermost, tp innermost.
TITAN_COORDS = [{"pp": r // 4, "dp_shard": r // 2 % 2, "tp": r % 2} for r in range(8)]


@pytest.mark.slow
def test_a_torchtitan_style_3d_mesh_gives_every_rank_three_coordinates_and_names_a_slowed_rank_alone(job):
    doc = job("titan-3d-slow", "titan_3d.py", "--slow-rank", "7", "--slow-ms", "15", ranks=8)
    assert doc["layout_roles"] == ["pp", "tp", "dp_shard"]
    assert [r["coords"] for r in doc["ranks"]] == TITAN_COORDS
    assert {"isend@pp", "irecv@pp", "all_reduce@tp", "all_gather_single@dp_shard", "reduce_scatter_single@dp_shard"} <= _job_ops(doc)
    slow = assert_named_first_and_alone(doc, 7, "forward", "rank 7 (pp 1, tp 1, dp_shard 1) slow in forward: +")
    assert 0.040 < slow["excess_s"] < 0.090, slow  # 4 micro-batches of 15 ms
