"""Every collective the job issues, watched: :func:`install` puts the wrappers in place, :func:`uninstall` takes them
out, :func:`detach` stops feeding a tracker.

Two doors lead into communication, and both are watched:

- the Python functions of ``torch.distributed`` (all_reduce, all_gather, broadcast,
  barrier, send/recv, ...), wrapped once at install time (probe/dist_wrappers.py);
- DDP's bucketed gradient all-reduce, which bypasses those functions (its
  reducer is C++): its wait is timed at the reducer's finalize (probe/ddp_waits.py).

Each wait becomes a record of the tracker (probe/collective_tracker.py), keyed by its op and its group's role
(probe/process_groups.py, which also lists the groups a rank is in for its hello).
"""

from __future__ import annotations

import sys

from . import collective_tracker, ddp_waits, dist_wrappers, dynamo_guard, process_groups
from .collective_tracker import CollectiveTracker


def install(tracker: CollectiveTracker) -> bool:
    """Wrap torch.distributed's collectives and DDP's forward; False if torch.distributed is absent.

    Idempotent; a later call only swaps the tracker (a new probe after a shutdown).
    """
    dist_wrappers._tracker = tracker
    dist = sys.modules.get("torch.distributed")
    if dist is None and "torch" in sys.modules:  # torch is loaded: its distributed package costs little more
        try:
            import torch.distributed as dist
        except Exception:
            return False
    if dist is None or not getattr(dist, "is_available", lambda: False)():
        return False
    dynamo_guard.bind(sys.modules.get("torch"))
    if dist_wrappers._installed:
        return True
    c10d = getattr(dist, "distributed_c10d", None)
    for name, arg in dist_wrappers.OPS.items():
        original = getattr(dist, name, None)
        if original is not None and not getattr(original, "_ranktop", False):
            dist_wrappers._installed[name] = original
            wrapped = dist_wrappers._wrap(name, arg, original, dist)
            setattr(dist, name, wrapped)
            # Library code (FSDP among it) also calls through distributed_c10d.
            if c10d is not None and getattr(c10d, name, None) is original:
                setattr(c10d, name, wrapped)
    dist_wrappers._install_batch_p2p(dist, c10d)
    dist_wrappers._install_work_wait(c10d)
    dist_wrappers._install_functional()
    ddp_waits._install_ddp()
    ddp_waits._install_compiled_ddp(sys.modules.get("torch"))
    return True


def detach(tracker: CollectiveTracker) -> None:
    """Stop feeding ``tracker`` (its probe was switched off); the wrappers then pass straight through."""
    if dist_wrappers._tracker is tracker:
        dist_wrappers._tracker = None


def uninstall() -> None:
    dist = sys.modules.get("torch.distributed")
    c10d = getattr(dist, "distributed_c10d", None)
    for name, original in dist_wrappers._installed.items():
        if name.startswith(("ddp.", "work.", "funcol.")):
            continue
        if c10d is not None and getattr(c10d, name, None) is getattr(dist, name, None):
            setattr(c10d, name, original)
        setattr(dist, name, original)
    work = dist_wrappers._installed.get("work.class")
    if work is not None:
        work.wait = dist_wrappers._installed["work.wait"]
    funcol = dist_wrappers._installed.get("funcol.module")
    if funcol is not None:
        for name, original in dist_wrappers._installed.items():
            if name.startswith("funcol.") and name != "funcol.module":
                setattr(funcol, name[len("funcol.") :], original)
    ddp = dist_wrappers._installed.get("ddp.class")
    if ddp is not None:
        ddp.forward = dist_wrappers._installed["ddp.forward"]
    hooks = dist_wrappers._installed.get("ddp.comm_hook_class")
    if hooks is not None:
        hooks.register_comm_hook = dist_wrappers._installed["ddp.register_comm_hook"]
    torch = dist_wrappers._installed.get("ddp.torch")
    if torch is not None and getattr(torch.compile, "_ranktop_ddp", False):  # (not if another wrapper is on top)
        torch.compile = dist_wrappers._installed["ddp.compile"]
    compiled = dist_wrappers._installed.get("ddp.compiled_class")
    if compiled is not None:
        compiled.__call__ = dist_wrappers._installed["ddp.compiled_call"]
    dist_wrappers._installed.clear()
    dist_wrappers._pending.clear()


# Our own, all the way down: dynamo compiles none of their frames, nor any they start (see probe/dynamo_guard.py).
# The wrappers reach them from eager code that may run inside a compiled region's extent (after a graph break).
dynamo_guard.keep_out(
    ddp_waits.watch_ddp_backward, ddp_waits._watch_if_synchronised, ddp_waits._ddp_prehook, ddp_waits._ddp_wait_begins,
    ddp_waits._ddp_wait_ends, collective_tracker._nbytes, collective_tracker._dtype, collective_tracker.on_cuda,
    process_groups._group_info, process_groups._note_p2p, process_groups._key, process_groups._label,
    dist_wrappers._wait_later, dist_wrappers._storage, collective_tracker.rows, dist_wrappers._functional_group,
    CollectiveTracker.begin, CollectiveTracker.end, CollectiveTracker.complete, CollectiveTracker.at_wait,
    ddp_waits.HookCompletions.reset, ddp_waits.HookCompletions.launched, ddp_waits.HookCompletions._completed,
    ddp_waits.HookCompletions.take, recursive=True,
)  # fmt: skip
