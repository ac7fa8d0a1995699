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

from typing import TYPE_CHECKING, Any, Callable

from . import runtime

if TYPE_CHECKING:  # the package's names stay those of __all__
    from .recorder import NoopScope, PhaseScope, StepScope
from .runtime import init, shutdown


def step(number: int | None = None) -> StepScope | NoopScope:
    """A context manager (or decorator) around one training step; ``number`` defaults to the next."""
    return runtime.active.step(number)


def phase(name: str) -> PhaseScope | NoopScope:
    """A context manager (or decorator) timing one phase: data, forward, backward, optimizer or your own."""
    return runtime.active.phase(name)


def set_work(*, batch_size: int | None = None, tokens_per_step: int | None = None, flops_per_step: float | None = None) -> None:
    """Say (or correct) what one step of this rank processes, for samples/s, tokens/s and MFU."""
    active = runtime.active
    if isinstance(active, runtime.Probe):
        active.resources.set_work(batch=batch_size, tokens=tokens_per_step, flops=flops_per_step)


def add_inputs(samples: int = 0, tokens: int = 0, padded: int | None = None) -> None:
    """Say what this step took in (call it once a step, or once per micro-batch): samples, tokens (the real
    ones) and, where batches are padded, ``padded``: the tokens computed on, padding included.

    A few integer adds; the probe sends the average per step, and the viewer names a slow rank that computes
    on more than its peers (``input_imbalance``, docs/detection.md): on the padded tokens where given (a batch
    padded to one length costs the same compute whatever its real tokens), else the tokens. Without it, the
    ``batch_size`` and ``tokens_per_step`` given to :func:`set_work` or ``init`` stand for every step."""
    runtime.active.add_inputs(samples, tokens, padded)


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Run ``fn(*args, **kwargs)`` once (a forward and backward) under PyTorch's FLOP counter,
    report the count as this rank's FLOPs per step, and return it. See probe/flops.py."""
    from . import flops

    total = flops.count_flops(fn, *args, **kwargs)
    active = runtime.active
    if isinstance(active, runtime.Probe) and total > 0:
        active.resources.set_work(flops=total)
    return total


def automatic(model: Any = None, optimizer: Any = None) -> runtime.Probe | None:
    """Automatic mode, opted into: steps and phases found from torch's own hooks (see docs/auto-mode.md).

    Starts the probe if needed (``init()``); the step ends at the optimizer step,
    forward is the outermost module call, backward ``Tensor.backward``, data the
    DataLoader's fetch. ``model``/``optimizer`` narrow the hooks to those objects.
    Returns the probe, or None when it is off. ``ranktop launch`` does the same with no code.
    """
    from . import auto

    active = runtime.active if isinstance(runtime.active, runtime.Probe) else init()
    if isinstance(active, runtime.Probe):
        auto.start(active, model, optimizer)
    return get()


def get() -> runtime.Probe | None:
    """The running :class:`~ranktop.probe.runtime.Probe`, or None when the probe is off."""
    active = runtime.active
    return active if isinstance(active, runtime.Probe) else None


__all__ = [
    "init", "shutdown", "step", "phase", "automatic", "get", "set_work", "add_inputs", "count_flops", "STANDARD_PHASES", "__version__",
]  # fmt: skip
