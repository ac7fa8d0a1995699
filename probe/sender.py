"""The probe's background thread: drains the recorder, streams telemetry, obeys commands.

Everything that may be slow lives here rather than on the training thread:
starting and checking the node's relay process, reading rendezvous files, reading the job secret,
encoding msgpack, socket I/O and command handling. Sends are non-blocking on a
PUB socket with a high-water mark, so a slow or absent listener costs dropped
messages, never a stall.
"""

from __future__ import annotations

import collections
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import msgspec
import zmq

from ranktop.wire import __version__ as PROBE_VERSION
from ranktop.wire import auth, schema
from ranktop.wire.names import COMMAND
from ranktop.wire.messages import (
    RANK_INFO_FIELDS,
    Call,
    CallSummary,
    Capture,
    DeviceTimes,
    Exit,
    Heartbeat,
    Hello,
    Message,
    RankInfo,
    Refused,
    Reply,
    State,
    Step,
    Steps,
)
from ranktop.transport import background, rendezvous
from ranktop.transport.captures import capture_folder

from . import collective_summary, commands, compile_phase
from .collective_tracker import CollectiveTracker
from ranktop.transport.identity import Identity
from .recorder import Recorder
from ranktop.transport.ipc import ipc_endpoints
from ranktop.relay.keeper import RelayKeeper

#: Most step records in one message; a rank that fell far behind sends several.
MAX_RECORDS_PER_MESSAGE = 512
#: With nothing else to send, a heartbeat this often says the rank is alive.
HEARTBEAT_EVERY_S = 1.0
#: Hello (metadata) is repeated so that a TUI attaching late learns it.
#: How long the last word (the exit heartbeat) is given to pass the node's relay before the rank lets it go.
LAST_WORD_S = 0.1
HELLO_EVERY_S = 2.0
#: Commands handled per wake-up at most, so a flood cannot starve telemetry.
MAX_COMMANDS_PER_WAKE = 32
#: Commands a rank checks per second at most (a burst of this many is allowed). Checking one (HMAC,
#: decode) takes 30-60 us of this thread, holding the GIL: a flood of forged or replayed commands,
#: thousands a second, would take that time from training. Past it they are counted ("flood"), unread.
MAX_COMMANDS_PER_S = 200.0
#: The state keys the sender fills itself; registered sources add the others.
_CORE_STATE = frozenset({"step", "last", "in_step", "phase", "step_age", "dropped", "rejected", "rate_hz", "median_step_s", "cap"})


def exit_kind() -> Exit:
    """How this process is ending, as the probe can tell while it shuts down: an uncaught exception in the
    script leaves ``sys.last_value`` (``sys.last_exc`` since 3.12) set before ``atexit`` runs."""
    died = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return "error" if died is not None else "clean"


class Sender(threading.Thread):
    def __init__(
        self,
        identity: Identity,
        recorder: Recorder,
        *,
        rate_hz: float,
        directory: str | None,
        on_fault: Callable[[BaseException], None],
        collectives: CollectiveTracker | None = None,
    ):
        super().__init__(name="ranktop-probe", daemon=True)
        self.identity = identity
        self.recorder = recorder
        self.collectives = collectives
        self.rate_hz = rate_hz
        self.ready = threading.Event()  # set once sockets are up (tests and shutdown wait on it)
        self._directory = directory
        self._on_fault = on_fault
        self._stop_event = threading.Event()
        self._relay = RelayKeeper(identity, directory)  # the node's relay process (relay/process.py)
        self._taken = 0
        self._dropped = 0
        self._rejected: dict[str, int] = {}
        self._command_budget = MAX_COMMANDS_PER_S  # a token bucket (see MAX_COMMANDS_PER_S)
        self._budget_at = time.monotonic()
        self._meta: RankInfo | None = None  # the hello's fields that never change
        # Recent step wall times: the state carries their median, so a TUI that attaches to a
        # job already hung still knows how long a step usually takes on this rank.
        self._recent_walls: collections.deque[float] = collections.deque(maxlen=32)
        self._held_calls: list[dict[str, Any]] = []  # collective calls of the step in progress (see _flush)
        self._next_sample = 0.0  # when the next sample of raw calls may go (probe/collective_summary.py)
        # Registered sources (see add_state / add_hello): what other parts of the probe put in
        # every state (memory, GPU gauges, the last collective) or every hello (the work per step).
        self._state_sources: dict[str, Callable[[], Any]] = {}
        self._hello_sources: dict[str, Callable[[], Any]] = {}
        self.capture: Any = None  # the latest capture (probe/capture.py), set by the capture command
        # The rank's device for its hello ("cuda:3 NVIDIA H100 ..."), set where it is known without touching
        # CUDA from this thread: the training thread when device timing attaches, or the memory sampler
        # once the training holds memory on a device (probe/resources.py).
        self.device = "cpu"
        if collectives is not None:
            self.add_state("collective", collectives.state)

    def add_state(self, key: str, source: Callable[[], Any]) -> None:
        """Send ``source()`` as ``key`` in every state (a field of wire/messages.py's ``State``), read on this thread.

        Register before :meth:`start`. A source runs on the sender thread, never
        the training thread, so it may take a moment (a memory sample); it returns
        plain values, which the state's type checks and converts (a value it refuses
        is left out, and the rest of the state goes).
        """
        if key in _CORE_STATE:
            raise ValueError(f"state key {key!r} belongs to the sender")
        if key not in State.__struct_fields__:
            raise ValueError(f"state key {key!r} is no field of wire/messages.py's State")
        self._state_sources[key] = source

    def add_hello(self, key: str, source: Callable[[], Any]) -> None:
        """Send ``source()`` as ``key`` (a field of wire/messages.py's ``RankInfo``) in every hello when it is
        not empty (the work per step may be learnt after init, so it is read each time)."""
        if key not in RANK_INFO_FIELDS:
            raise ValueError(f"hello key {key!r} is no field of wire/messages.py's RankInfo")
        self._hello_sources[key] = source

    def capture_folder(self, capture_id: str) -> Path:
        """Where this rank writes a capture's file: fixed by the job's side, never by the network."""
        return capture_folder(self.identity.job, capture_id, self._directory)

    # -- lifecycle ------------------------------------------------------------

    def stop(self, timeout: float = 2.0) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        try:
            background.name_thread(self.name)
            self._run()
        except Exception as exc:  # a fault in the probe disables the probe, never the training
            self._on_fault(exc)
        finally:
            self.ready.set()

    def _run(self) -> None:
        ctx = zmq.Context()
        pub = sub = None
        try:
            self._relay.start()
            try:
                secret = rendezvous.load_or_create_secret(self.identity.job, self._directory)
                verifier = auth.CommandVerifier(secret, self.identity.job)
            except OSError as exc:
                print(f"ranktop: commands disabled on rank {self.identity.rank}: cannot read job secret: {exc}", file=sys.stderr)
                verifier = None
            tele_ipc, ctl_ipc = ipc_endpoints(self.identity.job, self.identity.host, self._directory)
            pub = ctx.socket(zmq.PUB)
            pub.setsockopt(zmq.SNDHWM, 1000)
            pub.setsockopt(zmq.LINGER, 200)
            pub.connect(tele_ipc)
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.RCVHWM, 100)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, COMMAND.encode())
            sub.connect(ctl_ipc)
            self.ready.set()
            self._loop(pub, sub, verifier)
            self._flush(pub, final=True)
            # The last word (wire/schema.py EXITS): a viewer that hears every rank say it knows the job ended.
            self._send(pub, self.heartbeat(exit_kind()))
            # ... given a moment to leave the node: the last rank to go lets the relay end at once, and a relay
            # ending drops what it has not sent on yet. On this thread, at exit only.
            time.sleep(LAST_WORD_S)
        finally:
            for sock in (pub, sub):
                if sock is not None:
                    sock.close()
            ctx.term()
            self._relay.stop()

    def _loop(self, pub: zmq.Socket[bytes], sub: zmq.Socket[bytes], verifier: auth.CommandVerifier | None) -> None:
        poller = zmq.Poller()
        poller.register(sub, zmq.POLLIN)
        next_flush = time.monotonic()
        next_hello = next_flush
        last_sent = 0.0
        while not self._stop_event.is_set():
            now = time.monotonic()
            if self._relay.due(now):
                self._relay.check()
            if now >= next_hello:
                self._send(pub, self.wire_hello())
                next_hello = now + HELLO_EVERY_S
            if now >= next_flush:
                if self._flush(pub):
                    last_sent = now
                elif now - last_sent >= HEARTBEAT_EVERY_S:
                    self._send(pub, self.heartbeat())
                    last_sent = now
                next_flush = max(next_flush + 1.0 / self.rate_hz, now)  # never a burst to catch up
                compile_phase.settle()  # dynamo loaded since (the explicit probe's torch.compile): its compilations timed
            timeout_ms = max(0, int((min(next_flush, next_hello) - time.monotonic()) * 1000))
            if poller.poll(min(timeout_ms, 250)):
                self._handle_commands(pub, sub, verifier)

    # -- telemetry ------------------------------------------------------------

    def heartbeat(self, exit: Exit | None = None) -> Heartbeat:
        """This rank is alive, and where it is; ``exit``: its last word, how its process is ending."""
        ident = self.identity
        return Heartbeat(job=ident.job, rank=ident.rank, ts=time.time(), state=self.wire_state(), exit=exit)

    def message(self, msg: Message) -> list[bytes]:
        """The frames of one message of this rank."""
        return schema.encode(msg)

    def _send(self, pub: zmq.Socket[bytes], msg: Message) -> None:
        try:
            pub.send_multipart(self.message(msg), flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # PUB drops at its high-water mark; nothing to do but move on

    def _flush(self, pub: zmq.Socket[bytes], final: bool = False) -> bool:
        """Send every completed step record; True if anything was sent."""
        records = self.recorder.drain()
        self._recent_walls.extend(rec["w"] for rec in records[-32:])
        self._taken += len(records)
        # What the training thread produced but neither we took nor the buffer holds fell off.
        self._dropped = max(self._dropped, self.recorder.produced - self._taken - len(self.recorder.buffer))
        timeline = self.recorder.timeline  # device-side timing (probe/gpu_timing.py), once attached
        if timeline is not None:
            records = timeline.resolve(records, final=final)
        summaries, sample = self._collective_summaries(final)
        chunks = max(len(records), len(summaries))
        for i in range(0, chunks, MAX_RECORDS_PER_MESSAGE):
            cs = summaries[i : i + MAX_RECORDS_PER_MESSAGE]
            cx = None
            if cs and i == 0 and (final or time.monotonic() >= self._next_sample):
                cx = sample
                self._next_sample = time.monotonic() + collective_summary.SAMPLE_EVERY_S
            self._send(pub, self.steps_message(records[i : i + MAX_RECORDS_PER_MESSAGE], cs, cx))
        return bool(chunks)

    def steps_message(self, records: list[dict[str, Any]], cs: list[CallSummary] | None = None, cx: list[Call] | None = None) -> Steps:
        """A steps message of the recorder's ``records`` (and the device timeline's), the collectives' summaries and
        sample, and the state now. The records' figures are checked where they are read: a record the viewer
        refuses is dropped there, never a fault here."""
        steps = [
            Step(n=rec["n"], t=rec["t"], w=rec["w"], p=rec["p"], g=DeviceTimes(w=rec["g"]["w"], p=rec["g"]["p"]) if rec.get("g") else None)
            for rec in records
        ]  # fmt: skip
        ident = self.identity
        return Steps(job=ident.job, rank=ident.rank, ts=time.time(), steps=steps, state=self.wire_state(), cs=cs or None, cx=cx or None)

    def _collective_summaries(self, final: bool) -> tuple[list[CallSummary], list[Any]]:
        """The drained calls as one summary per step and phase (probe/collective_summary.py), and a sample.

        The calls of the step in progress wait for the next flush, so that a step's waits are
        unioned once, whole (its buckets overlap); never more than the tracker holds.
        """
        if self.collectives is None:
            return [], []
        calls = self._held_calls + self.collectives.drain(final=final)
        self._held_calls = []
        rec = self.recorder
        if not final and rec.step_started and calls and calls[-1]["n"] == rec.current_step:
            current = rec.current_step
            held = [c for c in calls if c["n"] == current]
            if len(held) < (self.collectives.buffer.maxlen or 0):
                self._held_calls = held
                calls = [c for c in calls if c["n"] != current]
        return collective_summary.summarise(calls) if calls else ([], [])

    def wire_state(self) -> State:
        """Where the training thread is, and what the registered sources say: the wire's ``State``, each source's
        value checked by its field's type (:func:`_checked`)."""
        rec = self.recorder
        started = rec.step_started
        return State(
            step=rec.current_step,
            last=rec.last_step,
            in_step=bool(started),
            phase=rec.current_phase,
            step_age=time.perf_counter() - started if started else 0.0,
            dropped=self._dropped,
            rejected=dict(self._rejected),
            rate_hz=self.rate_hz,
            median_step_s=statistics.median(self._recent_walls) if self._recent_walls else None,
            cap=self._capture_progress(),
            **_checked(self._state_sources, _STATE_TYPES),
        )

    def state(self) -> dict[str, Any]:
        """:meth:`wire_state` as plain values, every field named (None where unknown): what a command's answer
        carries (a reply's result is a plain map: wire/schema.py)."""
        state = self.wire_state()
        return {name: msgspec.to_builtins(getattr(state, name)) for name in State.__struct_fields__}

    def _capture_progress(self) -> Capture | None:
        capture = self.capture
        if capture is None:
            return None
        capture.give_up_if_late()  # a stalled job must not keep its one capture slot for ever
        return _checked({"cap": capture.progress}, _STATE_TYPES).get("cap")

    def wire_hello(self) -> Hello:
        """Who this rank is: its identity, its relay, what the registered sources say (each source's value checked
        by its field's type, and sent when not empty: the work per step may be learnt after init)."""
        if self._meta is None:
            ident = self.identity
            torch = sys.modules.get("torch")  # reported if the script imported it; never imported here
            self._meta = RankInfo(
                host=ident.host,
                pid=ident.pid,
                world=ident.world,
                local_rank=ident.local_rank,
                local_world=ident.local_world,
                launcher=ident.launcher,
                torch=str(getattr(torch, "__version__", "")) or None,  # a str subclass: a str
                probe=PROBE_VERSION,
                python=platform.python_version(),
                argv=sys.argv[:8],
                cwd=os.getcwd(),
            )
        sourced = {key: value for key, value in _checked(self._hello_sources, _HELLO_TYPES).items() if value}
        meta = self._meta
        return Hello(
            job=self.identity.job,
            rank=self.identity.rank,
            ts=time.time(),
            host=meta.host,
            pid=meta.pid,
            world=meta.world,
            local_rank=meta.local_rank,
            local_world=meta.local_world,
            launcher=meta.launcher,
            torch=meta.torch,
            probe=meta.probe,
            python=meta.python,
            argv=meta.argv,
            cwd=meta.cwd,
            rate_hz=self.rate_hz,
            device=self.device,
            relay=self._relay.endpoints(),
            **sourced,
        )

    def hello(self) -> dict[str, Any]:
        """:meth:`wire_hello`'s own fields (less the envelope) as plain values, those set."""
        return msgspec.to_builtins(self.wire_hello().info())

    # -- control --------------------------------------------------------------

    def _handle_commands(self, pub: zmq.Socket[bytes], sub: zmq.Socket[bytes], verifier: auth.CommandVerifier | None) -> None:
        now = time.monotonic()
        self._command_budget = min(MAX_COMMANDS_PER_S, self._command_budget + (now - self._budget_at) * MAX_COMMANDS_PER_S)
        self._budget_at = now
        for _ in range(MAX_COMMANDS_PER_WAKE):
            try:
                frames = sub.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if self._command_budget < 1.0:
                self._reject("flood")
                continue
            self._command_budget -= 1.0
            if verifier is None:
                self._reject("no-secret")
                continue
            try:
                msg = verifier.verify(frames)
            except auth.AuthError as exc:
                self._reject(exc.reason)
                continue
            except schema.WireError:
                self._reject("malformed")
                continue
            if msg.ranks is not None and self.identity.rank not in msg.ranks:
                continue
            try:
                ok, result = commands.run(self, msg.cmd, msg.args)
            except Exception as exc:  # a broken handler answers with its error, the probe lives on
                ok, result = False, Refused(error=f"{exc.__class__.__name__}: {exc}")
            ident = self.identity
            self._send(
                pub,
                Reply(job=ident.job, rank=ident.rank, ts=time.time(), id=msg.id, cmd=msg.cmd, ok=ok, result=msgspec.to_builtins(result)),
            )

    def _reject(self, reason: str) -> None:
        self._rejected[reason] = self._rejected.get(reason, 0) + 1


#: Each field's type, by name: a registered source's value is checked by its field's type.
_STATE_TYPES = {f.name: f.type for f in msgspec.structs.fields(State)}
_HELLO_TYPES = {f.name: f.type for f in msgspec.structs.fields(RankInfo)}


def _checked(sources: dict[str, Callable[[], Any]], types: dict[str, Any]) -> dict[str, Any]:
    """Each source's value as its field's type (a record a source built, or the plain values it returned), checked
    by that type's bounds (a Struct is built unchecked: a NaN gauge would cost the whole message at the viewer's
    decode); a value the type refuses is left out: a gauge gone wrong costs its field, never the message, never
    the probe."""
    out: dict[str, Any] = {}
    for key, source in sources.items():
        value = source()
        if value is None:
            continue
        try:
            out[key] = msgspec.convert(msgspec.to_builtins(value), types[key])
        except (msgspec.ValidationError, TypeError):
            continue
    return out
