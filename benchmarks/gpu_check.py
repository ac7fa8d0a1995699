"""What ranktop reports on a GPU, side by side with the references, in one command.

    python benchmarks/gpu_check.py            # on a machine with a CUDA GPU; about a minute
    python benchmarks/gpu_check.py --steps 40 # fewer steps

Without CUDA it says so in one line and exits 0. With it, one process trains the
demo's model (TinyLM, fp32, sized to about 20 ms a step on an H100) under
``probe.init()`` + ``probe.step()`` + ``probe.phase()`` and prints:

- phases: the probe's GPU time per phase (CUDA events, ``g`` of its step
  records) against torch.profiler's kernels of the same phase (those launched,
  from any thread, while a ``record_function`` around it was open), per step;
- NCCL: with 2 GPUs or more, two ranks (one made late by a sleep kernel) and
  the probe's device-timed all-reduce waits against the profiler's NCCL kernel
  durations; with one GPU this line says it was skipped;
- NVML gauges (probe/gpu_sampler.py) against ``nvidia-smi --query-gpu``;
- the probe's memory sample against ``torch.cuda.memory_stats()``;
- syncs: ``torch.cuda.set_sync_debug_mode("warn")`` warnings, by thread (the
  probe's threads must have none);
- the probe's cost per step: median step time by CUDA events, probe on vs off;
- DDP's step time with and without the probe (one rank, NCCL): the probe
  registers no comm hook, so DDP keeps its built-in C++ all-reduce, and the
  probe's ``ddp_allreduce`` records at the reducer's finalize are printed
  beside it: as a figure, what they hold on one rank (no peer to wait for:
  finalize's copy of each bucket into the gradients, which they include
  without a comm hook), and, checked, the same with
  ``gradient_as_bucket_view=True``, where finalize copies nothing: ~0;
- a side stream holding an async all-reduce back by ~10 ms (one rank, NCCL):
  the probe's wait, taken where the compute stream waits for it, must read
  ~10 ms;
- a CUDA-graph capture loop (``torch.cuda.graph``) with the probe's phases
  around it: the capture stays valid, replays match, no event goes into it;
- with 2 GPUs or more, a model on ``cuda:1`` with device 0 current (no
  ``set_device``): it trains under automatic mode, gets device times, and the
  process opens no context on GPU 0 (``nvidia-smi --query-compute-apps``);
- a trace capture (its kernels; HTA loads it where installed) and a memory
  capture (memory_viz draws it), taken by probe/capture.py as the capture
  command takes them;
- a multi-rank job on one GPU: 3 processes share it (gloo with CUDA tensors), one
  slowed in forward by a sleep kernel (GPU time only): ``ranktop watch --json``
  must name it first and alone, in forward, on the GPU clock;
- DDP with each stock comm hook (allreduce, fp16 and bf16 compression,
  PowerSGD and its batched form; 2 ranks sharing the GPU, one late): rank 0's
  ``ddp_allreduce`` wait against CUDA events around the true stall (a final
  callback queued ahead of DDP's finalize, and the end of backward);
- the PyTorch 2 patterns on the GPU (tests/jobs/pt2_patterns.py ``--device cuda``:
  torch.compile with inductor, fullgraph, DDP and FSDP2 on NCCL, checkpointing,
  compiled autograd, ``mode="reduce-overhead"`` and ``make_graphed_callables``),
  each without and then under automatic mode: dynamo's counters equal, the
  parameters bit-identical, every step timed, with device times.

Figures are for people (docs/gpu.md records them); the checks with a reference
print PASS, FAIL or SKIP (a check this machine cannot run: too few GPUs, a file
not here), and the run ends with "passed N of M, K skipped" (a skipped check is
never counted as passed); the exit status is 1 if any check failed.
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


#: Checks with a verdict so far: PASS, FAIL and SKIP (a row whose note begins with one of them).
TALLY = {"PASS": 0, "FAIL": 0, "SKIP": 0}


def row(what: str, ranktop: str, reference: str, note: str = "") -> None:
    print(f"{what:<28} {ranktop:>22}   {reference:>22}   {note}")
    word = note.split(":", 1)[0].strip()
    if word in TALLY:
        TALLY[word] += 1


def skip(what: str, why: str) -> None:
    """A check this machine cannot run: said, and counted as skipped (never as passed)."""
    row(what, "skipped", "", f"SKIP: {why}")


def tally_line(tally: dict[str, int] = TALLY) -> str:
    """The run's last line: "passed N of M, K skipped" (and how many failed, if any)."""
    total = sum(tally.values())
    failed = f", {tally['FAIL']} failed" if tally["FAIL"] else ""
    return f"passed {tally['PASS']} of {total}, {tally['SKIP']} skipped{failed}"


def versions() -> None:
    import torch

    smi = _smi(["--query-gpu=name,driver_version", "--format=csv,noheader"])
    try:
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except Exception:
        nccl = "?"
    print(
        f"device: {torch.cuda.get_device_name()} | driver: {smi.strip() or '?'} | torch {torch.__version__} | "
        f"CUDA {torch.version.cuda} | NCCL {nccl}"
    )


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
    """GPU span (ms) of each phase per step, from the profiler's trace: the kernels launched (from any thread:
    backward's come from autograd's device thread) while the phase's ``record_function`` was open on the host,
    first kernel start to last kernel end."""
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    windows = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), str(e["name"])[6:])
                     for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("phase:"))  # fmt: skip
    launched = {e["args"]["correlation"]: float(e["ts"]) for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}  # fmt: skip
    kernels = [(launched[e["args"]["correlation"]], float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
               and (e.get("args") or {}).get("correlation") in launched]  # fmt: skip
    spans: dict[str, list[float]] = {}
    for begin, end, name in windows:
        inside = [(k0, k1) for at, k0, k1 in kernels if begin <= at <= end]
        if inside:
            spans.setdefault(name, []).append((max(k1 for _, k1 in inside) - min(k0 for k0, _ in inside)) / 1000.0)
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
    row("steps with GPU times", f"{len(timed)} of {len(records)}", "",
        f"{verdict(0 < len(timed) >= len(records) - 2)}: every step but the one it attached in")  # fmt: skip
    spans = gpu_spans(trace) if trace else {}
    last = timed[-4:]
    for name in ("forward", "backward", "optimizer"):
        mine = [r["g"]["p"].get(name, 0.0) * 1000 for r in last]
        ref = spans.get(name, [])[-len(mine) :] if mine else []
        if mine and ref:
            row(
                f"phase {name} (ms, GPU)",
                f"{statistics.median(mine):.3f}",
                f"{statistics.median(ref):.3f}",
                f"profiler's kernels; host said {statistics.median(r['p'].get(name, 0.0) * 1000 for r in last):.3f}",
            )
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
    row(
        "allocated (MiB)",
        f"{cuda.get('alloc', 0) / 2**20:.1f}",
        f"{stats.get('allocated_bytes.all.current', 0) / 2**20:.1f}",
        "memory_stats (moves with training)",
    )
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
    row("syncs from probe threads", str(sum(probe_threads.values())), "0",
        f"{verdict(not probe_threads)}: {json.dumps(seen) if seen else 'none at all'}")  # fmt: skip


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
            row(f"capture {kind}", "failed", "", f"FAIL: {cap.error}")
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
            row("trace capture kernels", str(kernels), "> 0", f"{verdict(kernels > 0)}: {hta}")
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
            cost = (cap.summary or {}).get("cost_s")
            row("memsnap events", str(events), "> 0", f"{verdict(events > 0 and viz.startswith('memory_viz trace_plot'))}: {viz}; "
                f"cost to training {cost * 1000:.1f} ms" if cost is not None else f"{verdict(False)}: {viz}; no cost_s")  # fmt: skip


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def check_ddp(steps: int) -> None:
    """DDP's step with and without the probe, same single-rank NCCL job: the probe leaves DDP's C++ all-reduce as
    it is (no comm hook) and times the wait where its finalize stalls the compute stream."""
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ranktop import probe

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29672")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    results, waits, hooked = [], {False: [], True: []}, False
    # the last run: gradient_as_bucket_view=True, where finalize copies no bucket into the gradients
    for with_probe, as_view in ((False, False), (True, False), (False, False), (True, False), (True, True)):
        if with_probe:
            probe.init(job=f"gpu-check-ddp-{os.getpid()}")
            log: list = []
            sender = probe.get().sender
            original = sender.message

            def message(msg, original=original, log=log):
                if msg.KIND == "steps":
                    log.extend(msgspec.to_builtins(msg).get("cx", []))
                return original(msg)

            sender.message = message
        _, model, _, batch = model_and_step(torch.device("cuda", 0))
        ddp = DDP(model, device_ids=[0], bucket_cap_mb=4, gradient_as_bucket_view=as_view)  # many buckets
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
        marks = []
        for _ in range(steps):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            with probe.step():
                logits = ddp(batch[:, :-1])
                torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            end.record()
            marks.append((begin, end))
        torch.cuda.synchronize()
        if not as_view:
            results.append((with_probe, statistics.median(b.elapsed_time(e) for b, e in marks[len(marks) // 4 :])))
        hooked |= bool(getattr(ddp, "_comm_hooks", None))
        if with_probe:
            time.sleep(1.5)
            waits[as_view].extend(c["d"] * 1000 for c in log if c.get("op") == "ddp_allreduce")
            probe.shutdown()
    dist.destroy_process_group()
    off = statistics.median(t for p, t in results if not p)
    on = statistics.median(t for p, t in results if p)
    cost = 100 * (on - off) / off
    row("DDP step (ms), probe on/off", f"{on:.3f}", f"{off:.3f}",
        f"{verdict(not hooked and cost <= 1.0)}: comm hook {'REGISTERED' if hooked else 'none (C++ all-reduce kept)'}, "
        f"cost {cost:+.2f}% (target <= 1%)")  # fmt: skip
    for what, figures in finalize_rows(waits):
        row(what, *figures)


def finalize_rows(waits: dict[bool, list[float]]) -> list[tuple[str, tuple[str, str, str]]]:
    """The rows of DDP's finalize records on one rank (ms, by ``gradient_as_bucket_view``). One rank waits for no
    peer: without a comm hook its record holds finalize's copy of each bucket into the gradients (the reducer's
    futures are not Python's: no event between a bucket's wait and its copy), a figure with no verdict (it passed
    before because records existed); with the gradients as bucket views finalize copies nothing: ~0, checked."""
    copy, pure = waits.get(False, []), waits.get(True, [])
    wait = statistics.median(pure) if pure else None
    return [
        ("DDP finalize, wait + copy (ms)", (f"{statistics.median(copy):.3f}" if copy else "none", "copy only on one rank",
                                           f"{len(copy)} ddp_allreduce records; the copy into the gradients is in it")),
        ("DDP finalize wait, grads as bucket views (ms)", ("none" if wait is None else f"{wait:.3f}", "~0 on one rank",
                                                          f"{verdict(wait is not None and wait <= 0.1)}: {len(pure)} records, "
                                                          "no copy (within 0.1 ms of 0)")),
    ]  # fmt: skip


SIDE_STREAM_RANK = r"""
import os, sys, json, time, torch, torch.distributed as dist
out = sys.argv[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29673", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
from ranktop import probe
probe.init(job="gpu-check-side")
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
log = []
import msgspec
sender = probe.get().sender; orig = sender.message
def message(msg):
    if msg.KIND == "steps": log.extend(msgspec.to_builtins(msg).get("cx", []))
    return orig(msg)
sender.message = message
x = torch.ones(1 << 20, device="cuda")
side = torch.cuda.Stream()
cycles = int(sys.argv[2])
start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
refs = []
for n in range(30):
    with probe.step():
        with probe.phase("backward"):
            with torch.cuda.stream(side):
                torch.cuda._sleep(cycles)  # the side stream holds the all-reduce back
                work = dist.all_reduce(x, async_op=True)
            start.record()
            work.wait()  # the compute stream, idle, waits for it here
            stop.record()
    torch.cuda.synchronize()
    refs.append(start.elapsed_time(stop))
probe.shutdown()  # its final flush sends the calls' sample
json.dump({"calls": log, "refs": refs}, open(out, "w"))
dist.destroy_process_group()
"""


def sleep_cycles(ms: float) -> int:
    """``torch.cuda._sleep`` cycles for about ``ms`` milliseconds on this GPU (measured once)."""
    import torch

    torch.cuda._sleep(1_000)  # the first launch loads the kernel: not part of the rate
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(1_000_000)
    b.record()
    torch.cuda.synchronize()
    return int(1_000_000 * ms / max(a.elapsed_time(b), 1e-3))


def check_side_stream_wait() -> None:
    """A single-rank NCCL job where a side stream holds an async all-reduce back ~10 ms: the probe's wait must
    read what the compute stream waited (CUDA events around work.wait(), the reference)."""
    folder = tempfile.mkdtemp(prefix="ranktop-gpu-check-side-")
    script, out = os.path.join(folder, "rank.py"), os.path.join(folder, "out.json")
    with open(script, "w") as f:
        f.write(SIDE_STREAM_RANK)
    proc = subprocess.run([sys.executable, script, out, str(sleep_cycles(10.0))], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        row("side-stream wait (ms)", "failed", "", f"FAIL: {proc.stderr.strip().splitlines()[-1:]}")
        return
    with open(out) as f:
        found = json.load(f)
    mine = [c["d"] * 1000 for c in found["calls"] if str(c.get("op", "")).startswith("all_reduce")][5:]
    ref = found["refs"][5:]
    if not mine:
        row("side-stream wait (ms)", "none", f"{statistics.median(ref):.3f}", "FAIL: no all_reduce records")
        return
    m, r = statistics.median(mine), statistics.median(ref)
    row("side-stream wait (ms)", f"{m:.3f}", f"{r:.3f}", f"{verdict(abs(m - r) <= max(1.0, 0.1 * r) and r > 5)}: "
        "events around work.wait() on the compute stream")  # fmt: skip


def check_graph_capture() -> None:
    """A CUDA-graph capture loop with the probe's phases around it: capture valid, replay equal, no event in it."""
    import torch

    from ranktop import probe

    probe.init(job=f"gpu-check-graph-{os.getpid()}")
    try:
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)).cuda()
        static_in = torch.randn(64, 256, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up on a side stream, as torch.cuda.graph's docs ask
            for _ in range(3):
                with probe.step(), probe.phase("forward"):
                    model(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with probe.step():  # the probe's step and phase boundaries fall inside the capture
            with torch.cuda.graph(graph):
                with probe.phase("forward"):
                    static_out = model(static_in)
        expected = model(static_in)
        outs = []
        for _ in range(20):
            with probe.step(), probe.phase("forward"):
                graph.replay()
            outs.append(static_out.clone())
        torch.cuda.synchronize()
        same = all(torch.allclose(o, expected) for o in outs)
        row("CUDA graph capture", "valid" if same else "replay differs", "valid",
            f"{verdict(same)}: capture and 20 replays with the probe's boundaries around them")  # fmt: skip
    except Exception as exc:
        row("CUDA graph capture", "error", "valid", f"FAIL: {exc.__class__.__name__}: {exc}")
    finally:
        probe.shutdown()


OTHER_DEVICE_RANK = r"""
import os, sys, json, time, subprocess, torch
out = sys.argv[1]
os.environ["RANKTOP_JOB"] = "gpu-check-device"
from ranktop import probe
model = torch.nn.Linear(1024, 1024).to("cuda:1")  # no set_device: the thread's current device stays 0
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
p = probe.automatic()
log = []
import msgspec
orig = p.sender.message
def message(msg):
    if msg.KIND == "steps": log.extend(msgspec.to_builtins(msg).get("steps", []))
    return orig(msg)
p.sender.message = message
x = torch.randn(256, 1024, device="cuda:1")
for _ in range(30):
    model(x).square().mean().backward(); opt.step(); opt.zero_grad()
torch.cuda.synchronize(1); time.sleep(1.5)
apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_bus_id", "--format=csv,noheader"],
                      capture_output=True, text=True).stdout
buses = [line.split(",")[1].strip() for line in apps.splitlines() if line.split(",")[0].strip() == str(os.getpid())]
json.dump({"timed": sum("g" in r for r in log), "steps": len(log), "buses": buses,
           "gpu0": torch.cuda.get_device_properties(0).pci_bus_id}, open(out, "w"))
probe.shutdown()
"""


def _on_two_gpus(check: str, script_text: str, out: str) -> tuple[str, str, str] | None:
    """The scratch folder of a check that needs two GPUs, its rank script written there, and where its ranks write
    ``out``; None where this machine has fewer (the check's row says it was skipped)."""
    import torch

    if torch.cuda.device_count() < 2:
        skip(check, "needs 2 GPUs")
        return None
    folder = tempfile.mkdtemp(prefix="ranktop-gpu-check-")
    script = os.path.join(folder, "rank.py")
    with open(script, "w") as f:
        f.write(script_text)
    return folder, script, os.path.join(folder, out)


def check_other_device() -> None:
    if (scratch := _on_two_gpus("model on cuda:1, device 0 current", OTHER_DEVICE_RANK, "out.json")) is None:
        return
    folder, script, out = scratch
    env = dict(os.environ, RANKTOP_DIR=folder)
    proc = subprocess.run([sys.executable, script, out], capture_output=True, text=True, timeout=300, env=env)
    if proc.returncode != 0:
        row("model on cuda:1, device 0 current", "failed", "", f"FAIL: {proc.stderr.strip().splitlines()[-1:]}")
        return
    with open(out) as f:
        found = json.load(f)
    contexts = len(found["buses"])
    ok = found["timed"] > 0 and contexts == 1
    row("model on cuda:1, device 0 current", f"{found['timed']} of {found['steps']} timed", "no error",
        f"{verdict(ok)}: contexts of this process: {contexts} (one, on cuda:1: {found['buses']})")  # fmt: skip


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
torch.cuda.synchronize()
prof.export_chrome_trace(out + f".trace{rank}.json")
probe.shutdown()  # its final flush sends the calls' sample
json.dump(log, open(out + f".{rank}.json", "w"))
dist.destroy_process_group()
"""


def check_nccl() -> None:
    if (scratch := _on_two_gpus("NCCL waits", NCCL_RANK, "out")) is None:
        return
    _, script, out = scratch
    procs = [subprocess.Popen([sys.executable, script, str(r), out]) for r in range(2)]
    if any(p.wait(timeout=300) for p in procs):
        row("NCCL waits", "failed", "", "FAIL: a rank exited with an error")
        return
    for r in range(2):
        with open(f"{out}.{r}.json") as f:
            calls = [c for c in json.load(f) if "op" in c]
        with open(f"{out}.trace{r}.json") as f:
            kernels = [
                e["dur"] / 1000
                for e in json.load(f)["traceEvents"]
                if "nccl" in str(e.get("name", "")).lower() and e.get("cat") == "kernel"
            ]
        mine = statistics.median(c["d"] * 1000 for c in calls) if calls else float("nan")
        ref = statistics.median(kernels) if kernels else float("nan")
        row(f"NCCL all_reduce rank {r} (ms)", f"{mine:.3f}", f"{ref:.3f}", "wait on the device vs NCCL kernel (rank 0 waits for 1)")


ONE_GPU_RANK = r"""
import os, sys, time, torch, torch.distributed as dist
kind, slow, sleep, steps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")  # every rank on the one GPU: NCCL refuses two ranks on a device; gloo stages CUDA tensors
device = torch.device("cuda", 0) if kind == "cuda" else torch.device("cpu")
if device.type == "cuda":
    torch.cuda.set_device(device)
from ranktop import probe
probe.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(256, 512, device=device)
for _ in range(steps):
    with probe.step():
        with probe.phase("forward"):
            loss = model(x).square().mean()
            if rank == slow:
                if device.type == "cuda":
                    torch.cuda._sleep(int(sleep))  # GPU time only: the host goes on at once, only the GPU clock sees it
                else:
                    time.sleep(sleep / 1000)
        with probe.phase("backward"):
            loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(flat)
        with probe.phase("optimizer"):
            opt.step()
            opt.zero_grad()
probe.shutdown()
dist.destroy_process_group()
"""


def one_gpu_verdict(doc: dict, slow: int, phase: str = "forward") -> tuple[str, str, str]:
    """The row of the one-GPU job from ``ranktop watch --json``: the slow rank named first and alone, in ``phase``,
    on the GPU clock."""
    first = (doc.get("stragglers") or [None])[0]
    ranks = {r.get("rank"): r for r in doc.get("ranks") or []}
    named = ranks.get(first, {})
    said = doc.get("verdict") or {}
    ok = (doc.get("clock") == "gpu" and first == slow and named.get("culprit_phase") == phase
          and said.get("ranks") == [slow] and named.get("status") == "slow")  # fmt: skip
    found = f"rank {first} {named.get('culprit_phase') or '-'}" if first is not None else "nobody"
    return found, f"rank {slow} {phase}", f"{verdict(ok)}: clock {doc.get('clock')}; {said.get('text', 'no verdict')}"


def check_one_gpu_job(ranks: int = 3, slow: int = 1, sleep_ms: float = 8.0, kind: str = "cuda", watch_s: float = 12.0,
                      env_extra: dict | None = None) -> None:  # fmt: skip
    """A multi-rank job on one GPU: ``ranks`` processes share it (gloo with CUDA tensors), one slowed in forward by
    a sleep kernel, which only the GPU clock sees (the host returns at once; on the host clock every rank's extra
    time is in the all-reduce). ``ranktop watch --json`` must name it, on the GPU clock, in forward.
    ``kind="cpu"`` runs the same on the CPU (a sleep on the host), which the tests do."""
    import signal
    import time

    what = f"{ranks} ranks on one GPU, rank {slow} slow"
    folder = tempfile.mkdtemp(prefix="ranktop-gpu-check-shared-")
    script = os.path.join(folder, "rank.py")
    with open(script, "w") as f:
        f.write(ONE_GPU_RANK)
    job = f"gpu-check-shared-{os.getpid()}"
    env = {**os.environ, "RANKTOP_DIR": folder, "RANKTOP_JOB": job, **(env_extra or {})}
    env.pop("RANKTOP_AUTO", None)
    sleep = str(sleep_cycles(sleep_ms)) if kind == "cuda" else str(sleep_ms)
    port = str(29700 + os.getpid() % 200)
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", "--master_addr=127.0.0.1",
           f"--master_port={port}", script, kind, str(slow), sleep, "1000000"]  # fmt: skip
    with open(os.path.join(folder, "job.log"), "wb") as log:
        job_proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            time.sleep(2.0)  # the ranks start; the watch below waits for the job's first messages too
            watch = subprocess.run([sys.executable, "-m", "ranktop.cli", "watch", job, "--json", "--duration", str(watch_s),
                                    "--wait", "120"], capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
        finally:
            with contextlib_suppress():
                os.killpg(job_proc.pid, signal.SIGTERM)
            try:
                job_proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(job_proc.pid, signal.SIGKILL)
    if watch.returncode != 0:
        row(what, "failed", f"rank {slow} forward", f"FAIL: ranktop watch: {last_error(watch.stderr)}")
        return
    row(what, *one_gpu_verdict(json.loads(watch.stdout), slow, "forward"))


class contextlib_suppress:
    """``contextlib.suppress(ProcessLookupError, PermissionError)``: a job that ended on its own."""

    def __enter__(self):
        return self

    def __exit__(self, kind, *exc):
        return kind is not None and issubclass(kind, (ProcessLookupError, PermissionError))


#: The stock comm hooks of torch/distributed/algorithms/ddp_comm_hooks, by name.
COMM_HOOKS = ("allreduce", "fp16_compress", "bf16_compress", "powerSGD", "batched_powerSGD")

DDP_HOOK_RANK = r"""
import os, sys, json, time, functools, msgspec, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as powerSGD
kind, hook_name, sleep, steps, out, width = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
device = torch.device("cuda", 0) if kind == "cuda" else torch.device("cpu")
if device.type == "cuda":
    torch.cuda.set_device(device)
from ranktop import probe
probe.init()
log = []
sender = probe.get().sender; orig = sender.message
def message(msg):
    if msg.KIND == "steps":
        log.extend(msgspec.to_builtins(msg).get("cs", []))
    return orig(msg)
sender.message = message
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(6)]).to(device)
ddp = DDP(model, device_ids=[0] if device.type == "cuda" else None, bucket_cap_mb=max(1, width * width * 4 >> 20))
try:
    if hook_name == "allreduce":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook_name == "fp16_compress":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook_name == "bf16_compress":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    else:
        state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD.powerSGD_hook if hook_name == "powerSGD" else powerSGD.batched_powerSGD_hook)
except (TypeError, RuntimeError, ValueError) as exc:  # a hook this machine's torch refuses (bf16 needs CUDA and NCCL)
    json.dump({"rank": rank, "skip": str(exc)}, open(f"{out}.{rank}.json", "w"))
    probe.shutdown(); dist.destroy_process_group(); sys.exit(0)
opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
x = torch.randn(64, width, device=device)
cuda = device.type == "cuda"
def mark():
    if cuda:
        event = torch.cuda.Event(enable_timing=True); event.record(); return event
    return time.perf_counter()
def between(a, b):
    return a.elapsed_time(b) if cuda else (b - a) * 1000
refs = []
for step in range(steps):
    with probe.step():
        with probe.phase("forward"):
            out_ = ddp(x)
            loss = out_.square().mean()
            if rank == 1:  # rank 1 late: rank 0 stalls at DDP's finalize, waiting for its buckets
                torch.cuda._sleep(int(sleep)) if cuda else time.sleep(sleep / 1000)
        pair = []
        def finalize_begins(pair=pair):  # a final callback queued before DDP's: finalize runs next
            pair.append(mark())
        # queued from a pre-hook of the output's node: it runs before any gradient, so before DDP queues its finalize
        out_.grad_fn.register_prehook(lambda grads: torch.autograd.Variable._execution_engine.queue_callback(finalize_begins))
        with probe.phase("backward"):
            loss.backward()
            pair.append(mark())  # after finalize: the compute stream waited for every bucket
        with probe.phase("optimizer"):
            opt.step()
            opt.zero_grad()
        refs.append(pair)
if cuda:
    torch.cuda.synchronize()
ref_ms = [between(*pair) for pair in refs if len(pair) == 2]
probe.shutdown()  # its final flush sends the last summaries
waits = {}
for summary in log:
    op = (summary.get("ops") or {}).get("ddp_allreduce")
    if op:
        waits[summary["n"]] = waits.get(summary["n"], 0.0) + op[3] * 1000  # total seconds waited, that step
hooked = bool(getattr(ddp, "_comm_hooks", None))
json.dump({"rank": rank, "refs": ref_ms, "waits": waits, "hooked": hooked}, open(f"{out}.{rank}.json", "w"))
dist.destroy_process_group()
"""


def last_error(stderr: str) -> str:
    """The line of a failed job's output that says why (torchrun ends with a banner of '=')."""
    lines = [line for line in stderr.strip().splitlines() if "Error" in line or "error" in line]
    return (lines[-1] if lines else (stderr.strip().splitlines() or ["?"])[-1]).strip()[:200]


def hook_verdict(hook: str, found: dict, skip_steps: int = 5) -> tuple[str, str, str]:
    """The row of one comm hook: the probe's ``ddp_allreduce`` wait per step (median) on rank 0, the one that waits,
    against CUDA events around the true stall (a final callback queued ahead of DDP's finalize, and the end of
    backward); PASS within 1 ms or 10%; SKIP where torch refused the hook here."""
    if "skip" in found:
        return "skipped", "", f"SKIP: {found['skip'][:200]}"
    refs = found.get("refs", [])[skip_steps:]
    waits = [ms for n, ms in sorted(((int(n), ms) for n, ms in found.get("waits", {}).items()))][skip_steps:]
    if not refs:
        return "none", "none", "FAIL: no reference stalls"
    ref = statistics.median(refs)
    if not waits:
        return "none", f"{ref:.3f}", f"FAIL: no ddp_allreduce wait with {hook}_hook"
    mine = statistics.median(waits)
    ok = abs(mine - ref) <= max(1.0, 0.1 * ref)
    return f"{mine:.3f}", f"{ref:.3f}", f"{verdict(ok)}: {len(waits)} steps, events around finalize's stall"


def check_ddp_hooks(steps: int = 30, sleep_ms: float = 8.0, kind: str = "cuda", hooks: tuple = COMM_HOOKS,
                    env_extra: dict | None = None, width: int = 1024) -> None:  # fmt: skip
    """DDP with each stock comm hook (2 ranks sharing the GPU, gloo with CUDA tensors; rank 1 late by a sleep
    kernel): rank 0's ``ddp_allreduce`` wait against CUDA events around the true stall at DDP's finalize (the hooks
    launch ``all_reduce(async_op=True)`` and never wait: a hook's time in flight is no wait)."""
    sleep = str(sleep_cycles(sleep_ms)) if kind == "cuda" else str(sleep_ms)
    for n, hook in enumerate(hooks):
        what = f"DDP {hook}_hook wait (ms)"
        folder = tempfile.mkdtemp(prefix=f"ranktop-gpu-check-{hook}-")
        script, out = os.path.join(folder, "rank.py"), os.path.join(folder, "out")
        with open(script, "w") as f:
            f.write(DDP_HOOK_RANK)
        env = {**os.environ, "RANKTOP_DIR": folder, "RANKTOP_JOB": f"gpu-check-{hook}-{os.getpid()}", **(env_extra or {})}
        env.pop("RANKTOP_AUTO", None)
        port = str(29500 + (os.getpid() + n) % 100)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               f"--master_port={port}", script, kind, hook, sleep, str(steps), out, str(width)]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        except subprocess.TimeoutExpired:
            row(what, "timed out", "", "FAIL: over 600 s")
            continue
        if proc.returncode != 0:
            row(what, "failed", "", f"FAIL: {last_error(proc.stderr)}")
            continue
        with open(f"{out}.0.json") as f:
            row(what, *hook_verdict(hook, json.load(f)))


#: (backend, patterns) run on the GPU by check_pt2: everything with aot_eager (fast to compile), the patterns a
#: compiled trainer runs with inductor, and inductor's CUDA graphs (reduce-overhead needs inductor).
PT2_RUNS = (
    ("aot_eager", ("compile", "compile_fullgraph", "compile_dynamic", "module_compile", "per_block_compile",
                   "checkpoint", "checkpoint_reentrant", "checkpoint_compiled", "compiled_autograd",
                   "ddp_compile_outside", "ddp_compile_inside", "fsdp2_per_block_compile", "cuda_graph")),
    ("inductor", ("compile_fullgraph", "ddp_compile_inside", "ddp_compile_outside", "fsdp2_per_block_compile",
                  "checkpoint_compiled", "reduce_overhead")),
)  # fmt: skip
PT2_COUNTERS = ("graph_breaks", "unique_graphs", "calls_captured", "recompiles")


def check_pt2(steps: int = 6, accumulate: int = 2) -> None:
    """Each PyTorch 2 pattern without and then under automatic mode, on the GPU: the probe is invisible to dynamo
    (equal counters), changes no number (identical parameters) and times each step, with device times."""
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "jobs", "pt2_patterns.py")
    if not os.path.exists(job):
        skip("PyTorch 2 patterns", "tests/jobs/pt2_patterns.py not here (an installed copy)")
        return
    for backend, patterns in PT2_RUNS:
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29563", "RANKTOP_DIR": tempfile.mkdtemp()}
        env.pop("RANKTOP_AUTO", None)
        try:
            out = subprocess.run([sys.executable, job, "--device", "cuda", "--backend", backend, "--steps", str(steps),
                                  "--accumulate", str(accumulate), *patterns],
                                 capture_output=True, text=True, timeout=420, env=env)  # fmt: skip
        except subprocess.TimeoutExpired:
            row(f"pt2 {backend}", "timed out", "", "FAIL: over 420 s")
            continue
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode or not lines:
            row(f"pt2 {backend}", "failed", "", f"FAIL: rc {out.returncode}: {out.stderr[-600:]}")
        for result in lines:
            row(f"pt2 {backend} {result['pattern']}", *pt2_verdict(result, steps))


def pt2_verdict(result: dict, steps: int) -> tuple[str, str, str]:
    without, with_probe = result["without"], result["with"]
    if "error" in without:
        return "job fails alone", "", f"SKIP: {without['error'][:300]}"
    if "error" in with_probe:
        return "fails with probe", "runs", f"FAIL: {with_probe['error'][:300]}"
    differs = [k for k in PT2_COUNTERS if without[k] != with_probe[k]]
    same = with_probe["params"] == without["params"]
    timed = with_probe.get("steps", [])
    on_device = sum(1 for s in timed if s.get("g"))
    # on the GPU every step has device times but the one device timing attached in (and none may lack them)
    ok = not differs and same and len(timed) >= steps - 1 and on_device >= max(1, len(timed) - 1)
    counters = " ".join(f"{k}={with_probe[k]}" for k in PT2_COUNTERS)
    figures = f"{len(timed)} steps, {on_device} with device times, params {'same' if same else 'DIFFER'}"
    return figures, "counters equal" if not differs else f"differ: {differs}", f"{verdict(ok)}: {counters}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--only", choices=("pt2", "core"), help="run only the PyTorch 2 patterns, or all but them")
    args = ap.parse_args()
    if no_cuda():
        return 0
    versions()
    row("", "ranktop", "reference")
    if args.only == "pt2":
        check_pt2()
        print(tally_line())
        return 1 if TALLY["FAIL"] else 0
    check_ddp(max(20, args.steps // 2))
    check_side_stream_wait()
    check_graph_capture()
    check_other_device()
    check_phases(args.steps)
    check_syncs(max(10, args.steps // 4))
    check_cost(args.steps)
    check_nccl()
    check_captures()
    check_one_gpu_job()
    check_ddp_hooks(max(20, args.steps // 4))
    if args.only != "core":
        check_pt2()
    print(tally_line())
    return 1 if TALLY["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
