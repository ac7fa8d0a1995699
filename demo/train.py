"""The demo job: a real DDP training run, instrumented with ranktop's probe, with faults on demand.

Run it under torchrun (this is what ``ranktop demo`` does)::

    torchrun --standalone --nproc_per_node 4 demo/train.py --slow-rank 2 --slow-ms 40

or one task per rank under SLURM (the rank, world and master address come
from srun's variables, see :func:`torch_env_from_slurm`)::

    srun --ntasks 4 python -m ranktop.demo.train

or as a single process, without torchrun and without a process group::

    python demo/train.py --steps 5

It trains :class:`~ranktop.demo.model.TinyLM` on :class:`~ranktop.demo.data.MarkovTokens`
with AdamW; gloo on CPU, NCCL on GPU (``cuda:LOCAL_RANK``). Each step is
wrapped in ``probe.step()`` and its four standard phases in ``probe.phase()``;
``--no-probe`` replaces both with a no-op so the job runs, and can be timed,
without ranktop. The fault switches (slow, hang, leak) are described in
:mod:`ranktop.demo.faults`.

This file is run as a script path, so ``sys.path[0]`` is the demo folder:
every import below is absolute, through the installed ``ranktop`` package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, MutableMapping
from contextlib import AbstractContextManager
from types import FrameType

# A torch wheel without NumPy beside it warns once per process at import; with
# four ranks that is four copies of a warning the demo never cares about.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from ranktop import probe  # noqa: E402
from ranktop.demo.data import MarkovTokens  # noqa: E402
from ranktop.demo.faults import PHASES, Faults, Stopped  # noqa: E402
from ranktop.demo.flops import step_flops  # noqa: E402
from ranktop.demo.model import ModelConfig, TinyLM, lm_loss  # noqa: E402

#: Run "forever" by default: the live demo is ended by Ctrl+C or by ranktop.
DEFAULT_STEPS = 1_000_000
DEFAULT_SLOW_MS = 50.0
DEFAULT_HANG_AT_STEP = 100
#: How long a rank may stay stuck (in a collective whose peer is gone) after
#: SIGTERM/SIGINT before it exits without finishing its cleanup.
STOP_GRACE_S = 3.0


# -- command line -------------------------------------------------------------


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="train.py",
        description="ranktop's demo: a small transformer LM trained with DDP, with faults to inject.",
    )
    run = p.add_argument_group("training")
    run.add_argument(
        "--steps", type=_count(0), default=DEFAULT_STEPS, help=f"training steps to run (default {DEFAULT_STEPS:,}: until interrupted)"
    )
    run.add_argument("--batch-size", type=_count(1), default=8, help="sequences per rank per step (default 8)")
    run.add_argument("--seq-len", type=_count(2), default=64, help="tokens per sequence (default 64)")
    run.add_argument(
        "--workers", type=_count(0), default=1, help="DataLoader worker processes per rank; 0 loads in the training process (default 1)"
    )
    run.add_argument("--lr", type=_non_negative, default=3e-3, help="AdamW learning rate (default 3e-3)")
    run.add_argument("--log-every", type=_count(1), default=50, help="print loss and step time on rank 0 every K steps (default 50)")
    run.add_argument("--no-probe", action="store_true", help="run without ranktop's probe (every probe call becomes a no-op)")

    slow = p.add_argument_group("straggler: one rank slow in one phase, every step or one step in N")
    slow.add_argument("--slow-rank", type=int, metavar="R", help="the rank to slow down")
    slow.add_argument(
        "--slow-ms", type=_non_negative, metavar="MS", help=f"milliseconds to sleep per step on the slow rank (default {DEFAULT_SLOW_MS:g})"
    )
    slow.add_argument("--slow-phase", choices=PHASES, default="data", help="the phase the sleep happens in (default data)")
    slow.add_argument(
        "--slow-every",
        type=_count(1),
        metavar="N",
        help="sleep on one step in N only: an intermittent straggler, which ranktop tells as 'slow on 1 step in N' (default 1)",
    )

    hang = p.add_argument_group("hang: one rank stops making progress")
    hang.add_argument(
        "--hang-rank", type=int, metavar="R", help="the rank that hangs (inside forward; the others then wait in the all-reduce)"
    )
    hang.add_argument("--hang-at-step", type=_count(0), metavar="S", help=f"the step at which it hangs (default {DEFAULT_HANG_AT_STEP})")

    leak = p.add_argument_group("leak: one rank's memory grows every step")
    leak.add_argument(
        "--leak-mb-per-step",
        type=_non_negative,
        default=0.0,
        metavar="X",
        help="MB of new tensors kept alive per step on the leaking rank (default 0: no leak)",
    )
    leak.add_argument("--leak-rank", type=int, default=0, metavar="R", help="the leaking rank (default 0)")
    return p


def parse_args(argv: list[str] | None, world: int) -> argparse.Namespace:
    """Parse and check against the job's size, so every rank rejects a bad switch alike."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, rank in (("--slow-rank", args.slow_rank), ("--hang-rank", args.hang_rank), ("--leak-rank", args.leak_rank)):
        if rank is not None and not 0 <= rank < world:
            parser.error(f"{flag} {rank} is out of range: this job has {world} rank(s), 0 to {world - 1}")
    if args.slow_ms is not None and args.slow_rank is None:
        parser.error("--slow-ms needs --slow-rank")
    if args.slow_every is not None and args.slow_rank is None:
        parser.error("--slow-every needs --slow-rank")
    if args.slow_every is None:
        args.slow_every = 1
    if args.hang_at_step is not None and args.hang_rank is None:
        parser.error("--hang-at-step needs --hang-rank")
    if args.slow_ms is None:
        args.slow_ms = DEFAULT_SLOW_MS
    if args.hang_at_step is None:
        args.hang_at_step = DEFAULT_HANG_AT_STEP
    return args


# -- stopping -----------------------------------------------------------------


class GracefulStop:
    """SIGTERM or SIGINT ends the run at the next step boundary, quietly, with exit status 0.

    Python runs signal handlers only when the main thread executes Python code,
    and a rank whose peer hangs (or has already left) is blocked inside a C++
    all-reduce: it would never notice, and torchrun would SIGKILL it 30 s later.
    So the signal also wakes a watchdog thread, through ``signal.set_wakeup_fd``
    (written by the C-level handler the moment the signal lands). If the main
    thread has not finished cleaning up ``grace_s`` later, the watchdog calls
    ``last_words`` (releasing the probe) and exits the process; a second signal
    exits at once.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, grace_s: float, last_words: Callable[[], None]):
        self.grace_s = grace_s
        self.signum: int | None = None
        self.done = threading.Event()
        self._last_words = last_words

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def install(self) -> None:
        for signum in self.SIGNALS:
            signal.signal(signum, self._on_signal)
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._pair = (reader, writer)  # kept referenced: closing them would break the wakeup
        threading.Thread(target=self._watch, args=(reader,), name="demo-stop-watchdog", daemon=True).start()
        # DataLoader workers are forked from here: they must not wake our watchdog.
        os.register_at_fork(after_in_child=self._forget)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum

    def _watch(self, reader: socket.socket) -> None:
        seen, deadline = 0, None
        while not self.done.is_set():
            reader.settimeout(None if deadline is None else 0.1)
            try:
                data = reader.recv(64)
            except socket.timeout:  # TimeoutError from 3.10 on
                data = b""
            except OSError:
                return
            seen += sum(byte in self.SIGNALS for byte in data)  # other bytes: SIGCHLD from DataLoader workers
            if seen and deadline is None:
                deadline = time.monotonic() + self.grace_s
            if seen >= 2 or (deadline is not None and time.monotonic() >= deadline and not self.done.is_set()):
                self._exit_now(seen)

    def _exit_now(self, seen: int) -> None:
        why = "a second signal" if seen >= 2 else f"still blocked {self.grace_s:g} s after the signal (a peer is gone?)"
        print(f"[rank {os.environ.get('RANK', '0')}] {why}: exiting without cleanup", file=sys.stderr, flush=True)
        with contextlib.suppress(BaseException):
            self._last_words()
        os._exit(0)

    @staticmethod
    def _forget() -> None:
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


# -- the job ------------------------------------------------------------------


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    try:
        return int(text) if text else default
    except ValueError:
        sys.exit(f"train.py: {name}={text!r} is not a whole number")


def torch_env_from_slurm(env: MutableMapping[str, str] = os.environ) -> None:
    """Under ``srun`` without torchrun (one task per rank), give torch.distributed its env:// variables.

    RANK, WORLD_SIZE and LOCAL_RANK come from SLURM_PROCID, SLURM_NTASKS and
    SLURM_LOCALID; MASTER_ADDR, unless set, is the step's node when it runs on
    one (on several, set it in the batch script:
    ``export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)``);
    MASTER_PORT, unless set, is derived from the job id so that jobs sharing a
    node do not collide. A no-op under torchrun, which sets RANK itself.
    """
    if "RANK" in env or "SLURM_PROCID" not in env or "SLURM_NTASKS" not in env:
        return
    env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]
    env["LOCAL_RANK"] = env.get("SLURM_LOCALID", "0")
    nodes = env.get("SLURM_STEP_NODELIST", env.get("SLURM_JOB_NODELIST", ""))
    if "MASTER_ADDR" not in env:
        if not nodes or any(c in nodes for c in "[,"):
            sys.exit("train.py: several nodes under srun: export MASTER_ADDR (the first node) in the batch script")
        env["MASTER_ADDR"] = nodes
    env.setdefault("MASTER_PORT", str(30000 + int(env.get("SLURM_JOB_ID", "0") or 0) % 1000))


_NOOP = contextlib.nullcontext()


def gpu_index(gpus: int, local_world: int, local_rank: int, visible: str = "") -> int | None:
    """The CUDA device this rank trains on, or None for CPU.

    ``cuda:LOCAL_RANK`` when every rank of the node has a GPU of its own; ``cuda:0`` when each
    process is given just one (``CUDA_VISIBLE_DEVICES`` naming a single GPU, as SLURM's
    per-task binding does); else CPU for every rank: with fewer GPUs than ranks,
    ``cuda:LOCAL_RANK`` is "invalid device ordinal" on some, and all must take the same backend.
    """
    if gpus <= 0:
        return None
    if local_world <= gpus and 0 <= local_rank < gpus:
        return local_rank
    if gpus == 1 and visible and "," not in visible:
        return 0
    return None


def _noop_scope(*_args: object) -> contextlib.nullcontext[None]:
    return _NOOP


def main(argv: list[str] | None = None) -> int:
    torch_env_from_slurm()
    distributed = "WORLD_SIZE" in os.environ  # set by torchrun; absent: a plain single process
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    args = parse_args(argv, world)

    torch.set_num_threads(1)  # several ranks share a few cores: oversubscription would swamp the timings
    torch.manual_seed(0)  # the same initial weights everywhere (DDP would broadcast rank 0's anyway)

    step_scope: Callable[[], AbstractContextManager[object]]
    phase: Callable[[str], AbstractContextManager[object]]
    if args.no_probe:
        step_scope, phase = _noop_scope, _noop_scope
    else:
        # before the rendezvous, so ranktop sees a rank that is stuck in it; the model trains in fp32 (TF32 off,
        # torch's default), so MFU is against the fp32 peak
        probe.init(batch_size=args.batch_size, tokens_per_step=args.batch_size * args.seq_len, flops_dtype="fp32")
        step_scope, phase = probe.step, probe.phase

    stop = GracefulStop(STOP_GRACE_S, last_words=probe.shutdown)
    stop.install()

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    local_world = _env_int("LOCAL_WORLD_SIZE", 1)
    index = gpu_index(gpus, local_world, local_rank, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    if gpus and index is None and rank == 0:  # every rank must take the same backend: all on CPU
        print(f"[rank 0] {gpus} GPU(s) for {local_world} ranks per node: training on CPU (gloo)", flush=True)
    if index is not None:
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        backend = "nccl"
        device_timing = os.environ.get("RANKTOP_DEVICE_TIMING", "").lower() not in ("off", "0", "no")

        def sync() -> None:
            # The probe times phases on the GPU (CUDA events, docs/gpu.md). With device timing off it
            # reads only the host clock: then, without this, asynchronous kernels would make every
            # phase look instant and the wait for a slow rank land wherever the queue first blocks.
            if not device_timing:
                torch.cuda.synchronize(device)
    else:
        device, backend = torch.device("cpu"), "gloo"

        def sync() -> None:
            pass

    if distributed:
        dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)

    cfg = ModelConfig(seq_len=args.seq_len)
    if not args.no_probe:  # FLOPs of one step by PyTorch's counter, for TFLOP/s and MFU (demo/flops.py)
        probe.set_work(flops_per_step=step_flops(cfg, args.batch_size))
    model: torch.nn.Module = TinyLM(cfg).to(device)
    if distributed:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    try:  # the fused kernel halves the optimizer phase on CPU; torch < 2.4 has it for CUDA only
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
    except RuntimeError:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    dataset = MarkovTokens(cfg.vocab, args.seq_len, rank=rank, world=world)
    faults = Faults(
        rank,
        device=device,
        stop_requested=lambda: stop.requested,
        slow_rank=args.slow_rank,
        slow_ms=args.slow_ms,
        slow_phase=args.slow_phase,
        slow_every=args.slow_every,
        hang_rank=args.hang_rank,
        hang_at_step=args.hang_at_step,
        leak_rank=args.leak_rank,
        leak_mb_per_step=args.leak_mb_per_step,
    )
    faults.attach(model, optimizer)
    # With workers the data sleep comes after the fetch (a worker's would hide behind prefetching).
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        collate_fn=None if args.workers else faults.collate,
    )

    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(
            f"[rank 0] {world} rank(s), {backend} on {device.type}, {params:,} parameters, "
            f"loss floor {dataset.entropy():.3f} nats, probe {'off' if args.no_probe else 'on'}",
            flush=True,
        )

    step = 0
    batches = iter(loader)
    try:
        last_log_step, last_log_time = 0, time.perf_counter()
        for step in range(args.steps):
            if stop.requested:
                break
            with step_scope():
                with phase("data"):
                    inputs, targets = next(batches)
                    inputs = inputs.to(device, non_blocking=True)
                    targets = targets.to(device, non_blocking=True)
                    if args.workers:
                        faults.delay("data")
                with phase("forward"):
                    faults.hang(step)
                    loss = lm_loss(model, inputs, targets)
                    faults.leak()
                with phase("backward"):
                    faults.in_backward(loss)
                    loss.backward()  # type: ignore[no-untyped-call]  # DDP all-reduces the gradients here (torch's backward is unannotated)
                    sync()
                with phase("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    sync()
            if rank == 0 and (step == 0 or (step + 1) % args.log_every == 0):
                now = time.perf_counter()
                ms = (now - last_log_time) * 1000 / (step + 1 - last_log_step)
                leaked = f"  leaked {faults.leaked_mb:,.0f} MB" if faults.leaked else ""
                print(f"[rank 0] step {step + 1:>7}  loss {loss.item():.3f}  {ms:6.1f} ms/step{leaked}", flush=True)
                last_log_step, last_log_time = step + 1, time.perf_counter()
    except Stopped:
        pass
    except Exception:
        if not stop.requested:
            raise
        # A peer left first and tore its end of the collective down: expected while stopping.
    finally:
        if stop.signum is not None and rank == 0:  # stop.requested
            print(f"[rank 0] stopped by {signal.Signals(stop.signum).name} at step {step}", flush=True)
        del batches  # joins the DataLoader workers
        probe.shutdown()  # a no-op when the probe is off
        if distributed and dist.is_initialized():
            dist.destroy_process_group()
        stop.done.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
