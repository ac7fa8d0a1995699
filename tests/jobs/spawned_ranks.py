"""Ranks made by ``torch.multiprocessing.spawn``, their ranks passed as arguments (no RANK, no LOCAL_RANK).

Knows nothing of ranktop: ``ranktop launch`` must find both ranks, with one relay
for the node. gloo on CPU, a small DDP model, ``--seconds`` of training.
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel


def train(rank: int, world: int, port: int, seconds: float) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        loss = model(torch.randn(16, 32)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--seconds", type=float, default=120.0)
    args = p.parse_args()
    mp.spawn(train, args=(args.nprocs, args.port, args.seconds), nprocs=args.nprocs)
