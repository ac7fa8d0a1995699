"""Automatic mode: the step and its phases found from PyTorch's own hooks, with no change to the script.

What marks what (the hooks are installed once, on the thread that installs them,
which is the one whose events count; events on other threads are ignored):

- **optimizer**: an optimizer's ``step()`` (the global optimizer step pre/post
  hooks), outermost call only. The end of the last optimizer step of an
  iteration *completes* the step.
- **forward**: the outermost module call (counting depth). Global module hooks
  put every module call on torch's slow path (a few µs each), so they only
  serve to *discover* the outermost modules during the first iteration; from
  the first optimizer step on, only those root modules' calls are timed (by a
  :class:`TimedCall` in their ``_compiled_call_impl`` slot, no hook) and the
  whole model runs hook-free. A module
  first called later, at top level, is not timed (its time shows as other).
- **backward**: ``torch.autograd.backward``, which ``Tensor.backward`` calls.
  Module calls inside it (activation-checkpoint recomputation) stay backward.
- **data**: the wait in ``DataLoader`` iteration (``_BaseDataLoaderIter.__next__``).
- **other**: the rest of the step: loss functions that are not modules, host to
  device copies, gradient clipping, ``zero_grad``, logging.
- **checkpoint**: ``torch.save`` and ``torch.distributed.checkpoint``'s ``save`` and
  ``async_save`` (its blocking part: what the training thread waits for), outermost
  call only. Usually inside the step that has just had its optimizer step.
- **eval**: an evaluation loop (below), from when it is seen to be one until
  training goes on; carried into the next step.
- **compile**: torch.compile compiling inside a step (a recompilation), from
  dynamo's compile callbacks: probe/compile_phase.py, which the explicit probe
  has too (registered at ``torch.compile`` here, at once).

Steps are contiguous: a complete step ends, and the next begins, at the next
DataLoader fetch; in a loop with no DataLoader fetch in the step, at the next
training forward. So gradient accumulation (several forward/backward pairs) is
one step, several optimizers stepped in one iteration are one step (a GAN's
discriminator and generator steps count as one when a DataLoader fetch starts
the iteration, as two otherwise), and ``zero_grad`` and logging count as the
step's other.

Evaluation: a forward with gradients off (``no_grad``, ``inference_mode``) or
of a module in eval mode is *eval-like*. Inside a training step (a teacher or
EMA model) it counts as forward. But more than :data:`EVAL_AFTER` eval-like
forwards and DataLoader fetches in a row, with no backward or optimizer step
between them, is an evaluation loop: the step in progress is dropped (or, if
it already had its optimizer step, ended there) and what follows, until the
next training forward, backward or optimizer step, is the phase ``eval``, timed
outside any step and carried into the next (its fetches and forwards are eval,
not data and forward). The viewer then tells the job is evaluating, not stalled
(watch/analysis/pauses.py). See docs/auto-mode.md.

If the script calls ``probe.step()`` itself, automatic mode leaves the steps to
it and only adds the phases. Explicit ``probe.phase()`` blocks nest in and
around automatic phases as usual (a nested phase's time leaves its parent's).

This module imports torch only when hooks are installed, which happens after
the script has imported it (``ranktop launch``) or from ``probe.automatic()``.
"""

from __future__ import annotations

import copy
import functools
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Callable

from ranktop.wire.names import CHECKPOINT_PHASE, EVAL_PHASE

from . import compile_phase, dynamo_guard
from .recorder import Recorder

_perf = time.perf_counter  # the recorder's clock (Recorder.push is given its reading)

#: Eval-like forwards and fetches in a row, with no backward or optimizer step, that make an evaluation loop.
EVAL_AFTER = 6


class AutoTimer:
    """The state machine: outermost events in, ``Recorder`` steps and phases out (no torch here)."""

    def __init__(self, recorder: Recorder, eval_after: int = EVAL_AFTER):
        self.rec: Recorder | _Off = recorder  # _OFF once disabled
        self.eval_after = eval_after
        self.open = False  # one of our steps is open in the recorder
        self.complete = False  # ... and an optimizer step has ended in it
        self.fetched = False  # ... and it had a DataLoader fetch
        self.pending_fetch = False  # between steps: a fetch is waiting to be carried into the next step
        self.idle = 0  # eval-like forwards and fetches since the last sign of training
        self.user_steps = False  # the script marks steps itself (probe.step()): phases only
        self.evaluating = False  # an evaluation loop is under way: the phase ``eval`` is open
        self.discarded = 0  # steps dropped as evaluation
        self._number = -1

    # -- step boundaries --------------------------------------------------------

    # Each event first asks whether the recorder's state is still what we left (the step we opened, or none);
    # if not, the script marks steps itself. That question is asked inline: a frame per event is a tenth of
    # automatic mode's budget on the training thread.

    def _lose(self) -> None:
        """The script marks steps itself (``probe.step()``): from now on only phases are ours."""
        self.user_steps = True
        self.open = False

    def _begin_step(self) -> None:
        rec = self.rec
        if self.evaluating:
            self._end_eval()
        if self.open:
            rec.end_step()
        rec.begin_step()
        self._number = rec.current_step
        self.open, self.complete = True, False
        self.fetched, self.pending_fetch = self.pending_fetch, False

    def _drop(self) -> None:
        """An evaluation loop: end a step that had its optimizer step, drop anything else."""
        if self.complete:
            self.rec.end_step()
        else:
            self.rec.discard()
            self.discarded += 1
        self.open = self.complete = self.fetched = self.pending_fetch = False

    def _begin_eval(self) -> None:
        """An evaluation loop outside training steps: timed as the phase ``eval`` until training goes on (what was
        timed outside a step before it, a fetch, goes: it was the evaluation's)."""
        self.rec.discard()
        self.pending_fetch = False
        self.rec.begin_phase(EVAL_PHASE)
        self.evaluating = True

    def _end_eval(self) -> None:
        """Training goes on: the phase ``eval`` ends, and the next step carries it (Recorder: a phase timed outside
        a step belongs to the next one, whose wall time reaches back to cover it)."""
        self.evaluating = False
        self.rec.end_phase()

    # -- events (outermost only, training thread only) --------------------------
    # ``*_end`` only closes the phase: the hooks call ``timer.rec.end_phase()`` themselves (one frame less);
    # these methods are the same events for whoever drives the timer by hand.

    def data_begin(self) -> None:
        self.idle += 1
        rec = self.rec
        if self.evaluating:  # a fetch of the evaluation: its time is eval's (nested in it, so the wrapper's end closes it)
            rec.begin_phase(EVAL_PHASE)
            return
        if not self.user_steps:
            if self.open:
                if not (rec.step_started and rec.current_step == self._number):
                    self._lose()
                elif self.complete:
                    self._begin_step()
                elif self.idle > self.eval_after:
                    self._drop()
            elif rec.step_started:
                self._lose()
            if not self.user_steps:
                if self.open:
                    self.fetched = True
                elif self.idle > self.eval_after:
                    self._begin_eval()
                    rec.begin_phase(EVAL_PHASE)
                    return
                else:
                    rec.discard()  # between steps only the latest fetch is carried into the next step
                    self.pending_fetch = True
        push = rec.push
        if push is not None and rec.step_started:
            push(["data", _perf(), 0.0])  # (begin_phase inside a step, without its frame: see Recorder.push)
        else:
            rec.begin_phase("data")

    def data_end(self) -> None:
        self.rec.end_phase()

    def forward_begin(self, training: bool) -> bool:
        """Returns whether a forward phase was begun (and ``forward_end`` must follow)."""
        rec = self.rec
        if not self.user_steps and (not (rec.step_started and rec.current_step == self._number) if self.open else rec.step_started):
            self._lose()
        if self.user_steps:
            rec.begin_phase("forward")
            return True
        if training:
            self.idle = 0
            if not self.open or (self.complete and not self.fetched):
                self._begin_step()
        else:
            self.idle += 1
            if self.evaluating:
                return False  # (its time is the open eval's)
            if self.open and self.complete and not self.fetched:
                self._drop()  # a loop without DataLoader: eval right after the step ends it
            elif self.open and self.idle > self.eval_after:
                self._drop()
            if not self.open and self.idle > self.eval_after:
                self._begin_eval()
                return False  # an evaluation loop outside training steps: its forwards are the open eval's
            # else: timed, and outside a step carried into the next (a teacher's forward before the first step)
        push = rec.push
        if push is not None and rec.step_started:
            push(["forward", _perf(), 0.0])
        else:
            rec.begin_phase("forward")
        return True

    def forward_end(self) -> None:
        self.rec.end_phase()

    def _train_event(self) -> None:
        """A backward or an optimizer step: training goes on (a step begins here if none is open)."""
        self.idle = 0
        if not self.user_steps:
            rec = self.rec
            if self.open:
                if not (rec.step_started and rec.current_step == self._number):
                    self._lose()
            elif rec.step_started:
                self._lose()
            else:
                self._begin_step()

    def _training_phase(phase: str) -> Callable[["AutoTimer"], None]:  # type: ignore[misc]
        """``backward_begin`` and ``optimizer_begin``: a training event, then the phase (one frame each)."""

        def begin(self: "AutoTimer") -> None:
            rec = self.rec
            if self.open and rec.step_started and rec.current_step == self._number:
                self.idle = 0  # (the usual case of _train_event, inline)
            else:
                self._train_event()
            push = rec.push
            if push is not None and rec.step_started:
                push([phase, _perf(), 0.0])
            else:
                rec.begin_phase(phase)

        begin.__name__ = begin.__qualname__ = f"{phase}_begin"
        return begin

    backward_begin = _training_phase("backward")

    def backward_end(self) -> None:
        self.rec.end_phase()

    optimizer_begin = _training_phase("optimizer")

    def optimizer_end(self) -> None:
        self.rec.end_phase()
        if self.open:
            self.complete = True

    del _training_phase

    def checkpoint_begin(self) -> None:
        """``torch.save`` or a distributed checkpoint's save: the phase ``checkpoint`` (no sign of training or of
        evaluation: a step goes on around it)."""
        self.rec.begin_phase(CHECKPOINT_PHASE)

    def disable(self) -> None:
        for name in ("data_begin", "data_end", "forward_end", "backward_begin", "backward_end", "optimizer_begin", "optimizer_end",
                     "checkpoint_begin"):  # fmt: skip
            setattr(self, name, _noop)
        setattr(self, "forward_begin", _false)  # (an instance's own, over the method)
        self.rec = _OFF  # what the hooks close phases through


class _Off:
    """A recorder whose boundaries do nothing: a disabled timer's, so that hooks still in place record nothing."""

    # What the timer reads (only while enabled, so never of this one; said for the type checker, and so that a read
    # would see no step rather than a function).
    step_started = False
    current_step = -1

    def __getattr__(self, name: str) -> Callable[..., None]:
        return _noop


_OFF = _Off()


def _noop(*args: object, **kwargs: object) -> None:
    return None


def _false(*args: object, **kwargs: object) -> bool:
    return False


class TorchHooks:
    """Installs the hooks that feed an :class:`AutoTimer`, and removes them.

    ``model``/``optimizer`` (from ``probe.automatic(model, optimizer)``) narrow the
    hooks to those objects: then no global module hook is ever installed.

    Invisible to torch.compile: every hook and wrapper first asks
    ``torch.compiler.is_dynamo_compiling()`` (probe/dynamo_guard.py) and, while dynamo traces it, does nothing
    but what the code would do without it (a hook returns, a wrapper calls the
    function it wraps). Dynamo folds that question to a constant, so a hook
    reached inside a compiled region (a submodule of a compiled block, a global
    hook during discovery, the root of ``model.compile()``) traces to nothing:
    no graph break, no guard, no recompile, and ``fullgraph=True`` holds. What
    runs inside a compiled region is therefore timed from its eager boundary
    (the compiled module's call, ``backward``, the optimizer step); see
    docs/auto-mode.md for what that means pattern by pattern.

    A fault in any hook (an exception of ours) switches the probe off through
    ``on_fault`` and never reaches the training loop; the hooks are removed at
    the next point where torch is not iterating them.
    """

    def __init__(
        self,
        timer: AutoTimer,
        model: Any = None,
        optimizer: Any = None,
        on_first_step: Callable[[Any], str | None] | None = None,
        on_fault: Callable[[BaseException], None] | None = None,
    ):
        import torch

        dynamo_guard.bind(torch)
        self.timer = timer
        self._torch = torch
        self._thread = threading.get_ident()
        self._model = model
        self._optimizer = optimizer
        self._on_first_step = on_first_step
        # Called once, inside the first training forward (autocast is on there if the job uses it): what the job
        # computes in, for the peak of MFU (probe/resources.py learn_compute).
        self._on_forward: Callable[[Any], None] | None = None
        self._on_fault = on_fault
        self._handles: list[Any] = []
        self._discovery: list[Any] = []  # the global module hooks, until the roots are known
        self._roots: dict[int, weakref.ref[Any]] = {}
        self._fwd_depth = 0
        self._fwd_open = False
        self._bwd_depth = 0
        self._opt_depth = 0
        self._data_depth = 0
        self._save_depth = 0  # a checkpoint's save is running (torch.save inside a distributed save is the same one)
        self._saves_pending = True  # torch.distributed.checkpoint not looked for yet at the first optimizer step
        self._in_opt_hook = False  # torch is iterating the optimizer's hook dicts: removing one now would break it
        self._remove_pending = False
        self._faulted = False
        self._patched: list[tuple[Any, str, Any]] = []
        self._timed: weakref.WeakKeyDictionary[Any, tuple[TimedCall, Any]] = (
            weakref.WeakKeyDictionary()
        )  # module -> (our TimedCall, what it replaced)
        self._open_root: weakref.ref[Any] | None = None  # during discovery: the root module whose call began last
        self.installed = False

    # -- installing -------------------------------------------------------------

    def install(self) -> "TorchHooks":
        torch = self._torch
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim_module
        from torch.utils.data import dataloader

        if self._optimizer is not None:
            self._handles.append(self._optimizer.register_step_pre_hook(OwnHook(self._opt_pre)))
            self._handles.append(self._optimizer.register_step_post_hook(OwnHook(self._opt_post)))
        else:
            self._handles.append(optim_module.register_optimizer_step_pre_hook(self._opt_pre))
            self._handles.append(optim_module.register_optimizer_step_post_hook(self._opt_post))
        if self._model is not None:
            self._hook_root(self._model)
        else:
            # torch.compile(module) warns of global hooks firing "an extra time" on its wrapper: ours know
            # (the wrapper is the root, the module inside it depth 1) and end before dynamo sees them.
            warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks")
            self._discovery = [
                nn_module.register_module_forward_pre_hook(self._fwd_pre_discover),
                nn_module.register_module_forward_hook(self._fwd_post_discover, always_call=True),
            ]
        self._patch(torch.autograd, "backward", self._wrap_entry(torch.autograd.backward, "_bwd_depth", "backward_begin"))
        if hasattr(torch.nn.Module, "compile"):
            self._patch(torch.nn.Module, "compile", self._wrap_compile(torch.nn.Module.compile))
        if callable(getattr(torch, "compile", None)):
            self._patch(torch, "compile", _settling(torch.compile))
        if "torch._dynamo" in sys.modules:
            dynamo_guard.settle()
            compile_phase.settle()
        iter_class = dataloader._BaseDataLoaderIter
        self._patch(iter_class, "__next__", self._wrap_entry(iter_class.__next__, "_data_depth", "data_begin"))
        self._patch(torch, "save", self._wrap_entry(torch.save, "_save_depth", "checkpoint_begin"))
        self._patch_distributed_saves()
        self.installed = True
        return self

    def _patch_distributed_saves(self) -> None:
        """``torch.distributed.checkpoint``'s ``save`` and ``async_save`` timed as the phase ``checkpoint``, where
        the script has imported it: now, or by its first optimizer step (it is not imported here: a second of
        start-up for the scripts that never save one). Once found, not looked for again."""
        saver = sys.modules.get("torch.distributed.checkpoint.state_dict_saver")
        if saver is None:
            return
        self._saves_pending = False
        package = sys.modules.get("torch.distributed.checkpoint")
        for name in ("save", "async_save"):
            original = getattr(saver, name, None)
            if original is None:
                continue
            timed = self._wrap_entry(original, "_save_depth", "checkpoint_begin")
            self._patch(saver, name, timed)
            if package is not None and getattr(package, name, None) is original:
                self._patch(package, name, timed)

    def remove(self) -> None:
        """Take every hook and patch away; while torch runs the optimizer's hooks, at the next safe point."""
        if self._in_opt_hook:
            self._remove_pending = True
            return
        self._remove_pending = False
        for handle in self._handles + self._discovery:
            handle.remove()
        self._handles, self._discovery = [], []
        for owner, name, original in reversed(self._patched):
            if getattr(owner, name, None) is not original:
                setattr(owner, name, original)
        self._patched = []
        for module, (timed, replaced) in list(self._timed.items()):
            if module.__dict__.get("_compiled_call_impl") is timed:
                if replaced is None:
                    del module._compiled_call_impl
                else:
                    module._compiled_call_impl = replaced
        self._timed.clear()
        self.installed = False

    def _patch(self, owner: Any, name: str, wrapper: Any) -> None:
        self._patched.append((owner, name, getattr(owner, name)))
        setattr(owner, name, wrapper)

    def _hook_root(self, module: Any) -> None:
        if id(module) in self._roots:
            return
        self._roots[id(module)] = weakref.ref(module)
        self._hook_module(module)

    def _hook_module(self, module: Any) -> None:
        """Time the root's calls from around its ``_call_impl`` (see :class:`TimedCall`), not with module hooks:
        hooks put every call of it on torch's slow path, which cost more than the rest of automatic mode."""
        current = module.__dict__.get("_compiled_call_impl")
        if isinstance(current, TimedCall) and self._timed.get(module, (None,))[0] is current:
            return
        timed = TimedCall(self, module, current)
        module._compiled_call_impl = timed
        self._timed[module] = (timed, current)

    def _end_discovery(self) -> None:
        """After the first optimizer step, or before the first compiled module runs: hooks on the root
        modules seen, none on the rest.

        Dynamo guards a compiled region on how many global module hooks there
        are; taking ours away after it compiled would recompile it once. So a
        compiled module's first (eager) call ends discovery before dynamo sees
        it. That call may be nested (a compiled block inside an eager root): then
        the modules open around it lose their global post-hooks, and the root
        open now is closed by a hook of its own, registered for this one call;
        the depth is set to match.
        """
        for handle in self._discovery:
            handle.remove()
        self._discovery = []
        if self._fwd_depth:
            self._fwd_depth = 1
            self._close_on_return()
        for ref in list(self._roots.values()):
            module = ref()
            if module is not None:
                self._hook_module(module)

    def _close_on_return(self) -> None:
        """The root whose call is under way when discovery ends: its forward ends when that call returns."""
        module = self._open_root() if self._open_root is not None else None
        if module is None:
            return
        handles: list[Any] = []

        def close(module: Any, args: Any, output: Any) -> None:
            for handle in handles:
                handle.remove()
            self._fwd_post(module, args, output)

        handles.append(module.register_forward_hook(OwnHook(close), always_call=True))
        self._handles.extend(handles)

    def _fault(self, exc: BaseException) -> None:
        """Our own error inside a hook: automatic mode (and the probe, through ``on_fault``) goes off, training goes on."""
        if self._faulted:
            return
        self._faulted = True
        self.timer.disable()
        self._remove_pending = True
        try:
            if self._on_fault is not None:
                self._on_fault(exc)
            else:
                print(f"ranktop: automatic mode switched off after an internal error ({exc.__class__.__name__}: {exc}); "
                      "training continues", file=sys.stderr)  # fmt: skip
        except Exception:
            pass

    def _remove_now(self) -> None:
        """Called where torch iterates no hook dict of ours (a module hook runs over a copy of them)."""
        try:
            self.remove()
        except Exception:
            self._patched, self._handles, self._discovery = [], [], []

    # -- the hooks (hot path) ---------------------------------------------------
    # Each one: nothing while dynamo traces, nothing off the training thread, and never an exception out.

    def _fwd_pre_discover(self, module: Any, args: Any) -> None:
        if dynamo_guard.is_tracing() or self._thread != _get_ident():
            return
        try:
            root = self._fwd_depth == 0 and not self._bwd_depth
            if root:
                self._open_root = self._roots.setdefault(id(module), weakref.ref(module))
            if "dynamo_ctx" in module.__dict__ and self._discovery:  # an OptimizedModule, about to compile
                dynamo_guard.settle()
                if root:
                    self._fwd_pre(module, args)  # (closed when this call returns: see _end_discovery)
                self._end_discovery()
                return
        except Exception as exc:
            self._fault(exc)
        self._fwd_pre(module, args)

    def _fwd_post_discover(self, module: Any, args: Any, output: Any) -> None:
        if dynamo_guard.is_tracing() or self._thread != _get_ident():
            return
        self._fwd_post(module, args, output)

    def _fwd_pre(self, module: Any, args: Any) -> None:
        if dynamo_guard.is_tracing() or self._thread != _get_ident():
            return
        if self._remove_pending:
            return self._remove_now()
        try:
            depth = self._fwd_depth
            self._fwd_depth = depth + 1
            if depth == 0 and not self._bwd_depth:
                self._fwd_open = self.timer.forward_begin(module.training and self._torch.is_grad_enabled())
                if self._on_forward is not None and self._fwd_open and module.training:
                    self._first_forward(module)
        except Exception as exc:
            self._fault(exc)

    def _first_forward(self, module: Any) -> None:
        callback, self._on_forward = self._on_forward, None
        if callback is not None:
            callback(module)

    def _fwd_post(self, module: Any, args: Any, output: Any) -> None:
        if dynamo_guard.is_tracing() or self._thread != _get_ident():
            return
        if self._remove_pending:
            return self._remove_now()
        try:
            depth = self._fwd_depth - 1
            self._fwd_depth = depth if depth > 0 else 0
            if depth <= 0 and self._fwd_open:
                self._fwd_open = False
                self.timer.rec.end_phase()
        except Exception as exc:
            self._fault(exc)

    def _opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if dynamo_guard.is_tracing() or self._thread != _get_ident():
            return
        self._in_opt_hook = True
        try:
            self._opt_depth += 1
            if self._opt_depth == 1:
                self.timer.optimizer_begin()
        except Exception as exc:
            self._fault(exc)
        finally:
            self._in_opt_hook = False

    def _opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if dynamo_guard.is_tracing() or self._thread != _get_ident() or not self._opt_depth:
            return
        self._in_opt_hook = True
        try:
            self._opt_depth -= 1
            if self._opt_depth == 0:
                timer = self.timer
                timer.rec.end_phase()  # timer.optimizer_end(), inline: one frame less on the hot path
                if timer.open:
                    timer.complete = True
                if self._discovery and self._roots:  # (a step with no module call seen keeps discovering)
                    self._end_discovery()
                if self._saves_pending:  # (looked for once more, at the first step: then never again)
                    self._patch_distributed_saves()
                    self._saves_pending = False
                if self._on_first_step is not None:
                    callback, self._on_first_step = self._on_first_step, None
                    if callback(optimizer) == "again":  # (gpu_timing.AGAIN: a capture in progress) at the next step
                        self._on_first_step = callback
        except Exception as exc:
            self._fault(exc)
        finally:
            self._in_opt_hook = False

    def _wrap_compile(self, original: Callable[..., Any]) -> Any:
        """``module.compile()`` compiles the module's whole call, its hooks included: time that call from outside."""
        hooks = self

        def compile(module: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(module, *args, **kwargs)
            try:
                dynamo_guard.settle()
                compile_phase.settle()  # its compilations timed as ``compile`` from the first (probe/compile_phase.py)
                if hooks.installed and not hooks._faulted:
                    hooks._hook_module(module)
            except Exception as exc:
                hooks._fault(exc)
            return result

        return _standing_in(original, compile)

    def _wrap_entry(self, original: Callable[..., Any], depth: str, begin: str) -> Any:
        """``original`` (``torch.autograd.backward``, a DataLoader iterator's ``__next__``) timed as the phase that
        the timer's ``begin`` opens, when the training thread calls it outside dynamo's tracing and outside itself
        (``depth``: the hooks' flag that it is running). The guards are inline, not shared methods: each Python call
        here is one more on the training thread's every step (benchmarks/probe_overhead.py counts them)."""
        hooks = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if dynamo_guard.is_tracing() or hooks._thread != _get_ident() or getattr(hooks, depth):
                return original(*args, **kwargs)
            if hooks._remove_pending:
                hooks._remove_now()
                return original(*args, **kwargs)
            setattr(hooks, depth, 1)
            try:
                getattr(hooks.timer, begin)()
            except Exception as exc:
                hooks._fault(exc)
            try:
                return original(*args, **kwargs)
            finally:
                setattr(hooks, depth, 0)
                try:
                    hooks.timer.rec.end_phase()
                except Exception as exc:
                    hooks._fault(exc)

        return _standing_in(original, timed)


class TimedCall:
    """A root module's call timed as forward: set as the module's ``_compiled_call_impl``, the slot that
    ``Module.__call__`` calls instead of ``_call_impl`` when it is set (``module.compile()`` puts its compiled
    call there; then this wraps that one).

    Why not module hooks: any hook on a module sends each of its calls down
    torch's slow path (a few µs), and the hooks themselves are two more calls;
    here the module keeps torch's fast path and the timing is one frame. The
    script's own hooks on the module run inside ``_call_impl``, so they are
    forward time, as before.

    Invisible where it must be: dynamo, tracing a call of the module from a
    compiled region, goes to ``_call_impl`` or ``forward`` directly and never
    reads this slot; were it to trace this, ``is_tracing()`` makes it the plain
    call. ``copy.deepcopy(model)`` gives the copy no timed call (it is the
    model's, not the copy's), and ``Module.__getstate__`` already leaves the
    slot out of ``torch.save``.
    """

    __slots__ = ("hooks", "module", "inner", "__weakref__")

    def __init__(self, hooks: TorchHooks, module: Any, inner: Any):
        self.hooks = hooks
        self.module = weakref.ref(module)
        self.inner = inner  # the compiled call this replaced, or None: the module's own _call_impl

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hooks = self.hooks
        module: Any = self.module()  # alive: it is being called
        inner = self.inner or module._call_impl
        if dynamo_guard.is_tracing() or hooks._thread != _get_ident() or hooks._bwd_depth:
            return inner(*args, **kwargs)
        if hooks._discovery:  # a compiled module's first call: before dynamo sees the global hooks (see _end_discovery)
            try:
                if hooks._fwd_depth == 0:
                    hooks._roots.setdefault(id(module), self.module)
                hooks._end_discovery()
            except Exception as exc:
                hooks._fault(exc)
        if hooks._fwd_depth:
            return inner(*args, **kwargs)
        if hooks._remove_pending:
            hooks._remove_now()
            return inner(*args, **kwargs)
        hooks._fwd_depth = 1
        try:
            opened = hooks.timer.forward_begin(module.training and hooks._torch.is_grad_enabled())
            if hooks._on_forward is not None and opened and module.training:
                hooks._first_forward(module)
        except Exception as exc:
            hooks._fault(exc)
            opened = False
        try:
            return inner(*args, **kwargs)
        finally:
            hooks._fwd_depth = 0
            if opened:
                try:
                    hooks.timer.rec.end_phase()
                except Exception as exc:
                    hooks._fault(exc)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy.deepcopy(self.inner, memo)  # what the copy would have had without ranktop

    def __reduce__(self) -> tuple[Any, ...]:
        return (copy.copy, (None,))  # loads as the slot's default, where ranktop is not installed too


def _standing_in(original: Any, wrapper: Any) -> Any:
    """``wrapper``, set in place of torch's ``original``: it says whose it is (``__wrapped__``, the docstring), and
    dynamo never compiles its frame (it calls the script's code, or torch's: what that calls is dynamo's)."""
    wrapper.__wrapped__ = original
    wrapper.__name__ = original.__name__
    wrapper.__doc__ = original.__doc__
    dynamo_guard.keep_out(wrapper)
    return wrapper


_get_ident = threading.get_ident
# The hooks call nothing of the script's: dynamo compiles none of their frames, nor any they start (the state
# machine, the recorder, device timing), as when torch's own skipped code calls them within a compiled region.
dynamo_guard.keep_out(TimedCall.__call__)  # it calls the script's module: dynamo may compile what that calls
dynamo_guard.keep_out(
    TorchHooks._fwd_pre_discover,
    TorchHooks._fwd_post_discover,
    TorchHooks._fwd_pre,
    TorchHooks._fwd_post,
    TorchHooks._opt_pre,
    TorchHooks._opt_post,
    TorchHooks._first_forward,
    recursive=True,
)


def _settling(compile_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile``, unchanged, that then tells dynamo (loaded by now) which frames are ours."""

    @functools.wraps(compile_fn)
    def compile(*args: Any, **kwargs: Any) -> Any:
        result = compile_fn(*args, **kwargs)
        dynamo_guard.settle()
        compile_phase.settle()  # its compilations timed as ``compile`` from the first (probe/compile_phase.py)
        return result

    return compile


class OwnHook(functools.partial[Any]):
    """A hook of ours on the script's own model or optimizer: called as the method it holds (a C-level call,
    no extra frame), but copied as an inert one.

    ``copy.deepcopy(model)`` (an EMA or teacher copy) and ``torch.save(model)``
    copy a module's hook dicts; a bound method of ours would drag the whole
    automatic mode along, torch module included, and fail ("cannot pickle
    'module' object"). A copy gets ``functools.partial(sys.audit, ...)``
    instead: a no-op made of the standard library alone, so a checkpoint saved
    under ranktop loads where ranktop is not installed, and a copy of the model
    is not timed as the model.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (functools.partial, (sys.audit, INERT_HOOK))

    def __deepcopy__(self, memo: dict[int, Any]) -> functools.partial[None]:
        return functools.partial(sys.audit, INERT_HOOK)


#: What a copied hook of ours calls: ``sys.audit`` with this event name, which nobody listens to.
INERT_HOOK = "ranktop.copied_hook"


# -- the process's automatic mode -----------------------------------------------

_hooks: TorchHooks | None = None
_lock = threading.Lock()


def start(probe: Any, model: Any = None, optimizer: Any = None) -> TorchHooks | None:
    """Time ``probe``'s steps automatically (idempotent); None if the probe is off."""
    global _hooks
    with _lock:
        if _hooks is not None or not hasattr(probe, "recorder"):
            return _hooks
        timer = AutoTimer(probe.recorder)
        hooks = TorchHooks(timer, model=model, optimizer=optimizer, on_fault=getattr(probe, "_fault", None))
        gpu = _gpu_start_callback(probe)
        if gpu is not None:
            hooks._on_first_step = gpu
        hooks._on_forward = getattr(getattr(probe, "resources", None), "learn_compute", None)
        _hooks = hooks.install()
        probe.auto = hooks
        return hooks


def stop(remove: bool = True) -> None:
    """Switch automatic mode off (the probe was shut down or faulted, or this is a forked child).

    The timer's methods become no-ops at once. The hooks themselves are removed
    only from the training thread (or a fresh fork): removing them from the
    sender thread could change torch's hook dicts while training iterates them,
    so there they are only marked, and the training thread's next hook call
    takes them away.
    """
    global _hooks
    hooks = _hooks
    if hooks is None:
        return
    hooks.timer.disable()
    hooks._remove_pending = True
    _hooks = None
    if remove:
        try:
            hooks.remove()
        except Exception:
            pass


def _gpu_start_callback(probe: Any) -> Callable[[Any], str | None] | None:
    """On CUDA, device-side timing starts at the first optimizer step, on the device of its parameters."""
    try:
        from . import gpu_timing
    except ImportError:
        return None
    return gpu_timing.starter(probe)
