"""torch.compile's compilations timed as the phase ``compile``, from dynamo's own compile callbacks.

A rank that compiles (a recompilation after a new shape, a guard that failed) spends seconds on no training work,
and the other ranks wait for it in their next collective: without a word it looks like a hang. Dynamo calls the
callbacks of ``torch._dynamo.callback.callback_handler`` when a compilation starts and when it ends (outermost
only: it counts nested ones), in Python, outside any traced graph. Ours open and close the phase ``compile``
(wire/names.py PAUSE_PHASES) on the recorder, so the rank's state names it while it lasts and the viewer reads
the rank as compiling and the others as waiting for it (watch/analysis/stalls.py, pauses.py), never as stalled.

Rules, as for every hook of the probe:

- only on the training thread (the one the probe watches) and only inside a step: a compilation before the
  first step, or between steps, is start-up, left to the step that follows it as usual (not marked);
- nothing is traced, nothing guarded: the callbacks run around dynamo's work, never inside a graph, so there is
  no graph break and no recompile of the probe's making (tests/test_pt2_compat*.py);
- a fault of ours switches the callbacks off (they return at once from then on) and the probe with them (its
  ``on_fault``), never the compilation: dynamo would raise whatever a callback raises, so nothing leaves them;
- a compilation on another thread is not this rank's training: not marked (on a GPU, the autograd engine's
  device threads run a lazily compiled backward: its compilation stays backward's time).

This module never imports torch: dynamo is looked for in ``sys.modules`` (:func:`settle`), where the script has
loaded it (``torch.compile`` loads it; automatic mode settles right after, the sender thread at each flush, which also
registers them again after ``torch._dynamo.reset()``: a compilation right after a reset, before that flush, is not
marked).
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable

from ranktop.wire.names import COMPILE_PHASE

_get_ident = threading.get_ident


class CompileWatch:
    """Dynamo's compile callbacks, opening and closing ``compile`` on ``recorder`` for the thread ``thread``."""

    def __init__(self, recorder: Any, thread: int, on_fault: Callable[[BaseException], None] | None = None):
        self.rec = recorder
        self.thread = thread
        self.on_fault = on_fault
        self.open = False  # the phase is open: ours to close at the compilation's end
        self.off = False
        self.compiles = 0  # compilations marked (for tests and the curious)
        self.busy = False  # one of ours is running: dynamo is iterating its lists, which must not change now
        self._handler: Any = None

    def registered(self) -> bool:
        """Ours are in dynamo's lists (``torch._dynamo.reset()`` clears them: then they are registered again)."""
        handler = self._handler
        return handler is not None and self.started in handler.start_callbacks

    def install(self) -> bool:
        """Register with dynamo where the script has loaded it (True: registered, now or before)."""
        if self.off:
            return False
        if self.registered():
            return True
        handler = getattr(sys.modules.get("torch._dynamo.callback"), "callback_handler", None)
        if handler is None or not callable(getattr(handler, "register_start_callback", None)):
            return False
        handler.register_start_callback(self.started)
        handler.register_end_callback(self.ended)
        self._handler = handler
        return True

    def remove(self) -> None:
        """Unregister (from outside any compilation: dynamo iterates the lists while it calls them)."""
        self.off = True
        handler, self._handler = self._handler, None
        if handler is None:
            return
        for remove, callback in ((handler.remove_start_callback, self.started), (handler.remove_end_callback, self.ended)):
            try:
                remove(callback)
            except (ValueError, AttributeError):
                pass

    def started(self, args: Any = None) -> None:
        if self.off or self.thread != _get_ident():
            return
        self.busy = True  # (a fault now switches the probe off from inside dynamo's loop over the callbacks)
        try:
            rec = self.rec
            if rec.step_started and not self.open:
                rec.begin_phase(COMPILE_PHASE)
                self.open = True
                self.compiles += 1
        except Exception as exc:
            self._fault(exc)
        finally:
            self.busy = False

    def ended(self, args: Any = None) -> None:
        if not self.open or self.thread != _get_ident():
            return
        self.open = False
        self.busy = True
        try:
            if self.rec.current_phase == COMPILE_PHASE:  # (a step ended under it already closed it)
                self.rec.end_phase()
        except Exception as exc:
            self._fault(exc)
        finally:
            self.busy = False

    def _fault(self, exc: BaseException) -> None:
        self.off = True  # the callbacks stay in dynamo's lists (it may be iterating them) and return at once
        try:
            if self.on_fault is not None:
                self.on_fault(exc)
        except Exception:
            pass


_watch: CompileWatch | None = None


def start(recorder: Any, thread: int, on_fault: Callable[[BaseException], None] | None = None) -> CompileWatch:
    """The process's watch (idempotent: the first one stands), registered now if dynamo is loaded."""
    global _watch
    if _watch is None or _watch.off:
        _watch = CompileWatch(recorder, thread, on_fault)
    settle()
    return _watch


def settle() -> None:
    """Register the process's watch if dynamo has been loaded since, or again after ``torch._dynamo.reset()`` (which
    clears every callback): cheap once registered, a look in a short list."""
    watch = _watch
    if watch is None or watch.off or watch.registered():
        return
    try:
        watch.install()
    except Exception as exc:
        watch._fault(exc)


def stop(remove: bool = True) -> None:
    """Switch it off (the probe was shut down or faulted, or this is a forked child): its callbacks return at once
    from now on. They leave dynamo's lists only when ``remove`` and no compilation is under way here (dynamo
    iterates the lists while it calls them: a removal then would skip the callback after ours, another's);
    from another thread (the sender's), they stay, inert."""
    global _watch
    watch, _watch = _watch, None
    if watch is None:
        return
    watch.off = True
    if remove and not watch.open and not watch.busy:
        try:
            watch.remove()
        except Exception:
            pass
