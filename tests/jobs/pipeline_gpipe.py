"""Data x pipeline on 4 CPU ranks (gloo): a 2x2 DeviceMesh ("pp", "dp"), a GPipe schedule written by hand.

As Megatron-style trainers do it: each stage runs its micro-batches' forwards,
sending activations to the next stage with ``isend`` and receiving them with
``irecv`` (+ ``Work.wait``) over the mesh's pipeline group, then their
backwards with ``torch.autograd.backward(outputs, grads)`` (the last stage:
``loss.backward()``), sending gradients back; then the gradients are
all-reduced over the data group and the optimizer steps. Stage 1 has twice
stage 0's layers. ``--default-group``: the sends and receives name no group
(global ranks on the default group), as simple trainers do. The script never imports ranktop: run it under
``ranktop launch``.
"""

import torch
import torch.distributed as dist
from parallel_common import Layer, options
from torch.distributed.device_mesh import init_device_mesh

WIDTH, BATCH = 32, 8

args = options(default_group=True)
dist.init_process_group("gloo")
if args.default_group:  # no mesh, no pipeline group: plain new_group data groups, send/recv by global rank
    rank = dist.get_rank()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dp, pp, stage = groups[rank // 2], None, rank // 2
    peer = (rank + 2) % 4
else:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    pp, dp = mesh["pp"].get_group(), mesh["dp"].get_group()
    stage = mesh.get_local_rank("pp")
    peer = dist.get_global_rank(pp, 1 - stage)  # the other stage's rank, as send/recv want it
last = stage == 1
layers = 2 if stage == 0 else 4
model = torch.nn.Sequential(*(Layer(WIDTH, args.layer_ms, args.extra_ms if i == 0 else 0.0) for i in range(layers)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

for _ in range(args.steps):
    inputs, outputs = [], []
    for _ in range(args.micro_batches):
        if stage == 0:
            x = torch.randn(BATCH, WIDTH)
        else:
            x = torch.empty(BATCH, WIDTH)
            dist.irecv(x, src=peer, group=pp).wait()
            x.requires_grad_()
        y = model(x)
        if last:
            y = y.pow(2).mean()
        else:
            dist.isend(y.detach(), dst=peer, group=pp).wait()
        inputs.append(x)
        outputs.append(y)
    for x, y in zip(inputs, outputs):
        if last:
            y.backward()
            dist.send(x.grad, dst=peer, group=pp)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=peer, group=pp)
            torch.autograd.backward(y, grad)
    for p in model.parameters():
        dist.all_reduce(p.grad, group=dp)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
