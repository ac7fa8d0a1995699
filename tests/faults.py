"""Faults to inject into a live job, and a witness that says what they cost it.

Shared by tests/test_faults_live.py (short faults, loose bounds) and
benchmarks/faults.py (long faults, figures). Every fault is done to real
processes the way an operator or an attacker could: signals to a pid, a
kill, frames sent to the relay's control port, a limit on the size of the
files a rank may write.

The witness (:class:`StepLog`) is a viewer that is never faulted: it hears
every step record the ranks send and keeps their numbers and times, so a
scenario can say which steps the job ran while the fault lasted, whether a
record of each reached a viewer (no step lost) and the job's own step rate
before and during the fault, measured from the ranks' clocks.
"""

from __future__ import annotations

import bisect
import contextlib
import importlib.util
import os
import resource
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from support import start_job  # tests/support.py: the same start every live test uses
import messages  # tests/messages.py: raw bodies

from ranktop.watch.engine import keys
from ranktop.watch.session import WatchSession, resolve
from ranktop.wire import auth, schema
from ranktop.wire.names import COMMAND
from ranktop.wire.messages import Steps
from ranktop.transport import rendezvous

# -- processes ------------------------------------------------------------------


def freeze(pid: int) -> None:
    """SIGSTOP: the whole process stops, every thread, its sockets' I/O threads included."""
    os.kill(pid, signal.SIGSTOP)


def thaw(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def frozen(pid: int):
    freeze(pid)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            thaw(pid)


class Throttle(threading.Thread):
    """Let a process run only ``share`` of the time (stopped and continued every ``period_s``):
    a viewer far too slow for its job, without changing a line of it."""

    def __init__(self, pid: int, share: float = 0.1, period_s: float = 0.1):
        super().__init__(name=f"throttle-{pid}", daemon=True)
        self.pid, self.share, self.period_s = pid, share, period_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                freeze(self.pid)
                self._stop_event.wait(self.period_s * (1 - self.share))
                thaw(self.pid)
                self._stop_event.wait(self.period_s * self.share)
        except ProcessLookupError:
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                thaw(self.pid)

    def __enter__(self) -> "Throttle":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop_event.set()
        self.join()


def relay_pid(job: str) -> int:
    """The pid of the process that hosts the job's relay on this node, from its node record."""
    nodes = rendezvous.read_nodes(job)
    if not nodes:
        raise LookupError(f"job {job} has no relay")
    return nodes[0].pid


def connected_to(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP connection to ``port`` that is established (Linux's /proc): a viewer
    that has dialled the relay, however long a loaded machine took to start it."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            inodes.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue  # closed meanwhile
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port and f"socket:[{inode}]" in inodes:
                return True
    return False


def kill_relay(job: str) -> int:
    """SIGKILL the job's relay (no clean-up: its node record stays behind); returns its pid."""
    pid = relay_pid(job)
    os.kill(pid, signal.SIGKILL)
    return pid


# -- commands an attacker can send ------------------------------------------------


def forged_commands(job: str, count: int) -> list[list[bytes]]:
    """Well-formed commands of this job, signed with a key that is not the job's."""
    wrong = auth.new_secret()
    return [auth.sign_command(wrong, job, "ping")[1] for _ in range(count)]


def expired_commands(secret: bytes, job: str, count: int) -> list[list[bytes]]:
    """Commands signed with the job's own key two minutes ago: captured then, replayed now."""
    then = time.time() - 2 * auth.MAX_SKEW_S
    return [auth.sign_command(secret, job, "ping", now=then)[1] for _ in range(count)]


def malformed_commands() -> list[list[bytes]]:
    """Frames on the command topic that are no signed command: unsigned, garbage, a frame too many,
    a signature cut short. A rank cannot tell them from forgeries before checking the MAC, and
    counts them as ``forged``."""
    body = messages.raw(COMMAND, {"job": "x", "id": "y", "cmd": "ping", "args": {}, "ranks": None, "ts": time.time()})[1]
    return [
        [COMMAND.encode(), body],
        [COMMAND.encode(), secrets.token_bytes(64), secrets.token_bytes(32)],
        [COMMAND.encode(), body, secrets.token_bytes(32), b"extra"],
        [COMMAND.encode(), b"\xc1\xc1\xc1", b"short"],
        [COMMAND.encode(), b"", b""],
    ]


def valid_command(secret: bytes, job: str) -> tuple[str, list[bytes]]:
    """One genuine ping, as the job's own viewer would send it (its id, its frames): what a replay copies."""
    return auth.sign_command(secret, job, "ping")


@dataclass
class FloodResult:
    sent: dict[str, int] = field(default_factory=dict)  # by kind
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    @property
    def rate(self) -> float:
        return self.total / self.seconds if self.seconds else 0.0


def flood(control_url: str, kinds: dict[str, list[list[bytes]]], rate: float, seconds: float, secret: bytes | None = None) -> FloodResult:
    """Send the frames of ``kinds`` in turn to a relay's control port, ``rate`` a second for ``seconds``.

    ``secret``: the job's, to pass the relay's encryption (CURVE) as a viewer holding the key does; the
    flood then tests what the ranks do with what gets through. Without it a stranger's connection never
    completes its handshake and nothing reaches the ranks. Paced in 10 ms slices; a send the relay's
    queue refuses waits (the relay pushes back on TCP), at most a second, so the rate reached is what
    the relay took, reported in the result."""
    ctx = zmq.Context.instance()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 2000)
    push.setsockopt(zmq.SNDHWM, 10_000)
    push.setsockopt(zmq.SNDTIMEO, 1000)  # a relay that never takes them must not hang the flood
    if secret is not None:
        keys.secure(push, secret)
    push.connect(control_url)
    result = FloodResult(sent={name: 0 for name in kinds})
    # round robin over the kinds, so that each is spread over the whole flood
    longest = max(len(pool) for pool in kinds.values())
    cycle = [(name, pool[i % len(pool)]) for i in range(longest) for name, pool in kinds.items()]
    try:
        began = time.monotonic()
        i = 0
        while (now := time.monotonic()) - began < seconds:
            due = int((now - began + 0.01) * rate)
            while i < due:
                name, frames = cycle[i % len(cycle)]
                try:
                    push.send_multipart(frames)
                except zmq.Again:  # not taken within a second: the relay took none (a refused handshake)
                    result.seconds = time.monotonic() - began
                    return result
                result.sent[name] += 1
                i += 1
            time.sleep(max(0.0, began + (i / rate) - time.monotonic()))
        result.seconds = time.monotonic() - began
    finally:
        push.close()
    return result


# -- the disk ---------------------------------------------------------------------


@contextlib.contextmanager
def file_size_limit(pids: list[int], nbytes: int):
    """Make every write past ``nbytes`` of a file fail in these processes (EFBIG), as a full disk
    fails them (ENOSPC), until the block ends.

    Only the soft limit is lowered (raising it again needs no privilege), so it works for any
    user on their own job, root without CAP_SYS_RESOURCE included. Python ignores SIGXFSZ, so
    the write fails rather than killing the rank."""
    before = {pid: resource.prlimit(pid, resource.RLIMIT_FSIZE) for pid in pids}
    for pid, (_, hard) in before.items():
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        for pid, limits in before.items():
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(pid, resource.RLIMIT_FSIZE, limits)


# -- the witness --------------------------------------------------------------------


@dataclass
class _Stats:
    error: str | None = None


class StepLog:
    """Every step record the ranks send, by rank: ``{step: (start, wall)}``, the ranks' clocks.

    Plugged into a :class:`WatchSession` where its flight recorder goes (it hears every frame
    the receiver gets, before decoding); never faulted itself."""

    def __init__(self):
        self.stats = _Stats()
        self._lock = threading.Lock()
        self._steps: dict[int, dict[int, tuple[float, float]]] = {}

    # the recorder's interface (watch/engine/receiver.py Tap, and what WatchSession calls)
    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def endpoint(self, url: str, host: str | None = None) -> None:
        pass

    def tap(self, frames: list[bytes], endpoint: str | None) -> None:
        try:
            msg = schema.decode(frames)
        except schema.WireError:
            return
        if not isinstance(msg, Steps):
            return
        with self._lock:
            mine = self._steps.setdefault(msg.rank, {})
            for rec in msg.steps:
                mine[rec.n] = (rec.t, rec.w)

    # what a scenario asks
    def ranks(self) -> list[int]:
        with self._lock:
            return sorted(self._steps)

    def numbers(self, rank: int, t0: float = 0.0, t1: float = float("inf")) -> list[int]:
        """The steps of ``rank`` that began in [t0, t1), by the rank's clock."""
        with self._lock:
            return sorted(n for n, (t, _) in self._steps.get(rank, {}).items() if t0 <= t < t1)

    def last(self, rank: int) -> int:
        with self._lock:
            return max(self._steps.get(rank, {-1: None}))

    def missing(self, rank: int, t0: float, t1: float) -> list[int]:
        """Step numbers between the first and the last step that began in [t0, t1) with no record."""
        got = self.numbers(rank, t0, t1)
        if not got:
            return []
        have = set(got)
        return [n for n in range(got[0], got[-1] + 1) if n not in have]

    def rate(self, t0: float, t1: float, rank: int | None = None) -> float | None:
        """The job's steps per second over [t0, t1): steps begun there over the time they took.

        From step numbers, so records lost on the way do not lower it; by default the median
        over ranks (in a DDP job they move in lockstep)."""
        rates = []
        for r in [rank] if rank is not None else self.ranks():
            with self._lock:
                steps = sorted((n, t) for n, (t, _) in self._steps.get(r, {}).items() if t0 <= t < t1)
            if len(steps) >= 2 and steps[-1][1] > steps[0][1]:
                rates.append((steps[-1][0] - steps[0][0]) / (steps[-1][1] - steps[0][1]))
        if not rates:
            return None
        rates.sort()
        return rates[len(rates) // 2]

    def step_at(self, rank: int, when: float) -> int | None:
        """The last step of ``rank`` that began by ``when``."""
        with self._lock:
            steps = sorted((t, n) for n, (t, _) in self._steps.get(rank, {}).items())
        i = bisect.bisect_right(steps, (when, float("inf")))
        return steps[i - 1][1] if i else None


# -- the demo job ---------------------------------------------------------------------


class DemoJob:
    """The demo (demo/train.py) under torchrun, DDP over gloo, with a witness watching from before
    its first step. ``start`` returns once every rank trains; ``stop`` ends it (SIGTERM, then KILL)."""

    def __init__(self, job: str, nproc: int, cwd: Path, *demo_args: str):
        self.job, self.nproc, self.cwd, self.demo_args = job, nproc, Path(cwd), list(demo_args)
        self.log = StepLog()
        self.witness = WatchSession(resolve([job], allow_pending=True), recorder=self.log)  # before its relay is up
        self.proc: subprocess.Popen | None = None

    def start(self) -> "DemoJob":
        train = importlib.util.find_spec("ranktop.demo.train").origin
        env = dict(os.environ, RANKTOP_JOB=self.job, OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={self.nproc}", train, *self.demo_args]
        self.witness.start()
        try:
            self.proc = start_job(cmd, self.job, self.nproc, self.cwd, env)
        except BaseException:
            self.witness.close()
            raise
        return self

    def snapshot(self):
        return self.witness.snapshot()

    def pids(self) -> dict[int, int]:
        """rank -> pid, as the ranks' hellos say."""
        return {r.rank: r.pid for r in self.snapshot().ranks if r.pid > 0}

    def wait_steps(self, count: int, timeout: float = 60) -> None:
        """Until every rank has sent ``count`` more steps than now."""
        target = {r: self.log.last(r) + count for r in range(self.nproc)}
        deadline = time.monotonic() + timeout
        while any(self.log.last(r) < n for r, n in target.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"the job made no progress: {[(r, self.log.last(r)) for r in target]}")
            time.sleep(0.05)

    def stop(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
        finally:
            self.witness.close()


@dataclass
class Window:
    """A fault's span, by the wall clock the ranks stamp their steps with."""

    before: float  # a quiet stretch before it starts
    start: float
    end: float
    after: float  # once the job had time to show its recovery

    def steps_lost(self, log: StepLog, ranks: list[int]) -> dict[int, list[int]]:
        """Per rank, the step numbers from the quiet stretch to the end with no record: training that
        never happened, or a record the probe lost (the witness itself is never faulted)."""
        return {r: lost for r in ranks if (lost := log.missing(r, self.before, self.after))}

    def rates(self, log: StepLog) -> tuple[float | None, float | None]:
        """The job's steps/s before the fault and while it lasted."""
        return log.rate(self.before, self.start), log.rate(self.start, self.end)
