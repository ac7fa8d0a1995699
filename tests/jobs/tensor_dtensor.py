"""Data x tensor on 4 CPU ranks (gloo): DTensor ColwiseParallel/RowwiseParallel on a 2x2 DeviceMesh ("dp", "tp").

The tensor-parallel all-reduces are DTensor's functional collectives
(torch.distributed._functional_collectives); the gradients are all-reduced over
the data group by hand, or with ``--fsdp`` sharded over it by FSDP2 (``fully_shard`` on the
mesh's data dimension: FSDP2 + TP on a 2-D mesh). Each layer costs a fixed sleep (tests/jobs/parallel_common.py);
``--slow-rank R --slow-ms MS`` adds MS to R's forward per step. The script never
imports ranktop: run it under ``ranktop launch``.
"""

import torch
import torch.distributed as dist
from parallel_common import Block, options
from torch.distributed.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

WIDTH, BATCH = 32, 8


args = options(fsdp=True)
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
dp = mesh["dp"].get_group()
model = torch.nn.Sequential(*(Block(WIDTH, args.layer_ms + (args.extra_ms if i == 0 else 0.0)) for i in range(4)))
for block in model:
    parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    if args.fsdp:
        fully_shard(block, mesh=mesh["dp"])
if args.fsdp:
    fully_shard(model, mesh=mesh["dp"])
opt = torch.optim.SGD(model.parameters(), lr=0.01)

for _ in range(args.steps):
    x = torch.randn(BATCH, WIDTH)
    loss = model(x).pow(2).mean()
    loss.backward()
    for p in model.parameters() if not args.fsdp else ():
        dist.all_reduce(p.grad.to_local(), group=dp)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
