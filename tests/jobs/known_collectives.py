"""A 2-rank gloo job that issues a known sequence of collectives, then idles in steps until killed.

Per rank, over steps 0-4: all_reduce of 1000 float32 (sync) and of 256 float16 (async_op),
broadcast of 10 int64, all_gather_into_tensor of 100 float32, barrier; and one DDP
step of a Linear(10, 5) (55 float32 parameters: one 220-byte bucket) per step.
It starts only once the file named by $GO_FILE exists, so that a watcher can attach first
(telemetry published before anyone subscribes is dropped, by design).
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ranktop import probe

probe.init()
dist.init_process_group("gloo")
world = dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(10, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.1)

while not os.path.exists(os.environ["GO_FILE"]):
    with probe.step():
        with probe.phase("forward"):
            time.sleep(0.01)

for step in range(5):
    with probe.step():
        with probe.phase("forward"):
            loss = model(torch.randn(4, 10)).sum()
        with probe.phase("backward"):
            loss.backward()
        with probe.phase("optimizer"):
            opt.step()
            opt.zero_grad()
        with probe.phase("sync"):
            dist.all_reduce(torch.ones(1000, dtype=torch.float32))
            dist.all_reduce(torch.ones(256, dtype=torch.float16), async_op=True).wait()
            dist.broadcast(torch.zeros(10, dtype=torch.int64), src=0)
            dist.all_gather_into_tensor(torch.zeros(100 * world), torch.ones(100))
            dist.barrier()
print("collectives done", flush=True)
while True:  # keep the ranks (and the relay) alive for the watcher
    with probe.step():
        with probe.phase("forward"):
            time.sleep(0.01)
