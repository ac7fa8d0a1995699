"""A plain DDP training script of long steps (about one a second) that knows nothing of ranktop.

gloo on CPU, a small MLP behind a stand-in for a big model's compute (a sleep in the model's forward, so the step is
long without 4 ranks competing for a loaded machine's cores), AdamW, a DataLoader. Run under torchrun, under
``ranktop launch`` for automatic mode. ``--slow-rank R --slow-ms MS --slow-from-step N``: rank R's forward is MS
longer from its step N on (a rank that became slower mid-run); it prints when, as ``slow from <unix seconds>``.
"""

import argparse
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from unmodified_ddp import Squares  # noqa: E402  (the same data as the plain DDP job's; tests/jobs is the script's folder)


class Compute(torch.nn.Module):
    """What a big model's forward would take: ``seconds``, asleep."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--forward-s", type=float, default=0.9)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--slow-from-step", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    compute = Compute(args.forward_s)
    model = DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.GELU(), compute, torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 1)
        )
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Squares(), batch_size=32, num_workers=0)
    step = 0
    while step < args.steps:
        for x, y in loader:
            if rank == args.slow_rank and step == args.slow_from_step:
                compute.seconds = args.forward_s + args.slow_ms / 1000
                print(f"rank {rank} +{args.slow_ms:g} ms in forward from step {step}: slow from {time.time():.3f}", flush=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step >= args.steps:
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
