"""How ranktop's own threads and processes present themselves beside the job's: named for the OS.

A rank's probe threads (its sender, its GPU sampler, a capture's writer) and the node's relay run
beside the training threads. Each names itself for the OS (``/proc/<pid>/task/<tid>/comm``, what
``top -H``, ``ps -L`` and ``htop`` show), so a user who sees a rank use more CPU than expected can
tell ranktop's threads from the job's, and a benchmark can set them apart
(``benchmarks/probe_overhead.py --cores-apart`` runs them on cores of their own by these names).
Python before 3.14 leaves every thread named after the process. Threads a named thread starts
(ZeroMQ's, a relay's) inherit its name unless they name themselves.

Only a capture's writer, which may work for seconds at a time, also asks the kernel to let the
training threads go first (:func:`lower_priority`). The sender and the relay keep their priority:
they cost well under 1% of a core, and a monitor starved on a saturated node would report it late
or silent exactly when its ranks are slow (a nice-10 sender and relay were tried: the gain was
within the benchmark's noise).

Both are courtesies: where the platform has neither (not Linux, a locked-down /proc), nothing
happens and nothing is said.
"""

from __future__ import annotations

import os
import threading

#: How far behind the job a capture's writer asks to run.
NICE = 10


def name_thread(name: str) -> None:
    """Name the calling thread ``name`` for the OS (at most 15 characters are kept)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(name[:15])
    except OSError:
        pass


def lower_priority() -> None:
    """Let the training threads go first: on Linux a thread has a nice value of its own."""
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), NICE))
    except (AttributeError, OSError):
        pass
