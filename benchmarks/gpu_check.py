"""What ranktop reports on a GPU, side by side with the references, in one command.

    python benchmarks/gpu_check.py            # on a machine with a CUDA GPU; about a minute
    python benchmarks/gpu_check.py --steps 40 # fewer steps

Without CUDA it says so in one line and exits 0. With it, one process trains the
demo's model (TinyLM, fp32, sized to about 20 ms a step on an H100) under
``probe.init()`` + ``probe.step()`` + ``probe.phase()`` and prints:

- phases: the probe's GPU time per phase (CUDA events, ``g`` of its step
  records) against torch.profiler's GPU span of the same phase (the
  ``gpu_user_annotation`` of a ``record_function`` around it), per step;
- NCCL: with 2 GPUs or more, two ranks (one made late by a sleep kernel) and
  the probe's device-timed all-reduce waits against the profiler's NCCL kernel
  durations; with one GPU this line says it was skipped;
- NVML gauges (probe/gpu_sampler.py) against ``nvidia-smi --query-gpu``;
- the probe's memory sample against ``torch.cuda.memory_stats()``;
- syncs: ``torch.cuda.set_sync_debug_mode("warn")`` warnings, by thread (the
  probe's threads must have none);
- the probe's cost per step: median step time by CUDA events, probe on vs off;
- what ranktop's Python DDP comm hook costs next to DDP's built-in C++
  all-reduce (one rank, NCCL);
- a trace capture (its kernels; HTA loads it where installed) and a memory
  capture (memory_viz draws it), taken by probe/capture.py as the capture
  command takes them.

Figures are for people (docs/gpu.md records them), not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import warnings

import msgspec


def no_cuda() -> bool:
    try:
        import torch
    except Exception as exc:
        print(f"gpu_check: no torch ({exc.__class__.__name__}); nothing to check")
        return True
    if not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device here (torch {torch.__version__}); nothing to check")
        return True
    return False


def row(what: str, ranktop: str, reference: str, note: str = "") -> None:
    print(f"{what:<28} {ranktop:>22}   {reference:>22}   {note}")


def versions() -> None:
    import torch

    smi = _smi(["--query-gpu=name,driver_version", "--format=csv,noheader"])
    try:
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except Exception:
        nccl = "?"
    print(f"device: {torch.cuda.get_device_name()} | driver: {smi.strip() or '?'} | torch {torch.__version__} | "
          f"CUDA {torch.version.cuda} | NCCL {nccl}")


def _smi(args: list[str]) -> str:
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30).stdout
    except Exception:
        return ""


def model_and_step(device):
    import torch

    from ranktop.demo.model import ModelConfig, TinyLM

    cfg = ModelConfig(vocab=8192, d_model=1024, n_layers=8, n_heads=16, seq_len=512)  # ~20 ms a step on an H100
    model = TinyLM(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randint(0, cfg.vocab, (8, cfg.seq_len + 1), device=device)
    return cfg, model, opt, batch


def train(steps: int, probe_on: bool, profile: bool, sender_log: list):
    """Steps of the demo model; returns (median step ms by CUDA events, profiler trace path or None)."""
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile, record_function

    from ranktop import probe

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    _, model, opt, batch = model_and_step(device)
    if probe_on and probe.get() is None:
        probe.init(job=f"gpu-check-{os.getpid()}", flops_dtype="fp32")
        sender = probe.get().sender
        original = sender.message

        def message(msg):  # what the probe sends, as it sends it (wire/messages.py's Structs, as plain maps)
            if msg.KIND == "steps":
                sender_log.append(msgspec.to_builtins(msg))
            return original(msg)

        sender.message = message
    step_scope = probe.step if probe_on else (lambda: _Null())
    phase = probe.phase if probe_on else (lambda name: _Null())
    marks = []
    trace = None
    prof = torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) if profile else _Null()
    with prof:
        for _ in range(steps):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            with step_scope():
                with phase("forward"), record_function("phase:forward"):
                    logits = model(batch[:, :-1])
                    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
                with phase("backward"), record_function("phase:backward"):
                    loss.backward()
                with phase("optimizer"), record_function("phase:optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
            end.record()
            marks.append((begin, end))
    torch.cuda.synchronize()  # the benchmark's own reference, after the run: never the probe
    if profile:
        trace = os.path.join(tempfile.mkdtemp(prefix="ranktop-gpu-check-"), "trace.json")
        prof.export_chrome_trace(trace)
    times = [b.elapsed_time(e) for b, e in marks[len(marks) // 4 :]]
    return statistics.median(times), trace


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def gpu_spans(trace_path: str) -> dict[str, list[float]]:
    """GPU span (ms) of each phase per step, from the profiler's gpu_user_annotation events."""
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    spans: dict[str, list[float]] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") == "gpu_user_annotation" and name.startswith("phase:"):
            spans.setdefault(name[6:], []).append(float(e.get("dur", 0)) / 1000.0)
    return spans


def check_phases(steps: int) -> None:
    log: list = []
    train(steps, probe_on=True, profile=True, sender_log=log)
    import time

    time.sleep(1.5)  # two flushes: the last steps' events resolve on the sender thread
    from ranktop import probe

    _, trace = train(4, probe_on=True, profile=True, sender_log=log)  # profiled steps, device-timed alike
    time.sleep(1.5)
    records = [r for body in log for r in body.get("steps", [])]
    timed = [r for r in records if "g" in r]
    row("steps with GPU times", f"{len(timed)} of {len(records)}", "", "every step but the one it attached in")
    spans = gpu_spans(trace) if trace else {}
    last = timed[-4:]
    for name in ("forward", "backward", "optimizer"):
        mine = [r["g"]["p"].get(name, 0.0) * 1000 for r in last]
        ref = spans.get(name, [])[-len(mine):] if mine else []
        if mine and ref:
            row(f"phase {name} (ms, GPU)", f"{statistics.median(mine):.3f}", f"{statistics.median(ref):.3f}",
                f"profiler span; host said {statistics.median(r['p'].get(name, 0.0) * 1000 for r in last):.3f}")
        else:
            row(f"phase {name} (ms, GPU)", "?" if not mine else f"{statistics.median(mine):.3f}", "?", "missing")
    state = log[-1].get("state", {}) if log else {}
    check_gauges(state)
    probe.shutdown()


def check_gauges(state: dict) -> None:
    import torch

    gpu = state.get("gpu") or {}
    smi = _smi(["--query-gpu=utilization.gpu,memory.used,power.draw,temperature.gpu", "--format=csv,noheader,nounits"])
    ref = [s.strip() for s in smi.splitlines()[0].split(",")] if smi.strip() else ["?"] * 4
    if "na" in gpu:
        row("NVML", gpu["na"], "", "")
    else:
        mem = gpu.get("mem_used")
        row("GPU % (kernel active)", str(gpu.get("util")), ref[0], "nvidia-smi utilization.gpu")
        row("memory used (MiB)", f"{mem / 2**20:.0f}" if mem else "?", ref[1], "nvidia-smi memory.used (v2)")
        row("power (W)", f"{gpu.get('power_w') or 0:.0f}", ref[2], "")
        row("temperature (C)", str(gpu.get("temp_c")), ref[3], "")
    cuda = (state.get("mem") or {}).get("cuda") or {}
    stats = torch.cuda.memory_stats(0)
    row("allocated (MiB)", f"{cuda.get('alloc', 0) / 2**20:.1f}", f"{stats.get('allocated_bytes.all.current', 0) / 2**20:.1f}",
        "memory_stats (moves with training)")
    row("reserved (MiB)", f"{cuda.get('resv', 0) / 2**20:.1f}", f"{stats.get('reserved_bytes.all.current', 0) / 2**20:.1f}", "")


def check_syncs(steps: int) -> None:
    import torch

    seen: dict[str, int] = {}
    original = warnings.showwarning

    def show(message, category, *args, **kwargs):
        if "synchroniz" in str(message).lower():
            name = threading.current_thread().name
            seen[name] = seen.get(name, 0) + 1
        return None  # counted, not printed

    warnings.showwarning = show
    warnings.simplefilter("always")
    torch.cuda.set_sync_debug_mode("warn")
    try:
        train(steps, probe_on=True, profile=False, sender_log=[])
        import time

        time.sleep(1.0)
    finally:
        torch.cuda.set_sync_debug_mode(0)
        warnings.showwarning = original
        from ranktop import probe

        probe.shutdown()
    probe_threads = {k: v for k, v in seen.items() if k.startswith("ranktop")}
    row("syncs from probe threads", str(sum(probe_threads.values())), "0", json.dumps(seen) if seen else "none at all")


def check_cost(steps: int) -> None:
    from ranktop import probe

    off, _ = train(steps, probe_on=False, profile=False, sender_log=[])
    on, _ = train(steps, probe_on=True, profile=False, sender_log=[])
    probe.shutdown()
    row("step (ms), probe off / on", f"{on:.3f}", f"{off:.3f}", f"probe cost {100 * (on - off) / off:+.2f}% (target <= 0.2%)")


def check_captures() -> None:
    """A trace capture (kernels in it; HTA loads its folder where HTA is installed) and a memory capture
    (memory_viz draws it), taken as the capture command takes them: probe/capture.py on the training thread."""
    import time
    from pathlib import Path

    import torch

    from ranktop.probe.capture import Capture
    from ranktop.probe.recorder import Recorder
    from ranktop.wire.capture import MEMORY, TRACE

    device = torch.device("cuda", 0)
    _, model, opt, batch = model_and_step(device)
    for kind in (TRACE, MEMORY):
        folder = Path(tempfile.mkdtemp(prefix=f"ranktop-gpu-check-{kind}-"))
        rec = Recorder()
        cap = Capture(f"check-{kind}", kind, 2, 3, folder, rank=0, host="gpu-check", torch=torch)
        cap.attach(rec)
        for n in range(7):
            rec.begin_step(n)
            logits = model(batch[:, :-1])
            torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            rec.end_step()
        deadline = time.monotonic() + 120
        while cap.running and time.monotonic() < deadline:
            time.sleep(0.1)
        if cap.path is None:
            row(f"capture {kind}", "failed", "", str(cap.error))
            continue
        if kind == TRACE:
            with open(cap.path) as f:
                kernels = sum(1 for e in json.load(f).get("traceEvents", []) if e.get("cat") == "kernel")
            try:
                from hta.trace_analysis import TraceAnalysis

                TraceAnalysis(trace_dir=str(folder)).get_temporal_breakdown(visualize=False)
                hta = "HTA loads it"
            except ImportError:
                hta = "HTA not installed"
            except Exception as exc:
                hta = f"HTA: {exc.__class__.__name__}: {exc}"
            row("trace capture kernels", str(kernels), "> 0", hta)
        else:
            import pickle

            from torch.cuda import _memory_viz

            with open(cap.path, "rb") as f:
                snapshot = pickle.load(f)
            try:
                html = _memory_viz.trace_plot(snapshot)
                viz = f"memory_viz trace_plot: {len(html)} bytes of HTML"
            except Exception as exc:
                viz = f"memory_viz: {exc.__class__.__name__}: {exc}"
            events = sum(len(t) for t in snapshot.get("device_traces", []))
            row("memsnap events", str(events), "> 0", viz)


def check_ddp_hook(steps: int) -> None:
    """What ranktop's Python comm hook (probe/collectives.py: the stock all-reduce hook, wrapped) costs next to
    DDP's built-in C++ all-reduce: the same single-rank NCCL DDP job, without and then with the probe."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ranktop import probe

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29672")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    results = []
    for with_probe in (False, True):
        if with_probe:
            probe.init(job=f"gpu-check-ddp-{os.getpid()}")
        _, model, _, batch = model_and_step(torch.device("cuda", 0))
        ddp = DDP(model, device_ids=[0], bucket_cap_mb=4)  # many buckets: the hook's cost per bucket shows
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
        marks = []
        for _ in range(steps):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            logits = ddp(batch[:, :-1])
            torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            end.record()
            marks.append((begin, end))
        torch.cuda.synchronize()
        results.append(statistics.median(b.elapsed_time(e) for b, e in marks[len(marks) // 4 :]))
        hooked = bool(getattr(ddp, "_comm_hooks", None))
        if with_probe:
            probe.shutdown()
    dist.destroy_process_group()
    off, on = results
    row("DDP step (ms), C++ / hook", f"{on:.3f}", f"{off:.3f}",
        f"Python comm hook {'registered' if hooked else 'NOT registered'}: {100 * (on - off) / off:+.2f}%")


NCCL_RANK = r"""
import os, sys, json, time, msgspec, torch, torch.distributed as dist
rank = int(sys.argv[1]); out = sys.argv[2]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29671", RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
torch.cuda.set_device(rank)
from ranktop import probe
probe.init(job="gpu-check-nccl")
dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
log = []
sender = probe.get().sender; orig = sender.message
def message(msg):
    if msg.KIND == "steps":
        body = msgspec.to_builtins(msg)
        log.extend(body.get("cx", []) + [{"cs": body.get("cs", [])}])
    return orig(msg)
sender.message = message
x = torch.ones(64 << 20, device="cuda")
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for n in range(20):
        with probe.step():
            with probe.phase("backward"):
                if rank == 1:
                    torch.cuda._sleep(20_000_000)  # rank 1 late by ~10 ms of GPU time
                dist.all_reduce(x)
torch.cuda.synchronize(); time.sleep(1.5)
prof.export_chrome_trace(out + f".trace{rank}.json")
json.dump(log, open(out + f".{rank}.json", "w"))
probe.shutdown(); dist.destroy_process_group()
"""


def check_nccl() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        row("NCCL waits", "skipped", "", "needs 2 GPUs")
        return
    folder = tempfile.mkdtemp(prefix="ranktop-gpu-check-nccl-")
    script = os.path.join(folder, "rank.py")
    with open(script, "w") as f:
        f.write(NCCL_RANK)
    out = os.path.join(folder, "out")
    procs = [subprocess.Popen([sys.executable, script, str(r), out]) for r in range(2)]
    if any(p.wait(timeout=300) for p in procs):
        row("NCCL waits", "failed", "", "a rank exited with an error")
        return
    for r in range(2):
        with open(f"{out}.{r}.json") as f:
            calls = [c for c in json.load(f) if "op" in c]
        with open(f"{out}.trace{r}.json") as f:
            kernels = [e["dur"] / 1000 for e in json.load(f)["traceEvents"] if "nccl" in str(e.get("name", "")).lower() and e.get("cat") == "kernel"]
        mine = statistics.median(c["d"] * 1000 for c in calls) if calls else float("nan")
        ref = statistics.median(kernels) if kernels else float("nan")
        row(f"NCCL all_reduce rank {r} (ms)", f"{mine:.3f}", f"{ref:.3f}", "wait on the device vs NCCL kernel (rank 0 waits for 1)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    if no_cuda():
        return 0
    versions()
    row("", "ranktop", "reference")
    check_ddp_hook(max(20, args.steps // 2))  # first: once the probe has run, every DDP model gets its hook
    check_phases(args.steps)
    check_syncs(max(10, args.steps // 4))
    check_cost(args.steps)
    check_nccl()
    check_captures()
    return 0


if __name__ == "__main__":
    sys.exit(main())
