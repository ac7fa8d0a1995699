"""FLOPs per step (PyTorch's counter, by hand), peak FLOP/s by device, and the work a probe reports."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ranktop.demo.flops import analytic_step_flops, step_flops
from ranktop.demo.model import ModelConfig, TinyLM, lm_loss
from ranktop.probe import flops


@pytest.mark.parametrize("cfg, batch", [(ModelConfig(), 8), (ModelConfig(d_model=32, n_layers=3, seq_len=16), 3)])
def test_the_demos_flop_count_is_pytorchs_and_matches_the_matmuls_by_hand(cfg, batch):
    counted = step_flops(cfg, batch)
    # PyTorch's counter on the same model and batch, run the plain way (real tensors on the CPU).
    model = TinyLM(cfg)
    inputs = torch.randint(0, cfg.vocab, (batch, cfg.seq_len))
    counter = FlopCounterMode(display=False)
    with counter:
        lm_loss(model, inputs, inputs).backward()
    by_op = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    attention = counted - sum(by_op.values())  # the CPU's fused attention kernel is not in the counter's table
    assert counted == analytic_step_flops(cfg, batch)
    d, t = cfg.d_model, cfg.seq_len
    assert attention == 3 * cfg.n_layers * batch * 4 * t * t * d  # exactly the attention matmuls, forward and backward
    # ... and the rule of thumb: 6 x (non-embedding) parameters x tokens, plus attention.
    params = sum(p.numel() for name, p in model.named_parameters() if "tokens" not in name and "positions" not in name)
    assert counted == pytest.approx(6 * params * batch * t + attention, rel=0.05)  # biases and norms: a few %


def test_probe_count_flops_counts_one_call():
    a, b = torch.ones(16, 32), torch.ones(32, 8)
    assert flops.count_flops(torch.mm, a, b) == 2 * 16 * 32 * 8


@pytest.mark.parametrize(
    "name, dtype, peak",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 PCIe", "bf16", 756.0),
        ("NVIDIA H100 NVL", "fp8", 1670.0),
        ("NVIDIA H200", "bf16", 989.4),
        ("NVIDIA H200 NVL", "bf16", 835.5),  # not the SXM figure
        ("NVIDIA H800 PCIe", "bf16", 756.0),
        ("NVIDIA H800", "bf16", 989.4),
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "bf16", pytest.approx(989.4 * 3 / 7)),  # a slice: its share
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "bf16", pytest.approx(312.0 / 7)),
        ("NVIDIA A100-SXM4-40GB", "bf16", 312.0),
        ("NVIDIA A100 80GB PCIe", "tf32", 156.0),
        ("NVIDIA L40S", "bf16", 362.1),
        ("NVIDIA A10G", "bf16", 70.0),
        ("Tesla V100-SXM2-32GB", "fp16", 125.0),
        ("AMD Instinct MI300X", "bf16", 1307.4),
        ("Tesla V100-SXM2-32GB", "bf16", None),  # no bf16 on Volta
        ("cpu", "bf16", None),
    ],
)
def test_peak_flops_by_device_name_and_dtype(name, dtype, peak):
    assert flops.peak_tflops(name, dtype) == peak


def test_work_comes_from_arguments_then_the_environment_and_the_peak_can_be_overridden(capsys):
    env = {"RANKTOP_BATCH_SIZE": "16", "RANKTOP_TOKENS_PER_STEP": "1e4", "RANKTOP_PEAK_TFLOPS": "400"}
    work = flops.work_from(batch_size=8, env=env)
    assert work == {"dtype": "bf16", "batch": 8, "tokens": 10000, "peak_tflops": 400.0}
    assert flops.with_device(work, "NVIDIA H100 80GB HBM3")["peak_tflops"] == 400.0  # the override wins
    assert flops.with_device(flops.work_from(flops_dtype=torch.float16, env={}), "NVIDIA A100")["peak_tflops"] == 312.0
    assert flops.work_from(flops_per_step="auto", env={}) == {"dtype": "bf16"}
    assert flops.work_from(env={"RANKTOP_BATCH_SIZE": "many"}) == {"dtype": "bf16"}  # a bad variable is ignored ...
    assert "ignoring RANKTOP_BATCH_SIZE" in capsys.readouterr().err  # ... and said
    with pytest.raises(ValueError):
        flops.work_from(batch_size=0, env={})  # a bad argument is the caller's error
    with pytest.raises(ValueError):
        flops.normalise_dtype("int4")


def test_ranktop_launch_passes_the_work_per_step_in_the_environment_probe_init_reads():
    from ranktop.cli.launch import work_env

    env = work_env(8.0, 16384.0, 1.2e15)
    assert env == {"RANKTOP_BATCH_SIZE": "8", "RANKTOP_TOKENS_PER_STEP": "16384", "RANKTOP_FLOPS_PER_STEP": "1200000000000000"}
    assert flops.work_from(env=env) == {"dtype": "bf16", "batch": 8, "tokens": 16384, "flops": 1.2e15}
    assert work_env(None, None, None) == {}


def test_the_demo_trains_on_cpu_when_a_node_has_fewer_gpus_than_ranks():
    from ranktop.demo.train import gpu_index

    assert [gpu_index(2, 4, r) for r in range(4)] == [None] * 4  # not cuda:2 / cuda:3 ("invalid device ordinal")
    assert [gpu_index(4, 4, r) for r in range(4)] == [0, 1, 2, 3]
    assert [gpu_index(1, 4, r, visible=str(r)) for r in range(4)] == [0] * 4  # one GPU per task (SLURM binding)
    assert gpu_index(0, 1, 0) is None
