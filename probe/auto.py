"""Automatic mode: the step and its phases found from PyTorch's own hooks, with no change to the script.

What marks what (the hooks are installed once, on the thread that installs them,
which is the one whose events count; events on other threads are ignored):

- **optimizer**: an optimizer's ``step()`` (the global optimizer step pre/post
  hooks), outermost call only. The end of the last optimizer step of an
  iteration *completes* the step.
- **forward**: the outermost module call (module forward pre/post hooks,
  counting depth). Global module hooks put every module call on torch's slow
  path (a few µs each), so they only serve to *discover* the outermost modules
  during the first iteration; from the first optimizer step on, hooks sit on
  those root modules only and the rest of the model runs hook-free. A module
  first called later, at top level, is not timed (its time shows as other).
- **backward**: ``torch.autograd.backward``, which ``Tensor.backward`` calls.
  Module calls inside it (activation-checkpoint recomputation) stay backward.
- **data**: the wait in ``DataLoader`` iteration (``_BaseDataLoaderIter.__next__``).
- **other**: the rest of the step: loss functions that are not modules, host to
  device copies, gradient clipping, ``zero_grad``, logging.

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
it already had its optimizer step, ended there) and nothing is timed until the
next training forward, backward or optimizer step. See docs/auto-mode.md.

If the script calls ``probe.step()`` itself, automatic mode leaves the steps to
it and only adds the phases. Explicit ``probe.phase()`` blocks nest in and
around automatic phases as usual (a nested phase's time leaves its parent's).

This module imports torch only when hooks are installed, which happens after
the script has imported it (``ranktop launch``) or from ``probe.automatic()``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from .recorder import Recorder

#: Eval-like forwards and fetches in a row, with no backward or optimizer step, that make an evaluation loop.
EVAL_AFTER = 6


class AutoTimer:
    """The state machine: outermost events in, ``Recorder`` steps and phases out (no torch here)."""

    def __init__(self, recorder: Recorder, eval_after: int = EVAL_AFTER):
        self.rec = recorder
        self.eval_after = eval_after
        self.open = False  # one of our steps is open in the recorder
        self.complete = False  # ... and an optimizer step has ended in it
        self.fetched = False  # ... and it had a DataLoader fetch
        self.pending_fetch = False  # between steps: a fetch is waiting to be carried into the next step
        self.idle = 0  # eval-like forwards and fetches since the last sign of training
        self.user_steps = False  # the script marks steps itself (probe.step()): phases only
        self.discarded = 0  # steps dropped as evaluation
        self._number = -1

    # -- step boundaries --------------------------------------------------------

    def _ours(self) -> bool:
        """Whether the recorder's state is still what we left; if the script marks steps, stop marking them."""
        rec = self.rec
        if self.open:
            if rec.step_started and rec.current_step == self._number:
                return True
        elif not rec.step_started:
            return True
        self.user_steps = True
        self.open = False
        return False

    def _begin_step(self) -> None:
        rec = self.rec
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

    # -- events (outermost only, training thread only) --------------------------

    def data_begin(self) -> None:
        self.idle += 1
        if not self.user_steps and self._ours():
            if self.open:
                if self.complete:
                    self._begin_step()
                elif self.idle > self.eval_after:
                    self._drop()
            if self.open:
                self.fetched = True
            else:
                self.rec.discard()  # between steps only the latest fetch is carried into the next step
                self.pending_fetch = True
        self.rec.begin_phase("data")

    def data_end(self) -> None:
        self.rec.end_phase()

    def forward_begin(self, training: bool) -> bool:
        """Returns whether a forward phase was begun (and ``forward_end`` must follow)."""
        if self.user_steps or not self._ours():
            self.rec.begin_phase("forward")
            return True
        if training:
            self.idle = 0
            if not self.open or (self.complete and not self.fetched):
                self._begin_step()
        else:
            self.idle += 1
            if self.open and self.complete and not self.fetched:
                self._drop()  # a loop without DataLoader: eval right after the step ends it
            elif self.open and self.idle > self.eval_after:
                self._drop()
            if not self.open and self.idle > self.eval_after:
                self.rec.discard()
                self.pending_fetch = False
                return False  # an evaluation loop outside training steps is not timed
            # else: timed, and outside a step carried into the next (a teacher's forward before the first step)
        self.rec.begin_phase("forward")
        return True

    def forward_end(self) -> None:
        self.rec.end_phase()

    def _train_event(self) -> None:
        self.idle = 0
        if not self.user_steps and self._ours() and not self.open:
            self._begin_step()

    def backward_begin(self) -> None:
        self._train_event()
        self.rec.begin_phase("backward")

    def backward_end(self) -> None:
        self.rec.end_phase()

    def optimizer_begin(self) -> None:
        self._train_event()
        self.rec.begin_phase("optimizer")

    def optimizer_end(self) -> None:
        self.rec.end_phase()
        if self.open:
            self.complete = True

    def disable(self) -> None:
        for name in ("data_begin", "data_end", "forward_end", "backward_begin", "backward_end", "optimizer_begin", "optimizer_end"):
            setattr(self, name, _noop)
        self.forward_begin = _false


def _noop(*args, **kwargs) -> None:
    return None


def _false(*args, **kwargs) -> bool:
    return False


class TorchHooks:
    """Installs the hooks that feed an :class:`AutoTimer`, and removes them.

    ``model``/``optimizer`` (from ``probe.automatic(model, optimizer)``) narrow the
    hooks to those objects: then no global module hook is ever installed.
    """

    def __init__(self, timer: AutoTimer, model: Any = None, optimizer: Any = None, on_first_step: Callable[[Any], None] | None = None):
        import torch

        self.timer = timer
        self._torch = torch
        self._thread = threading.get_ident()
        self._model = model
        self._optimizer = optimizer
        self._on_first_step = on_first_step
        self._handles: list[Any] = []
        self._discovery: list[Any] = []  # the global module hooks, until the roots are known
        self._roots: dict[int, weakref.ref] = {}
        self._fwd_depth = 0
        self._fwd_open = False
        self._bwd_depth = 0
        self._opt_depth = 0
        self._data_depth = 0
        self._patched: list[tuple[Any, str, Any]] = []
        self.installed = False

    # -- installing -------------------------------------------------------------

    def install(self) -> "TorchHooks":
        torch = self._torch
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim_module
        from torch.utils.data import dataloader

        if self._optimizer is not None:
            self._handles.append(self._optimizer.register_step_pre_hook(self._opt_pre))
            self._handles.append(self._optimizer.register_step_post_hook(self._opt_post))
        else:
            self._handles.append(optim_module.register_optimizer_step_pre_hook(self._opt_pre))
            self._handles.append(optim_module.register_optimizer_step_post_hook(self._opt_post))
        if self._model is not None:
            self._hook_root(self._model)
        else:
            self._discovery = [
                nn_module.register_module_forward_pre_hook(self._fwd_pre_discover),
                nn_module.register_module_forward_hook(self._fwd_post_discover, always_call=True),
            ]
        self._patch(torch.autograd, "backward", self._wrap_backward(torch.autograd.backward))
        iter_class = dataloader._BaseDataLoaderIter
        self._patch(iter_class, "__next__", self._wrap_next(iter_class.__next__))
        self.installed = True
        return self

    def remove(self) -> None:
        for handle in self._handles + self._discovery:
            handle.remove()
        self._handles, self._discovery = [], []
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched = []
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
        # First of the module's pre-hooks and last of its post-hooks: the script's own hooks are forward time.
        self._handles.append(module.register_forward_pre_hook(self._fwd_pre, prepend=True))
        self._handles.append(module.register_forward_hook(self._fwd_post, always_call=True))

    def _end_discovery(self) -> None:
        """After the first optimizer step: hooks on the root modules seen, none on the rest."""
        for handle in self._discovery:
            handle.remove()
        self._discovery = []
        for ref in list(self._roots.values()):
            module = ref()
            if module is not None:
                self._hook_module(module)

    # -- the hooks (hot path) ---------------------------------------------------

    def _fwd_pre_discover(self, module, args):
        if self._thread != threading.get_ident():
            return
        if self._fwd_depth == 0 and not self._bwd_depth:
            self._roots.setdefault(id(module), weakref.ref(module))
        self._fwd_pre(module, args)

    def _fwd_post_discover(self, module, args, output):
        if self._thread != threading.get_ident():
            return
        self._fwd_post(module, args, output)

    def _fwd_pre(self, module, args):
        if self._thread != threading.get_ident():
            return
        depth = self._fwd_depth
        self._fwd_depth = depth + 1
        if depth == 0 and not self._bwd_depth:
            self._fwd_open = self.timer.forward_begin(module.training and self._torch.is_grad_enabled())

    def _fwd_post(self, module, args, output):
        if self._thread != threading.get_ident():
            return
        depth = self._fwd_depth - 1
        self._fwd_depth = depth if depth > 0 else 0
        if depth <= 0 and self._fwd_open:
            self._fwd_open = False
            self.timer.forward_end()

    def _opt_pre(self, optimizer, args, kwargs):
        if self._thread != threading.get_ident():
            return
        self._opt_depth += 1
        if self._opt_depth == 1:
            self.timer.optimizer_begin()

    def _opt_post(self, optimizer, args, kwargs):
        if self._thread != threading.get_ident() or not self._opt_depth:
            return
        self._opt_depth -= 1
        if self._opt_depth == 0:
            self.timer.optimizer_end()
            if self._discovery and self._roots:  # (a step with no module call seen keeps discovering)
                self._end_discovery()
            if self._on_first_step is not None:
                callback, self._on_first_step = self._on_first_step, None
                callback(optimizer)

    def _wrap_backward(self, original):
        hooks = self

        def backward(*args, **kwargs):
            if hooks._thread != threading.get_ident() or hooks._bwd_depth:
                return original(*args, **kwargs)
            hooks._bwd_depth = 1
            hooks.timer.backward_begin()
            try:
                return original(*args, **kwargs)
            finally:
                hooks._bwd_depth = 0
                hooks.timer.backward_end()

        backward.__wrapped__ = original
        backward.__doc__ = original.__doc__
        return backward

    def _wrap_next(self, original):
        hooks = self

        def __next__(self):
            if hooks._thread != threading.get_ident() or hooks._data_depth:
                return original(self)
            hooks._data_depth = 1
            hooks.timer.data_begin()
            try:
                return original(self)
            finally:
                hooks._data_depth = 0
                hooks.timer.data_end()

        __next__.__wrapped__ = original
        return __next__


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
        hooks = TorchHooks(timer, model=model, optimizer=optimizer)
        gpu = _gpu_start_callback(probe)
        if gpu is not None:
            hooks._on_first_step = gpu
        _hooks = hooks.install()
        probe.auto = hooks
        return hooks


def stop(remove: bool = True) -> None:
    """Switch automatic mode off (the probe was shut down or faulted, or this is a forked child).

    The timer's methods become no-ops at once. The hooks themselves are removed
    only from the training thread (or a fresh fork): removing them from the
    sender thread could change torch's hook dicts while training iterates them.
    """
    global _hooks
    hooks = _hooks
    if hooks is None:
        return
    hooks.timer.disable()
    if remove:
        _hooks = None
        try:
            hooks.remove()
        except Exception:
            pass


def _gpu_start_callback(probe: Any):
    """On CUDA, device-side timing starts at the first optimizer step, on the device of its parameters."""
    try:
        from . import gpu_timing
    except ImportError:
        return None
    return gpu_timing.starter(probe)
