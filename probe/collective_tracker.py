"""The record of every collective a rank waits in: op, group size, bytes, dtype, duration, the step and phase it ran in.

The wrappers of torch.distributed (probe/dist_wrappers.py) and of DDP's backward (probe/ddp_waits.py) call
:meth:`CollectiveTracker.begin` where a wait starts and :meth:`~CollectiveTracker.end` (a blocking call) or
:meth:`~CollectiveTracker.complete` (an async one) where it ends; the duration is therefore what this rank
*waited* for the collective: a rank that arrives last waits least, which is how the viewer tells the slow rank
from those it holds up. On the device (probe/device_waits.py, once CUDA timing is attached) the wait is timed
with CUDA events instead, never by synchronising.

Records go into a bounded deque, like step records: appends are atomic, the
sender thread drains them, and a full deque drops its oldest entries. The
sender folds them into one summary per step and phase before they leave the
rank (probe/collective_summary.py): the training thread pays for one append per
call, the wire for O(ops) per step.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from ranktop.wire.messages import LastCollective

from .recorder import Recorder, drain

_perf = time.perf_counter

#: A call under way, from :meth:`CollectiveTracker.begin` to its end: [entry, start, step, phase, device start,
#: on device] (a list: made on the hot path, one allocation).
Token = list[Any]

#: The name DDP's bucketed gradient all-reduce is reported under.
DDP_OP = "ddp_allreduce"
#: Kinds of call (the ``k`` of a record).
COLLECTIVE, P2P, FUNCTIONAL = "c", "p", "f"


def _nbytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    try:
        return int(value.numel()) * int(value.element_size())
    except Exception:
        return 0


def rows(value: Any) -> int:
    """The rows of a tensor (its first dimension; a scalar is one), or of a list of them, summed."""
    if isinstance(value, (list, tuple)):
        return sum(rows(v) for v in value)
    try:
        shape = value.shape
        return int(shape[0]) if len(shape) else 1
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
        self.rows_in = 0  # rows received in all-to-alls (written by the training thread, read by the sender's)
        self._recorder = recorder
        # What the sender reports while a rank hangs: the last collective entered, and
        # when a blocking one began (0.0 once it returned).
        self.last: dict[str, Any] | None = None
        self.blocked_since = 0.0
        # Waits timed on the device (probe/device_waits.py), once CUDA timing is attached.
        self.device: Any = None

    def begin(
        self,
        op: str,
        nbytes: int,
        dtype: str,
        group_size: int,
        gid: str = "",
        kind: str = COLLECTIVE,
        on_device: bool = True,
        blocking: bool = True,
    ) -> Token:
        """A call starts: its token, for :meth:`end` (a blocking call) or :meth:`complete` (an async one).

        ``on_device``: its tensors are on the GPU (see :func:`on_cuda`), so its wait is timed there once
        device timing is attached; a call on CPU tensors (gloo, objects, a barrier) blocks the host, and
        is timed on the host. ``blocking``: the wait is here, on the current stream, which must then be the
        compute stream (a call on a side stream keeps its host time); an async call's wait comes later."""
        self.seq += 1
        rec = self._recorder
        entry = {"op": op, "seq": self.seq, "b": nbytes, "dt": dtype, "g": group_size, "gi": gid, "k": kind}
        self.last = entry
        device = self.device
        start = device.start(any_stream=not blocking) if device is not None and on_device else None
        return [entry, _perf(), rec.current_step, rec.current_phase, start, on_device]

    def _record(self, token: Token, duration: float) -> dict[str, Any]:
        entry, start, step, phase = token[:4]
        return dict(entry, d=duration, n=step, ph=phase, t0=start)

    def end(self, token: Token, upto: Any = None) -> None:
        """A blocking call returned (on the device: the current stream now waits for its kernel). ``upto``: where
        its wait ended, when before its end (DDP's finalize with a comm hook: :class:`HookCompletions`), an event
        on the device or a perf_counter time on the host."""
        record = self._record(token, _perf() - token[1])
        self.produced += 1
        if upto is not None:
            if token[4] is not None and self.device is not None and type(upto) is not float:
                record["_upto"] = upto
            elif type(upto) is float:
                record["d"] = min(record["d"], max(0.0, upto - token[1]))
            elif self.device is not None:
                self.device.give_back(upto)
        if token[4] is not None and self.device is not None:
            if record["k"] == COLLECTIVE and record["op"] != DDP_OP:
                # a collective launched and waited for here: its kernel begins where the stream reaches it, so its
                # kernel time is its wait (not DDP's finalize, over every bucket; not a wait for a launch made
                # earlier: a point-to-point op's or a functional collective's)
                record["_k"] = True
            if self.device.stop(record, token[4]):
                return  # the sender thread reads its device times (probe/device_waits.py), then sends it
            record.pop("_k", None)
            self.device.give_back(record.pop("_upto", None))
        elif len(token) < 6 or not token[5]:
            record["kd"] = record["d"]  # on the host (gloo, CPU tensors) the call's time is its transfer's
        self.buffer.append(record)

    def at_wait(self, token: Token) -> None:
        """An async call's wait begins (a functional collective's ``wait_tensor``): on the device its wait is
        timed from here, so :meth:`end` after the wait gives the stall of the stream, not launch to end."""
        if token[4] is not None and self.device is not None:
            self.device.restart(token[4])

    def complete(self, token: Token, work: Any) -> None:
        """An async call was launched: ``work`` is its Work (a Work.wait() ends it on the device) or a
        future; on the host, it ends when its future completes."""
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

    def state(self) -> LastCollective | None:
        """The last collective entered, and whether the rank is blocked in it: the one place where the training
        thread's record of a call (a plain dict, cheap to make on the hot path) becomes the wire's record."""
        last = self.last
        if last is None:
            return None
        blocked = self.blocked_since
        device = self.device
        if not blocked and device is not None and device.blocked_since is not None:  # NCCL: the host never blocks
            entry, inside, age = device.blocked_entry or last, True, _perf() - device.blocked_since
        else:
            entry, inside, age = last, bool(blocked), _perf() - blocked if blocked else 0.0
        get = entry.get
        return LastCollective(
            op=get("op"), seq=get("seq"), b=get("b"), dt=get("dt"), g=get("g"), gi=get("gi"), k=get("k"), inside=inside, age=age
        )
