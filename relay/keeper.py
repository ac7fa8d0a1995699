"""A rank's side of its node's relay process: register, start the relay if none runs, keep it alive, let it go.

Runs on the probe's thread (the :class:`~ranktop.probe.sender.Sender`), never
the training thread: at start the rank registers its pid in the node's claim
folder (:mod:`.relay_claim`) and, if no relay holds the claim, starts one
(``python -m ranktop.relay.process``); every :data:`CHECK_EVERY_S` it
looks again and starts another if the relay died. The ranks' PUB and SUB
sockets are connected to the node's IPC paths, which a new relay binds again,
so ZeroMQ reconnects them by itself. At the end the rank unregisters; the
relay ends once no registered rank runs (the last rank to leave tells it to
look at once, and waits a moment for it, so the node record is gone when the
job is).

The relay is started in a session of its own (a Ctrl-C to the job's process
group reaches the ranks, not the relay) with none of the rank's file
descriptors: a launcher or test that waits for the end of the job's
stdout/stderr is not kept waiting by it. Its stderr goes to ``relay.log`` in
the claim folder; what it says while starting (a port that was not free) is
copied to the starting rank's stderr, once it is up (on a loaded machine a
relay may take longer than :data:`READY_TIMEOUT_S` to start: what it said is
then passed on at the check that finds it running, looked for every
:data:`UNSAID_EVERY_S` until then).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ranktop.wire import settings
from ranktop.transport import rendezvous

from ranktop.transport.identity import Identity
from .claim import Claim, RelayInfo, is_relay

#: How often a rank checks that its node's relay runs.
CHECK_EVERY_S = 2.0
#: How often it looks while what the relay it started said is not passed on yet (the relay was slower to come up
#: than the rank waits): at the sender's own pace, so that a rank ended by SIGTERM soon after (torchrun ends the
#: ranks so when one fails; SIGTERM skips atexit, where stop() would pass it on) has said it. The probe installs
#: no signal handler for that: a Python handler runs only between bytecodes of the main thread, so a rank blocked
#: in a collective, the usual reason it is sent SIGTERM, would no longer die of it.
UNSAID_EVERY_S = 0.25
#: How long the rank that started a relay waits for it to be up (a Python start-up, zmq imported, sockets bound).
READY_TIMEOUT_S = 5.0
#: How long a relay this rank started may take to come up before another is started beside it.
STARTING_AT_MOST_S = 30.0
#: How long the last rank to leave waits for the relay to end.
LEAVE_WAIT_S = 1.0
#: Failed starts back off up to this long between tries.
MAX_BACKOFF_S = 60.0
#: A relay.log bigger than this is emptied before a new relay writes to it.
MAX_LOG_BYTES = 1 << 20


def _package_root() -> str:
    """The folder the ``ranktop`` package is imported from here, so the relay process finds the same one."""
    return str(Path(__file__).resolve().parents[2])


class RelayKeeper:
    def __init__(self, identity: Identity, directory: str | None):
        self.identity = identity
        self._directory = directory
        self._claim: Claim | None = None
        self._child: subprocess.Popen[bytes] | None = None  # the relay this rank started (reaped as it ends)
        self._failures = 0
        self._next_check = 0.0
        self._started_at = 0.0  # when this rank started its relay (time.monotonic)
        self._unsaid: int | None = None  # where in relay.log a relay started too slowly to be waited for began to write
        self.info: RelayInfo | None = None  # the running relay, as its relay.json says

    # -- what the sender calls ------------------------------------------------------------

    def start(self) -> None:
        """Register this rank and make sure the node has a relay."""
        self._claim = Claim(self.identity.job, self.identity.host, self._directory)
        self._claim.register(self.identity.pid, self.identity.rank)
        self.check()

    def due(self, now: float) -> bool:
        return now >= self._next_check

    def check(self) -> None:
        """Start a relay if none runs (backing off after failed starts), and learn where it listens."""
        claim = self._claim
        if claim is None:
            return
        self._reap()
        if not claim.registered(self.identity.pid):  # a relay that thought us gone, or a cleaned temp folder
            claim.register(self.identity.pid, self.identity.rank)
        delay = CHECK_EVERY_S
        if not claim.relay_running():
            if self._starting():
                pass  # the relay this rank started is still starting: never a second one beside it
            elif self._spawn():
                self._failures = 0
            else:
                self._failures += 1
                delay = min(CHECK_EVERY_S * 2**self._failures, MAX_BACKOFF_S)
        self.info = claim.read_info()
        child = self._child
        if child is None or (self.info is not None and self.info.pid == child.pid):
            self._pass_on_unsaid()  # (a relay this rank started may be up only now: it wrote relay.json once bound)
        if self._unsaid is not None:
            delay = min(delay, UNSAID_EVERY_S)
        self._next_check = time.monotonic() + delay

    def endpoints(self) -> dict[str, Any] | None:
        """The relay's TCP endpoints for the hello (a viewer given only a telemetry URL learns the control one)."""
        info = self.info
        return {"telemetry": info.telemetry, "control": info.control} if info is not None else None

    def stop(self) -> None:
        """Unregister; if no other rank of the job runs on this node, have the relay end now."""
        claim, self._claim = self._claim, None
        if claim is None:
            return
        self._pass_on_unsaid()  # (leaving before the relay it started was up: what it said so far)
        claim.unregister(self.identity.pid)
        if not claim.live_ranks():
            info = claim.read_info()
            if info is not None and claim.relay_running() and is_relay(info.pid):  # never a signal to a reused pid
                try:
                    os.kill(info.pid, signal.SIGUSR1)
                except OSError:
                    pass
                deadline = time.monotonic() + LEAVE_WAIT_S
                while claim.relay_running() and time.monotonic() < deadline:
                    self._reap()
                    time.sleep(0.02)
        self._reap()

    # -- starting the relay -----------------------------------------------------------------

    def _starting(self) -> bool:
        """Whether the relay this rank started runs but has not taken the claim yet (a slow start on a loaded
        machine), for at most :data:`STARTING_AT_MOST_S` since it was started."""
        child = self._child
        return child is not None and child.poll() is None and time.monotonic() - self._started_at < STARTING_AT_MOST_S

    def _reap(self) -> None:
        if self._child is not None and self._child.poll() is not None:
            self._child = None

    def _command(self) -> list[str]:
        ident = self.identity
        cmd = [sys.executable, "-m", "ranktop.relay.process", "--job", ident.job, "--host", ident.host]
        if ident.slurm_job:
            cmd += ["--slurm-job", ident.slurm_job]
        # Spelt out, and absolute: the relay runs in "/" (it must not keep the job's folder busy).
        cmd += ["--dir", str(rendezvous.root(self._directory).absolute())]
        return cmd

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop(settings.AUTO.name, None)  # the relay is no rank: ranktop launch's start-up hook stays out of it
        root = _package_root()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
        return env

    def _spawn(self) -> bool:
        """Start the node's relay unless another rank is starting one; False if it could not be started."""
        claim = self._claim
        if claim is None:  # stopped meanwhile
            return False
        lock = claim.try_spawn_lock()
        if lock is None:
            return True  # another rank of the node is starting it
        try:
            if claim.relay_running():
                return True
            log = claim.log_path
            try:
                if log.stat().st_size > MAX_LOG_BYTES:
                    log.unlink()
            except FileNotFoundError:
                pass
            with open(log, "ab") as err:
                offset = err.tell()
                try:
                    child = subprocess.Popen(
                        self._command(),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        env=self._environment(),
                        cwd="/",
                        start_new_session=True,
                        close_fds=True,
                    )
                except OSError as exc:
                    if self._failures == 0:
                        print(f"ranktop: cannot start the node's relay: {exc}", file=sys.stderr)
                    return False
            self._child = child
            self._started_at = time.monotonic()
            up = self._wait_until_up(child)
            if not up and child.poll() is None:  # still starting: said at the check that finds it up
                self._unsaid = offset if self._failures == 0 else None
                return False
            self._unsaid = None
            if self._failures == 0:  # once: a relay that keeps failing says the same each time
                sys.stderr.write(self._relay_said(offset))
            return up
        finally:
            os.close(lock)

    def _wait_until_up(self, child: subprocess.Popen[bytes]) -> bool:
        claim = self._claim
        if claim is None:
            return False
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            info = claim.read_info()
            if info is not None and info.pid == child.pid:
                return True
            if child.poll() is not None:  # lost a race to another relay (exit 0), or failed (said in the log)
                return child.returncode == 0 and claim.relay_running()
            time.sleep(0.01)
        return claim.relay_running()

    def _pass_on_unsaid(self) -> None:
        """What a relay this rank started too slowly to wait for said, copied to this rank's stderr, once."""
        if self._unsaid is not None:
            sys.stderr.write(self._relay_said(self._unsaid))
            self._unsaid = None

    def _relay_said(self, offset: int) -> str:
        claim = self._claim
        if claim is None:
            return ""
        try:
            with open(claim.log_path, "rb") as f:
                f.seek(offset)
                return f.read(8192).decode(errors="replace")
        except OSError:
            return ""
