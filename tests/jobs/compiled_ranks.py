"""A data-parallel job compiled the ways 2026 trainers compile, knowing nothing of ranktop: what
``ranktop launch`` must time without breaking, slowing or changing it (tests/test_pt2_launch.py).

- ``--layout ddp-fullgraph``: ``DDP(torch.compile(model, fullgraph=True))``;
- ``--layout compile-ddp``: ``torch.compile(DDP(model))`` (dynamo's DDPOptimizer splits the graph at buckets);
- ``--layout fsdp2-blocks``: the torchtitan pattern: each block ``torch.compile(block, fullgraph=True)``,
  then ``fully_shard`` per block and on the root.

Gradient accumulation over ``--micro-batches`` (DDP's ``no_sync`` on all but the last). The layers' compute is
a sleep inside a custom op (``ranktop_test::sleep``: opaque to the compiler, so it lives inside the fullgraph
region), ``--layer-ms`` in forward and twice that in backward: four ranks share two cores here, and the timings
must not depend on who else runs. ``--slow-rank R --slow-ms MS`` adds MS to R's forward per micro-batch, inside
its compiled region (``--slow-phase backward``: to its backward, inside the compiled backward). ``--micro-batches 1``
is no accumulation (every backward all-reduces). Rank 0 prints its rate every ``--report-s`` seconds
("rate 12.34 steps/s"), what ``ranktop watch`` must read too.
"""

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist


@torch.library.custom_op("ranktop_test::sleep", mutates_args=())
def sleep(x: torch.Tensor, seconds: float, backward_seconds: float) -> torch.Tensor:
    time.sleep(seconds)
    return x.clone()


@sleep.register_fake
def _(x, seconds, backward_seconds):
    return torch.empty_like(x)


def _sleep_backward(ctx, grad):
    return sleep(grad, ctx.backward_s, 0.0), None, None


def _sleep_setup(ctx, inputs, output):
    ctx.backward_s = inputs[2]


sleep.register_autograd(_sleep_backward, setup_context=_sleep_setup)


class Block(torch.nn.Module):
    def __init__(self, width: int, forward_s: float, backward_s: float):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)
        self.forward_s, self.backward_s = forward_s, backward_s

    def forward(self, x):
        return x + sleep(torch.tanh(self.linear(x)), self.forward_s, self.backward_s)


class Net(torch.nn.Module):
    def __init__(self, width: int, blocks: int, layer_s: float, extra_s: float, extra_backward_s: float = 0.0):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            Block(width, layer_s + (extra_s if i == 0 else 0.0), 2 * layer_s + (extra_backward_s if i == 0 else 0.0)) for i in range(blocks)
        )
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", choices=("ddp-fullgraph", "compile-ddp", "fsdp2-blocks"), default="ddp-fullgraph")
    parser.add_argument("--backend", default="aot_eager", help="torch.compile's backend (inductor needs a C++ compiler)")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=float, default=0.0)
    parser.add_argument("--slow-phase", choices=("forward", "backward"), default="forward")
    parser.add_argument("--report-s", type=float, default=2.0)
    parser.add_argument("--layer-ms", type=float, default=2.0)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    extra_s = args.slow_ms / 1000 if rank == args.slow_rank else 0.0
    if args.slow_phase == "backward":
        net = Net(32, 3, args.layer_ms / 1000, 0.0, extra_s)
    else:
        net = Net(32, 3, args.layer_ms / 1000, extra_s)
    if args.layout == "ddp-fullgraph":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(torch.compile(net, fullgraph=True, backend=args.backend))
    elif args.layout == "compile-ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = torch.compile(DDP(net), backend=args.backend)
    else:
        from torch.distributed.fsdp import fully_shard

        for i, block in enumerate(net.blocks):
            net.blocks[i] = torch.compile(block, fullgraph=True, backend=args.backend)
            fully_shard(net.blocks[i])
        model = fully_shard(net)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4096, 32)), batch_size=8)
    no_sync = getattr(model, "no_sync", None) or getattr(getattr(model, "_orig_mod", None), "no_sync", None)
    step = 0
    since, since_step = time.perf_counter(), 0
    while step < args.steps:
        for i, (x,) in enumerate(data):
            last = (i + 1) % args.micro_batches == 0
            with no_sync() if no_sync is not None and not last else contextlib.nullcontext():
                loss = model(x).square().mean() / args.micro_batches
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                now = time.perf_counter()
                if rank == 0 and now - since >= args.report_s:
                    print(f"rate {(step - since_step) / (now - since):.2f} steps/s", flush=True)
                    since, since_step = now, step
                if step >= args.steps:
                    break
    if rank == 0:
        print(f"trained {step} steps, loss {loss.item():.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
