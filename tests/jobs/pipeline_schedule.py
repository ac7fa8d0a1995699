"""Data x pipeline on 4 CPU ranks (gloo) with torch.distributed.pipelining: a 2x2 DeviceMesh ("pp", "dp"),
``PipelineStage`` + ``ScheduleGPipe`` over the mesh's pipeline group (its sends and receives are
``batch_isend_irecv`` + ``Work.wait``, its backward ``stage_backward``), gradients all-reduced over the
data group. Stage 1 has twice stage 0's layers. The script never imports ranktop: run it under
``ranktop launch``.
"""

import torch
import torch.distributed as dist
from parallel_common import Layer, options, train_pipeline
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

WIDTH, BATCH = 32, 8

args = options()
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
pp, dp = mesh["pp"].get_group(), mesh["dp"].get_group()
stage_index = mesh.get_local_rank("pp")
layers = 2 if stage_index == 0 else 4
model = torch.nn.Sequential(*(Layer(WIDTH, args.layer_ms, args.extra_ms if i == 0 else 0.0) for i in range(layers)))
stage = PipelineStage(model, stage_index, 2, torch.device("cpu"), group=pp)
schedule = ScheduleGPipe(stage, n_microbatches=args.micro_batches, loss_fn=lambda out, target: out.pow(2).mean())
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def reduce_gradients():
    for p in model.parameters():
        dist.all_reduce(p.grad, group=dp)


train_pipeline(schedule, stage_index, args, opt, lambda: torch.randn(BATCH * args.micro_batches, WIDTH), reduce_gradients)
dist.destroy_process_group()
