"""Where a node's ranks and its relay meet: the node-local IPC socket addresses of a job.

Every local rank and the relay derive the same two addresses from the job, the node's
name and the rendezvous folder; the sockets live in a per-user folder of mode 0700, so
other users of the node cannot connect to them.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from . import rendezvous


def ipc_folder() -> Path:
    folder = Path(tempfile.gettempdir()) / f"ranktop-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def socket_file(url: str) -> Path:
    """The file behind one of :func:`ipc_endpoints`' addresses (``ipc://<path>``)."""
    return Path(url[len("ipc://") :])


def ipc_endpoints(job: str, host: str = "", directory: str | os.PathLike[str] | None = None) -> tuple[str, str]:
    """The node-local (telemetry, control) IPC addresses of a job on one node; every local rank derives the same.

    The node's name is part of it, so "nodes" with distinct ``RANKTOP_HOST`` on one machine stay apart; so is
    the rendezvous folder, so two jobs of one name with folders of their own never share a relay.
    """
    folder = rendezvous.root(directory).resolve()
    digest = hashlib.sha1(f"{job}\0{host}\0{folder}".encode()).hexdigest()[:16]  # keeps the path under the 107-byte limit
    base = ipc_folder() / digest
    return f"ipc://{base}.tele", f"ipc://{base}.ctl"
