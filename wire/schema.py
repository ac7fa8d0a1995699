"""The messages that cross the wire, and the only code that encodes or decodes them.

Both ends import this module: the probe inside each rank and the TUI. A message is
a ZeroMQ multipart frame list ``[topic, body]``: the topic (the message kind, as
bytes) lets a subscriber filter without decoding, and the body is one msgpack map.
Every body carries ``v`` (the protocol version as ``[major, minor]``), so a peer
of another major version is recognised before anything else is read.

Nothing here unpickles or evaluates what arrives: msgpack yields plain maps,
lists, strings and numbers, and :func:`decode` checks the shape of each kind
before handing it on.
"""

from __future__ import annotations

from typing import Any

import msgpack

from . import collective_summary as _summary
from . import node_digest as _digest
from .capture import STATES as _CAPTURE_STATES

#: Bump the major version on any incompatible change; minor versions only add fields.
PROTOCOL_VERSION = (1, 5)

#: The standard phases, in the order bars are drawn. Users may add phases of their own.
STANDARD_PHASES = ("data", "forward", "backward", "optimizer")
#: The name of the time a step spent outside every named phase.
OTHER_PHASE = "other"
#: The name of the time a step spent waiting in collectives (taken out of the phases it happened in).
COMM_PHASE = "comm"

# Message kinds (the topic frame). Telemetry flows rank -> relay -> TUIs.
HELLO = "hello"  # a rank's metadata; re-sent periodically so late TUIs learn it
STEPS = "steps"  # a batch of completed step records
HEARTBEAT = "heartbeat"  # sent when a rank has nothing else to say: it is alive
REPLY = "reply"  # a rank's answer to a control command
NODE = "node"  # since 1.5: a relay's digest of its node's ranks (wire/node_digest.py), for the biggest jobs
# Control flows TUI -> relay -> ranks, always signed (see ranktop.wire.auth).
COMMAND = "command"

TELEMETRY_KINDS = (HELLO, STEPS, HEARTBEAT, REPLY, NODE)
#: What a rank itself sends (a viewer takes either these, step by step, or the node digests).
RANK_KINDS = (HELLO, STEPS, HEARTBEAT, REPLY)
KINDS = TELEMETRY_KINDS + (COMMAND,)

# A step record is a map with these keys: compact, since a rank sends one per step.
#   n: step number, t: wall-clock start (unix seconds), w: wall duration (s),
#   p: {phase: seconds of self time}; "other" is w minus the sum of p.
STEP_KEYS = ("n", "t", "w", "p")
# Since 1.2 a step record may carry "g": the step's device-side times, where the rank
#   measured them (CUDA events, probe/gpu_timing.py): {"w": seconds, "p": {phase: seconds of self time}}.
# Since 1.1 a steps message may carry "coll": one record per collective call,
#   op: name, seq: the rank's call counter, b: bytes, dt: dtype, g: group size,
#   d: seconds this rank waited for it (launch to completion), n: step, ph: phase (or None),
#   t0: its start on the rank's own monotonic clock (only differences within one rank mean anything).
COLLECTIVE_KEYS = ("op", "seq", "b", "dt", "g", "d", "n", "ph", "t0")
# Since 1.4 a probe sends no "coll" but "cs": one summary per step and phase, and "cx": a bounded
#   sample of raw records as above (wire/collective_summary.py says what each field means). A 1.3
#   viewer ignores both: it sees no collectives, and scores phases with their waits in them.

#: The largest body we accept. Bigger frames are foreign or malicious; dropped unread.
MAX_BODY_BYTES = 4 << 20


class WireError(ValueError):
    """A frame that is not a ranktop message of a known shape (dropped and counted)."""


class VersionMismatch(WireError):
    """A ranktop peer speaking another major protocol version."""

    def __init__(self, theirs: Any):
        self.theirs = theirs
        super().__init__(
            f"peer speaks ranktop protocol {_fmt_version(theirs)}, this side speaks "
            f"{_fmt_version(PROTOCOL_VERSION)}: upgrade ranktop on both sides to the same major version"
        )


def _fmt_version(v: Any) -> str:
    try:
        return ".".join(str(int(x)) for x in v)
    except Exception:
        return repr(v)


def encode(kind: str, body: dict[str, Any]) -> list[bytes]:
    """Frames for one message: ``[topic, msgpack(body + version + kind)]``."""
    payload = dict(body)
    payload["v"] = list(PROTOCOL_VERSION)
    payload["k"] = kind
    return [kind.encode(), msgpack.packb(payload, use_bin_type=True)]


def decode(frames: list[bytes]) -> dict[str, Any]:
    """Parse and check one telemetry or command message.

    Raises :class:`VersionMismatch` for a ranktop peer of another major version and
    :class:`WireError` for anything else that is not a well-formed message.
    """
    if len(frames) < 2:
        raise WireError(f"expected at least 2 frames, got {len(frames)}")
    topic, body = frames[0], frames[1]
    if len(body) > MAX_BODY_BYTES:
        raise WireError(f"message body of {len(body)} bytes exceeds {MAX_BODY_BYTES}")
    try:
        msg = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise WireError(f"body is not msgpack: {exc.__class__.__name__}") from None
    if not isinstance(msg, dict):
        raise WireError("body is not a map")
    version = msg.get("v")
    if not (isinstance(version, list) and len(version) == 2 and all(isinstance(x, int) for x in version)):
        raise WireError("missing or malformed protocol version")
    if version[0] != PROTOCOL_VERSION[0]:
        raise VersionMismatch(version)
    kind = msg.get("k")
    if kind not in KINDS or topic != kind.encode():
        raise WireError(f"unknown message kind {kind!r}")
    _CHECKS[kind](msg)
    return msg


def _need(msg: dict, key: str, types: type | tuple[type, ...]) -> Any:
    value = msg.get(key)
    # bool is an int subclass; a rank number of True is nonsense.
    if not isinstance(value, types) or isinstance(value, bool) and bool not in _as_tuple(types):
        raise WireError(f"{msg.get('k')}: field {key!r} missing or of the wrong type")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _check_origin(msg: dict) -> None:
    _need(msg, "job", str)
    rank = _need(msg, "rank", int)
    if rank < 0:
        raise WireError("negative rank")
    _need(msg, "ts", (int, float))
    _check_gauges(msg)


# Optional since 1.2 (older peers just lack them): state["mem"] = {"rss": bytes or None, "cuda": {"dev",
#   "alloc", "resv", "peak", "retries", "ooms", "cap"}} (probe/memory.py); state["gpu"] = NVML gauges,
#   {"seq", "t", ...} or {"na": why} (probe/gpu_sampler.py); hello["work"] = {"dtype", "batch", "tokens",
#   "flops", "device", "peak_tflops"} per rank and step (probe/flops.py).
# Optional since 1.3: state["cap"] = the rank's latest capture (wire/capture.py, probe/capture.py), or None:
#   {"id": str, "kind": "trace"|"memory", "st": waiting|recording|writing|done|failed, "start": first step,
#   "steps": how many, "dir": the capture folder on the rank's host, "at": the step being recorded (optional),
#   "path": the rank's file once written, "err": why it failed, "sum": a small summary once done
#   (probe/trace_summary.py: {"steps", "ops", "kernels", "basis", "wall_us", "compute", "comm", "idle"})}.
_NUMBER = (int, float)


def _check_gauges(msg: dict) -> None:
    _check_state(msg.get("state"))
    _check_work(msg.get("work"))


def _check_state(state: Any) -> None:
    if isinstance(state, dict):
        mem = state.get("mem")
        if mem is not None:
            if not isinstance(mem, dict) or not (mem.get("rss") is None or isinstance(mem["rss"], _NUMBER)):
                raise WireError("state: bad mem")
            cuda = mem.get("cuda")
            if cuda is not None and not (
                isinstance(cuda, dict) and all(isinstance(v, _NUMBER) for v in cuda.values())
            ):
                raise WireError("state: bad mem.cuda")
        gpu = state.get("gpu")
        if gpu is not None and not (isinstance(gpu, dict) and all(isinstance(k, str) for k in gpu)):
            raise WireError("state: bad gpu")
        cap = state.get("cap")
        if cap is not None:
            _check_capture(cap)


def _check_work(work: Any) -> None:
    if work is not None and not (
        isinstance(work, dict) and all(isinstance(v, (str,) + _NUMBER) for v in work.values())
    ):
        raise WireError("hello: bad work")


def _check_capture(cap: Any) -> None:
    if not (isinstance(cap, dict) and isinstance(cap.get("id"), str) and cap.get("st") in _CAPTURE_STATES):
        raise WireError("state: bad cap")
    if not (isinstance(cap.get("start"), int) and isinstance(cap.get("steps"), int) and isinstance(cap.get("kind"), str)):
        raise WireError("state: bad cap")
    for key in ("dir", "path", "err"):
        if cap.get(key) is not None and not isinstance(cap[key], str):
            raise WireError("state: bad cap")
    if cap.get("at") is not None and not isinstance(cap["at"], int):
        raise WireError("state: bad cap")
    if cap.get("sum") is not None and not isinstance(cap["sum"], dict):
        raise WireError("state: bad cap")


def _check_hello(msg: dict) -> None:
    _check_origin(msg)
    _need(msg, "host", str)
    _need(msg, "world", int)
    _need(msg, "local_rank", int)
    _need(msg, "pid", int)


# The checks below run for every step record and summary of thousands of ranks: they test exact types
# (msgpack yields plain int, float, str, list and dict; a bool is no number here) without generators.
_REAL = frozenset((int, float))


def _check_steps(msg: dict) -> None:
    _check_origin(msg)
    steps = _need(msg, "steps", list)
    real = _REAL
    for rec in steps:
        if type(rec) is not dict:
            raise WireError("steps: record is not a map")
        n, t, w, p = rec.get("n"), rec.get("t"), rec.get("w"), rec.get("p")
        if type(n) is not int or type(t) not in real or type(w) not in real:
            raise WireError("steps: record lacks n/t/w")
        if w < 0 or type(p) is not dict:
            raise WireError("steps: bad wall time or phases")
        for name, sec in p.items():
            if type(name) is not str or type(sec) not in real or sec < 0:
                raise WireError("steps: bad phase entry")
        if "g" in rec:
            _check_device_times(rec["g"])
    for key in ("coll", "cx"):
        if key in msg:
            _check_calls(msg[key], key)
    if "cs" in msg:
        _check_summaries(msg["cs"])


def _check_calls(calls: Any, key: str) -> None:
    if type(calls) is not list:
        raise WireError(f"steps: {key} is not a list")
    real = _REAL
    for call in calls:
        if type(call) is not dict:
            raise WireError("steps: collective record is not a map")
        get = call.get
        op, seq, nbytes, dtype, group, dur, step, phase, start = (
            get("op"), get("seq"), get("b"), get("dt"), get("g"), get("d"), get("n"), get("ph"), get("t0")
        )  # fmt: skip
        if not (type(op) is str and type(seq) is int and type(nbytes) is int and nbytes >= 0):
            raise WireError("steps: collective record lacks op/seq/bytes")
        if not (type(dtype) is str and type(group) is int and type(step) is int):
            raise WireError("steps: collective record lacks dtype/group/step")
        if type(start) not in real or type(dur) not in real or dur < 0:
            raise WireError("steps: collective record has a bad start or duration")
        if not (phase is None or type(phase) is str):
            raise WireError("steps: collective record has a bad phase")


def _check_summaries(summaries: Any) -> None:
    if type(summaries) is not list:
        raise WireError("steps: cs is not a list")
    real = _REAL
    for entry in summaries:
        if type(entry) is not dict:
            raise WireError("steps: collective summary is not a map")
        n, w, phase, ops = entry.get("n"), entry.get("w"), entry.get("ph"), entry.get("ops")
        if type(n) is not int or type(w) not in real or w < 0:
            raise WireError("steps: collective summary lacks n/w")
        if not (phase is None or type(phase) is str) or type(ops) is not dict:
            raise WireError("steps: collective summary has a bad phase or ops")
        _check_ops(ops)


def _check_ops(ops: dict) -> None:
    real, size = _REAL, _summary.OP_FIELDS
    for op, fields in ops.items():
        if type(op) is not str or type(fields) is not list or len(fields) != size:
            raise WireError("steps: collective summary has a bad op entry")
        calls, nbytes, waited, total, longest, group, dtype = fields  # the order of wire/collective_summary.py
        if not (type(calls) is int and calls > 0 and type(nbytes) is int and nbytes >= 0):
            raise WireError("steps: collective summary has bad calls/bytes")
        if not (type(group) is int and type(dtype) is str):
            raise WireError("steps: collective summary has a bad group/dtype")
        if type(waited) not in real or type(total) not in real or type(longest) not in real or min(waited, total, longest) < 0:
            raise WireError("steps: collective summary has a bad wait")


def _check_device_times(g: Any) -> None:
    if not isinstance(g, dict) or not isinstance(g.get("w"), (int, float)) or g["w"] < 0:
        raise WireError("steps: bad device times")
    phases = g.get("p")
    if not isinstance(phases, dict):
        raise WireError("steps: bad device times")
    for name, sec in phases.items():
        if not isinstance(name, str) or not isinstance(sec, (int, float)) or sec < 0:
            raise WireError("steps: bad device phase entry")


def _check_heartbeat(msg: dict) -> None:
    _check_origin(msg)


def _check_reply(msg: dict) -> None:
    _check_origin(msg)
    _need(msg, "id", str)
    _need(msg, "cmd", str)
    _need(msg, "ok", bool)


def _check_command(msg: dict) -> None:
    _need(msg, "job", str)
    _need(msg, "id", str)
    _need(msg, "cmd", str)
    _need(msg, "ts", (int, float))
    _need(msg, "args", dict)
    targets = msg.get("ranks")
    if targets is not None and not (isinstance(targets, list) and all(isinstance(r, int) for r in targets)):
        raise WireError("command: ranks must be null or a list of ints")


def _check_node(msg: dict) -> None:
    _need(msg, "job", str)
    _need(msg, "host", str)
    _need(msg, "ts", (int, float))
    relay = msg.get("relay")
    if relay is not None and not (isinstance(relay, dict) and all(type(v) is str for v in relay.values())):
        raise WireError("node: bad relay addresses")
    entries = _need(msg, "ranks", list)
    real = _REAL
    for entry in entries:
        if type(entry) is not dict:
            raise WireError("node: rank entry is not a map")
        rank, ts = entry.get("r"), entry.get("ts")
        if type(rank) is not int or rank < 0 or type(ts) not in real:
            raise WireError("node: rank entry lacks r/ts")
        if "state" in entry:
            if type(entry["state"]) is not dict:
                raise WireError("node: bad state")
            _check_state(entry["state"])
        if "hello" in entry:
            _check_node_hello(entry["hello"])
        if "s" in entry:
            _check_step_digest(entry["s"])
        if "ops" in entry:
            if type(entry["ops"]) is not dict:
                raise WireError("node: ops is not a map")
            _check_ops(entry["ops"])
        if "cx" in entry:
            _check_calls(entry["cx"], "cx")
        if "dev" in entry and type(entry["dev"]) is not bool:
            raise WireError("node: bad dev")


def _check_node_hello(hello: Any) -> None:
    if type(hello) is not dict:
        raise WireError("node: hello is not a map")
    if not (type(hello.get("host")) is str and type(hello.get("world")) is int and type(hello.get("local_rank")) is int):
        raise WireError("node: hello lacks host/world/local_rank")
    if type(hello.get("pid")) is not int:
        raise WireError("node: hello lacks pid")
    _check_work(hello.get("work"))


def _check_step_digest(s: Any) -> None:
    """A rank's steps of one interval (wire/node_digest.py): [last, count, start, mean wall, own times]."""
    real = _REAL
    if type(s) is not list or len(s) != _digest.STEP_FIELDS:
        raise WireError("node: bad step record")
    last, count, start, wall, own = s
    if type(last) is not int or type(count) is not int or count < 1 or type(start) not in real:
        raise WireError("node: step record lacks last/count/start")
    if type(wall) not in real or wall < 0 or type(own) is not dict:
        raise WireError("node: step record has a bad wall or own times")
    for name, sec in own.items():
        if type(name) is not str or type(sec) not in real or sec < 0:
            raise WireError("node: bad own time entry")


_CHECKS = {
    HELLO: _check_hello,
    STEPS: _check_steps,
    HEARTBEAT: _check_heartbeat,
    REPLY: _check_reply,
    COMMAND: _check_command,
    NODE: _check_node,
}
