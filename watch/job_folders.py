"""The folders of jobs that are over: counted for ``ranktop jobs``, pruned once they have been idle a while.

Every job leaves a folder in the rendezvous directory (``jobs/<job>/``): its
secret, and a node record per relay (removed by a relay that ends cleanly,
left behind by one that was killed). A cluster user running hundreds of jobs
piles up hundreds of folders, each with a live command key in it. A folder is
*ended* when no relay of its job runs (see ``session.live_jobs``) and it still
holds a secret or a record; it is pruned (secret and records; the folder too
when nothing else is left: a job's captures stay) once none of those files has
changed for :data:`ENDED_GRACE_S`, by the first ``ranktop jobs``. A job
requeued after that gets a new secret from its ranks, as any new job does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ranktop.transport import rendezvous

#: How long an ended job's folder is kept (a requeue within it finds its secret where it left it).
ENDED_GRACE_S = 24 * 3600.0
#: A folder younger than this is never called ended: its ranks may be writing their secret, their relay starting.
STARTING_GRACE_S = 60.0


@dataclass(frozen=True)
class EndedFolder:
    path: Path
    files: tuple[Path, ...]  # its secret and node records: what pruning removes
    idle_s: float  # since the newest of them last changed


def _job_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.is_file() and (p.name == "secret" or p.name.startswith(("node-", ".secret.")))]


def ended_folders(live_jobs: Iterable[str], directory: str | os.PathLike[str] | None = None, now: float | None = None) -> list[EndedFolder]:
    """The folders of jobs not in ``live_jobs`` (names) that still hold a secret or a node record, oldest first."""
    jobs_root = rendezvous.root(directory) / "jobs"
    if not jobs_root.is_dir():
        return []
    now = time.time() if now is None else now
    live = {rendezvous.job_dir(job, directory).name for job in live_jobs}
    found = []
    for folder in sorted(jobs_root.iterdir()):
        if not folder.is_dir() or folder.is_symlink() or folder.name in live:
            continue
        try:
            files = _job_files(folder)
            if not files:
                continue
            idle = now - max(p.stat().st_mtime for p in files)
        except OSError:
            continue
        if idle >= STARTING_GRACE_S:
            found.append(EndedFolder(folder, tuple(files), idle))
    return sorted(found, key=lambda f: -f.idle_s)


def prune(folders: list[EndedFolder], older_than_s: float = 0.0) -> list[Path]:
    """Remove the secret and records of each folder idle for over ``older_than_s``, and the folder once empty."""
    removed = []
    for folder in folders:
        if folder.idle_s < older_than_s:
            continue
        try:
            for path in folder.files:
                path.unlink(missing_ok=True)
            if not any(folder.path.iterdir()):
                folder.path.rmdir()
            removed.append(folder.path)
        except OSError:
            continue
    return removed
