"""Every collective the job issues: op, group size, bytes, dtype, duration, and the step and phase it ran in.

Two doors lead into communication, and both are watched:

- the Python functions of ``torch.distributed`` (all_reduce, all_gather, broadcast,
  barrier, send/recv, ...), wrapped once at install time;
- DDP's bucketed gradient all-reduce, which bypasses those functions (its
  reducer is C++). A DDP communication hook sees every bucket: the user's hook,
  if they register one, is wrapped; otherwise the stock all-reduce hook is
  registered, wrapped, just before the model's first forward.

A blocking call is timed around the call; an ``async_op`` call and a DDP bucket
are timed from launch to the completion callback of their future (on gloo, the
work's completion; nothing here ever synchronizes a device). The duration is
therefore what this rank *waited* for the collective: a rank that arrives last
waits least, which is how the aggregator tells the slow rank from those it
holds up.

Records go into a bounded deque, like step records: appends are atomic, the
sender thread drains them, and a full deque drops its oldest entries. The
sender folds them into one summary per step and phase before they leave the
rank (wire/collective_summary.py): the training thread pays for one append per
call, the wire for O(ops) per step.
"""

from __future__ import annotations

import collections
import functools
import sys
import threading
import time
from typing import Any

from .recorder import Recorder, drain

_perf = time.perf_counter

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
#: The name DDP's bucketed gradient all-reduce is reported under.
DDP_OP = "ddp_allreduce"


def _nbytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    try:
        return int(value.numel()) * int(value.element_size())
    except Exception:
        return 0


def on_cuda(value: Any) -> bool:
    """Whether a collective's tensor (or the first of a list) is on a CUDA device."""
    if isinstance(value, (list, tuple)):
        return on_cuda(value[0]) if value else False
    return getattr(value, "is_cuda", False) is True


def _dtype(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return _dtype(value[0]) if value else ""
    dtype = getattr(value, "dtype", None)
    return str(dtype).replace("torch.", "") if dtype is not None else ""


class CollectiveTracker:
    def __init__(self, recorder: Recorder, capacity: int = 8192):
        self.buffer: collections.deque[dict[str, Any]] = collections.deque(maxlen=capacity)
        self.produced = 0
        self.seq = 0
        self._recorder = recorder
        # What the sender reports while a rank hangs: the last collective entered, and
        # when a blocking one began (0.0 once it returned).
        self.last: dict[str, Any] | None = None
        self.blocked_since = 0.0
        # Waits timed on the device (probe/device_waits.py), once CUDA timing is attached.
        self.device: Any = None

    def begin(self, op: str, nbytes: int, dtype: str, group_size: int, on_device: bool = True) -> list:
        """A call starts: its token, for :meth:`end` (a blocking call) or :meth:`complete` (an async one).

        ``on_device``: its tensors are on the GPU (see :func:`on_cuda`), so its wait is timed there once
        device timing is attached; a call on CPU tensors (gloo, objects, a barrier) blocks the host, and
        is timed on the host."""
        self.seq += 1
        rec = self._recorder
        entry = {"op": op, "seq": self.seq, "b": nbytes, "dt": dtype, "g": group_size}
        self.last = entry
        device = self.device
        start = device.start() if device is not None and on_device else None
        return [entry, _perf(), rec.current_step, rec.current_phase, start]

    def _record(self, token: list, duration: float) -> dict[str, Any]:
        entry, start, step, phase, _ = token
        return dict(entry, d=duration, n=step, ph=phase, t0=start)

    def end(self, token: list) -> None:
        """A blocking call returned (on the device: the current stream now waits for its kernel)."""
        record = self._record(token, _perf() - token[1])
        self.produced += 1
        if token[4] is not None and self.device is not None and self.device.stop(record, token[4]):
            return  # the sender thread reads its device times (probe/device_waits.py), then sends it
        self.buffer.append(record)

    def at_wait(self, token: list) -> None:
        """An async call's wait begins (a functional collective's ``wait_tensor``): on the device its wait is
        timed from here, so :meth:`end` after the wait gives the stall of the stream, not launch to end."""
        if token[4] is not None and self.device is not None:
            self.device.restart(token[4])

    def complete(self, token: list, work: Any) -> None:
        """An async call was launched: ``work`` is its Work (a Work.wait() ends it on the device) or a
        future (DDP's comm hook); on the host, it ends when its future completes."""
        device = self.device
        if token[4] is not None and device is not None:
            self.produced += 1
            record = self._record(token, 0.0)
            if hasattr(work, "get_future"):
                device.later(record, token[4], work)
            else:
                device.future(record, token[4], work)
            return
        try:
            future = work.get_future() if hasattr(work, "get_future") else work
            future.add_done_callback(lambda _fut: self.end(token))
        except Exception:
            pass  # a backend without futures: the launch is counted by `last`, the duration is unknown

    def drain(self, limit: int = 100_000, final: bool = False) -> list[dict[str, Any]]:
        out = drain(self.buffer, limit)
        if self.device is not None:
            resolved = self.device.resolve(final)
            if resolved:
                out.extend(resolved)
                out.sort(key=lambda r: r["seq"])
        return out

    def state(self) -> dict[str, Any] | None:
        if self.last is None:
            return None
        blocked = self.blocked_since
        device = self.device
        if not blocked and device is not None and device.blocked_since is not None:  # NCCL: the host never blocks
            return dict(device.blocked_entry or self.last, inside=True, age=_perf() - device.blocked_since)
        return dict(self.last, inside=bool(blocked), age=_perf() - blocked if blocked else 0.0)


# -- installation ---------------------------------------------------------------

_installed: dict[str, Any] = {}  # name -> original function, for uninstall
_inside_hook = threading.local()  # set while a counted call (or a DDP comm hook) runs on this thread
_tracker: CollectiveTracker | None = None


def install(tracker: CollectiveTracker) -> bool:
    """Wrap torch.distributed's collectives and DDP's comm hooks; False if torch.distributed is absent.

    Idempotent; a later call only swaps the tracker (a new probe after a shutdown).
    """
    global _tracker
    _tracker = tracker
    dist = sys.modules.get("torch.distributed")
    if dist is None and "torch" in sys.modules:  # torch is loaded: its distributed package costs little more
        try:
            import torch.distributed as dist
        except Exception:
            return False
    if dist is None or not getattr(dist, "is_available", lambda: False)():
        return False
    if _installed:
        return True
    c10d = getattr(dist, "distributed_c10d", None)
    for name, arg in OPS.items():
        original = getattr(dist, name, None)
        if original is not None and not getattr(original, "_ranktop", False):
            _installed[name] = original
            wrapped = _wrap(name, arg, original, dist)
            setattr(dist, name, wrapped)
            # Library code (FSDP among it) also calls through distributed_c10d.
            if c10d is not None and getattr(c10d, name, None) is original:
                setattr(c10d, name, wrapped)
    _install_ddp()
    return True


def detach(tracker: CollectiveTracker) -> None:
    """Stop feeding ``tracker`` (its probe was switched off); the wrappers then pass straight through."""
    global _tracker
    if _tracker is tracker:
        _tracker = None


def uninstall() -> None:
    dist = sys.modules.get("torch.distributed")
    c10d = getattr(dist, "distributed_c10d", None)
    for name, original in _installed.items():
        if name.startswith("ddp."):
            continue
        if c10d is not None and getattr(c10d, name, None) is getattr(dist, name, None):
            setattr(c10d, name, original)
        setattr(dist, name, original)
    ddp = _installed.get("ddp.class")
    if ddp is not None:
        ddp.register_comm_hook = _installed["ddp.register_comm_hook"]
        ddp.forward = _installed["ddp.forward"]
    _installed.clear()


def _group_size(dist, group) -> int:
    try:
        return int(dist.get_world_size(group))
    except Exception:
        return 0


def _wrap(name: str, arg: str, original, dist):
    import inspect

    try:
        params = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        params = []
    position = params.index(arg) if arg in params else None
    group_position = params.index("group") if "group" in params else None
    async_position = params.index("async_op") if "async_op" in params else None
    always_async = name in ("isend", "irecv")

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        tracker = _tracker
        if tracker is None or getattr(_inside_hook, "active", False):
            return original(*args, **kwargs)
        try:
            payload = kwargs.get(arg) if arg in kwargs else (args[position] if position is not None and position < len(args) else None)
            group = kwargs.get("group") if "group" in kwargs else (args[group_position] if group_position is not None and group_position < len(args) else None)
            is_async = always_async or bool(kwargs.get("async_op") if "async_op" in kwargs else (args[async_position] if async_position is not None and async_position < len(args) else False))
            token = tracker.begin(name, _nbytes(payload), _dtype(payload), _group_size(dist, group), on_cuda(payload))
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

    wrapper._ranktop = True
    return wrapper


def _on_complete(work, tracker: CollectiveTracker, token: list) -> None:
    """The completion path of an async call (kept for wrappers that call it): ``tracker.complete``."""
    tracker.complete(token, work)


def _timed_hook(hook):
    """Wrap a DDP comm hook so each bucket's all-reduce is timed from launch to completion."""

    @functools.wraps(hook)
    def timed(state, bucket):
        tracker = _tracker
        if tracker is None:
            return hook(state, bucket)
        try:
            buffer = bucket.buffer()
            group = state if state is not None and hasattr(state, "size") else None
            size = group.size() if group is not None else _group_size(sys.modules["torch.distributed"], None)
            token = tracker.begin(DDP_OP, _nbytes(buffer), _dtype(buffer), size, on_cuda(buffer))
        except Exception:
            return hook(state, bucket)
        _inside_hook.active = True  # the hook's own dist.all_reduce is this bucket: count it once
        try:
            fut = hook(state, bucket)
        finally:
            _inside_hook.active = False
        tracker.complete(token, fut)
        return fut

    timed._ranktop = True
    return timed


def _install_ddp() -> None:
    try:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel as DDP
    except Exception:
        return
    original_register = DDP.register_comm_hook
    original_forward = DDP.forward
    _installed["ddp.class"] = DDP
    _installed["ddp.register_comm_hook"] = original_register
    _installed["ddp.forward"] = original_forward

    @functools.wraps(original_register)
    def register_comm_hook(self, state, hook):
        if not getattr(hook, "_ranktop", False):
            hook = _timed_hook(hook)
        return original_register(self, state, hook)

    @functools.wraps(original_forward)
    def forward(self, *args, **kwargs):
        # DDP accepts one comm hook, registered before the first forward: if the
        # user registered none by then, register the stock all-reduce, timed.
        if not self.__dict__.get("_ranktop_hooked"):
            self.__dict__["_ranktop_hooked"] = True
            if not getattr(self, "_comm_hooks", None):
                try:
                    register_comm_hook(self, self.process_group, default_hooks.allreduce_hook)
                except Exception:
                    pass
        return original_forward(self, *args, **kwargs)

    DDP.register_comm_hook = register_comm_hook
    DDP.forward = forward
