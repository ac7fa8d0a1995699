"""A plain DDP training script that knows nothing of ranktop: what `ranktop launch` must time unchanged.

gloo on CPU, a small MLP, AdamW, a DataLoader with two worker processes, and a
loss computed outside the model. Run under torchrun; ``--steps`` bounds it,
``--start-method`` picks how the DataLoader starts its workers.
"""

import argparse
import os
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class Squares(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        x = torch.full((64,), float(i % 97) / 97)
        return x, x.pow(2).sum(0, keepdim=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--start-method", default=None, choices=(None, "fork", "spawn", "forkserver"))
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 1))
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Squares(), batch_size=32, num_workers=2, multiprocessing_context=args.start_method)
    step = 0
    while step < args.steps:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step >= args.steps:
                break
    if dist.get_rank() == 0:
        print(f"trained {step} steps, pid {os.getpid()}", flush=True)
    time.sleep(0.5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
