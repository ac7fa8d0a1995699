"""A plain data-parallel training script (no ranktop in it) whose torch.compile'd model recompiles now and then on
one rank, as a job does when a batch of a new shape comes (the last batch of an epoch, a variable length).

gloo on CPU, a small MLP compiled with ``dynamic=False`` by a backend that runs the graph eagerly after taking
``--compile-s`` seconds to "compile" (every compilation but the first: the warm-up's is quick), a DataLoader, the
gradients all-reduced by hand so that the other ranks wait for the compiling one in that collective. Every
``--recompile-every`` steps rank 1's batch has a new size (7, 6, 5, ...: a new shape, a recompilation). Run under
``ranktop launch -- torchrun ...``: the probe times the compilations as the phase ``compile``
(probe/compile_phase.py).
"""

import argparse
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class Squares(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        x = torch.full((32,), float(i % 97) / 97)
        return x, x.pow(2).sum(0, keepdim=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--step-s", type=float, default=0.02, help="each rank's own work per step, slept")
    p.add_argument("--recompile-every", type=int, default=40)
    p.add_argument("--compile-s", type=float, default=3.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    compiles = []

    def slow_backend(gm, example_inputs):
        if compiles:
            time.sleep(args.compile_s)  # a recompilation: what inductor takes on a big model
        compiles.append(len(example_inputs))
        return gm.forward

    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    model = torch.compile(net, backend=slow_backend, dynamic=False)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
    loader = DataLoader(Squares(), batch_size=8)
    world = dist.get_world_size()
    step = 0
    for x, y in loader:
        if dist.get_rank() == 1 and step and step % args.recompile_every == 0:
            size = max(1, 8 - step // args.recompile_every)  # a new shape, until it runs out of them
            x, y = x[:size], y[:size]
        loss = torch.nn.functional.mse_loss(model(x), y)
        time.sleep(args.step_s)  # the rest of the work a real step does
        loss.backward()
        for param in net.parameters():
            dist.all_reduce(param.grad)
            param.grad /= world
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step >= args.steps:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
