"""FLOPs per step (PyTorch's counter, by hand), peak FLOP/s by device, and the work a probe reports."""

import subprocess
import sys
import types

import pytest
import torch
from support import run_cli
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
    assert work == {"dtype": "bf16", "dtype_from": "default", "batch": 8, "tokens": 10000, "peak_tflops": 400.0}
    assert flops.with_device(work, "NVIDIA H100 80GB HBM3")["peak_tflops"] == 400.0  # the override wins
    assert flops.with_device(flops.work_from(flops_dtype=torch.float16, env={}), "NVIDIA A100")["peak_tflops"] == 312.0
    assert flops.work_from(flops_per_step="auto", env={}) == {"dtype": "bf16", "dtype_from": "default"}
    assert flops.work_from(env={"RANKTOP_BATCH_SIZE": "many"}) == {
        "dtype": "bf16",
        "dtype_from": "default",
    }  # a bad variable is ignored ...
    assert "ignoring RANKTOP_BATCH_SIZE" in capsys.readouterr().err  # ... and said
    with pytest.raises(ValueError):
        flops.work_from(batch_size=0, env={})  # a bad argument is the caller's error
    with pytest.raises(ValueError):
        flops.normalise_dtype("int4")


def test_ranktop_launch_passes_the_work_per_step_in_the_environment_probe_init_reads():
    from ranktop.cli.launch import work_env

    env = work_env(8.0, 16384.0, 1.2e15)
    assert env == {"RANKTOP_BATCH_SIZE": "8", "RANKTOP_TOKENS_PER_STEP": "16384", "RANKTOP_FLOPS_PER_STEP": "1200000000000000"}
    assert flops.work_from(env=env) == {"dtype": "bf16", "dtype_from": "default", "batch": 8, "tokens": 16384, "flops": 1.2e15}
    assert work_env(None, None, None) == {}
    assert flops.work_from(env=work_env(None, None, None, "fp32")) == {"dtype": "fp32", "dtype_from": "stated"}


def test_ranktop_launch_refuses_a_dtype_with_no_peak_in_one_line():
    out = run_cli("launch", "--flops-dtype", "int4", "--", sys.executable, "-c", "pass")
    assert out.returncode != 0 and "unknown dtype 'int4'" in out.stderr


class FakeParam:
    def __init__(self, dtype, device="cuda"):
        self.dtype, self.device = dtype, types.SimpleNamespace(type=device)


def fake_torch(autocast=None, precision="highest", allow_tf32=False):
    """What compute_dtype asks of torch, on a GPU: autocast's state for the device, the matmul precision."""
    matmul = types.SimpleNamespace(allow_tf32=allow_tf32)
    return types.SimpleNamespace(
        is_autocast_enabled=lambda device: autocast is not None, get_autocast_dtype=lambda device: autocast,
        get_float32_matmul_precision=lambda: precision, backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=matmul)),
    )  # fmt: skip


def test_the_peak_is_that_of_the_dtype_the_job_computes_in():
    """fp32 parameters under autocast compute in bf16; without it in fp32, or in TF32 where matmuls may use it; bf16
    parameters in bf16. The demo's fp32 work divided by the bf16 peak read MFU ~15x too low on an H100."""
    model = types.SimpleNamespace(parameters=lambda: iter([FakeParam(torch.float32)]))
    assert flops.compute_dtype(fake_torch(autocast=torch.bfloat16), model) == ("bf16", "autocast")
    assert flops.compute_dtype(fake_torch(), model) == ("fp32", "parameters")
    assert flops.compute_dtype(fake_torch(precision="high"), model) == ("tf32", "parameters")
    assert flops.compute_dtype(fake_torch(allow_tf32=True), model) == ("tf32", "parameters")
    half = types.SimpleNamespace(parameters=lambda: iter([FakeParam(torch.bfloat16)]))
    assert flops.compute_dtype(fake_torch(), half) == ("bf16", "parameters")
    assert flops.compute_dtype(fake_torch(), types.SimpleNamespace(parameters=lambda: iter([]))) is None
    policy = types.SimpleNamespace(param_dtype=torch.bfloat16)  # FSDP2: fp32 shards, unsharded in bf16
    group = types.SimpleNamespace(mp_policy=policy)
    sharded = types.SimpleNamespace(parameters=model.parameters, _get_fsdp_state=lambda: types.SimpleNamespace(_fsdp_param_group=group))
    sharded.modules = lambda: iter([sharded])
    assert flops.compute_dtype(fake_torch(), sharded) == ("bf16", "parameters")
    assert flops.peak_tflops("NVIDIA H100 80GB HBM3", "fp32") == 66.9  # against 989.4 for bf16


def test_automatic_mode_learns_the_dtype_inside_the_first_training_forward_unless_one_was_stated():
    """With torch's own autocast (on the CPU here): the first training forward runs inside it, so that is where
    the dtype is asked; a dtype the user stated is kept."""
    from ranktop.probe import auto
    from ranktop.probe.recorder import Recorder

    def learnt(stated=None):
        resources = types.SimpleNamespace(work=flops.work_from(flops_dtype=stated, env={}))

        def learn(module):
            if resources.work["dtype_from"] != "stated":
                found = flops.compute_dtype(torch, module)
                resources.work = dict(resources.work, dtype=found[0], dtype_from=found[1])

        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        hooks = auto.TorchHooks(auto.AutoTimer(Recorder()), model=model, optimizer=opt)
        hooks._on_forward = learn
        hooks.install()
        try:
            model.eval()
            model(torch.ones(4))  # an evaluation first: not what training computes in
            model.train()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.ones(4)).sum()
            loss.backward()
            opt.step()
        finally:
            hooks.remove()
        return resources.work["dtype"], resources.work["dtype_from"]

    assert learnt() == ("bf16", "autocast")
    assert learnt("fp32") == ("fp32", "stated")


def test_flops_dtype_is_honoured_under_ranktop_launch(rdv, tmp_path):
    """``ranktop launch`` starts the probe before the script runs; the script's own ``probe.init(flops_dtype=...)``
    was then ignored (the probe was up: init returned it as it was), and its fp32 work went against the bf16 peak."""
    script = tmp_path / "fp32.py"
    script.write_text(
        "import torch\n"
        "from ranktop import probe\n"
        "m = torch.nn.Linear(4, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    m(torch.ones(2, 4)).sum().backward(); opt.step()\n"
        "p = probe.get(); before = dict(p.resources.work)\n"
        "probe.init(flops_dtype='fp32', batch_size=8)\n"
        "after = p.resources.work\n"
        "print(before['dtype_from'], after['dtype'], after['dtype_from'], after['batch'])\n"
    )
    out = run_cli("launch", "--job", "jd", "--", sys.executable, str(script), cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["parameters", "fp32", "stated", "8"]


def test_autocast_s_dtype_is_learnt_under_ranktop_launch_with_nothing_stated(rdv, tmp_path, monkeypatch):
    """Issue 48: the peak comes from the dtype the job computes in. A script that trains under autocast (bf16, on
    the CPU here) and states no dtype: automatic mode learns bf16 from autocast inside its first training forward,
    through the probe's own wiring (not a stand-in), and the parameters' fp32 without autocast."""
    script = tmp_path / "amp.py"
    script.write_text(
        "import sys, torch\n"
        "from ranktop import probe\n"
        "amp = sys.argv[1] == 'amp'\n"
        "m = torch.nn.Linear(4, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "m.eval(); m(torch.ones(2, 4))\n"  # an evaluation first, outside autocast: not what training computes in
        "m.train()\n"
        "for _ in range(3):\n"
        "    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=amp):\n"
        "        loss = m(torch.ones(2, 4)).float().sum()\n"
        "    loss.backward(); opt.step(); opt.zero_grad()\n"
        "work = probe.get().resources.work\n"
        "print(work['dtype'], work['dtype_from'])\n"
    )
    monkeypatch.delenv("RANKTOP_FLOPS_DTYPE", raising=False)
    for how, expected in (("amp", ["bf16", "autocast"]), ("fp32", ["fp32", "parameters"])):
        out = run_cli("launch", "--job", f"amp-{how}", "--", sys.executable, str(script), how, cwd=tmp_path, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == expected, out.stdout


def test_init_mode_learns_autocast_s_dtype_where_its_forward_phase_is_entered_inside_autocast(rdv, tmp_path):
    """``probe.init()`` + ``probe.phase()`` knows no model: the peak stayed bf16 ("default") for a job computing in
    fp16 under autocast. The forward phase, entered inside autocast, says what it computes in; a dtype the script
    states is kept."""
    script = tmp_path / "amp_init.py"
    script.write_text(
        "import sys, torch\n"
        "from ranktop import probe\n"
        "probe.init(job='amp-init', flops_dtype=sys.argv[1] or None)\n"
        "m = torch.nn.Linear(4, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    with probe.step():\n"
        "        with torch.autocast('cpu', dtype=torch.float16):\n"
        "            with probe.phase('forward'):\n"
        "                loss = m(torch.ones(2, 4)).float().sum()\n"
        "        with probe.phase('backward'):\n"
        "            loss.backward()\n"
        "        opt.step(); opt.zero_grad()\n"
        "work = probe.get().resources.work\n"
        "print(work['dtype'], work['dtype_from'])\n"
        "probe.shutdown()\n"
    )
    for stated, expected in (("", ["fp16", "autocast"]), ("fp32", ["fp32", "stated"])):
        out = subprocess.run([sys.executable, str(script), stated], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == expected, out.stdout + out.stderr


def test_the_demo_trains_on_cpu_when_a_node_has_fewer_gpus_than_ranks():
    from ranktop.demo.train import gpu_index

    assert [gpu_index(2, 4, r) for r in range(4)] == [None] * 4  # not cuda:2 / cuda:3 ("invalid device ordinal")
    assert [gpu_index(4, 4, r) for r in range(4)] == [0, 1, 2, 3]
    assert [gpu_index(1, 4, r, visible=str(r)) for r in range(4)] == [0] * 4  # one GPU per task (SLURM binding)
    assert gpu_index(0, 1, 0) is None


def test_fsdp2_s_mixed_precision_is_what_a_fully_sharded_model_computes_in(tmp_path):
    """torch's own fully_shard (one gloo rank, on the CPU): its shards stay fp32, the forward runs on bf16
    parameters (MixedPrecisionPolicy.param_dtype), which it unshards after our hook has asked."""
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
        for block in model:
            fully_shard(block, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
        fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
        assert next(model.parameters()).dtype == torch.float32
        assert flops.compute_dtype(torch, model) == ("bf16", "parameters")
    finally:
        dist.destroy_process_group()
