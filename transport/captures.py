"""Where a job's captures are written: one folder per capture, one file per rank inside."""

from __future__ import annotations

import os
from pathlib import Path

from ranktop.wire import settings

from . import rendezvous

#: The job side may send its captures elsewhere than the rendezvous folder (a scratch file system).
CAPTURE_DIR_ENV = settings.CAPTURE_DIR.name


def capture_root(job: str, directory: str | os.PathLike[str] | None = None) -> Path:
    """Where a job's captures go: ``$RANKTOP_CAPTURE_DIR``, else ``<rendezvous>/jobs/<job>/captures``."""
    configured = os.environ.get(CAPTURE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return rendezvous.job_dir(job, directory) / "captures"


def capture_folder(job: str, capture_id: str, directory: str | os.PathLike[str] | None = None) -> Path:
    """The one folder of a capture, shared by every rank of the job (one file per rank inside)."""
    return capture_root(job, directory) / rendezvous.safe_name(capture_id)
