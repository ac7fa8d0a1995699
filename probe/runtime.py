"""The probe of this process: one per process, started by ``init``, stopped by ``shutdown``.

The module-level ``step``/``phase`` of :mod:`ranktop.probe` go through the
``active`` object here, which is either a running :class:`Probe` or
:data:`DISABLED`. Switching the probe off swaps that object (and turns the
recorder's methods into no-ops), so the hot path never tests a flag.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

from ranktop.wire import settings

from . import auto, collectives, compile_phase, device_waits, flops, gpu_timing, process_groups, stream_waits
from .evidence import Evidence
from .collective_tracker import CollectiveTracker
from ranktop.transport.identity import Identity, detect
from .recorder import NOOP, NoopScope, PhaseScope, Recorder, StepScope
from .resources import RankResources
from .sender import Sender

DEFAULT_RATE_HZ = settings.DEFAULT_RATE_HZ
DEFAULT_CAPACITY = 4096


class Probe:
    def __init__(self, identity: Identity, *, rate_hz: float, capacity: int, directory: str | None, work: dict[str, Any] | None = None):
        self.identity = identity
        self.recorder = Recorder(capacity, on_fault=self._fault)
        self.collectives = CollectiveTracker(self.recorder)
        self.sender = Sender(
            identity, self.recorder, rate_hz=rate_hz, directory=directory, on_fault=self._fault, collectives=self.collectives
        )
        self.resources = RankResources(identity, self.sender, work or {})  # memory, GPU gauges, work per step
        # built on the training thread (the one that calls init): the thread it watches
        self.evidence = Evidence(
            rows_in=lambda: self.collectives.rows_in, steps=lambda: self.recorder.produced,
            work=lambda: self.resources.work, retries=self.resources.memory.retries,
        )  # fmt: skip
        self.sender.add_state("ev", self.evidence.sample)
        self._step = StepScope(self.recorder)
        self._phases: dict[str, PhaseScope] = {}
        self._disabled = False

    def step(self, number: int | None = None) -> StepScope:
        return self._step if number is None else StepScope(self.recorder, number)

    def phase(self, name: str) -> PhaseScope:
        scope = self._phases.get(name)
        if scope is None:
            scope = self._phases[name] = PhaseScope(self.recorder, str(name))
            if name == "forward":  # once: where the script enters it, autocast (if on) says what MFU's peak is for
                try:
                    self.resources.learn_autocast()
                except Exception:
                    pass
        return scope

    def add_inputs(self, samples: int = 0, tokens: int = 0, padded: int | None = None) -> None:
        self.evidence.inputs.add(samples, tokens, padded)

    def _fault(self, exc: BaseException) -> None:
        if not self._disabled:
            print(
                f"ranktop: probe disabled on rank {self.identity.rank} after an internal error "
                f"({exc.__class__.__name__}: {exc}); training continues",
                file=sys.stderr,
            )
            _deactivate(self)


class _Disabled:
    """The probe while off: every call returns the shared no-op scope."""

    identity = None

    def step(self, number: int | None = None) -> NoopScope:
        return NOOP

    def phase(self, name: str) -> NoopScope:
        return NOOP

    def add_inputs(self, samples: int = 0, tokens: int = 0, padded: int | None = None) -> None:
        pass


DISABLED = _Disabled()
active: Probe | _Disabled = DISABLED
_lock = threading.Lock()  # guards init/shutdown only, never the hot path


def init(
    job: str | None = None,
    *,
    rate_hz: float = DEFAULT_RATE_HZ,
    capacity: int = DEFAULT_CAPACITY,
    rendezvous_dir: str | None = None,
    batch_size: int | None = None,
    tokens_per_step: int | None = None,
    flops_per_step: float | str | None = None,
    flops_dtype: str | None = None,
    layout: str | None = None,
) -> Probe | _Disabled:
    """Start the probe in this process (idempotent). ``RANKTOP_DISABLE=1`` keeps it off.

    ``batch_size``, ``tokens_per_step`` and ``flops_per_step`` (per rank, per step; else
    ``RANKTOP_BATCH_SIZE``, ``RANKTOP_TOKENS_PER_STEP``, ``RANKTOP_FLOPS_PER_STEP``) give
    samples/s, tokens/s and MFU against the peak of ``flops_dtype`` (else ``RANKTOP_FLOPS_DTYPE``, else the
    dtype the job computes in, learnt in automatic mode, else bf16; see probe/flops.py). Called again once the
    probe runs (a script's own ``init`` under ``ranktop launch``), the work it states replaces the launch's.
    ``layout`` (else ``RANKTOP_LAYOUT``) states the parallel layout, outermost dimension first
    (``"pp=4,tp=8,dp=-1"``), for a job whose process groups do not say it (docs/parallelism.md).
    """
    global active
    with _lock:
        if isinstance(active, Probe):
            # A script that called init() before importing torch: automatic mode (``ranktop launch``) calls
            # again once torch is in, and the collectives are wrapped then (idempotent), or their waits would
            # count as the phase's own work.
            collectives.install(active.collectives)
            if flops_per_step == "auto":
                flops_per_step = None
            active.resources.set_work(batch=batch_size, tokens=tokens_per_step, flops=flops_per_step, dtype=flops_dtype)
            return active
        if settings.DISABLE.on():
            return DISABLED
        problem = settings.rate_problem(rate_hz)
        if problem:
            raise ValueError(f"rate_hz {problem}")
        work = flops.work_from(batch_size, tokens_per_step, flops_per_step, flops_dtype)
        identity = detect(job)
        process_groups._stated[:] = _stated_layout(layout, identity)
        probe = Probe(identity, rate_hz=rate_hz, capacity=capacity, directory=rendezvous_dir, work=work)
        probe.sender.add_hello("groups", process_groups.groups_hello)
        active = probe
        collectives.install(probe.collectives)  # only if the script has imported torch.distributed
        gpu_timing.arm(probe)  # device timing, from the first step once the script has CUDA up
        # torch.compile's compilations inside a step, timed as the phase ``compile`` on this (the training) thread:
        # registered with dynamo once the script has loaded it (now, at its torch.compile in automatic mode, or by
        # the sender thread's next flush).
        compile_phase.start(probe.recorder, threading.get_ident(), probe._fault)
        probe.sender.start()
        probe.resources.start()
        probe.evidence.start()
        return probe


def _stated_layout(layout: str | None, identity: Identity) -> list[dict[str, Any]]:
    """The groups a stated layout puts this rank in: ``layout`` (a bad one raises), else ``RANKTOP_LAYOUT``
    (a bad one is said once and ignored: a typo in the environment must not cost the job its probe)."""
    if layout:
        return process_groups.state_layout(layout, identity.rank, identity.world)
    text = settings.LAYOUT.get()
    if not text:
        return []
    try:
        return process_groups.state_layout(text, identity.rank, identity.world)
    except ValueError as exc:
        if identity.rank == 0:
            print(f"ranktop: RANKTOP_LAYOUT ignored: {exc}", file=sys.stderr)
        return []


def _deactivate(probe: Probe) -> None:
    global active
    probe._disabled = True
    probe.recorder.disable()
    collectives.detach(probe.collectives)
    device_waits.unwatch()
    stream_waits.unwatch()
    auto.stop(remove=threading.current_thread() is not probe.sender)  # never mutate torch's hooks under training
    compile_phase.stop(remove=threading.current_thread() is not probe.sender)
    if active is probe:
        active = DISABLED
    probe.resources.stop()
    probe.evidence.stop()
    probe.sender.stop(timeout=0 if threading.current_thread() is probe.sender else 2.0)


def shutdown() -> None:
    """Flush what is left, remove this node's rendezvous record, stop the thread."""
    with _lock:
        if isinstance(active, Probe):
            capture = active.sender.capture
            if capture is not None and threading.current_thread() is not active.sender:
                capture.abandon("the probe shut down during the capture")  # stops a running profiler
            _deactivate(active)


def _after_fork_in_child() -> None:
    # A forked child (a DataLoader worker) has the parent's probe but none of its
    # threads or sockets: it must stay silent, and never touch the zmq context.
    global active
    if isinstance(active, Probe):
        active._disabled = True
        active.recorder.disable()
        collectives.detach(active.collectives)
        active.evidence.stop()  # the child's collections are no training step's
    device_waits.unwatch()  # a forked child has no CUDA of its own: its Work.wait passes straight through
    stream_waits.unwatch()
    auto.stop(remove=True)
    compile_phase.stop(remove=False)  # (the parent's registration, copied: inert here)
    active = DISABLED


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(shutdown)
