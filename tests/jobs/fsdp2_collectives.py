"""FSDP2 (fully_shard) on CPU/gloo: two training steps once $GO_FILE exists, then idle steps until killed."""

import os
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from ranktop import probe

probe.init()
dist.init_process_group("gloo")
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))  # 340 parameters
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
while not os.path.exists(os.environ["GO_FILE"]):
    with probe.step():
        time.sleep(0.01)
for _ in range(2):
    with probe.step():
        model(torch.randn(2, 16)).sum().backward()
        opt.step()
print("fsdp steps done", flush=True)
while True:
    with probe.step():
        time.sleep(0.01)
