"""The wrappers of torch.distributed: its collective and point-to-point functions, ``Work.wait``, its functional
collectives, each timing where the training thread waits and handing the record to the tracker.

A blocking call is timed around the call; an ``async_op`` call from launch to
the completion callback of its future (on gloo, the work's completion; nothing
here ever synchronizes a device), or, on the device, where its ``wait()`` makes
the stream wait.

Point-to-point ops and functional collectives are timed where the training
thread *blocks*: a blocking ``send``/``recv`` around the call; ``isend``/
``irecv`` (and ``batch_isend_irecv``) in their ``Work.wait()``; a functional
collective (``torch.distributed._functional_collectives``, what DTensor and
async TP use) in its ``wait_tensor``. Their launch returns at once, and a
send's completion lands whenever the peer receives it, which is not this
rank's wait.

The state every wrapper reads (the tracker fed, what was replaced, whether a counted call is under way on this
thread) lives here; probe/collectives.py installs and removes the wrappers, probe/ddp_waits.py reads it too.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable

from ranktop.wire import parallel_groups

from . import dynamo_guard
from .collective_tracker import COLLECTIVE, FUNCTIONAL, P2P, CollectiveTracker, _dtype, _nbytes, on_cuda, rows
from .process_groups import (
    PIPELINE,
    GroupInfo,
    _group_info,
    _groups,
    _groups_by_mesh,
    _groups_by_name,
    _group_refs,
    _key,
    _label,
    _note_p2p,
)

#: Functions of torch.distributed that move data, and which argument holds the tensor(s) whose
#: size counts. As in nccl-tests, gathers and scatters count the whole (gathered) buffer.
OPS: dict[str, str] = {
    "all_reduce": "tensor",
    "reduce": "tensor",
    "broadcast": "tensor",
    "all_gather": "tensor_list",
    "all_gather_into_tensor": "output_tensor",
    "all_gather_object": "",
    "gather": "tensor",
    "scatter": "tensor",
    "reduce_scatter": "input_list",
    "reduce_scatter_tensor": "input",
    "all_gather_single": "output_tensor",  # newer names, used by FSDP2 (fully_shard)
    "reduce_scatter_single": "input",
    "all_to_all": "input_tensor_list",
    "all_to_all_single": "input",
    "barrier": "",
    "send": "tensor",
    "recv": "tensor",
    "isend": "tensor",
    "irecv": "tensor",
    "broadcast_object_list": "",
}
#: All-to-alls, and the argument that holds what this rank receives: its rows are counted (an expert's load).
RECEIVES: dict[str, str] = {"all_to_all": "output_tensor_list", "all_to_all_single": "output"}
#: Point-to-point ops: timed in their wait, and what marks a group as a pipeline group.
P2P_OPS = frozenset(("send", "recv", "isend", "irecv", "batch_isend_irecv"))
#: Functional collectives (torch.distributed._functional_collectives): the tensor argument, and the group's position.
FUNCTIONAL_OPS: dict[str, int] = {
    "all_reduce": 2, "all_gather_tensor": 2, "all_gather_single": 1, "reduce_scatter_tensor": 3,
    "reduce_scatter_single": 3, "all_to_all_single": 3, "broadcast": 2,
    "all_reduce_autograd": 2, "all_gather_tensor_autograd": 2, "all_gather_single_autograd": 1,
    "reduce_scatter_tensor_autograd": 3, "reduce_scatter_single_autograd": 3, "all_to_all_single_autograd": 3,
}  # fmt: skip
#: Launched waits not yet waited on, at most (an ``isend`` nobody waits on leaks no memory).
MAX_PENDING = 4096


_installed: dict[str, Any] = {}  # name -> original function, for uninstall
_inside_hook = threading.local()  # set while a counted call runs on this thread (one torch function may call another)
_tracker: CollectiveTracker | None = None


def _wrap(name: str, arg: str, original: Callable[..., Any], dist: Any) -> Callable[..., Any]:
    import inspect

    try:
        params = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        params = []
    position = params.index(arg) if arg in params else None
    group_position = params.index("group") if "group" in params else None
    async_position = params.index("async_op") if "async_op" in params else None
    received = RECEIVES.get(name) if RECEIVES.get(name) in params else None  # an all-to-all: where its output is
    received_position = params.index(received) if received is not None else 0
    always_async = name in ("isend", "irecv")
    p2p = name in P2P_OPS
    kind = P2P if p2p else COLLECTIVE

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tracker = _tracker
        if tracker is None or dynamo_guard.is_compiling() or getattr(_inside_hook, "active", False):
            return original(*args, **kwargs)
        try:
            payload = kwargs.get(arg) if arg in kwargs else (args[position] if position is not None and position < len(args) else None)
            group = (
                kwargs.get("group")
                if "group" in kwargs
                else (args[group_position] if group_position is not None and group_position < len(args) else None)
            )
            is_async = always_async or bool(
                kwargs.get("async_op")
                if "async_op" in kwargs
                else (args[async_position] if async_position is not None and async_position < len(args) else False)
            )
            info = _groups.get(id(group)) or _group_info(dist, group)
            if received is not None:  # the rows it receives (an int add)
                output = kwargs.get(received) if received in kwargs else args[received_position] if received_position < len(args) else None
                tracker.rows_in += rows(output)
            pipeline = p2p and _note_p2p(dist, info, args, kwargs, name)
            key = _key(name, PIPELINE if pipeline else _label(info, p2p))
            if p2p and is_async:  # timed in its Work.wait(), where the training thread blocks
                work = original(*args, **kwargs)
                _wait_later(work, (key, _nbytes(payload), _dtype(payload), info[2], info[1], kind, on_cuda(payload)))
                return work
            token = tracker.begin(key, _nbytes(payload), _dtype(payload), info[2], info[1], kind, on_device=on_cuda(payload),
                                  blocking=not is_async)  # fmt: skip
        except Exception:
            return original(*args, **kwargs)  # never let bookkeeping break a collective
        _inside_hook.active = True  # one torch function may call another (all_gather_into_tensor does): count one
        try:
            if is_async:
                work = original(*args, **kwargs)
                tracker.complete(token, work)
                return work
            tracker.blocked_since = token[1]
            try:
                return original(*args, **kwargs)
            finally:
                tracker.blocked_since = 0.0
                tracker.end(token)
        finally:
            _inside_hook.active = False

    dynamo_guard.keep_out(wrapper)
    setattr(wrapper, "_ranktop", True)  # the mark that makes installing idempotent
    return wrapper


#: The functional collective being launched on this thread, for a wait inside its launch.
_launching = threading.local()
#: What :meth:`CollectiveTracker.begin` takes, for a wait still to come: (op, bytes, dtype, group size, group, kind,
#: on the device).
Launched = tuple[str, int, str, int, str, str, bool]
#: id(work or tensor) -> what :meth:`CollectiveTracker.begin` takes, for a wait still to come.
_pending: dict[Any, Launched] = {}


def _wait_later(handle: Any, what: Launched, ident: Callable[[Any], Any] = id) -> None:
    if len(_pending) >= MAX_PENDING:
        _pending.clear()  # launched and never waited on: forget them rather than grow
    _pending[ident(handle)] = what


def _storage(tensor: Any) -> Any:
    """A functional collective's output, known by its memory: DTensor waits on a *view* of it (a view of an
    AsyncCollectiveTensor is a new one, around a view of the same storage)."""
    try:
        return ("t", tensor.untyped_storage().data_ptr())
    except Exception:
        return id(tensor)


def _timed_wait(original: Callable[..., Any], key: str = "", kind: str = P2P, ident: Callable[[Any], Any] = id) -> Callable[..., Any]:
    """Wrap a blocking wait (``Work.wait``, ``wait_tensor``): a wait on something this module launched is
    recorded, with that launch's op and group; ``wait_tensor`` on a collective launched elsewhere (compiled
    code) as ``key``. Anything else passes straight through at the cost of a dict lookup."""

    @functools.wraps(original)
    def wait(handle: Any, *args: Any, **kwargs: Any) -> Any:
        if dynamo_guard.is_compiling():
            return original(handle, *args, **kwargs)
        tracker = _tracker
        what = _pending.pop(ident(handle), None) if _pending else None
        if what is None and key:
            what = getattr(_launching, "what", None)
        if tracker is None or (what is None and not key) or getattr(_inside_hook, "active", False):
            return original(handle, *args, **kwargs)
        try:
            token = (tracker.begin(*what) if what is not None
                     else tracker.begin(key, _nbytes(handle), _dtype(handle), 0, "", kind, on_device=on_cuda(handle)))  # fmt: skip
        except Exception:
            return original(handle, *args, **kwargs)
        tracker.blocked_since = token[1]
        try:
            return original(handle, *args, **kwargs)
        finally:
            tracker.blocked_since = 0.0
            tracker.end(token)

    dynamo_guard.keep_out(wait)
    setattr(wait, "_ranktop", True)  # the mark that makes installing idempotent
    return wait


def _install_work_wait(c10d: Any) -> None:
    """``Work.wait`` of the works ``isend``/``irecv``/``batch_isend_irecv`` return: where a pipeline blocks."""
    work = getattr(c10d, "Work", None)
    original = getattr(work, "wait", None)
    if work is None or original is None or getattr(original, "_ranktop", False):  # (no Work has no wait)
        return
    try:
        work.wait = _timed_wait(original)
    except Exception:
        return
    _installed["work.class"] = work
    _installed["work.wait"] = original


def _install_batch_p2p(dist: Any, c10d: Any) -> None:
    """``batch_isend_irecv``: one launch of several point-to-point ops; each work it returns is timed in
    its wait, under the batch's name and group (the ops inside are not counted again)."""
    original = getattr(dist, "batch_isend_irecv", None)
    if original is None or getattr(original, "_ranktop", False):
        return

    @functools.wraps(original)
    def batch_isend_irecv(p2p_op_list: Any, *args: Any, **kwargs: Any) -> Any:
        tracker = _tracker
        if tracker is None or dynamo_guard.is_compiling() or getattr(_inside_hook, "active", False):
            return original(p2p_op_list, *args, **kwargs)
        try:
            first = p2p_op_list[0]
            info = _groups.get(id(first.group)) or _group_info(dist, first.group)
            pipeline = [_note_p2p(dist, info, (None, op.peer), None, "batch_isend_irecv") for op in p2p_op_list]
            label = PIPELINE if all(pipeline) else "" if info[4] else _label(info, True)
            what = (_key("batch_isend_irecv", label),
                    _nbytes([op.tensor for op in p2p_op_list]), _dtype(first.tensor), info[2], info[1], P2P,
                    on_cuda(first.tensor))  # fmt: skip
        except Exception:
            return original(p2p_op_list, *args, **kwargs)
        _inside_hook.active = True
        try:
            works = original(p2p_op_list, *args, **kwargs)
        finally:
            _inside_hook.active = False
        try:
            for i, work in enumerate(works or ()):
                _wait_later(work, what if i == 0 else (what[0], 0) + what[2:])  # bytes counted once per batch
        except Exception:
            pass
        return works

    dynamo_guard.keep_out(batch_isend_irecv)
    setattr(batch_isend_irecv, "_ranktop", True)  # the mark that makes installing idempotent
    _installed["batch_isend_irecv"] = original
    dist.batch_isend_irecv = batch_isend_irecv
    if c10d is not None and getattr(c10d, "batch_isend_irecv", None) is original:
        c10d.batch_isend_irecv = batch_isend_irecv


def _install_functional() -> None:
    """Functional collectives (DTensor, async TP, ``torch.compile``'s eager fallback): the launch notes its
    op and group against the tensor it returns; ``wait_tensor`` on that tensor is the wait."""
    try:
        import torch.distributed._functional_collectives as funcol
    except Exception:
        return
    if getattr(funcol.wait_tensor, "_ranktop", False):
        return
    _installed["funcol.module"] = funcol
    for name, group_position in FUNCTIONAL_OPS.items():
        original = getattr(funcol, name, None)
        if original is None:
            continue
        _installed["funcol." + name] = original
        setattr(funcol, name, _functional_launch(name, group_position, original, funcol))
    _installed["funcol.wait_tensor"] = funcol.wait_tensor
    funcol.wait_tensor = _timed_wait(funcol.wait_tensor, "wait_tensor", FUNCTIONAL, _storage)


def _functional_launch(name: str, group_position: int, original: Callable[..., Any], funcol: Any) -> Callable[..., Any]:
    op = name.replace("_autograd", "")

    @functools.wraps(original)
    def launch(*args: Any, **kwargs: Any) -> Any:
        if _tracker is None or dynamo_guard.is_compiling():
            return original(*args, **kwargs)
        try:
            group = kwargs.get("group") if "group" in kwargs else args[group_position] if len(args) > group_position else None
            info = _functional_group(funcol, group, kwargs.get("tag", ""))
            payload = args[0] if args else kwargs.get("self", kwargs.get("input"))
            if op == "all_to_all_single":  # the rows it receives: its output split sizes' sum, else its input's
                split = kwargs.get("output_split_sizes") if "output_split_sizes" in kwargs else args[1] if len(args) > 1 else None
                _tracker.rows_in += sum(split) if split else rows(payload)
            what = (_key(op, _label(info, False)), _nbytes(payload), _dtype(payload), info[2], info[1], FUNCTIONAL,
                    on_cuda(payload))  # fmt: skip
        except Exception:
            return original(*args, **kwargs)
        _launching.what = what  # a launch that waits at once (while tracing, or autograd's) waits inside the call
        try:
            result = original(*args, **kwargs)
        finally:
            _launching.what = None
        try:
            _wait_later(getattr(result, "elem", result), what, _storage)  # an AsyncCollectiveTensor waits on its elem
        except Exception:
            pass
        return result

    dynamo_guard.keep_out(launch)
    setattr(launch, "_ranktop", True)  # the mark that makes installing idempotent
    return launch


def _functional_group(funcol: Any, group: Any, tag: str) -> GroupInfo:
    """A functional collective's group (a ProcessGroup, a (mesh, dim) pair, a name, a list of ranks), by name."""
    # DTensor names its group (mesh, dim), a new tuple every call: keyed by the mesh's identity and the dim
    mesh_key = (id(group[0]), group[1]) if type(group) is tuple and len(group) == 2 else None
    info = _groups_by_mesh.get(mesh_key) if mesh_key is not None else _groups.get(id(group))
    if info is not None:
        return info
    name = str(funcol._resolve_group_name(group, tag))
    info = _groups_by_name.get(name)
    if info is None:
        dist = sys.modules["torch.distributed"]
        pg = dist.distributed_c10d._resolve_process_group(name)
        info = _group_info(dist, pg)
    if mesh_key is not None and len(_groups_by_mesh) < 4 * parallel_groups.MAX_GROUPS:
        _groups_by_mesh[mesh_key] = info
        _group_refs.append(group[0])  # the mesh stays alive, so its id stays its own
    return info
