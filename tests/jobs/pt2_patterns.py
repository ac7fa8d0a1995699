"""The PyTorch 2 patterns a 2026 trainer uses, each run twice in this one process: without ranktop, then
under automatic mode (``probe.automatic()``, what ``ranktop launch`` starts). Prints one JSON line per pattern:
dynamo's counters and the final parameters' checksum of both runs, and the steps automatic mode timed.

    python pt2_patterns.py [--backend aot_eager|inductor|eager] [--steps N] [--device cuda] PATTERN ...

Distributed patterns (DDP, FSDP2) run on a one-rank group (gloo; NCCL with ``--device cuda``). Used by
tests/test_pt2_compat.py on CPU, and by benchmarks/gpu_check.py on a GPU, where two more patterns exist:
``reduce_overhead`` (``torch.compile(mode="reduce-overhead")``: inductor's CUDA graphs) and ``cuda_graph``
(``torch.cuda.make_graphed_callables``: forward and backward captured once, replayed each step, automatic
mode's global hooks firing while they are captured).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.utils.checkpoint as checkpoint
from torch._dynamo.utils import counters

DIM = 16


class Block(torch.nn.Module):
    def __init__(self, ckpt: str = ""):
        super().__init__()
        self.norm = torch.nn.LayerNorm(DIM)
        self.up = torch.nn.Linear(DIM, 2 * DIM)
        self.down = torch.nn.Linear(2 * DIM, DIM)
        self.ckpt = ckpt

    def mlp(self, x):
        return self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    def forward(self, x):
        if self.ckpt:
            return x + checkpoint.checkpoint(self.mlp, x, use_reentrant=self.ckpt == "reentrant")
        return x + self.mlp(x)


class Net(torch.nn.Module):
    def __init__(self, ckpt: str = ""):
        super().__init__()
        self.embed = torch.nn.Linear(DIM, DIM)
        self.blocks = torch.nn.ModuleList([Block(ckpt) for _ in range(3)])
        self.head = torch.nn.Linear(DIM, 1)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


#: Patterns that exist on a GPU only: CUDA graphs.
CUDA_ONLY = ("reduce_overhead", "cuda_graph")


def build(pattern: str, backend: str, device: str, micro: int):
    """The model as the pattern wraps it (what the loop calls) and the module whose parameters train."""
    ckpt = "reentrant" if pattern == "checkpoint_reentrant" else "nonreentrant" if pattern.startswith("checkpoint") else ""
    net = Net(ckpt).to(device)
    compile_ = lambda m, **kw: torch.compile(m, backend=backend, **kw)  # noqa: E731
    if pattern == "reduce_overhead":
        return torch.compile(net, mode="reduce-overhead"), net
    if pattern == "cuda_graph":
        return torch.cuda.make_graphed_callables(net, (torch.randn(micro, DIM, device=device),)), net
    if pattern == "compile":
        return compile_(net), net
    if pattern == "compile_fullgraph":
        return compile_(net, fullgraph=True), net
    if pattern == "compile_dynamic":
        return compile_(net, dynamic=True), net
    if pattern == "module_compile":
        net.compile(backend=backend, fullgraph=True)
        return net, net
    if pattern in ("per_block_compile", "checkpoint_compiled"):
        for i, block in enumerate(net.blocks):
            net.blocks[i] = compile_(block, fullgraph=True)
        return net, net
    if pattern in ("ddp_compile_outside", "ddp_compile_outside_no_sync"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        return compile_(DDP(net), fullgraph=False), net
    if pattern == "ddp_compile_inside":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(compile_(net, fullgraph=True)), net
    if pattern == "fsdp2_per_block_compile":
        from torch.distributed.fsdp import fully_shard

        for i, block in enumerate(net.blocks):
            net.blocks[i] = compile_(block, fullgraph=True)
            fully_shard(net.blocks[i])
        fully_shard(net)
        return net, net
    if pattern in ("compiled_autograd", "checkpoint", "checkpoint_reentrant", "compiled_train_step"):
        return (compile_(net) if pattern == "compiled_autograd" else net), net
    raise SystemExit(f"unknown pattern {pattern}")


def run(pattern: str, backend: str, steps: int, accumulate: int, with_probe: bool, device: str = "cpu") -> dict:
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    taken: list = []
    p = None
    if with_probe:
        from ranktop import probe

        p = probe.automatic()
        drain = p.recorder.drain

        def tap(*args, **kwargs):
            out = drain(*args, **kwargs)
            taken.extend(out)
            return out

        p.recorder.drain = tap
        calls: list = []
        drain_calls = p.collectives.drain

        def tap_calls(*args, **kwargs):
            out = drain_calls(*args, **kwargs)
            calls.extend(out)
            return out

        p.collectives.drain = tap_calls
    if pattern == "reduce_overhead":  # one micro-batch a step, as the CUDA-graph trees' training loop runs
        accumulate = 1
    model, net = build(pattern, backend, device, 4)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(steps * accumulate * 4, DIM)), batch_size=4)
    autograd = torch._dynamo.config.patch(compiled_autograd=True) if pattern == "compiled_autograd" else contextlib.nullcontext()

    # Gradient accumulation with DDP's no_sync() on all but the last micro-batch (the usual way), or without
    no_sync = model._orig_mod.no_sync if pattern.endswith("_no_sync") else None

    def micro_batch(x, last: bool):
        x = x.to(device)
        if pattern == "reduce_overhead":  # a new iteration: the graphs' last outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with no_sync() if no_sync is not None and not last else contextlib.nullcontext():
            loss = model(x).square().mean() / accumulate
            loss.backward()
        if last:
            opt.step()
            opt.zero_grad()
        return loss

    if pattern == "compiled_train_step":  # the whole step in one compiled function (dynamo breaks at backward)
        micro_batch = torch.compile(micro_batch, backend=backend)
    with autograd:
        for i, (x,) in enumerate(data):
            loss = micro_batch(x, (i + 1) % accumulate == 0)
    digest = hashlib.sha256()
    for param in net.parameters():
        full = param.full_tensor() if hasattr(param, "full_tensor") else param
        digest.update(full.detach().contiguous().cpu().numpy().tobytes())
    found = {
        "graph_breaks": sum(counters["graph_break"].values()),
        "unique_graphs": counters["stats"]["unique_graphs"],
        "calls_captured": counters["stats"]["calls_captured"],
        "recompiles": sum(v for k, v in counters["recompiles"].items()) if "recompiles" in counters else 0,
        "frames": {k: v for k, v in counters["frames"].items()},
        "params": digest.hexdigest(),
        "loss": float(loss.detach()),
    }
    if p is not None:
        from ranktop import probe

        probe.shutdown()
        found["steps"] = [{"n": r["n"], "w": r["w"], "p": r["p"], **({"g": r["g"]} if "g" in r else {})} for r in taken]
        found["calls"] = [{"op": r["op"], "n": r["n"], "ph": r["ph"], "d": r["d"]} for r in calls]
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("patterns", nargs="+")
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    if args.device == "cuda":  # the same numbers twice: no atomics-ordered kernels, one cuBLAS workspace
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.cuda.set_device(0)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if any(p.startswith(("ddp", "fsdp")) for p in args.patterns):
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=0, world_size=1)
    for pattern in args.patterns:
        result = {"pattern": pattern}
        for name, with_probe in (("without", False), ("with", True)):
            try:
                result[name] = run(pattern, args.backend, args.steps, args.accumulate, with_probe, args.device)
            except Exception as exc:  # the pattern itself failing is a result too
                result[name] = {"error": f"{exc.__class__.__name__}: {str(exc)[:2000]}"}
        print(json.dumps(result), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
