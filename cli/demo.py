"""``ranktop demo``: start the demo training job under torchrun and watch it.

The job runs in its own process group with its output in a log file, so it
never scribbles over the TUI; quitting the TUI stops the job. The TUI opens at
once and shows "waiting" until the ranks' relays appear, and if the job dies
before that, the user gets the tail of its log instead of an empty screen.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

from ranktop.cli.errors import UserError
from ranktop.cli.options import Command, add_view_options, positive_int
from ranktop.cli.watch import run_tui
from ranktop.watch import WatchSession, resolve
from ranktop.wire import settings

HELP = "run the demo training job (torchrun, gloo on CPU) and watch it"
DESCRIPTION = (
    "Launch the demo job with torchrun and open the TUI on it. Demo switches "
    "(--slow-rank R --slow-ms MS --slow-phase P --slow-every N, --hang-rank R --hang-at-step S, "
    "--leak-mb-per-step X, --steps N, ...) are passed to the job; see `python -m ranktop.demo.train --help`."
)


def configure(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--nproc", type=positive_int, default=4, help="ranks to launch (default 4)")
    demo.add_argument(
        "--simulate", type=positive_int, default=None, metavar="N",
        help="instead of torchrun, simulate a job of N ranks (thousands fit on a laptop) through the real wire and relays: "
        "--nodes M --calls-per-step K --steps-per-s S --slow-rank R --slow-ms MS --slow-phase P --slow-node HOST "
        "--stall-rank R --stall-at-s T --silent-rank R (see `python -m ranktop.demo.simulate --help`)",
    )  # fmt: skip
    demo.add_argument("--no-tui", action="store_true", help="run the job in the foreground without the TUI")
    demo.add_argument("--job", default=None, help="job name (default: demo-<pid>)")
    add_view_options(demo, json_mode=False)
    demo.set_defaults(run=run_demo, takes_extra=True)


def _train_script() -> Path:
    spec = importlib.util.find_spec("ranktop.demo.train")
    if spec is None or spec.origin is None:
        raise RuntimeError("ranktop.demo is not installed")
    return Path(spec.origin)


def demo_command(nproc: int, extra: list[str]) -> list[str]:
    # A script path rather than `-m`: the job then never picks modules up from the cwd.
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
        str(_train_script()), *extra,
    ]  # fmt: skip


def start_process(command: list[str], job: str, directory: str | None, log_path: Path | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **{settings.JOB.name: job})
    if directory:
        env[settings.DIR.name] = directory
    env.setdefault("OMP_NUM_THREADS", "1")
    out = open(log_path, "wb") if log_path else None
    return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True)


def stop(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """Ask torchrun to stop (it forwards SIGTERM to its ranks), then force the whole group.

    Only torchrun gets the first SIGTERM: signalling the whole group would also
    kill the ranks' DataLoader workers under them, and the ranks would die of that.
    """
    if proc.poll() is not None:
        return
    try:
        proc.terminate()
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group: stuck ranks, workers
    except ProcessLookupError:
        pass
    proc.wait()


def _log_tail(path: Path, lines: int = 15) -> str:
    """What the user needs from a dead job's log: its error lines, else its last lines."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = list(dict.fromkeys(line.strip() for line in text if "error:" in line or "Error:" in line))
    return "\n".join(errors[:4] if errors else text[-lines:])


def run_demo(args: argparse.Namespace, extra: list[str]) -> int:
    if args.simulate is not None:
        # A simulated job of N ranks (ranktop.demo.simulate) instead of torchrun's, watched the same way;
        # in a process of its own, so that it and the viewer each have an interpreter (and a core).
        job = args.job or f"sim-{os.getpid()}"
        command = simulate_command(args.simulate, job, extra)
        return run_job(args, job, command, f"simulated: {args.simulate} ranks", what="the simulator")
    if importlib.util.find_spec("torch") is None:
        raise UserError("the demo needs PyTorch in this environment: pip install torch")
    job = args.job or f"demo-{os.getpid()}"
    return run_job(args, job, demo_command(args.nproc, extra), f"{args.nproc} ranks", what="the demo job")


def simulate_command(ranks: int, job: str, extra: list[str]) -> list[str]:
    """The simulator (ranktop.demo.simulate) as a process of its own, as the demo job is: it checks its own options."""
    return [sys.executable, "-m", "ranktop.demo.simulate", "--ranks", str(ranks), "--job", job, *extra]


def run_job(args: argparse.Namespace, job: str, command: list[str], size: str, *, what: str) -> int:
    """Start ``command`` as job ``job`` and watch it until the user quits (or, with --no-tui, until it ends)."""
    # A closed terminal (SIGHUP) or a kill (SIGTERM) must still stop the job, not orphan it:
    # the job runs in a session of its own, so nothing else would reach it.
    for sig in EXIT_SIGNALS:
        signal.signal(sig, _raise_interrupt)
    if args.no_tui:
        print(f"ranktop: demo job {job}; watch it from another terminal with: ranktop watch {job}", file=sys.stderr)
        proc = start_process(command, job, args.dir, None)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            stop(proc)
            return 130
    log_path = Path(tempfile.gettempdir()) / f"ranktop-{job}.log"
    proc = start_process(command, job, args.dir, log_path)
    try:
        session = WatchSession(
            resolve([job], args.dir, allow_pending=True),
            window=args.window,
            silent_after_s=args.silent_after,
            stall_factor=args.stall_factor,
            stall_floor_s=args.stall_floor,
        )
        terminal = _terminal()
        run_tui(session, args.refresh, title=f"ranktop demo ({size})", on_app=lambda app: _close_with(app, proc, terminal))
        ended_by_itself = proc.poll() is not None
    finally:
        stop(proc)
    if ended_by_itself and proc.returncode != 0:
        # It died on its own (a bad switch, a crash): the user needs its last words, not a blank screen.
        raise UserError(f"{what} exited with code {proc.returncode}; the end of its log ({log_path}):\n{_log_tail(log_path)}")
    print(f"ranktop: demo stopped; its log is {log_path}", file=sys.stderr)
    return 0


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


#: The signals that end the demo: a closed terminal and a kill.
EXIT_SIGNALS = (signal.SIGHUP, signal.SIGTERM)
#: After SIGHUP or SIGTERM, the job is stopped at once and the viewer given this long to close by itself.
EXIT_GRACE_S = 5.0
#: How often the stop thread looks whether the terminal hung up with no SIGHUP for the demo (seconds).
HANGUP_CHECK_S = 1.0


def _terminal() -> int | None:
    """The terminal the TUI draws on (None: not a terminal)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return None
    return fd if os.isatty(fd) else None


def _hung_up(fd: int) -> bool:
    """The terminal ``fd`` is gone (its window killed, its ssh connection dropped): after the kernel's hangup every
    call on it but close fails with EIO."""
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return bool(exc.args) and exc.args[0] == errno.EIO
    return False


def _close_with(app: Any, proc: subprocess.Popen[bytes], terminal: int | None = None) -> None:
    """Close the TUI when the job ends by itself, so its exit is reported; on SIGHUP/SIGTERM; and when
    ``terminal`` (a file descriptor) hangs up.

    A signal must end the app through ``app.exit()``: an exception out of the
    event loop would skip Textual's shutdown and leave its threads (and us) alive.
    Textual's shutdown can itself hang once the terminal is gone (its writer
    thread dies on the closed terminal and the last write waits for it forever),
    so the job is stopped first and the viewer ends there if it has not closed
    within :data:`EXIT_GRACE_S`.

    That stop is not left to the Python handler: Python runs handlers only in
    the main thread, between bytecodes, and once the terminal stops taking
    output the main thread blocks on Textual's full write queue. A signal the
    kernel hands to another thread (any may take a process's signal) would
    then never be handled, and the demo and its job would outlive the terminal.
    The C-level handler writes every signal to ``signal.set_wakeup_fd`` at
    once, on whichever thread it lands, so a thread of ours reads it there.

    A closed terminal need not send the demo a SIGHUP at all: the kernel sends
    it to the terminal's session leader, which passes it on to its jobs if it is
    a shell, but ``make demo`` in a tmux window killed is make's, and make waits
    for its children without passing SIGHUP on. So the same thread looks at the
    terminal every :data:`HANGUP_CHECK_S` and takes its hangup for a SIGHUP.
    """
    for sig in EXIT_SIGNALS:
        signal.signal(sig, lambda signum, frame: app.exit())  # the clean way out, when the main thread is free
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_stop_on_signal, args=(reader, writer, proc, terminal), name="ranktop-demo-stop", daemon=True).start()

    def wait() -> None:
        proc.wait()
        try:
            app.call_from_thread(app.exit)
        except RuntimeError:
            pass  # the app has already gone

    threading.Thread(target=wait, name="ranktop-demo-wait", daemon=True).start()


def _stop_on_signal(reader: socket.socket, writer: socket.socket, proc: subprocess.Popen[bytes], terminal: int | None = None) -> None:
    """Wait for SIGHUP or SIGTERM on the wake-up socket, or for ``terminal`` to hang up (as a SIGHUP), then stop the
    job and, ``EXIT_GRACE_S`` later, the viewer.

    ``writer`` is held here for as long as the wake-up fd is in use: closed, the signal would have nowhere to go."""
    reader.settimeout(HANGUP_CHECK_S if terminal is not None else None)
    signum: int
    while True:
        try:
            data = reader.recv(64)
        except socket.timeout:
            if terminal is not None and _hung_up(terminal):
                signum = signal.SIGHUP
                break
            continue
        except OSError:
            return
        if not data:
            return
        got = next((byte for byte in data if byte in EXIT_SIGNALS), None)  # other bytes: SIGWINCH (Textual's)
        if got is not None:
            signum = got
            break
    stop(proc)
    time.sleep(EXIT_GRACE_S)
    os._exit(128 + signum)  # still here: the viewer's shutdown hung on the closed terminal; the job is stopped


COMMAND = Command("demo", HELP, configure, DESCRIPTION)
