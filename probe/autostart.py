"""The process-startup hook behind ``ranktop launch``: automatic mode in every rank, in no other process.

``ranktop-auto.pth`` (installed into site-packages with the package) runs one
line at every interpreter start-up; only when ``RANKTOP_AUTO=1`` is set, which
``ranktop launch`` does for the command it runs, does it import this module
(the same gate coverage.py's and pytest-cov's start-up hooks use). This module
never imports torch: it puts a finder on ``sys.meta_path`` that lets the real
import of ``torch`` happen and then calls :func:`_torch_imported` (a
post-import hook, like ``wrapt.register_post_import_hook``). The finder removes
itself after that one import; a process that never imports torch is left alone.

Which processes get the probe, once torch is imported:

- the torchrun agent (``torchrun`` / ``python -m torch.distributed.run``): never;
- a process with a launcher's rank (``RANK`` and ``WORLD_SIZE``, as torchrun,
  accelerate and deepspeed set them) that is not a multiprocessing child: at
  once, so a rank stuck in the rendezvous is already visible. It then takes
  ``RANKTOP_AUTO`` out of its own environment, so nothing it starts (DataLoader
  workers under any start method, torch.compile's workers, subprocesses) runs
  the hook again;
- any other process (``python train.py``, ``srun python train.py``, ranks
  made by ``torch.multiprocessing.spawn``): at its first module call, unless
  that happens in a DataLoader worker (``get_worker_info()``) or a forked
  child. A process that imports torch but never runs a model never reports.

Forked DataLoader workers inherit the parent's probe, which goes quiet after
fork (``probe/runtime.py``), and its hooks, which :func:`ranktop.probe.auto.stop`
removes in the child.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import TypedDict

    class _State(TypedDict):
        lazy_handle: Any  # torch's RemovableHandle of the one-shot hook, while it waits
        started: bool


from ranktop.wire import settings

ENV = settings.AUTO.name
#: Steps per second the probe sends at, from ``ranktop launch --rate``.
RATE_ENV = settings.RATE.name

_forked = False
_state: _State = {"lazy_handle": None, "started": False}


def _is_launcher_agent() -> bool:
    argv = getattr(sys, "orig_argv", None) or sys.argv
    if any(a == "torch.distributed.run" or a == "torch.distributed.launch" for a in argv):
        return True
    return bool(sys.argv) and os.path.basename(sys.argv[0] or "") in ("torchrun", "torchrun.exe")


def _is_multiprocessing_child() -> bool:
    argv = getattr(sys, "orig_argv", None) or sys.argv
    if "--multiprocessing-fork" in argv or any("multiprocessing.forkserver" in a for a in argv):
        return True
    mp = sys.modules.get("multiprocessing")
    try:
        return mp is not None and mp.parent_process() is not None
    except Exception:
        return False


def _launched_rank(env: Mapping[str, str] = os.environ) -> bool:
    return bool(env.get("RANK")) and bool(env.get("WORLD_SIZE"))


def _start(model: Any = None) -> None:
    """Start the probe and automatic mode in this process, and keep the hook out of its children."""
    if _state["started"] or _forked:
        return
    _state["started"] = True
    os.environ.pop(ENV, None)
    from . import auto, runtime

    try:
        rate = float(os.environ.get(RATE_ENV, runtime.DEFAULT_RATE_HZ))
    except ValueError:
        rate = runtime.DEFAULT_RATE_HZ
    probe = runtime.init(rate_hz=rate)
    auto.start(probe)


def _torch_imported(torch: ModuleType) -> None:
    try:
        if _forked or _is_launcher_agent():
            return
        if _launched_rank() and not _is_multiprocessing_child():
            _start()
            return
        # Not (yet) known to be a rank: wait for the first module call on a thread of this process.
        from torch.nn.modules import module as nn_module

        _state["lazy_handle"] = nn_module.register_module_forward_pre_hook(_first_module_call)
    except Exception as exc:  # the hook must never break the user's import of torch
        print(f"ranktop: automatic mode off: {exc.__class__.__name__}: {exc}", file=sys.stderr)


def _first_module_call(module: Any, args: Any) -> None:
    handle, _state["lazy_handle"] = _state["lazy_handle"], None
    if handle is None:
        return
    handle.remove()  # safe here: torch iterates a copy of the global pre-hooks
    try:
        from torch.utils.data import get_worker_info

        if _forked or get_worker_info() is not None:
            return  # a DataLoader worker that runs a model: not a rank
        _start()
    except Exception as exc:
        print(f"ranktop: automatic mode off: {exc.__class__.__name__}: {exc}", file=sys.stderr)


# -- the post-import hook --------------------------------------------------------------


if TYPE_CHECKING:  # a Loader to the type checker; at run time a plain class (nothing imported at start-up for it)
    _Loader = Loader
else:
    _Loader = object


class _ChainedLoader(_Loader):
    """The real loader of torch, then our hook once its ``__init__`` has run."""

    def __init__(self, loader: Loader, callback: Callable[[ModuleType], None]):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._loader  # torch sees its own loader, as if we were never here
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class TorchImportFinder:
    """A ``sys.meta_path`` finder that only watches for ``import torch``, once."""

    def __init__(self, callback: Callable[[ModuleType], None]):
        self._callback = callback
        self._busy = False

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != "torch" or self._busy:
            return None
        self._busy = True
        try:
            import importlib.util

            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        self.uninstall()
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ChainedLoader(spec.loader, self._callback)
        return spec

    def uninstall(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def _after_fork_in_child() -> None:
    global _forked
    _forked = True


def install() -> None:
    """Called from the ``.pth`` line: run :func:`_torch_imported` once torch is imported."""
    if "torch" in sys.modules:
        _torch_imported(sys.modules["torch"])
        return
    sys.meta_path.insert(0, TorchImportFinder(_torch_imported))


if os.environ.get(ENV, "") not in ("", "0"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
    install()
