"""The whole-job benchmark's job: a compiled 2-rank DDP TinyLM, gradient accumulation, torchrun'd.

Run by ``benchmarks/probe_overhead.py --job`` with and without ``ranktop launch``, alternated; it knows
nothing of ranktop. Rank 0 prints ``optimizer steps/s: X`` over ``--steps`` optimizer steps after
``--warmup`` (compilation, the allocator's first steps), and the CPU time the ranks spent per optimizer step
over the same steps (mean of the ranks): ``training-thread cpu ms/step`` (the thread that runs the loop) and
``process cpu ms/step`` (every thread of the rank: the probe's sender thread too, when launched). Those two do
not depend on what else runs on the machine the way the rate does. The model is ``torch.compile(DDP(model))`` (dynamo's
DDPOptimizer splits the graph at DDP's buckets), or with ``--ddp-outside`` ``DDP(torch.compile(model))``;
``--fullgraph`` compiles with ``fullgraph=True`` (with ``--ddp-outside`` only).

    torchrun --nproc_per_node 2 benchmarks/compiled_job.py [--backend inductor] [--micro-batches 4]
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ranktop.demo.model import ModelConfig, TinyLM, lm_loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--fullgraph", action="store_true")
    parser.add_argument("--ddp-outside", action="store_true")
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = TinyLM(ModelConfig())
    if args.ddp_outside:
        model = DDP(torch.compile(net, backend=args.backend, fullgraph=args.fullgraph))
    else:
        model = torch.compile(DDP(net), backend=args.backend)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    data = torch.randint(0, net.cfg.vocab, (64, args.batch_size, net.cfg.seq_len + 1))
    start = cpu_thread = cpu_process = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
            cpu_thread, cpu_process = time.thread_time(), time.process_time()
        for i in range(args.micro_batches):
            batch = data[(step * args.micro_batches + i) % len(data)]
            with model.no_sync() if i + 1 < args.micro_batches else _nothing():
                lm_loss(model, batch[:, :-1], batch[:, 1:]).div(args.micro_batches).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    cpu = torch.tensor([time.thread_time() - cpu_thread, time.process_time() - cpu_process], dtype=torch.float64)
    dist.barrier()
    elapsed = time.perf_counter() - start
    dist.all_reduce(cpu)  # after the timed window
    cpu_ms = (cpu / dist.get_world_size() / args.steps * 1e3).tolist()
    if dist.get_rank() == 0:
        print(f"optimizer steps/s: {args.steps / elapsed:.4f}", flush=True)
        print(f"training-thread cpu ms/step: {cpu_ms[0]:.4f}", flush=True)
        print(f"process cpu ms/step: {cpu_ms[1]:.4f}", flush=True)
    dist.destroy_process_group()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
