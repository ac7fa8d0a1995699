"""Where a job's relays publish their endpoints, and where a TUI finds them.

Layout, under the rendezvous directory (``$RANKTOP_DIR``, default ``~/.ranktop``)::

    jobs/<job>/secret          the job's command key, mode 0600
    jobs/<job>/node-<host>.json one per node: that node's relay endpoints

A file per node (written atomically: temporary name, then rename) means nodes
never contend for one file, and a home directory shared across a cluster gives
``ranktop watch JOB`` every node of the job with no other service.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ranktop.wire import settings
from ranktop.wire.auth import new_secret, read_secret_env

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def root(directory: str | os.PathLike[str] | None = None) -> Path:
    if directory is not None:
        return Path(directory).expanduser()
    return Path(settings.DIR.get() or Path.home() / ".ranktop").expanduser()


def safe_name(name: str) -> str:
    """A job or host name made safe to use as one path component."""
    cleaned = _SAFE.sub("_", name).strip(".") or "_"
    return cleaned[:120]


def job_dir(job: str, directory: str | os.PathLike[str] | None = None) -> Path:
    return root(directory) / "jobs" / safe_name(job)


def _ensure_private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)


def load_or_create_secret(job: str, directory: str | os.PathLike[str] | None = None) -> bytes:
    """The job's command key: from ``RANKTOP_SECRET``, else the job folder (created once, race-free)."""
    env = read_secret_env()
    if env:
        return env
    folder = job_dir(job, directory)
    _ensure_private_dir(folder)
    path = folder / "secret"
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    tmp = folder / f".secret.{os.getpid()}.{time.monotonic_ns()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(new_secret())
    try:
        os.link(tmp, path)  # fails if another rank won the race: then use theirs
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    data = path.read_bytes().strip()
    if not data:
        raise FileNotFoundError(path)
    return data


def read_secret(job: str, directory: str | os.PathLike[str] | None = None) -> bytes | None:
    """The job's key for a TUI that wants to send commands; None if it cannot be read."""
    env = read_secret_env()
    if env:
        return env
    try:
        return _read_secret(job_dir(job, directory) / "secret")
    except (FileNotFoundError, PermissionError):
        return None


@dataclass(frozen=True)
class NodeRecord:
    job: str
    host: str
    telemetry: str  # tcp://addr:port a TUI subscribes to
    control: str  # tcp://addr:port a TUI pushes signed commands to
    pid: int
    started: float
    path: Path | None = None
    # Optional (records of older relays lack them):
    machine: str = ""  # the real host name of the relay's process, when ``host`` is an advertised name
    slurm_job: str | None = None  # the SLURM job id the relay ran in: `ranktop attach --slurm` finds it by that
    encrypted: bool | None = None  # its TCP sockets speak CURVE (transport/curve.py); None: a relay too old to say
    links: str = ""  # tcp://addr:port where it answers the job's other relays' link probes (relay/links.py); "": none

    @property
    def on_this_machine(self) -> bool:
        return (self.machine or self.host) == socket.gethostname()

    def is_stale(self) -> bool:
        """A record of a relay on this machine whose process is gone is stale (the job died).

        Records of other machines cannot be judged from here: under SLURM the
        job's state tells (``ranktop.watch.slurm``); otherwise the TUI shows the
        node as waiting or lost.
        """
        if not self.on_this_machine:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def write_node(record: NodeRecord, directory: str | os.PathLike[str] | None = None) -> Path:
    folder = job_dir(record.job, directory)
    _ensure_private_dir(folder)
    path = folder / f"node-{safe_name(record.host)}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = {
        "job": record.job,
        "host": record.host,
        "telemetry": record.telemetry,
        "control": record.control,
        "pid": record.pid,
        "started": record.started,
    }
    if record.machine and record.machine != record.host:
        data["machine"] = record.machine
    if record.slurm_job:
        data["slurm_job"] = record.slurm_job
    if record.encrypted is not None:
        data["curve"] = record.encrypted
    if record.links:
        data["links"] = record.links
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)
    return path


def remove_node(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


#: A node record is a few hundred bytes; a bigger file in the folder is not one (read no further).
MAX_RECORD_BYTES = 64 << 10
#: The largest process id a record may name (Linux's limit is 2**22; a bigger one is not a process).
MAX_PID = 2**31 - 1


def parse_node(text: bytes | str, path: Path | None = None) -> NodeRecord:
    """A node record from a file's bytes; ValueError for anything else (the folder is shared: trust no file).

    Every field is checked for its type, so a record that parses is one a viewer can dial and judge:
    a pid of a real process's range, a finite start time, URLs and names as strings.
    """
    if len(text) > MAX_RECORD_BYTES:
        raise ValueError("node record too big")
    try:
        data = json.loads(text)
    except RecursionError:  # deep nesting: json raises this, not a ValueError
        raise ValueError("node record nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("node record is not an object")
    job, host, telemetry, control = (data.get(k) for k in ("job", "host", "telemetry", "control"))
    if not (isinstance(job, str) and isinstance(host, str) and isinstance(telemetry, str) and isinstance(control, str)):
        raise ValueError("node record lacks job, host or endpoints")
    if not (job and host and telemetry and control):
        raise ValueError("node record lacks job, host or endpoints")
    pid, started = data.get("pid"), data.get("started")
    if type(pid) is not int or not 0 < pid <= MAX_PID:
        raise ValueError("node record has a bad pid")
    if not isinstance(started, (int, float)) or isinstance(started, bool) or not math.isfinite(started):
        raise ValueError("node record has a bad start time")
    machine, slurm_job = data.get("machine") or "", data.get("slurm_job")
    if not isinstance(machine, str) or not (slurm_job is None or isinstance(slurm_job, (str, int)) and type(slurm_job) is not bool):
        raise ValueError("node record has a bad machine or SLURM job")
    encrypted = data.get("curve")
    if encrypted is not None and type(encrypted) is not bool:
        raise ValueError("node record has a bad curve flag")
    links = data.get("links") or ""
    if not isinstance(links, str):
        raise ValueError("node record has a bad links address")
    return NodeRecord(
        job=job,
        host=host,
        telemetry=telemetry,
        control=control,
        pid=pid,
        started=float(started),
        path=path,
        machine=machine,
        slurm_job=str(slurm_job) if slurm_job not in (None, "") else None,
        encrypted=encrypted,
        links=links,
    )


def read_nodes(job: str, directory: str | os.PathLike[str] | None = None) -> list[NodeRecord]:
    """Every node record of a job, stale ones included (callers decide); a file that is no record is skipped.

    A viewer reads this every second, and a job of 2,048 nodes has 2,048 records: a file whose inode, size and
    modification time are those of the last read is not read and parsed again (records are written whole,
    by a rename: a new record is a new inode); and while the folder itself is unchanged (its inode and
    modification time: a rename into it changes them) and was last changed :data:`SETTLED_S` ago or more, its
    files are not even looked at again (a stat per record per second, at 2,048 nodes a hundredth of a core).
    The margin covers a record renamed in within the tick of the folder's clock after the last read."""
    records: list[NodeRecord] = []
    folder = job_dir(job, directory)
    try:
        st = os.stat(folder)
    except OSError:
        return records
    listed = _listed.get(str(folder))
    stamp = (st.st_ino, st.st_mtime_ns)
    if listed is not None and listed[0] == stamp and time.time() - st.st_mtime >= SETTLED_S:
        return list(listed[1])
    try:
        entries = sorted((e for e in os.scandir(folder) if e.name.startswith("node-") and e.name.endswith(".json")),
                         key=lambda e: e.name)  # fmt: skip
    except OSError:
        return records
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            known = _read.get(entry.path)
            if known is not None and known[0] == key:
                records.append(known[1])
                continue
            path = Path(entry.path)
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO planted there must not block us
            try:
                text = os.read(fd, MAX_RECORD_BYTES + 1)
            finally:
                os.close(fd)
            record = parse_node(text, path)
        except (OSError, ValueError):
            continue  # half-written or foreign file: not a node we can reach
        if len(_read) >= _READ_KEPT:
            _read.clear()
        _read[entry.path] = (key, record)
        records.append(record)
    if len(_listed) >= _READ_KEPT:
        _listed.clear()
    _listed[str(folder)] = (stamp, list(records))
    return records


#: Node records parsed, by path: (inode, size, mtime) when read, the record. Cleared when it reaches _READ_KEPT.
_read: dict[str, tuple[tuple[int, int, int], NodeRecord]] = {}
_READ_KEPT = 65536
#: Job folders listed, by path: (the folder's inode and modification time when listed, its records then).
_listed: dict[str, tuple[tuple[int, int], list[NodeRecord]]] = {}
#: Seconds a folder must have been unchanged for its last listing to stand for it (read_nodes).
SETTLED_S = 2.0


def list_jobs(directory: str | os.PathLike[str] | None = None) -> dict[str, list[NodeRecord]]:
    """Jobs with at least one node record, live or stale, by job name."""
    jobs_root = root(directory) / "jobs"
    if not jobs_root.is_dir():
        return {}
    found = {}
    for folder in sorted(jobs_root.iterdir()):
        if folder.is_dir():
            nodes = read_nodes(folder.name, directory)
            if nodes:
                found[nodes[0].job] = nodes
    return found


#: A job folder with a secret but no node record is left alone this long (its relay may be starting).
EMPTY_FOLDER_GRACE_S = 60.0


def prune(directory: str | os.PathLike[str] | None = None, is_dead: Callable[[NodeRecord], bool] | None = None) -> list[Path]:
    """Remove the records of dead relays, and job folders left with nothing but a secret.

    A record is dead when :meth:`NodeRecord.is_stale` says so, or ``is_dead(record)``
    (the TUI passes SLURM's word for records of other machines). Returns what was removed.
    """
    removed: list[Path] = []
    jobs_root = root(directory) / "jobs"
    if not jobs_root.is_dir():
        return removed
    for folder in sorted(jobs_root.iterdir()):
        if not folder.is_dir():
            continue
        for record in read_nodes(folder.name, directory):
            if record.path is None:  # never: read_nodes gives each record the file it came from
                continue
            if record.is_stale() or (is_dead is not None and is_dead(record)):
                remove_node(record.path)
                removed.append(record.path)
        try:
            left = [p for p in folder.iterdir()]
            if all(p.name == "secret" for p in left) and all(time.time() - p.stat().st_mtime > EMPTY_FOLDER_GRACE_S for p in left):
                for p in left:
                    p.unlink()
                folder.rmdir()
                removed.append(folder)
        except OSError:
            continue
    return removed
