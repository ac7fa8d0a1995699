"""The claim folder of one job on one node: who runs the node's relay, and which ranks it serves.

One folder per job and node, beside the node's IPC sockets (the per-user 0700
folder in the machine's temp directory, never the rendezvous folder, which may
be a home directory shared over NFS, where locks and process ids mean nothing)::

    <ipc folder>/<job-and-host digest>.relay/
        relay.lock        the relay process holds a POSIX lock on it while it runs
        spawn.lock        a rank holds it while it starts a relay, so ranks do not start one each
        relay.json        the running relay's pid and TCP endpoints (written once it is up)
        relay.log         the relay's stderr (a rank copies what it says at start-up to its own)
        rank-<pid>        one per rank of the job on this node: "pid start-time rank"

Why a lock and not a pid file: the kernel drops a process's locks when it
dies, however it dies (kill -9 included), so a dead relay never holds its
claim and a pid reused by another process never looks like the relay. POSIX
(``lockf``) locks, not ``flock``: a forked child (a DataLoader worker forked
while a rank tests the lock) does not inherit them.

Exactly one relay runs per job per node because the relay process takes
``relay.lock`` itself, first thing, and exits if it cannot; a rank that finds
the lock free starts one (under ``spawn.lock``, so normally only one rank of
the node does), and two relays started at once settle it between themselves.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ranktop.transport.ipc import ipc_endpoints, socket_file

RELAY_LOCK = "relay.lock"
SPAWN_LOCK = "spawn.lock"
RELAY_INFO = "relay.json"
RELAY_LOG = "relay.log"
RANK_PREFIX = "rank-"


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc), None if it is gone or a zombie.

    A pid and its start time name one process for good: a pid the kernel
    reuses for another process has another start time. Where /proc is missing
    (not Linux) the start time is "" and only the pid is checked.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return _alive_without_proc(pid)
    fields = stat.rsplit(")", 1)[-1].split()
    if not fields or fields[0] in ("Z", "X"):  # a zombie has exited: its parent has not reaped it yet
        return None
    return fields[19] if len(fields) > 19 else ""


def _alive_without_proc(pid: int) -> str | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return ""


def is_relay(pid: int) -> bool:
    """Whether process ``pid`` is a relay process (before a signal goes to a pid read from a file)."""
    try:
        return b"ranktop.relay.process" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    except OSError:
        return process_start(pid) is not None  # no /proc: the lock test before this call has to do


@dataclass(frozen=True)
class RelayInfo:
    """What the running relay wrote in ``relay.json``."""

    pid: int
    telemetry: str
    control: str


def _try_lock(fd: int) -> bool:
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise


class Claim:
    """The claim folder of ``job`` on the node named ``host`` (``RANKTOP_HOST`` or the host name)."""

    def __init__(self, job: str, host: str, directory: str | os.PathLike[str] | None = None):
        tele, _ = ipc_endpoints(job, host, directory)  # creates the per-user 0700 folder
        self.folder = socket_file(tele).with_suffix(".relay")
        self.folder.mkdir(mode=0o700, exist_ok=True)

    def _open(self, name: str) -> int:
        return os.open(self.folder / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def _hold(self, name: str) -> int | None:
        """The lock file ``name`` taken: its fd, held until closed; or None if another process holds it."""
        fd = self._open(name)
        if _try_lock(fd):
            return fd
        os.close(fd)
        return None

    # -- the relay's claim ----------------------------------------------------------------

    def hold_relay_lock(self) -> int | None:
        """In the relay process: take ``relay.lock`` for the life of the process; its fd, or None if another relay has it."""
        return self._hold(RELAY_LOCK)

    def relay_running(self) -> bool:
        """Whether a relay process holds the claim now (a test of the lock, released at once)."""
        fd = self._open(RELAY_LOCK)
        try:
            if not _try_lock(fd):
                return True
            fcntl.lockf(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def try_spawn_lock(self) -> int | None:
        """In a rank: the right to start the relay now (an fd to close when done), or None if another rank is at it."""
        return self._hold(SPAWN_LOCK)

    def write_info(self, info: RelayInfo) -> None:
        path = self.folder / RELAY_INFO
        tmp = path.with_name(f".{RELAY_INFO}.{os.getpid()}")
        tmp.write_text(json.dumps({"pid": info.pid, "telemetry": info.telemetry, "control": info.control}))
        os.replace(tmp, path)

    def read_info(self) -> RelayInfo | None:
        try:
            data = json.loads((self.folder / RELAY_INFO).read_text())
            return RelayInfo(int(data["pid"]), str(data["telemetry"]), str(data["control"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def remove_info(self, pid: int) -> None:
        """Remove ``relay.json`` if it is still the one relay ``pid`` wrote."""
        info = self.read_info()
        if info is not None and info.pid == pid:
            try:
                (self.folder / RELAY_INFO).unlink()
            except FileNotFoundError:
                pass

    @property
    def log_path(self) -> Path:
        return self.folder / RELAY_LOG

    # -- the ranks it serves ----------------------------------------------------------------

    def _rank_path(self, pid: int) -> Path:
        return self.folder / f"{RANK_PREFIX}{pid}"

    def register(self, pid: int, rank: int) -> None:
        """Say that rank ``rank`` (process ``pid``) of the job runs on this node, until :meth:`unregister`."""
        path = self._rank_path(pid)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(f"{pid} {process_start(pid) or ''} {rank}")
        os.replace(tmp, path)

    def registered(self, pid: int) -> bool:
        return self._rank_path(pid).exists()

    def unregister(self, pid: int) -> None:
        try:
            self._rank_path(pid).unlink()
        except FileNotFoundError:
            pass

    def live_ranks(self, prune: bool = False) -> dict[int, int]:
        """The registered ranks whose processes still run, as {pid: rank}; ``prune`` removes the others' files."""
        live = {}
        for path in self.folder.glob(f"{RANK_PREFIX}*"):
            try:
                pid_text, start, rank_text = (path.read_text().split(" ") + ["", ""])[:3]
                pid, rank = int(pid_text), int(rank_text or -1)
            except (OSError, ValueError):
                continue  # being written, or gone meanwhile
            now = process_start(pid)
            if now is not None and (not start or not now or now == start):
                live[pid] = rank
            elif prune:
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
        return live
