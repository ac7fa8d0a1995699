"""Helpers the tests share: paths, waiting, and running the installed `ranktop` command."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

JOBS = Path(__file__).parent / "jobs"
#: The installed console script, next to this interpreter (tests run against the installed package).
RANKTOP = shutil.which("ranktop", path=str(Path(sys.executable).parent)) or "ranktop"


def wait_for(predicate, timeout: float, message: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(message)


def run_cli(*args: str, timeout: float = 60, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([RANKTOP, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)
