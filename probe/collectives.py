"""Every collective the job issues: op, group size, bytes, dtype, duration, and the step and phase it ran in.

Two doors lead into communication, and both are watched:

- the Python functions of ``torch.distributed`` (all_reduce, all_gather, broadcast,
  barrier, send/recv, ...), wrapped once at install time;
- DDP's bucketed gradient all-reduce, which bypasses those functions (its
  reducer is C++). It is left as it is (no communication hook of ours): the
  training waits for it only where the reducer finalizes backward, and that
  wait is timed from two final callbacks of the autograd engine around it
  (:func:`watch_ddp_backward`), set up after DDP's forward, or after a compiled
  DDP's call (:func:`_install_compiled_ddp`). A comm hook of the script's runs
  with the wrappers passing through (:func:`watch_comm_hooks`): its all-reduce
  is DDP's, whose wait is that one at finalize.

A blocking call is timed around the call; an ``async_op`` call from launch to
the completion callback of its future (on gloo, the work's completion; nothing
here ever synchronizes a device), or, on the device, where its ``wait()`` makes
the stream wait. The duration is
therefore what this rank *waited* for the collective: a rank that arrives last
waits least, which is how the aggregator tells the slow rank from those it
holds up.

Every record carries its group (torch's ``group_name``, the same on every member)
and its kind: a collective, a point-to-point op or a functional collective. Ops
on a group other than the default one are keyed ``op@role`` ("all_reduce@tp",
"send@pp"): the role comes from the group's description (DeviceMesh's
``mesh_<dim>``, Megatron's ``group_desc``), else from its use (a group that
carries send/recv is a pipeline group); see wire/parallel_groups.py. The
groups a rank is in go out in its hello (:func:`groups_hello`).

Point-to-point ops and functional collectives are timed where the training
thread *blocks*: a blocking ``send``/``recv`` around the call; ``isend``/
``irecv`` (and ``batch_isend_irecv``) in their ``Work.wait()``; a functional
collective (``torch.distributed._functional_collectives``, what DTensor and
async TP use) in its ``wait_tensor``. Their launch returns at once, and a
send's completion lands whenever the peer receives it, which is not this
rank's wait.

Records go into a bounded deque, like step records: appends are atomic, the
sender thread drains them, and a full deque drops its oldest entries. The
sender folds them into one summary per step and phase before they leave the
rank (probe/collective_summary.py): the training thread pays for one append per
call, the wire for O(ops) per step.
"""

from __future__ import annotations

import collections
import functools
import sys
import threading
import time
from typing import Any

from ranktop.wire import parallel_groups
from ranktop.wire.messages import LastCollective

from . import dynamo_guard
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
#: All-to-alls, and the argument that holds what this rank receives: its rows are counted (an expert's load).
RECEIVES: dict[str, str] = {"all_to_all": "output_tensor_list", "all_to_all_single": "output"}
#: The name DDP's bucketed gradient all-reduce is reported under.
DDP_OP = "ddp_allreduce"
#: Point-to-point ops: timed in their wait, and what marks a group as a pipeline group.
P2P_OPS = frozenset(("send", "recv", "isend", "irecv", "batch_isend_irecv"))
#: Functional collectives (torch.distributed._functional_collectives): the tensor argument, and the group's position.
FUNCTIONAL_OPS: dict[str, int] = {
    "all_reduce": 2, "all_gather_tensor": 2, "all_gather_single": 1, "reduce_scatter_tensor": 3,
    "reduce_scatter_single": 3, "all_to_all_single": 3, "broadcast": 2,
    "all_reduce_autograd": 2, "all_gather_tensor_autograd": 2, "all_gather_single_autograd": 1,
    "reduce_scatter_tensor_autograd": 3, "reduce_scatter_single_autograd": 3, "all_to_all_single_autograd": 3,
}  # fmt: skip
#: Kinds of call (the ``k`` of a record).
COLLECTIVE, P2P, FUNCTIONAL = "c", "p", "f"
#: The role of pipeline traffic (wire/parallel_groups.py).
PIPELINE = "pp"
#: Launched waits not yet waited on, at most (an ``isend`` nobody waits on leaks no memory).
MAX_PENDING = 4096


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
        self, op: str, nbytes: int, dtype: str, group_size: int, gid: str = "", kind: str = COLLECTIVE, on_device: bool = True,
        blocking: bool = True,
    ) -> list:
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

    def _record(self, token: list, duration: float) -> dict[str, Any]:
        entry, start, step, phase = token[:4]
        return dict(entry, d=duration, n=step, ph=phase, t0=start)

    def end(self, token: list, upto: Any = None) -> None:
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

    def at_wait(self, token: list) -> None:
        """An async call's wait begins (a functional collective's ``wait_tensor``): on the device its wait is
        timed from here, so :meth:`end` after the wait gives the stall of the stream, not launch to end."""
        if token[4] is not None and self.device is not None:
            self.device.restart(token[4])

    def complete(self, token: list, work: Any) -> None:
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


# -- installation ---------------------------------------------------------------

_installed: dict[str, Any] = {}  # name -> original function, for uninstall
_inside_hook = threading.local()  # set while a counted call runs on this thread (one torch function may call another)
_tracker: CollectiveTracker | None = None


def install(tracker: CollectiveTracker) -> bool:
    """Wrap torch.distributed's collectives and DDP's forward; False if torch.distributed is absent.

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
    dynamo_guard.bind(sys.modules.get("torch"))
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
    _install_batch_p2p(dist, c10d)
    _install_work_wait(c10d)
    _install_functional()
    _install_ddp()
    _install_compiled_ddp(sys.modules.get("torch"))
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
        if name.startswith(("ddp.", "work.", "funcol.")):
            continue
        if c10d is not None and getattr(c10d, name, None) is getattr(dist, name, None):
            setattr(c10d, name, original)
        setattr(dist, name, original)
    work = _installed.get("work.class")
    if work is not None:
        work.wait = _installed["work.wait"]
    funcol = _installed.get("funcol.module")
    if funcol is not None:
        for name, original in _installed.items():
            if name.startswith("funcol.") and name != "funcol.module":
                setattr(funcol, name[len("funcol."):], original)
    ddp = _installed.get("ddp.class")
    if ddp is not None:
        ddp.forward = _installed["ddp.forward"]
    hooks = _installed.get("ddp.comm_hook_class")
    if hooks is not None:
        hooks.register_comm_hook = _installed["ddp.register_comm_hook"]
    torch = _installed.get("ddp.torch")
    if torch is not None and getattr(torch.compile, "_ranktop_ddp", False):  # (not if another wrapper is on top)
        torch.compile = _installed["ddp.compile"]
    compiled = _installed.get("ddp.compiled_class")
    if compiled is not None:
        compiled.__call__ = _installed["ddp.compiled_call"]
    _installed.clear()
    _pending.clear()


def _group_size(dist, group) -> int:
    try:
        return int(dist.get_world_size(group))
    except Exception:
        return 0


# -- groups ---------------------------------------------------------------------

#: id(group object) -> [group object (kept alive so the id stays its own), id, size, label (its role, or the name
#: a framework gives a group that is no dimension), default group?]
_groups: dict[int, list] = {}
#: torch group name -> the same list, for functional collectives (which name their group).
_groups_by_name: dict[str, list] = {}
#: (id(DeviceMesh), dim) -> the same list, for DTensor's functional collectives.
_groups_by_mesh: dict[tuple, list] = {}
_group_refs: list = []
#: Group ids point-to-point ops ran on (their role, if unnamed, is pipeline).
_p2p_groups: set[str] = set()
#: Peers (global ranks) of point-to-point ops on the default group: a pipeline with no group of its own.
_p2p_peers: set[int] = set()
#: Stated layout (probe.init(layout=...) or RANKTOP_LAYOUT): the groups it implies, in hello form.
_stated: list[dict[str, Any]] = []


def _group_info(dist, group) -> list:
    """[group, id, size, role, default?] of a group object (None: the default group); cached by identity,
    so the hot path pays a dict lookup."""
    info = _groups.get(id(group))
    if info is not None:
        return info
    info = [group, "", 0, "", False]
    try:
        c10d = dist.distributed_c10d
        pg = group if group is not None else c10d._get_default_group()
        info[1] = str(getattr(pg, "group_name", "") or "")[: parallel_groups.MAX_DESC]
        info[2] = int(dist.get_world_size(pg))
        info[4] = pg is c10d._get_default_group()
        info[3] = "" if info[4] else _describe(pg)
    except Exception:
        pass
    if len(_groups) < 4 * parallel_groups.MAX_GROUPS:
        _groups[id(group)] = info
        if info[1]:
            _groups_by_name[info[1]] = info
    return info


def framework_roles() -> dict[int, str]:
    """id(process group) -> role, for the groups a framework names in its own objects rather than in their
    description: DeepSpeed's pipeline grid (``PipelineParallelGrid``, its ``pipe`` x ``data`` x ``model``
    topology, registered by its pipeline engine in ``deepspeed.runtime.pipe.p2p``) makes its groups with no
    description. Read where groups are described (cheap: a module lookup and a few attributes)."""
    grid = getattr(sys.modules.get("deepspeed.runtime.pipe.p2p"), "_grid", None)
    if grid is None:
        return {}
    roles = {}
    for attribute, role in (("pp_proc_group", "pp"), ("dp_proc_group", "dp"), ("slice_proc_group", "tp")):
        group = getattr(grid, attribute, None)
        if group is not None:
            roles[id(group)] = role
    return roles


def _describe(pg) -> str:
    """A group's label: from its description, else from the framework that made it (:func:`framework_roles`)."""
    return parallel_groups.label_of(str(getattr(pg, "group_desc", "") or "")) or framework_roles().get(id(pg), "")


def _label(info: list, p2p: bool) -> str:
    """The role suffix of an op's key: "" on the default group; the named role; "pp" for a group carrying
    point-to-point ops; else the group's size ("g4")."""
    if info[4]:
        return ""
    if info[3]:
        return info[3]
    if p2p or info[1] in _p2p_groups:
        return PIPELINE
    return parallel_groups.label("", info[2])


def _key(op: str, label: str) -> str:
    return f"{op}@{label}" if label else op


def _note_p2p(dist, info: list, args, kwargs, name: str) -> bool:
    """Mark the group as carrying point-to-point traffic; on the default group, remember the peer. True where
    the op is on the default group with a peer of this rank's pipeline group: pipeline traffic (Megatron's
    interleaved schedule sends one direction there when its pipeline groups hold two ranks), keyed ``@pp``."""
    if info[4]:
        peer = kwargs.get("dst", kwargs.get("src")) if kwargs else None
        if peer is None and len(args) > 1:
            peer = args[1]
        if not isinstance(peer, int):
            return False
        if peer in (_pipeline_ranks if _pipeline_ranks is not None else _learn_pipeline_ranks(dist)):
            return True
        if len(_p2p_peers) < 64:
            _p2p_peers.add(peer)
    elif info[1] not in _p2p_groups:
        _p2p_groups.add(info[1])
    return False


#: The other ranks of this rank's pipeline groups (named pp by their description, or by a stated layout),
#: learned at its first point-to-point op on the default group (groups are made before training).
_pipeline_ranks: frozenset | None = None


def _learn_pipeline_ranks(dist) -> frozenset:
    global _pipeline_ranks
    ranks: set[int] = set()
    try:
        for entry in _stated:
            if entry["role"] == "pp":
                start, *rest = entry["ranks"]
                ranks.update(range(start, start + rest[0] * rest[1], rest[1]) if entry.get("compact") else entry["ranks"])
        me = dist.get_rank()
        for pg, ranks_map in list(dist.distributed_c10d._world.pg_group_ranks.items()):
            if me in ranks_map and _describe(pg) == PIPELINE:
                ranks.update(ranks_map)
        ranks.discard(me)
    except Exception:
        pass
    _pipeline_ranks = frozenset(ranks)
    return _pipeline_ranks


def state_layout(text: str, rank: int, world: int) -> list[dict[str, Any]]:
    """The groups a stated layout puts ``rank`` in: ``"pp=2,dp=2"`` (outermost first, the last dimension
    varies fastest, as ``init_device_mesh`` lays ranks out; one dimension may be ``-1``: the rest).
    Raises ValueError on a layout that does not fit the world."""
    dims: list[list] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        name, _, size = part.partition("=")
        role = parallel_groups.role_of(name)
        if not role or not size.lstrip("-").isdigit():
            raise ValueError(f"layout: {part!r} is not role=size with a role among {', '.join(parallel_groups.ROLES)}")
        dims.append([role, int(size)])
    known = 1
    for _, size in dims:
        known *= size if size > 0 else 1
    rest = [d for d in dims if d[1] <= 0]
    if len(rest) > 1 or (rest and world % known):
        raise ValueError(f"layout: {text!r} does not divide {world} ranks")
    if rest:
        rest[0][1] = world // known
    total = 1
    for _, size in dims:
        total *= size
    if total != world:
        raise ValueError(f"layout: {text!r} is {total} ranks, the job has {world}")
    out = []
    stride = 1
    for role, size in reversed(dims):
        index = (rank // stride) % size
        start = rank - index * stride
        members = [start + i * stride for i in range(size)]
        ranks = parallel_groups.compact(members)
        entry = {"id": f"stated:{role}:{start}", "desc": f"stated_{role}", "size": size, "ranks": ranks, "role": role}
        if len(ranks) != size or size <= 3:
            entry["ranks"] = members
        else:
            entry["compact"] = True
        out.append(entry)
        stride *= size
    return out[::-1]


def groups_hello() -> list[dict[str, Any]]:
    """The groups this rank is in, for its hello (wire/parallel_groups.py); read by the sender thread.

    A stated layout wins. Else every group torch knows with this rank among its members, but the default
    one, with its members, description and role, and whether point-to-point ops ran on it.
    """
    if _stated:
        return _stated
    dist = sys.modules.get("torch.distributed")
    out: list[dict[str, Any]] = []
    try:
        c10d = dist.distributed_c10d
        world = c10d._world
        default = c10d._get_default_group() if dist.is_initialized() else None
        me = dist.get_rank() if default is not None else -1
        named = framework_roles()
        for info in list(_groups.values()) if named else ():
            if not info[3] and not info[4] and id(info[0]) in named:
                info[3] = named[id(info[0])]  # a group used before its framework said what it is (one str store)
        for pg, ranks_map in list(world.pg_group_ranks.items()):
            if pg is default or len(out) >= parallel_groups.MAX_GROUPS or me not in ranks_map:
                continue  # torch may register groups this rank is not in (Megatron's): not its layout
            members = [g for g, _ in sorted(ranks_map.items(), key=lambda kv: kv[1])]
            name = str(getattr(pg, "group_name", "") or "")[: parallel_groups.MAX_DESC]
            desc = str(getattr(pg, "group_desc", "") or "")[: parallel_groups.MAX_DESC]
            role = parallel_groups.role_of(desc) or named.get(id(pg)) or (PIPELINE if name in _p2p_groups else "")
            ranks = parallel_groups.compact(members)
            entry = {"id": name, "desc": desc, "size": len(members), "ranks": ranks, "role": role}
            if len(ranks) != len(members):
                entry["compact"] = True
            if name in _p2p_groups:
                entry["p2p"] = True
            out.append(entry)
        if _p2p_peers and default is not None and len(out) < parallel_groups.MAX_GROUPS:
            # Point-to-point on the default group: the pipeline is this rank and its peers.
            members = sorted(_p2p_peers | {dist.get_rank()})
            out.append({"id": "p2p:" + ",".join(map(str, members))[:50], "desc": "p2p peers", "size": len(members),
                        "ranks": members, "role": "pp", "p2p": True})  # fmt: skip
    except Exception:
        return out
    return out


def _wrap(name: str, arg: str, original, dist):
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
    def wrapper(*args, **kwargs):
        tracker = _tracker
        if tracker is None or dynamo_guard.is_compiling() or getattr(_inside_hook, "active", False):
            return original(*args, **kwargs)
        try:
            payload = kwargs.get(arg) if arg in kwargs else (args[position] if position is not None and position < len(args) else None)
            group = kwargs.get("group") if "group" in kwargs else (args[group_position] if group_position is not None and group_position < len(args) else None)
            is_async = always_async or bool(kwargs.get("async_op") if "async_op" in kwargs else (args[async_position] if async_position is not None and async_position < len(args) else False))
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
    wrapper._ranktop = True
    return wrapper


#: The functional collective being launched on this thread, for a wait inside its launch.
_launching = threading.local()
#: id(work or tensor) -> what :meth:`CollectiveTracker.begin` takes, for a wait still to come.
_pending: dict[int, tuple] = {}


def _wait_later(handle: Any, what: tuple, ident=id) -> None:
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


def _timed_wait(original, key: str = "", kind: str = P2P, ident=id):
    """Wrap a blocking wait (``Work.wait``, ``wait_tensor``): a wait on something this module launched is
    recorded, with that launch's op and group; ``wait_tensor`` on a collective launched elsewhere (compiled
    code) as ``key``. Anything else passes straight through at the cost of a dict lookup."""

    @functools.wraps(original)
    def wait(handle, *args, **kwargs):
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
    wait._ranktop = True
    return wait


def _install_work_wait(c10d) -> None:
    """``Work.wait`` of the works ``isend``/``irecv``/``batch_isend_irecv`` return: where a pipeline blocks."""
    work = getattr(c10d, "Work", None)
    original = getattr(work, "wait", None)
    if original is None or getattr(original, "_ranktop", False):
        return
    try:
        work.wait = _timed_wait(original)
    except Exception:
        return
    _installed["work.class"] = work
    _installed["work.wait"] = original


def _install_batch_p2p(dist, c10d) -> None:
    """``batch_isend_irecv``: one launch of several point-to-point ops; each work it returns is timed in
    its wait, under the batch's name and group (the ops inside are not counted again)."""
    original = getattr(dist, "batch_isend_irecv", None)
    if original is None or getattr(original, "_ranktop", False):
        return

    @functools.wraps(original)
    def batch_isend_irecv(p2p_op_list, *args, **kwargs):
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
    batch_isend_irecv._ranktop = True
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


def _functional_launch(name: str, group_position: int, original, funcol):
    op = name.replace("_autograd", "")

    @functools.wraps(original)
    def launch(*args, **kwargs):
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
    launch._ranktop = True
    return launch


def _functional_group(funcol, group, tag: str) -> list:
    """A functional collective's group (a ProcessGroup, a (mesh, dim) pair, a name, a list of ranks), by name."""
    # DTensor names its group (mesh, dim), a new tuple every call: keyed by the mesh's identity and the dim
    key = (id(group[0]), group[1]) if type(group) is tuple and len(group) == 2 else id(group)
    info = _groups_by_mesh.get(key) if type(key) is tuple else _groups.get(key)
    if info is not None:
        return info
    name = str(funcol._resolve_group_name(group, tag))
    info = _groups_by_name.get(name)
    if info is None:
        dist = sys.modules["torch.distributed"]
        pg = dist.distributed_c10d._resolve_process_group(name)
        info = _group_info(dist, pg)
    if type(key) is tuple and len(_groups_by_mesh) < 4 * parallel_groups.MAX_GROUPS:
        _groups_by_mesh[key] = info
        _group_refs.append(group[0])  # the mesh stays alive, so its id stays its own
    return info


def _ddp_output_node(output: Any) -> Any:
    """The autograd node of a DDP forward's output (a tensor, or the first of a tuple, list or dict), or None."""
    for _ in range(3):
        if isinstance(output, (tuple, list)):
            output = output[0] if output else None
        elif isinstance(output, dict):
            output = next(iter(output.values()), None)
        else:
            break
    return getattr(output, "grad_fn", None)


def _compiled_autograd() -> bool:
    dynamo = sys.modules.get("torch._dynamo")
    return bool(dynamo is not None and getattr(getattr(dynamo, "config", None), "compiled_autograd", False))


def _queue_callback(callback) -> None:
    """A final callback of the backward in progress (it runs after every gradient, in the order queued)."""
    sys.modules["torch"].autograd.Variable._execution_engine.queue_callback(callback)


def _ddp_what(ddp: Any) -> tuple:
    """What one backward's gradient all-reduce moves (every gradient, once), worked out once per DDP module."""
    what = ddp.__dict__.get("_ranktop_what")
    if what is None:
        params = [p for p in ddp.module.parameters() if p.requires_grad]
        group = getattr(ddp, "process_group", None)
        size = group.size() if group is not None and hasattr(group, "size") else _group_size(sys.modules["torch.distributed"], None)
        what = (_nbytes(params), _dtype(params), size, on_cuda(params))
        ddp.__dict__["_ranktop_what"] = what
    return what


def watch_ddp_backward(ddp: Any, output: Any, queue: Any = None) -> bool:
    """Time where DDP's backward waits for its gradients' all-reduce, leaving DDP on its built-in C++ one.

    DDP's reducer launches each bucket's all-reduce as soon as the bucket is
    ready, overlapped with the rest of backward; the training waits only in
    ``Reducer::finalize_backward``, a final callback of the autograd engine
    queued when the last bucket is ready, where the compute stream (on NCCL) or
    the host (on gloo) waits for every bucket. So: a pre-hook on the output's
    autograd node, which runs before any gradient, queues a final callback of
    ours *before* DDP's; it begins the wait, and queues a second one, which runs
    after DDP's finalize and ends it. Both run on the caller's current streams
    (the engine sets them for final callbacks), so on the device the wait is
    the compute stream's stall, not the buckets' time in flight. One record per
    synchronised backward: ``ddp_allreduce``, every gradient's bytes.
    """
    node = _ddp_output_node(output)
    if node is None or not hasattr(node, "register_prehook"):
        return False
    hooked = getattr(ddp, "__dict__", {}).get("_ranktop_hook_done")
    node.register_prehook(functools.partial(_ddp_prehook, _tracker, _ddp_what(ddp), queue or _queue_callback, hooked))
    return True


def _ddp_prehook(tracker: Any, what: tuple, queue, hooked: "HookCompletions | None", grad_outputs) -> None:
    """Backward reached the DDP output's node, before any gradient: queue the final callback that begins the wait
    (and, with a comm hook, count this backward's buckets from here)."""
    try:
        if hooked is not None:
            hooked.reset(what[3])
        queue(functools.partial(_ddp_wait_begins, tracker, what, queue, hooked))
    except Exception:
        pass
    return None


def _ddp_wait_begins(tracker: Any, what: tuple, queue, hooked: "HookCompletions | None" = None) -> None:
    """Every gradient is done; DDP's finalize (queued after this) is next: the wait begins, and its end is queued."""
    if tracker is None or _tracker is not tracker:
        return
    try:
        token = tracker.begin(DDP_OP, what[0], what[1], what[2], on_device=what[3])
        tracker.blocked_since = token[1]
        queue(functools.partial(_ddp_wait_ends, tracker, token, hooked))
    except Exception:
        tracker.blocked_since = 0.0


def _ddp_wait_ends(tracker: Any, token: list, hooked: "HookCompletions | None" = None) -> None:
    """DDP's finalize returned (on the device: the compute stream now waits for every bucket). Finalize also
    copied each bucket into its gradients after that bucket's wait: with a comm hook, the wait ends where the last
    bucket's future completed (:class:`HookCompletions`), and the copy after it is left out."""
    tracker.blocked_since = 0.0
    tracker.end(token, upto=hooked.take() if hooked is not None else None)


def _install_ddp() -> None:
    """DDP keeps its own C++ all-reduce (no comm hook of ours: a Python hook loses the reducer's fused
    divide-while-copying, takes the GIL per bucket, and stops a script registering its own after the first
    forward); its forward gets :func:`watch_ddp_backward` for the backward that follows."""
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
    except Exception:
        return
    original_forward = DDP.forward
    _installed["ddp.class"] = DDP
    _installed["ddp.forward"] = original_forward

    @functools.wraps(original_forward)
    def forward(self, *args, **kwargs):
        if _tracker is None or dynamo_guard.is_compiling() or _compiled_call.depth:
            return original_forward(self, *args, **kwargs)  # traced: a tail call, the graph as without us
        output = original_forward(self, *args, **kwargs)
        _watch_if_synchronised(self, output)
        return output

    # Not kept out of dynamo: with torch.compile(DDP(model)) this wrapper is the frame dynamo compiles in place of
    # DDP.forward (it then inlines DDP.forward, as without ranktop); is_compiling() keeps the traced path clean.
    DDP.forward = forward
    watch_comm_hooks(DDP)


def watch_comm_hooks(ddp_class: Any) -> None:
    """A comm hook a script registers (``register_comm_hook``: PyTorch's ``allreduce_hook``, ``bf16_compress_hook``,
    PowerSGD, its own) runs with the collectives' wrappers passing straight through.

    Such a hook launches ``all_reduce(async_op=True)`` and never waits for it: it returns the future, and the
    reducer's finalize waits for that. Timed as a collective of its own, each bucket's launch-to-completion (its
    whole time in flight, overlapped with backward) would count as a wait, beside the stall at finalize that
    :func:`watch_ddp_backward` times: 25 ms recorded for a 5 ms stall. The hook's collectives are DDP's
    all-reduce, whose wait is that one ``ddp_allreduce`` record. (A hook's launches in a future's ``then``
    callback are covered where the callback runs inside the hook, as it does on NCCL, whose futures are complete
    at enqueue; on gloo such a callback runs on gloo's thread, and its launch is timed as any async call.)"""
    original = getattr(ddp_class, "register_comm_hook", None)
    if original is None or getattr(original, "_ranktop", False):
        return

    @functools.wraps(original)
    def register_comm_hook(self, state, hook):
        if not callable(hook):
            return original(self, state, hook)
        done = HookCompletions()
        result = original(self, state, _inside_comm_hook(hook, done))
        try:
            self.__dict__["_ranktop_hook_done"] = done  # registered: watch_ddp_backward ends the wait with it
        except Exception:
            pass
        return result

    register_comm_hook._ranktop = True
    _installed["ddp.comm_hook_class"] = ddp_class
    _installed["ddp.register_comm_hook"] = original
    ddp_class.register_comm_hook = register_comm_hook


class HookCompletions:
    """When one DDP backward's comm-hook futures completed, to end its wait at finalize there.

    ``Reducer::finalize_backward`` waits for each bucket's future and then copies the bucket into its gradients
    (``copy_bucket_to_grad``, with ``gradient_as_bucket_view=False``), on the compute stream, in one C++ call:
    timed around finalize, the copies are in the wait (0.6 ms of one H100 rank's record, whose true wait was ~0).
    No Python runs between a bucket's wait and its copy. A hook's future is the one thing of a bucket that Python
    holds: its done-callback records an event where it completes (a CUDA future calls back on a stream made to
    wait for the kernel, at once on NCCL, whose futures are complete at enqueue), or notes the host's time (gloo).
    The wait then ends where the last bucket's future did (never after finalize's end): the copies after it are
    left out; those of earlier buckets made while later ones were still in flight stay in (they overlap the
    wait). Only when every bucket's completion is known (a late gloo callback: finalize's end, as before).

    Without a comm hook the buckets' futures are the reducer's own, not exposed to Python, and a hook of ours
    would change the numbers (the reducer then divides after the copy instead of multiplying while copying):
    that wait keeps the copies (docs/gpu.md)."""

    __slots__ = ("generation", "calls", "done", "last", "on_device")

    def __init__(self) -> None:
        self.generation = 0
        self.calls = 0
        self.done = 0
        self.last: Any = None  # the latest completion: an event (on the device) or a perf_counter time
        self.on_device = False

    def reset(self, on_device: bool) -> None:
        """A synchronised backward begins (before any bucket is ready); ``on_device``: its gradients are CUDA
        tensors, whose futures are CUDA futures (Python's Future does not say)."""
        self.on_device = on_device
        self.generation += 1
        self.calls = self.done = 0
        self._give_back(self.last)
        self.last = None

    def launched(self, future: Any) -> None:
        """The hook returned ``future`` for a bucket: note when it completes."""
        self.calls += 1
        try:
            future.add_done_callback(functools.partial(self._completed, self.generation))
        except Exception:
            self.calls += 1  # never matched: this backward's wait keeps finalize's end

    def _completed(self, generation: int, _future: Any) -> None:
        if generation != self.generation:
            return  # a late callback of an earlier backward
        tracker = _tracker
        device = tracker.device if tracker is not None else None
        if self.on_device:  # a CUDA future (NCCL calls back at once): only an event on the device says when
            mark = device.mark() if device is not None else None
            if mark is None:
                return  # none to be had (no device timing, pool empty, a capture): finalize's end, as before
        else:
            mark = _perf()  # a CPU future (gloo, CPU tensors) calls back when its work is done
        previous, self.last = self.last, mark
        self._give_back(previous)
        self.done += 1

    def take(self) -> Any:
        """The last bucket's completion, where every bucket's is known (then forgotten), else None."""
        last = self.last
        if last is None or self.done != self.calls:
            return None
        self.last = None
        return last

    @staticmethod
    def _give_back(mark: Any) -> None:
        tracker = _tracker
        if mark is not None and type(mark) is not float and tracker is not None and tracker.device is not None:
            tracker.device.give_back(mark)


def _inside_comm_hook(hook: Any, done: HookCompletions | None = None) -> Any:
    """``hook``, run with this thread's collectives passing through (see :func:`watch_comm_hooks`), its futures'
    completions noted in ``done``; the same name, signature and annotations, which DDP checks."""

    @functools.wraps(hook)
    def comm_hook(state, bucket):
        if dynamo_guard.is_compiling():  # compiled autograd's Python reducer traces the hook
            return hook(state, bucket)
        before = getattr(_inside_hook, "active", False)
        _inside_hook.active = True
        try:
            future = hook(state, bucket)
        finally:
            _inside_hook.active = before
        if done is not None:
            done.launched(future)
        return future

    dynamo_guard.keep_out(comm_hook)
    return comm_hook


def _watch_if_synchronised(ddp: Any, output: Any) -> None:
    """After a DDP forward: if its backward will all-reduce (not under ``no_sync``, gradients on, DDP's C++
    reducer), time that backward's wait (:func:`watch_ddp_backward`)."""
    try:
        if (ddp.require_backward_grad_sync and sys.modules["torch"].is_grad_enabled()
                and not getattr(ddp, "_use_python_reducer", False) and not _compiled_autograd()):  # fmt: skip
            watch_ddp_backward(ddp, output)
    except Exception:
        pass  # never let bookkeeping break the forward


class _CompiledCall(threading.local):
    depth = 0  # inside a compiled DDP's call on this thread (DDP's forward wrapper then leaves the watching to it)


_compiled_call = _CompiledCall()


def _install_compiled_ddp(torch: Any) -> None:
    """A DDP compiled as a whole: ``torch.compile(DDP(model))``, or ``ddp.compile()``. DDP's forward is then traced
    into the compiled region (with DDPOptimizer's splits), so the forward wrapper above never runs eagerly and
    could queue nothing. The compiled call itself is eager and outside the region: ``OptimizedModule.__call__``
    (torch.compile's wrapper module), or the function ``ddp.compile()`` puts in the module's
    ``_compiled_call_impl`` slot. Wrapped there, a compiled DDP gets the same :func:`watch_ddp_backward` from
    its output as an eager one: no probe code in the region, no comm hook, the device rules of eager DDP.

    ``OptimizedModule`` lives in ``torch._dynamo``, which only ``torch.compile`` loads: its call is wrapped now if
    dynamo is loaded, else by the first ``torch.compile`` call, through a pass-through wrapper of
    ``torch.compile`` (which ``Module.compile`` calls too)."""
    if torch is None:
        return
    _wrap_compiled_call(getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None))
    compile_fn = getattr(torch, "compile", None)
    if not callable(compile_fn) or getattr(compile_fn, "_ranktop_ddp", False):
        return
    call_impl = getattr(getattr(getattr(torch, "nn", None), "Module", None), "_call_impl", None)

    @functools.wraps(compile_fn)
    def compile(*args, **kwargs):
        result = compile_fn(*args, **kwargs)
        if not _installed:
            return result
        try:
            if "ddp.compiled_class" not in _installed:
                _wrap_compiled_call(getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None))
            target = args[0] if args else kwargs.get("model")
            ddp, ddp_class = getattr(target, "__self__", None), _installed.get("ddp.class")
            if ddp_class is not None and isinstance(ddp, ddp_class) and getattr(target, "__func__", None) is call_impl:
                return _compiled_ddp_call(ddp, result)  # ddp.compile(): its compiled _call_impl, in its slot
        except Exception:
            pass
        return result

    compile._ranktop_ddp = True
    dynamo_guard.keep_out(compile)
    torch.compile = compile
    _installed["ddp.torch"] = torch
    _installed["ddp.compile"] = compile_fn


def _compiled_ddp_call(ddp: Any, compiled: Any) -> Any:
    """``ddp.compile()``'s compiled call, watched as :func:`_wrap_compiled_call` watches torch.compile's wrapper."""

    @functools.wraps(compiled)
    def call(*args, **kwargs):
        if _tracker is None or dynamo_guard.is_compiling():
            return compiled(*args, **kwargs)
        _compiled_call.depth += 1
        try:
            output = compiled(*args, **kwargs)
        finally:
            _compiled_call.depth -= 1
        _watch_if_synchronised(ddp, output)
        return output

    dynamo_guard.keep_out(call)  # it calls the compiled region: what that starts is dynamo's
    return call


def _wrap_compiled_call(optimized: Any) -> None:
    """``OptimizedModule.__call__`` (once): a call of one that wraps a DDP watches the DDP's backward."""
    if optimized is None or "ddp.compiled_class" in _installed:
        return
    original = optimized.__call__
    if getattr(original, "_ranktop", False):
        return
    ddp_class = _installed.get("ddp.class")

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        if _tracker is None or dynamo_guard.is_compiling():
            return original(self, *args, **kwargs)
        modules = self.__dict__.get("_modules")
        inner = modules.get("_orig_mod") if modules else None
        if ddp_class is None or not isinstance(inner, ddp_class):
            return original(self, *args, **kwargs)
        _compiled_call.depth += 1
        try:
            output = original(self, *args, **kwargs)
        finally:
            _compiled_call.depth -= 1
        _watch_if_synchronised(inner, output)
        return output

    __call__._ranktop = True
    dynamo_guard.keep_out(__call__)  # it calls the compiled region: what that starts is dynamo's
    _installed["ddp.compiled_class"] = optimized
    _installed["ddp.compiled_call"] = original
    optimized.__call__ = __call__


# Our own, all the way down: dynamo compiles none of their frames, nor any they start (see probe/dynamo_guard.py).
# The wrappers reach them from eager code that may run inside a compiled region's extent (after a graph break).
dynamo_guard.keep_out(
    watch_ddp_backward, _watch_if_synchronised, _ddp_prehook, _ddp_wait_begins, _ddp_wait_ends, _nbytes, _dtype,
    on_cuda, _group_info, _note_p2p, _key, _label, _wait_later, _storage, rows, _functional_group,
    CollectiveTracker.begin, CollectiveTracker.end, CollectiveTracker.complete, CollectiveTracker.at_wait,
    HookCompletions.reset, HookCompletions.launched, HookCompletions._completed, HookCompletions.take, recursive=True,
)
