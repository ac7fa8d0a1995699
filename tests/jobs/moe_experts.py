"""An expert-parallel mixture-of-experts layer on gloo (run under torchrun): one expert per rank, tokens routed to
experts and back with ``all_to_all_single`` and the split sizes the routing gives, as in DeepSpeed-MoE or
Megatron's expert parallelism.

Each rank holds ``--tokens`` tokens a step. A router sends each to an expert: spread evenly (random, a healthy job),
or, with ``--hot-rank R``, a share ``--hot-share`` of every rank's tokens to the expert on rank R (a hot expert),
the rest evenly to the others. A step: data (a short sleep), forward (the counts exchanged, the tokens dispatched,
each expert's feed-forward over the tokens it received, the results combined back), backward (an all_reduce of
the gradients' size, as the data-parallel part does), optimizer (a short sleep). The expert's work grows with the
rows it receives, so the hot expert's rank is slow in forward while the others wait in its all-to-all.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

from ranktop import probe

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--tokens", type=int, default=256)
parser.add_argument("--hidden", type=int, default=128)
parser.add_argument("--hot-rank", type=int, default=-1)
parser.add_argument("--hot-share", type=float, default=0.7)
args = parser.parse_args()

rank = int(os.environ["RANK"])
probe.init()
dist.init_process_group("gloo")
world = dist.get_world_size()
torch.manual_seed(rank)
expert = torch.nn.Sequential(torch.nn.Linear(args.hidden, 4 * args.hidden), torch.nn.GELU(), torch.nn.Linear(4 * args.hidden, args.hidden))
grads = torch.ones(4096)


def route(tokens: int) -> torch.Tensor:
    """The expert (rank) of each token: even, or a share to the hot expert and the rest even among the others."""
    if args.hot_rank < 0:
        return torch.randint(0, world, (tokens,))
    hot = int(tokens * args.hot_share)
    others = [r for r in range(world) if r != args.hot_rank]
    rest = torch.tensor(others)[torch.randint(0, len(others), (tokens - hot,))]
    return torch.cat([torch.full((hot,), args.hot_rank), rest])


@torch.no_grad()
def moe_layer(x: torch.Tensor) -> torch.Tensor:
    experts = route(len(x))
    order = torch.argsort(experts, stable=True)
    send_counts = torch.bincount(experts, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)  # how many rows each peer sends this expert
    send, recv = send_counts.tolist(), recv_counts.tolist()
    received = x.new_empty(sum(recv), x.shape[1])
    dist.all_to_all_single(received, x[order], output_split_sizes=recv, input_split_sizes=send)  # dispatch
    out = expert(received)
    back = x.new_empty(len(x), x.shape[1])
    dist.all_to_all_single(back, out, output_split_sizes=send, input_split_sizes=recv)  # combine
    result = torch.empty_like(back)
    result[order] = back
    return result


for n in range(args.steps):
    with probe.step():
        with probe.phase("data"):
            time.sleep(0.002)
            x = torch.randn(args.tokens, args.hidden)
        with probe.phase("forward"):
            y = moe_layer(x)
        with probe.phase("backward"):
            dist.all_reduce(grads)
        with probe.phase("optimizer"):
            time.sleep(0.002)
probe.shutdown()
