"""A plain DDP training script (no ranktop in it) that saves checkpoints or evaluates now and then, as real jobs do.

gloo on CPU, a small MLP, a DataLoader. Run under ``ranktop launch -- torchrun ...``: automatic mode times the
saves and the evaluation as the phases ``checkpoint`` and ``eval`` (probe/auto.py).

``--checkpoint-every N --checkpoint-s S``: every N steps rank 0 saves the model with ``torch.save`` to slow
storage (a file whose first write takes S seconds, as a network filesystem's open can) while the others wait
for it in ``dist.barrier()``. ``--eval-every N --eval-batches B --eval-batch-s S``: every N steps every rank
evaluates the model (eval mode, ``no_grad``) on B batches its DataLoader takes S seconds each to make.
"""

import argparse
import io
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class Squares(Dataset):
    def __init__(self, size: int = 1 << 20, make_s: float = 0.0):
        self.size, self.make_s = size, make_s

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        if self.make_s:
            time.sleep(self.make_s)
        x = torch.full((32,), float(i % 97) / 97)
        return x, x.pow(2).sum(0, keepdim=True)


class SlowStorage(io.BytesIO):
    """A file on slow storage: its first write waits ``seconds``."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def write(self, data) -> int:
        if self.seconds:
            time.sleep(self.seconds)
            self.seconds = 0.0
        return super().write(data)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--step-s", type=float, default=0.02, help="each rank's own work per step, slept")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--checkpoint-s", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=0)
    p.add_argument("--eval-batch-s", type=float, default=0.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Squares(), batch_size=8)
    evaluation = DataLoader(Squares(args.eval_batches, args.eval_batch_s), batch_size=1)
    step = 0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        time.sleep(args.step_s)  # the rest of the work a real step does
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), SlowStorage(args.checkpoint_s))
            dist.barrier()
        if args.eval_every and step % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                for x, y in evaluation:
                    model(x)
            model.train()
        if step >= args.steps:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
