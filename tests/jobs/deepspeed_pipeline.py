"""DeepSpeed's pipeline engine on 4 CPU ranks (gloo, ``DS_ACCELERATOR=cpu``): a ``PipelineModule`` of two
stages over two data-parallel replicas (DeepSpeed's ``pipe`` x ``data`` topology), trained with
``engine.train_batch`` (its own 1F1B schedule, send/recv between stages, gradients all-reduced over its data
groups). Stage 1's layers cost twice stage 0's layers; each layer costs a fixed sleep (tests/jobs/parallel_common.py).
DeepSpeed's groups carry no description: ranktop learns them from its grid. The script never imports
ranktop: run it under ``ranktop launch``.
"""

import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import sys  # noqa: E402

import deepspeed  # noqa: E402
import deepspeed.comm.torch  # noqa: E402,F401  (the module: deepspeed.comm's own `torch` name is torch)
import torch  # noqa: E402
from deepspeed.pipe import PipelineModule  # noqa: E402
from parallel_common import Layer, options  # noqa: E402

WIDTH, MICRO_BATCH = 32, 2

# DeepSpeed's CPU backend compiles a shared-memory all-reduce (a C++ op, built at the first run): gloo does it here.
sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None

args = options()
deepspeed.init_distributed(dist_backend="gloo")
stage_of = int(os.environ["RANK"]) // 2  # DeepSpeed lays ranks out pipe-major: stage 0 holds ranks 0 and 1
# Two layers a stage (DeepSpeed's uniform partition), stage 1's costing twice stage 0's; the slow rank's extra
# forward time goes to the first layer of its own stage.
layers = [Layer(WIDTH, args.layer_ms, args.extra_ms if stage_of == 0 else 0.0), Layer(WIDTH, args.layer_ms),
          Layer(WIDTH, 2 * args.layer_ms, args.extra_ms if stage_of == 1 else 0.0), Layer(WIDTH, 2 * args.layer_ms)]  # fmt: skip
model = PipelineModule(layers=layers, num_stages=2, partition_method="uniform", loss_fn=lambda out, target: (out - target).pow(2).mean())
config = {
    "train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": args.micro_batches,
    "optimizer": {"type": "SGD", "params": {"lr": 0.01}}, "steps_per_print": 10**9, "wall_clock_breakdown": False,
}  # fmt: skip
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters() if p.requires_grad], config=config)


def batches():
    while True:
        yield torch.randn(MICRO_BATCH, WIDTH), torch.randn(MICRO_BATCH, WIDTH)


data = batches()
for _ in range(args.steps):
    engine.train_batch(data_iter=data)
