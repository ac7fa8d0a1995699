"""A torchtitan-style 3-D job on 8 CPU ranks (gloo): a DeviceMesh ("pp", "dp_shard", "tp") of 2 x 2 x 2, laid
out as torchtitan lays it (pipeline outermost, tensor parallel innermost). Each stage's blocks are tensor
parallel (DTensor ColwiseParallel/RowwiseParallel on the mesh's "tp" dimension, their all-reduces functional
collectives), sharded over "dp_shard" with FSDP2 (``fully_shard``), and the stages run
``torch.distributed.pipelining``'s ``ScheduleGPipe`` over the "pp" group. Each block costs a fixed sleep
(tests/jobs/parallel_common.py's way; stage 1 has twice stage 0's blocks). The script never imports ranktop:
run it under ``ranktop launch``.
"""

import torch
import torch.distributed as dist
from parallel_common import Block, options, train_pipeline
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

WIDTH, BATCH = 32, 4

args = options()
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("pp", "dp_shard", "tp"))
stage_index = mesh.get_local_rank("pp")
blocks = 1 if stage_index == 0 else 2
model = torch.nn.Sequential(*(Block(WIDTH, args.layer_ms + (args.extra_ms if i == 0 else 0.0)) for i in range(blocks)))
for block in model:
    parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(block, mesh=mesh["dp_shard"])
fully_shard(model, mesh=mesh["dp_shard"])
stage = PipelineStage(model, stage_index, 2, torch.device("cpu"), group=mesh["pp"].get_group())
schedule = ScheduleGPipe(stage, n_microbatches=args.micro_batches, loss_fn=lambda out, target: out.pow(2).mean())
opt = torch.optim.SGD(model.parameters(), lr=0.01)

train_pipeline(schedule, stage_index, args, opt, lambda: torch.randn(BATCH * args.micro_batches, WIDTH))
dist.destroy_process_group()
