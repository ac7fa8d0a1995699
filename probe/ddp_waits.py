"""DDP's bucketed gradient all-reduce, which bypasses torch.distributed's Python functions (its reducer is C++).

It is left as it is (no communication hook of ours): the training waits for it only where the reducer
finalizes backward, and that wait is timed from two final callbacks of the autograd engine around it
(:func:`watch_ddp_backward`), set up after DDP's forward, or after a compiled DDP's call
(:func:`_install_compiled_ddp`). A comm hook of the script's runs with the wrappers passing through
(:func:`watch_comm_hooks`): its all-reduce is DDP's, whose wait is that one at finalize.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable

from . import dist_wrappers, dynamo_guard
from .collective_tracker import DDP_OP, _dtype, _nbytes, _perf, on_cuda
from .process_groups import _group_size

if TYPE_CHECKING:
    from .collective_tracker import CollectiveTracker

#: What one backward's gradient all-reduce moves: (bytes, dtype, group size, on CUDA).
DdpWhat = tuple[int, str, int, bool]
#: How a final callback of the backward in progress is queued (the autograd engine's, or a test's).
Queue = Callable[[Callable[[], None]], None]


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


def _queue_callback(callback: Callable[[], None]) -> None:
    """A final callback of the backward in progress (it runs after every gradient, in the order queued)."""
    sys.modules["torch"].autograd.Variable._execution_engine.queue_callback(callback)


def _ddp_what(ddp: Any) -> DdpWhat:
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
    node.register_prehook(functools.partial(_ddp_prehook, dist_wrappers._tracker, _ddp_what(ddp), queue or _queue_callback, hooked))
    return True


def _ddp_prehook(tracker: Any, what: DdpWhat, queue: Queue, hooked: HookCompletions | None, grad_outputs: Any) -> None:
    """Backward reached the DDP output's node, before any gradient: queue the final callback that begins the wait
    (and, with a comm hook, count this backward's buckets from here)."""
    try:
        if hooked is not None:
            hooked.reset(what[3])
        queue(functools.partial(_ddp_wait_begins, tracker, what, queue, hooked))
    except Exception:
        pass
    return None


def _ddp_wait_begins(tracker: CollectiveTracker | None, what: DdpWhat, queue: Queue, hooked: HookCompletions | None = None) -> None:
    """Every gradient is done; DDP's finalize (queued after this) is next: the wait begins, and its end is queued."""
    if tracker is None or dist_wrappers._tracker is not tracker:
        return
    try:
        token = tracker.begin(DDP_OP, what[0], what[1], what[2], on_device=what[3])
        tracker.blocked_since = token[1]
        queue(functools.partial(_ddp_wait_ends, tracker, token, hooked))
    except Exception:
        tracker.blocked_since = 0.0


def _ddp_wait_ends(tracker: Any, token: list[Any], hooked: HookCompletions | None = None) -> None:
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
    original_forward: Callable[..., Any] = DDP.forward
    dist_wrappers._installed["ddp.class"] = DDP
    dist_wrappers._installed["ddp.forward"] = original_forward

    @functools.wraps(original_forward)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if dist_wrappers._tracker is None or dynamo_guard.is_compiling() or _compiled_call.depth:
            return original_forward(self, *args, **kwargs)  # traced: a tail call, the graph as without us
        output = original_forward(self, *args, **kwargs)
        _watch_if_synchronised(self, output)
        return output

    # Not kept out of dynamo: with torch.compile(DDP(model)) this wrapper is the frame dynamo compiles in place of
    # DDP.forward (it then inlines DDP.forward, as without ranktop); is_compiling() keeps the traced path clean.
    DDP.forward = forward  # type: ignore[method-assign]  # torch's class, patched: the point of it
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
    def register_comm_hook(self: Any, state: Any, hook: Any) -> Any:
        if not callable(hook):
            return original(self, state, hook)
        done = HookCompletions()
        result = original(self, state, _inside_comm_hook(hook, done))
        try:
            self.__dict__["_ranktop_hook_done"] = done  # registered: watch_ddp_backward ends the wait with it
        except Exception:
            pass
        return result

    setattr(register_comm_hook, "_ranktop", True)  # the mark that makes this idempotent
    dist_wrappers._installed["ddp.comm_hook_class"] = ddp_class
    dist_wrappers._installed["ddp.register_comm_hook"] = original
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
        tracker = dist_wrappers._tracker
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
        tracker = dist_wrappers._tracker
        if mark is not None and type(mark) is not float and tracker is not None and tracker.device is not None:
            tracker.device.give_back(mark)


def _inside_comm_hook(hook: Any, done: HookCompletions | None = None) -> Any:
    """``hook``, run with this thread's collectives passing through (see :func:`watch_comm_hooks`), its futures'
    completions noted in ``done``; the same name, signature and annotations, which DDP checks."""

    @functools.wraps(hook)
    def comm_hook(state: Any, bucket: Any) -> Any:
        if dynamo_guard.is_compiling():  # compiled autograd's Python reducer traces the hook
            return hook(state, bucket)
        before = getattr(dist_wrappers._inside_hook, "active", False)
        dist_wrappers._inside_hook.active = True
        try:
            future = hook(state, bucket)
        finally:
            dist_wrappers._inside_hook.active = before
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
    def compile(*args: Any, **kwargs: Any) -> Any:
        result = compile_fn(*args, **kwargs)
        if not dist_wrappers._installed:
            return result
        try:
            if "ddp.compiled_class" not in dist_wrappers._installed:
                _wrap_compiled_call(getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None))
            target = args[0] if args else kwargs.get("model")
            ddp, ddp_class = getattr(target, "__self__", None), dist_wrappers._installed.get("ddp.class")
            if ddp_class is not None and isinstance(ddp, ddp_class) and getattr(target, "__func__", None) is call_impl:
                return _compiled_ddp_call(ddp, result)  # ddp.compile(): its compiled _call_impl, in its slot
        except Exception:
            pass
        return result

    setattr(compile, "_ranktop_ddp", True)  # the mark that makes this idempotent
    dynamo_guard.keep_out(compile)
    torch.compile = compile
    dist_wrappers._installed["ddp.torch"] = torch
    dist_wrappers._installed["ddp.compile"] = compile_fn


def _compiled_ddp_call(ddp: Any, compiled: Any) -> Any:
    """``ddp.compile()``'s compiled call, watched as :func:`_wrap_compiled_call` watches torch.compile's wrapper."""

    @functools.wraps(compiled)
    def call(*args: Any, **kwargs: Any) -> Any:
        if dist_wrappers._tracker is None or dynamo_guard.is_compiling():
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
    if optimized is None or "ddp.compiled_class" in dist_wrappers._installed:
        return
    original = optimized.__call__
    if getattr(original, "_ranktop", False):
        return
    ddp_class = dist_wrappers._installed.get("ddp.class")

    @functools.wraps(original)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if dist_wrappers._tracker is None or dynamo_guard.is_compiling():
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

    setattr(__call__, "_ranktop", True)  # the mark that makes this idempotent
    dynamo_guard.keep_out(__call__)  # it calls the compiled region: what that starts is dynamo's
    dist_wrappers._installed["ddp.compiled_class"] = optimized
    dist_wrappers._installed["ddp.compiled_call"] = original
    optimized.__call__ = __call__
