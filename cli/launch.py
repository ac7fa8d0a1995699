"""``ranktop launch [--job NAME] [--rate HZ] -- COMMAND ...``: any launcher, every rank timed, no code change.

It runs COMMAND (``torchrun ...``, ``python train.py``, ``srun ...``) with
``RANKTOP_AUTO=1`` in its environment; the start-up hook (``ranktop-auto.pth``,
see :mod:`ranktop.probe.autostart`) then switches automatic mode on in each rank
that imports torch and in no other process. The exit status is COMMAND's.

Why a ``.pth`` installed in site-packages rather than one written per launch:
the interpreter reads ``.pth`` files only from site directories, never from
``PYTHONPATH``, and the alternative, a ``sitecustomize.py`` on ``PYTHONPATH``,
shadows the environment's own one, is lost whenever a launcher, container or
module system resets ``PYTHONPATH``, and lives in one node's temp folder where
the other nodes of a multi-node job cannot see it. An installed ``.pth`` is on
every node that has ranktop installed, and the environment variable that gates
it is passed on by every launcher (torchrun, srun, mpirun -x, ...). Only where
the ``.pth`` is missing (an editable install: setuptools' editable wheels leave
non-package files out) does ``launch`` fall back to a chaining
``sitecustomize.py`` on ``PYTHONPATH``, and says so.

This module never imports torch.
"""

from __future__ import annotations

import argparse
import os
import signal
import site
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ranktop.cli.errors import UserError
from ranktop.cli.options import Command, positive_float
from ranktop.wire import settings
from ranktop.wire.dtypes import normalise_dtype

PTH = "ranktop-auto.pth"

#: The fallback start-up hook: ours, then the ``sitecustomize`` it shadows, if any.
SITECUSTOMIZE = """\
# Written by `ranktop launch` (the ranktop-auto.pth start-up hook is not installed here).
import os as _os, sys as _sys
if _os.environ.get("RANKTOP_AUTO", "") not in ("", "0"):
    try:
        __import__("ranktop.probe.autostart")
    except ModuleNotFoundError:
        pass  # an interpreter without ranktop (a system python run by the job): nothing to do
    except Exception as _exc:
        print(f"ranktop: automatic mode off: {_exc!r}", file=_sys.stderr)
_here = _os.path.dirname(_os.path.abspath(__file__))
_rest = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
import importlib.machinery as _machinery
_spec = _machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _module = __import__("importlib.util").util.module_from_spec(_spec)
    _sys.modules["sitecustomize"] = _module
    _spec.loader.exec_module(_module)
"""


class LaunchError(UserError):
    """A command line that cannot be launched; the message is the whole story."""


HELP = "run a training command with the probe in every rank, no code change"
DESCRIPTION = (
    "Run COMMAND (torchrun ..., python train.py, srun ...) with ranktop's automatic mode "
    "switched on in every rank that imports torch, and in no other process (the torchrun agent, "
    "DataLoader workers). Exits with COMMAND's exit status."
)
USAGE = "ranktop launch [--job NAME] [--rate HZ] -- COMMAND [ARGS ...]"


def configure(launch: argparse.ArgumentParser) -> None:
    launch.add_argument("--job", default=None, help="job name to watch it under (default: $SLURM_JOB_ID, else COMMAND-PID)")
    launch.add_argument(
        "--rate", type=positive_float, default=None, help=f"telemetry messages per second per rank (default {settings.DEFAULT_RATE_HZ:g})"
    )
    work = launch.add_argument_group("work per step, per rank (samples/s, tokens/s, MFU; see probe/flops.py)")
    work.add_argument("--batch-size", type=positive_float, default=None, help="samples per rank per step")
    work.add_argument("--tokens-per-step", type=positive_float, default=None, help="tokens per rank per step")
    work.add_argument("--flops-per-step", type=positive_float, default=None, help="model FLOPs per rank per step")
    work.add_argument(
        "--flops-dtype",
        type=flops_dtype,
        default=None,
        help="the dtype whose peak MFU is against (fp32, tf32, bf16, fp16, fp8; default: the one the job computes in)",
    )
    launch.add_argument("argv", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command to run, after --")
    launch.set_defaults(run=cmd_launch)


def hook_installed() -> bool:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return any((Path(d) / PTH).is_file() for d in dirs)


def launch_env(job: str, rate: float | None, directory: str | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env[settings.AUTO.name] = "1"
    env[settings.JOB.name] = job
    if rate is not None:
        env[settings.RATE.name] = str(rate)
    if directory:
        env[settings.DIR.name] = directory
    return env


def work_env(batch_size: float | None, tokens_per_step: float | None, flops_per_step: float | None,
             dtype: str | None = None) -> dict[str, str]:  # fmt: skip
    """The environment variables ``probe.init`` reads the work per step from (probe/flops.py)."""
    names = (
        (settings.BATCH_SIZE.name, batch_size),
        (settings.TOKENS_PER_STEP.name, tokens_per_step),
        (settings.FLOPS_PER_STEP.name, flops_per_step),
    )
    env = {name: f"{value:.17g}" for name, value in names if value is not None}
    if dtype:
        env[settings.FLOPS_DTYPE.name] = dtype
    return env


def flops_dtype(text: str) -> str:
    """``--flops-dtype``: one of the dtypes the peak table knows (probe/flops.py), by any of its names."""
    try:
        return normalise_dtype(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _default_job(command: list[str]) -> str:
    job = settings.JOB.get()
    if job:
        return job
    if os.environ.get("SLURM_JOB_ID"):
        return os.environ["SLURM_JOB_ID"]  # what every node of an allocation agrees on
    name = Path(command[0]).name or "job"
    return f"{name}-{os.getpid()}"


def cmd_launch(args: argparse.Namespace) -> int:
    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise LaunchError(f"nothing to launch: {USAGE}")
    problem = None if args.rate is None else settings.rate_problem(args.rate)
    if problem:
        raise LaunchError(f"--rate {problem}")
    job = args.job or _default_job(command)
    env = launch_env(job, args.rate, args.dir)
    env.update(work_env(getattr(args, "batch_size", None), getattr(args, "tokens_per_step", None), getattr(args, "flops_per_step", None),
                        getattr(args, "flops_dtype", None)))  # fmt: skip
    fallback = None
    if not hook_installed():
        fallback = tempfile.TemporaryDirectory(prefix="ranktop-launch-")
        (Path(fallback.name) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (fallback.name, env.get("PYTHONPATH", "")) if p)
        print(f"ranktop: {PTH} is not installed (editable install?): using a sitecustomize.py on PYTHONPATH", file=sys.stderr)
    print(f"ranktop: job {job}; watch it with: ranktop watch {job}", file=sys.stderr)
    try:
        proc = subprocess.Popen(command, env=env)
    except OSError as exc:
        raise LaunchError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
    # Ctrl+C reaches the whole foreground process group by itself; a SIGTERM or
    # SIGHUP sent to us alone is passed on, so the job never outlives its launcher.
    previous = {sig: signal.signal(sig, lambda signum, frame: _forward(proc, signum)) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:
                continue  # the child got the same SIGINT: wait for it to finish
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if fallback is not None:
            fallback.cleanup()
    return 128 - code if code < 0 else code


def _forward(proc: subprocess.Popen[bytes], signum: int) -> None:
    if proc.poll() is None:
        proc.send_signal(signum)


COMMAND = Command("launch", HELP, configure, DESCRIPTION, USAGE)
