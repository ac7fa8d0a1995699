"""What the probe costs the training thread, measured side by side in one run.

Three workloads, each run without the probe, with the explicit probe
(``probe.step()`` around the step, four ``probe.phase()`` blocks inside) and,
for the two torch ones, in automatic mode (``probe/auto.py``: the hooks of
``ranktop launch``, installed for the "auto" blocks only, as they are after
the first step: on the root module, the optimizer, ``backward`` and the
DataLoader):

- a *tiny* step of a few microseconds of Python, so the probe's absolute cost
  per step (in µs) stands out of the noise;
- a *tiny torch* step (a DataLoader fetch, a 4-to-1 linear layer, backward,
  SGD): every event automatic mode hooks, around almost no work;
- the demo model's training step (TinyLM, forward + backward + AdamW, single
  process), the realistic case, sized to take roughly 20 ms (its data is a
  tensor slice, not a DataLoader: automatic mode has no data phase there);
- the same step with the model compiled (``torch.compile``, default and
  ``fullgraph=True``; ``--backend``, inductor by default): automatic mode's
  hooks sit on the compiled module, outside the compiled region.

And the whole job (``--no-job`` skips it): benchmarks/compiled_job.py, a 2-rank
``torch.compile(DDP(TinyLM))`` with 4-micro-batch gradient accumulation, under
torchrun with and without ``ranktop launch``, alternated ``--job-rounds``
times; the ratio of the median optimizer steps per second. It counts what the
training thread pays and what the sender threads and the relay take from the
same two cores. With ``--cores-apart`` the job (both ways) runs on the first
core and ranktop's threads and relay on the others (found by the names they
give themselves for the OS, ``transport/background.py``): the job's rate where
ranktop does not compete for its cores, on a machine that has only two.

Configurations are interleaved in short blocks (A B A B ...) so that drift of a
noisy 2-core machine hits all of them alike; each figure is the median over
blocks. The probe runs for real throughout: its sender thread streams at 4 Hz
and its relay is bound, so the "without" figures include the background thread
too. The sender thread's CPU use is read from /proc for the whole run. The torch
steps are timed on two clocks: wall time, and the training thread's CPU time,
which is what the probe costs that thread with the other processes of a shared
machine (and the sender's GIL turns) left out.

Targets (issues 2/3 and 29): under 1% of a 20 ms step and under 30 µs per step
on the training thread; automatic mode at most 10 µs per step on the tiny torch
step (its CPU time) and at most 0.3% of the demo model's step; the sender
thread under 2% of one core at 4 Hz; the whole job under ``ranktop launch`` at
least 0.97 times as fast as without, and its training threads' CPU per
optimizer step within 1% (the rate where the sender and relay have cores of
their own).

    python benchmarks/probe_overhead.py           # about five minutes (the first compiles take longest)
    python benchmarks/probe_overhead.py --quick   # a smoke run
    python benchmarks/probe_overhead.py --job-only [--cores-apart]   # the whole-job row alone
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from typing import Callable

PHASES = ("data", "forward", "backward", "optimizer")


def tiny_work() -> int:
    total = 0
    for i in range(40):
        total += i * i
    return total


def make_tiny(probe) -> dict[str, Callable[[], None]]:
    def bare() -> None:
        for _ in PHASES:
            tiny_work()

    def explicit() -> None:
        with probe.step():
            for name in PHASES:
                with probe.phase(name):
                    tiny_work()

    configs = {"none": bare, "explicit": explicit}
    try:
        configs["auto"] = tiny_automatic(probe)
    except ImportError:  # no torch here: automatic mode has nothing to hook
        pass
    return configs


def tiny_automatic(probe) -> Callable[[], None]:
    """The tiny step with automatic mode's hook functions called where torch would call them.

    The real backward and DataLoader wrappers, the module and optimizer hook
    methods, the state machine and the recorder, around the same Python work;
    not included: torch's slower module-call path once a module has hooks
    (about 2.5 µs per step here, for the one root module).
    """
    import torch

    from ranktop.probe import auto

    hooks = auto.TorchHooks(auto.AutoTimer(probe.get().recorder))  # never installed: we call it ourselves
    module = torch.nn.Identity()
    fetch = hooks._wrap_entry(lambda _it: tiny_work(), "_data_depth", "data_begin")
    backward = hooks._wrap_entry(tiny_work, "_bwd_depth", "backward_begin")

    def step() -> None:
        fetch(None)
        hooks._fwd_pre(module, ())
        tiny_work()
        hooks._fwd_post(module, (), None)
        backward()
        hooks._opt_pre(None, (), {})
        tiny_work()
        hooks._opt_post(None, (), {})

    return step


def torch_configs(probe, model, opt, fetch: Callable[[], object], loss_of: Callable[[object], object]) -> dict[str, Callable[[], None]]:
    """One training step (fetch, forward, backward, optimizer) bare, with the explicit probe, and automatic."""

    def run(scope: Callable[[str], contextlib.AbstractContextManager], step_scope) -> None:
        with step_scope():
            with scope("data"):
                batch = fetch()
            with scope("forward"):
                loss = loss_of(batch)
            with scope("backward"):
                loss.backward()
            with scope("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)

    null = contextlib.nullcontext
    return {
        "none": lambda: run(lambda _name: null(), null),
        "explicit": lambda: run(probe.phase, probe.step),
        "auto": automatic(probe, model, lambda: run(lambda _name: null(), null)),
    }


def make_model_step(probe, batch: int, seq: int) -> dict[str, Callable[[], None]]:
    import torch

    from ranktop.demo.model import ModelConfig, TinyLM, lm_loss

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyLM(ModelConfig(seq_len=seq))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, model.cfg.vocab, (batch, seq + 1))
    return torch_configs(probe, model, opt, lambda: (data[:, :-1], data[:, 1:]), lambda xy: lm_loss(model, *xy))


def make_compiled_model_step(probe, batch: int, seq: int, fullgraph: bool, backend: str) -> dict[str, Callable[[], None]]:
    """The demo model's step with the model compiled (``torch.compile``, default or ``fullgraph=True``):
    automatic mode's hooks sit on the compiled module, outside the compiled region (probe/auto.py)."""
    import torch

    from ranktop.demo.model import ModelConfig, TinyLM, lm_loss

    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = TinyLM(ModelConfig(seq_len=seq))
    model = torch.compile(net, fullgraph=fullgraph, backend=backend)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    data = torch.randint(0, net.cfg.vocab, (batch, seq + 1))
    return torch_configs(probe, model, opt, lambda: (data[:, :-1], data[:, 1:]), lambda xy: lm_loss(model, *xy))


#: What benchmarks/compiled_job.py prints, by the key each figure is kept under.
JOB_FIGURES = {
    "rate": r"optimizer steps/s: ([0-9.]+)",
    "thread_ms": r"training-thread cpu ms/step: ([0-9.]+)",
    "process_ms": r"process cpu ms/step: ([0-9.]+)",
}


def whole_job(rounds: int, steps: int, backend: str, fullgraph: bool, apart: bool = False) -> dict[bool, dict[str, list[float]]]:
    """benchmarks/compiled_job.py (2-rank DDP, compiled TinyLM, 4 micro-batches) under torchrun, with and
    without ``ranktop launch``, alternated ``rounds`` times: each run's figures (:data:`JOB_FIGURES`), by launched.

    ``apart``: the job (both arms) confined to the machine's first core, and ranktop's own threads and relay
    moved to the others as they appear (:class:`CoresApart`): the job's rate where ranktop does not compete
    for its cores, measured on a machine that has only two."""
    import re
    import subprocess

    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compiled_job.py")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    ranktop = os.path.join(os.path.dirname(sys.executable), "ranktop")
    args = [job, "--steps", str(steps), "--backend", backend] + (["--fullgraph"] if fullgraph else [])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RANKTOP_AUTO", None)
    cores = sorted(os.sched_getaffinity(0))
    if apart and len(cores) < 2:
        raise SystemExit("--cores-apart needs at least two cores")
    job_cores, spare = {cores[0]}, set(cores[1:])
    runs: dict[bool, dict[str, list[float]]] = {launched: {key: [] for key in JOB_FIGURES} for launched in (False, True)}
    for r in range(-1, rounds):  # round -1: one of each, not counted (compile caches, page cache, CPU clocks)
        for launched in (False, True) if r % 2 == 0 else (True, False):
            command = ([ranktop, "launch", "--job", f"bench-job-{os.getpid()}-{r}", "--"] if launched else []) + torchrun + args
            confine = (lambda: os.sched_setaffinity(0, job_cores)) if apart else None
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=confine)
            mover = CoresApart(proc.pid, spare) if apart else contextlib.nullcontext()
            with mover:
                stdout, stderr = proc.communicate(timeout=900)
            found = {key: re.search(pattern, stdout) for key, pattern in JOB_FIGURES.items()}
            if proc.returncode != 0 or None in found.values():
                raise SystemExit(f"the whole-job run failed ({'with' if launched else 'without'} ranktop):\n{stderr[-3000:]}")
            if apart and launched and not mover.moved:
                raise SystemExit("--cores-apart: none of ranktop's threads was found in the launched job")
            if r >= 0:
                for key, match in found.items():
                    runs[launched][key].append(float(match.group(1)))
    return runs


class CoresApart:
    """While a job runs, moves ranktop's own threads and relay (found by the names they give themselves,
    ``ranktop/transport/background.py``) among the job's processes onto ``spare`` cores, ten times a second.

    In the job's processes that is every thread named ``ranktop*`` and ZeroMQ's (``ZMQbg*``: the sender's
    context's; the benchmark's job uses no ZeroMQ of its own); a relay (its main thread is named
    ``ranktop-relay``) moves whole. Threads they start later inherit the spare cores."""

    def __init__(self, root: int, spare: set[int], every_s: float = 0.1):
        import threading

        self._root, self._spare, self._every_s = root, spare, every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.moved: set[int] = set()

    def __enter__(self) -> "CoresApart":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._every_s):
            for pid in self._descendants():
                relay = _comm(f"/proc/{pid}/comm") == "ranktop-relay"
                try:
                    tasks = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for task in tasks:
                    tid = int(task)
                    name = _comm(f"/proc/{pid}/task/{task}/comm")
                    if tid not in self.moved and (relay or name.startswith(("ranktop", "ZMQbg"))):
                        with contextlib.suppress(OSError):
                            os.sched_setaffinity(tid, self._spare)
                            self.moved.add(tid)

    def _descendants(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                children.setdefault(ppid, []).append(int(entry))
        found, todo = [], [self._root]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, ()))
        return found


def _comm(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def make_tiny_torch(probe) -> dict[str, Callable[[], None]]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader([torch.ones(4)] * 1024, batch_size=None)
    state = {"it": iter(loader)}

    def fetch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            return next(state["it"])

    return torch_configs(probe, model, opt, fetch, lambda x: model(x).sum())


def automatic(probe, model, bare: Callable[[], None]) -> Callable[[], None]:
    """The bare step, with automatic mode's hooks installed around each block of it (``fn.block``), as
    ``ranktop launch`` runs them: the step-mode arming of device timing (a ``torch.cuda.is_initialized()``
    per step, for ``probe.init()`` scripts) is off, as automatic mode turns it off."""
    from ranktop.probe import auto, gpu_timing

    @contextlib.contextmanager
    def hooked():
        p = probe.get()
        gpu_timing.disarm(p)
        hooks = auto.TorchHooks(auto.AutoTimer(p.recorder), model=model).install()
        try:
            yield
        finally:
            hooks.remove()
            gpu_timing.arm(p)

    # The bare step itself, hooked for its blocks: a wrapper frame here would be charged to automatic mode
    # (half a microsecond of the ten it is allowed on this 2-core VM). ``bare`` is made for this row alone.
    bare.block = hooked
    return bare


def interleaved(configs: dict[str, Callable[[], None]], blocks: int, steps: int, warmup: int) -> dict[str, float]:
    """Median over blocks of the mean step time (seconds), configurations alternating block by block."""
    return interleaved_clocks(configs, blocks, steps, warmup)[0]


def interleaved_clocks(
    configs: dict[str, Callable[[], None]], blocks: int, steps: int, warmup: int
) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`interleaved` on two clocks at once: wall time, and the calling thread's CPU time.

    Wall time is what the step takes; the thread's CPU time is what the probe costs the training thread
    alone: time the thread spends preempted by other processes (a shared 2-core VM) or waiting for the
    GIL while the sender thread holds it is not in it (the sender's own share is measured apart)."""
    for fn in configs.values():
        with getattr(fn, "block", contextlib.nullcontext)():
            for _ in range(warmup):
                fn()
    wall: dict[str, list[float]] = {name: [] for name in configs}
    cpu: dict[str, list[float]] = {name: [] for name in configs}
    perf, thread_time = time.perf_counter, time.thread_time
    for b in range(blocks):
        order = list(configs) if b % 2 == 0 else list(reversed(configs))
        for name in order:
            fn = configs[name]
            with getattr(fn, "block", contextlib.nullcontext)():  # automatic mode's hooks, for its blocks only
                start, start_cpu = perf(), thread_time()
                for _ in range(steps):
                    fn()
                cpu[name].append((thread_time() - start_cpu) / steps)
                wall[name].append((perf() - start) / steps)
    return (
        {name: statistics.median(times) for name, times in wall.items()},
        {name: statistics.median(times) for name, times in cpu.items()},
    )


def python_calls(configs: dict[str, Callable[[], None]], steps: int = 100) -> dict[str, float]:
    """Python function calls per step of each configuration (``sys.setprofile``, after a warm-up): what the
    microseconds above cost in a figure no machine's noise moves (on a shared 2-core VM the same step's added
    microseconds vary by half from one process to the next)."""
    counts = {}
    for name, fn in configs.items():
        with getattr(fn, "block", contextlib.nullcontext)():
            for _ in range(steps):
                fn()
            calls = [0]

            def profile(frame, event, arg) -> None:
                if event == "call":
                    calls[0] += 1

            sys.setprofile(profile)
            try:
                for _ in range(steps):
                    fn()
            finally:
                sys.setprofile(None)
        counts[name] = calls[0] / steps
    return counts


def thread_cpu_seconds(native_id: int) -> float:
    """User + system CPU time of one thread of this process, from /proc (Linux)."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


#: The step the 1% target is stated for.
REFERENCE_STEP_S = 0.020


def report(title: str, result: dict[str, float], judge: bool) -> bool:
    """Print a table; with ``judge``, check each probe config against < 30 µs and < 1% of a 20 ms step.

    The absolute cost is judged on the tiny steps, where it stands out of the
    noise; on the ~14 ms model step, run-to-run noise of this machine is about
    ±1%, larger than the cost itself, so that table is a sanity check only.
    """
    base = result["none"]
    print(f"\n{title}")
    print(f"  {'config':<10} {'step':>12} {'ratio':>8} {'added/step':>12} {'of a 20 ms step':>16}")
    ok = True
    for name, value in result.items():
        ratio = value / base
        added = value - base
        share = added / REFERENCE_STEP_S
        print(f"  {name:<10} {value * 1e6:>10.1f}µs {ratio:>8.4f} {added * 1e6:>10.2f}µs {share * 100:>15.3f}%")
        if judge and name != "none":
            ok &= added < 30e-6 and share < 0.01
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (numbers are noisy)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend for the compiled rows and the job")
    parser.add_argument("--no-compiled", action="store_true", help="skip the compiled-model rows")
    parser.add_argument("--no-job", action="store_true", help="skip the whole-job row")
    parser.add_argument("--job-rounds", type=int, default=3)
    parser.add_argument("--job-steps", type=int, default=200)
    parser.add_argument("--job-only", action="store_true", help="only the whole-job row")
    parser.add_argument(
        "--cores-apart",
        action="store_true",
        help="the whole-job row with the job on the first core and ranktop's threads and relay on the others",
    )
    args = parser.parse_args(argv)
    if args.job_only:
        return report_job(args, True)

    os.environ.setdefault("RANKTOP_DIR", tempfile.mkdtemp(prefix="ranktop-bench-"))
    from ranktop import probe

    p = probe.init(job=f"bench-{os.getpid()}")
    if not p.sender.ready.wait(10):
        print("the probe's sender thread did not start", file=sys.stderr)
        return 1
    sender_id = p.sender.native_id
    cpu0, wall0 = thread_cpu_seconds(sender_id), time.monotonic()

    tiny = interleaved(make_tiny(probe), blocks=6 if args.quick else 40, steps=2000, warmup=2000)
    tiny_torch_configs = make_tiny_torch(probe)
    tiny_torch, tiny_torch_cpu = interleaved_clocks(tiny_torch_configs, blocks=6 if args.quick else 60, steps=200, warmup=200)
    calls = python_calls(tiny_torch_configs)
    model, model_cpu = interleaved_clocks(
        make_model_step(probe, args.batch_size, args.seq_len),
        blocks=2 if args.quick else 30,
        steps=5 if args.quick else 8,
        warmup=3 if args.quick else 10,
    )
    compiled = {}
    if not args.no_compiled:
        for fullgraph in (False, True):
            compiled[fullgraph] = interleaved_clocks(
                make_compiled_model_step(probe, args.batch_size, args.seq_len, fullgraph, args.backend),
                blocks=2 if args.quick else 30,
                steps=5 if args.quick else 8,
                warmup=3 if args.quick else 10,
            )
    sender_cpu = (thread_cpu_seconds(sender_id) - cpu0) / (time.monotonic() - wall0)
    dropped = p.sender.state()["dropped"]
    probe.shutdown()

    ok = report("tiny step (isolates the probe's own cost)", tiny, True)
    ok &= report("tiny torch step (every event automatic mode hooks, around almost no work)", tiny_torch, True)
    auto_us = (tiny_torch["auto"] - tiny_torch["none"]) * 1e6
    auto_cpu_us = (tiny_torch_cpu["auto"] - tiny_torch_cpu["none"]) * 1e6
    explicit_cpu_us = (tiny_torch_cpu["explicit"] - tiny_torch_cpu["none"]) * 1e6
    print(
        f"  automatic mode on the tiny torch step: +{auto_us:.1f} µs of wall time; on the training thread's CPU "
        f"time +{auto_cpu_us:.1f} µs (target <= 10 µs; the explicit probe +{explicit_cpu_us:.1f} µs)"
    )
    print(
        f"  Python calls the probe adds to the tiny torch step: automatic mode {calls['auto'] - calls['none']:.0f}, "
        f"the explicit probe {calls['explicit'] - calls['none']:.0f} (counted, not timed)"
    )
    ok &= auto_cpu_us <= 10
    # Automatic mode hooks the same events on the demo model as on the tiny torch step (after the first step,
    # the root module's call, backward, the optimizer step; no per-layer hook), so its cost per step is the
    # tiny step's; measured on the model step directly, it is under that step's own run-to-run noise.
    rows = [(f"demo model step (TinyLM, batch {args.batch_size} x seq {args.seq_len}, 1 thread; noise ±1%)", model, model_cpu)] + [
        (
            f"demo model step compiled (torch.compile, {'fullgraph=True' if fullgraph else 'default'}, backend {args.backend}; noise ±1%)",
            *clocks,
        )
        for fullgraph, clocks in compiled.items()
    ]
    worst = 0.0
    for title, wall, cpu in rows:
        report(title, wall, False)
        share = auto_cpu_us * 1e-6 / cpu["none"]
        worst = max(worst, share)
        print(
            f"  training thread's CPU per step: none {cpu['none'] * 1e3:.2f} ms, explicit "
            f"{(cpu['explicit'] / cpu['none'] - 1) * 100:+.2f}%, automatic {(cpu['auto'] / cpu['none'] - 1) * 100:+.2f}% "
            f"(measured directly); automatic mode's cost per step (the tiny torch step's) is {share * 100:.3f}% of it"
        )
    print(f"  automatic mode on the demo model: at most {worst * 100:.3f}% of a step (target <= 0.3%)")
    ok &= worst <= 0.003
    print(f"\nsender thread: {sender_cpu * 100:.2f}% of one core at {p.sender.rate_hz:g} Hz (target < 2%)")
    print(f"step records dropped: {dropped} (by design: the tiny loops make ~100k steps/s, beyond a 4096-record buffer at 4 Hz)")
    ok &= sender_cpu < 0.02
    print(
        f"\ntraining-thread targets (< 30 µs and < 1% of a 20 ms step, automatic mode <= 10 µs on the tiny torch step; "
        f"sender < 2% of a core): {'PASS' if ok else 'FAIL'}"
    )
    if not args.no_job:
        return report_job(args, ok)
    print(f"\nall targets: {'PASS' if ok else 'FAIL'}")
    return 0


def report_job(args, ok: bool) -> int:
    """The whole job's three ratios: the rate (what a user sees, moved by anything else on the machine), and
    the CPU the ranks spend per optimizer step, which other processes move far less: the training thread's
    alone (the rate the job would keep with the sender and relay on cores of their own) and the whole rank's
    (the training thread plus the probe's sender thread)."""
    rounds, steps = (1, 40) if args.quick else (args.job_rounds, args.job_steps)
    runs = whole_job(rounds, steps, args.backend, fullgraph=False, apart=args.cores_apart)
    without, launched = runs[False], runs[True]
    ratio = statistics.median(launched["rate"]) / statistics.median(without["rate"])
    thread = statistics.median(without["thread_ms"]) / statistics.median(launched["thread_ms"])
    process = statistics.median(without["process_ms"]) / statistics.median(launched["process_ms"])
    print(
        f"\nwhole job (2-rank torch.compile(DDP(TinyLM)), 4 micro-batches, backend {args.backend}; "
        f"{rounds} alternated runs each after one of each not counted, {steps} optimizer steps a run; benchmarks/compiled_job.py)"
    )
    if args.cores_apart:
        print("  the job (both ways) on the first core; ranktop's threads and relay moved to the others as they appeared")
    for name, figures in (("without ranktop", without), ("ranktop launch", launched)):
        print(
            f"  {name + ':':<16} {', '.join(f'{r:.3f}' for r in figures['rate'])} optimizer steps/s; "
            f"CPU per step: training thread {', '.join(f'{r:.2f}' for r in figures['thread_ms'])} ms, "
            f"whole rank {', '.join(f'{r:.2f}' for r in figures['process_ms'])} ms"
        )
    target = 0.99 if args.cores_apart else 0.97
    where = "on cores of their own" if args.cores_apart else "on the same 2 cores"
    print(f"  ratio of medians (rates): {ratio:.4f} (target >= {target} with the sender and relay {where})")
    print(
        f"  training thread's CPU per step, without / with: {thread:.4f} (target >= 0.99: the job's rate where the "
        "sender and relay do not compete for its cores)"
    )
    print(f"  whole rank's CPU per step, without / with: {process:.4f} (the sender thread included)")
    ok &= ratio >= target and thread >= 0.99
    print(f"\nall targets: {'PASS' if ok else 'FAIL'}")
    if args.quick:
        print("(--quick: too short to judge the targets; run without it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
