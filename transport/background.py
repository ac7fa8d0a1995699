"""How ranktop's own threads and processes stand beside the job's: named for the OS, and behind it.

A rank's probe threads (its sender, its GPU sampler, a capture's writer) and the node's relay
share the machine with the training threads, and on a busy node they compete with them for a
core. They are never in a hurry (a message four times a second, a file written once), so each
asks the kernel to let the training threads go first: a nice value of :data:`NICE` for the
thread (on Linux a thread has a nice value of its own) or the relay's process. When cores are
short, a nice-10 thread gets about a tenth of a busy nice-0 thread's share, far more than the
probe needs, and none of a core the training needs.

Each also names itself for the OS (``/proc/<pid>/task/<tid>/comm``, what ``top -H``, ``ps -L``
and ``htop`` show), so a user who sees a rank use more CPU than expected can tell ranktop's
threads from the job's, and a benchmark can set them apart (``benchmarks/probe_overhead.py``
runs ranktop on cores of its own by these names). Python before 3.14 leaves every thread
named after the process.

Both are courtesies: where the platform has neither (not Linux, a locked-down /proc), nothing
happens and nothing is said.
"""

from __future__ import annotations

import os
import threading

#: How far behind the job ranktop's threads and relay ask to run.
NICE = 10

#: Every OS thread name of ranktop's starts with this, within the kernel's 15 characters.
PREFIX = "ranktop"


def stand_back(name: str) -> None:
    """Name the calling thread ``name`` for the OS and lower its priority to :data:`NICE`.

    Called first thing in each of ranktop's own threads, never on a training thread."""
    tid = threading.get_native_id()
    try:
        with open(f"/proc/self/task/{tid}/comm", "w") as comm:
            comm.write(name[:15])
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), NICE))
    except (AttributeError, OSError):
        pass
