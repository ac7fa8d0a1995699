"""ranktop's in-process probe: per-step phase timings streamed from every rank.

Usage::

    from ranktop import probe

    probe.init()                          # once per process; reads rank/job from the env
    for batch in loader:
        with probe.step():
            with probe.phase("forward"):
                loss = model(batch)
            with probe.phase("backward"):
                loss.backward()
            with probe.phase("optimizer"):
                opt.step()

``step()`` and ``phase()`` also work as decorators, cost nothing before ``init``
or after ``shutdown``, and never raise into the training loop. This package
imports neither torch nor anything of the TUI.
"""

from __future__ import annotations

from ranktop.wire import STANDARD_PHASES, __version__

from . import runtime
from .runtime import init, shutdown


def step(number: int | None = None):
    """A context manager (or decorator) around one training step; ``number`` defaults to the next."""
    return runtime.active.step(number)


def phase(name: str):
    """A context manager (or decorator) timing one phase: data, forward, backward, optimizer or your own."""
    return runtime.active.phase(name)


def get():
    """The running :class:`~ranktop.probe.runtime.Probe`, or None when the probe is off."""
    active = runtime.active
    return active if isinstance(active, runtime.Probe) else None


__all__ = ["init", "shutdown", "step", "phase", "get", "STANDARD_PHASES", "__version__"]
