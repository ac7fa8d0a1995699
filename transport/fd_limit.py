"""How many files a process may hold open, raised toward what it needs: every ZeroMQ socket is one.

Each ZeroMQ socket takes a file descriptor for its mailbox, and each listener or
connection one more: a viewer of 2,048 relays holds some 12,000 of them, a
process hosting a thousand simulated relays 16,000, where a login shell's
soft limit is often 1,024. Any process may raise its soft limit up to the hard
one; only root raises the hard limit, so past it a process can only say so
(``ulimit -Hn``) and do what fits. Running out is worse than knowing: libzmq
fails the socket that would cross the limit, wherever that happens.
"""

from __future__ import annotations

import resource


def room_for(wanted: int) -> int:
    """Raise this process's soft limit on open files to ``wanted`` if it is lower, never above the hard
    limit; the soft limit now (less than ``wanted`` when the hard limit is)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return wanted if soft == resource.RLIM_INFINITY else soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # above the kernel's own ceiling (fs.nr_open): keep what there is
        return soft
    return target


def hard_limit() -> int | None:
    """The most files this process could hold open (None: no limit), as ``ulimit -Hn`` says it."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return None if hard == resource.RLIM_INFINITY else hard
