"""What the multi-dimensional test jobs share: layers whose compute is a fixed sleep, and their options.

Four CPU ranks share this machine's two cores, so the layers' cost is a sleep in
forward and in backward (an autograd Function), not arithmetic: the jobs'
timings then do not depend on who else is running, and a healthy job is truly
even. Everything between them (DeviceMesh groups, send/recv, DTensor
collectives, autograd) is real.
"""

import argparse
import os
import time

import torch


class _Sleep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, forward_s, backward_s):
        ctx.backward_s = backward_s
        time.sleep(forward_s)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.backward_s)
        return grad, None, None


class Layer(torch.nn.Module):
    """A linear layer that costs ``forward_ms`` in forward and twice that in backward."""

    def __init__(self, width: int, forward_ms: float, extra_ms: float = 0.0):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)
        self.forward_s = (forward_ms + extra_ms) / 1000
        self.backward_s = 2 * forward_ms / 1000

    def forward(self, x):
        return _Sleep.apply(torch.tanh(self.linear(x)), self.forward_s, self.backward_s)


class Block(torch.nn.Module):
    """A tensor-parallel MLP (``up`` and ``down``, for ColwiseParallel/RowwiseParallel) whose every rank's
    shard costs ``ms`` of compute (a sleep) per forward."""

    def __init__(self, width: int, ms: float):
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)
        self.seconds = ms / 1000

    def forward(self, x):
        h = torch.relu(self.up(x))
        time.sleep(self.seconds)
        return self.down(h)


def train_pipeline(schedule, stage_index: int, args: argparse.Namespace, optimizer, inputs, after_backward=None) -> None:
    """``args.steps`` steps of a ``torch.distributed.pipelining`` schedule: the first stage feeds ``inputs()``,
    the last has it as its target; ``after_backward()`` (a gradient all-reduce) before the optimizer's step."""
    for _ in range(args.steps):
        x = inputs()
        if stage_index == 0:
            schedule.step(x)
        else:
            schedule.step(target=x)
        if after_backward is not None:
            after_backward()
        optimizer.step()
        optimizer.zero_grad()


def options(fsdp: bool = False, default_group: bool = False) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    if default_group:
        parser.add_argument("--default-group", action="store_true", help="point-to-point on the default group")
    if fsdp:
        parser.add_argument("--fsdp", action="store_true", help="shard over the data dimension with FSDP2")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=float, default=0.0, help="extra forward time per micro-batch of the slow rank")
    parser.add_argument("--layer-ms", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--micro-batches", type=int, default=4)
    args = parser.parse_args()
    args.rank = int(os.environ["RANK"])
    args.extra_ms = args.slow_ms if args.rank == args.slow_rank else 0.0
    torch.manual_seed(0)
    torch.set_num_threads(1)
    return args
