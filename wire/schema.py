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
from . import parallel_groups as _groups
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
#: The most ranks a job may have: a rank or world size beyond it is no job's (a world of 2**60 would make
#: the viewer count the ranks that never reported for ever).
MAX_RANKS = 1 << 22
#: The largest magnitude a time, duration or gauge may have (seconds, bytes, counts): every figure read is
#: finite and below it, so sums and differences stay finite and a figure always formats.
MAX_FIGURE = 1e18
#: The most phases one step record may name.
MAX_PHASES = 256
#: How deep the free-form maps a snapshot carries as they came (a command's result, a capture's summary,
#: the last collective) may nest; they hold only maps, lists, strings, finite numbers, booleans and None.
MAX_DEPTH = 8


class WireError(ValueError):
    """A frame that is not a ranktop message of a known shape (dropped and counted).

    Its text names the fault, never the peer's data (``"steps: collective record lacks phase"``): the viewer
    names each kind of fault once in its status line, so the texts are a small fixed set.
    """


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
        raise WireError("fewer than 2 frames")
    topic, body = frames[0], frames[1]
    if len(body) > MAX_BODY_BYTES:
        raise WireError(f"message body over {MAX_BODY_BYTES} bytes")
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
        raise WireError("unknown message kind")
    _CHECKS[kind](msg)
    return msg


def _need(msg: dict, key: str, types: type | tuple[type, ...]) -> Any:
    value = msg.get(key)
    # bool is an int subclass; a rank number of True is nonsense.
    if not isinstance(value, types) or isinstance(value, bool) and bool not in _as_tuple(types):
        raise WireError(f"{msg.get('k')}: field {key!r} missing or of the wrong type")
    if type(value) is float and not -MAX_FIGURE <= value <= MAX_FIGURE:  # NaN fails every comparison
        raise WireError(f"{msg.get('k')}: field {key!r} is not a finite figure")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


# The checks below run for every step record and summary of thousands of ranks: they test exact types
# (msgpack yields plain int, float, str, list and dict; a bool is no number here) without generators, and
# bound every figure by comparisons (NaN fails them all; infinities and 1e308 fail the bound).
_REAL = frozenset((int, float))
_BIG = MAX_FIGURE


def _figure(value: Any) -> bool:
    """A finite number within +-MAX_FIGURE (not a bool)."""
    return type(value) in _REAL and -_BIG <= value <= _BIG


def _amount(value: Any) -> bool:
    """A finite number within [0, MAX_FIGURE]: a duration, a size, a rate."""
    return type(value) in _REAL and 0 <= value <= _BIG


def _optional(value: Any, test) -> bool:
    return value is None or test(value)


def _plain(value: Any, depth: int = 0) -> bool:
    """Maps with string keys, lists, strings, finite numbers, booleans and None, at most MAX_DEPTH deep:
    what a snapshot may carry as it came and ``--json`` prints (no bytes, no NaN, no msgpack extension)."""
    kind = type(value)
    if kind is str or kind is bool or kind is int or value is None:
        return True
    if kind is float:
        return -_BIG <= value <= _BIG
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(_plain(v, depth + 1) for v in value)
    return False


def _check_origin(msg: dict) -> None:
    _need(msg, "job", str)
    rank = _need(msg, "rank", int)
    if not 0 <= rank < MAX_RANKS:
        raise WireError("rank out of range")
    _need(msg, "ts", (int, float))
    if "state" in msg:
        _check_state(msg["state"])


# A state (steps and heartbeat messages) says where the training thread is (probe/sender.py): "step" and
# "last" (ints), "in_step" (bool), "phase" (str or None), "step_age", "median_step_s" and "rate_hz"
# (seconds, per second), "dropped" (records lost), "rejected" ({reason: count} of refused commands),
# "collective" (the last collective entered: {"op", "seq", "b", "dt", "g", "inside", "age"}, shown as sent).
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
#: The NVML gauges a viewer reads (probe/gpu_sampler.py): texts, figures, and the slowdown reasons (a list of texts).
GPU_TEXTS = ("name", "bus")
GPU_FIGURES = ("t", "util", "mem_util", "mem_used", "mem_total", "power_w", "power_limit_w", "temp_c", "sm_mhz", "sm_max_mhz",
               "pcie_tx", "pcie_rx")  # fmt: skip


def _check_state(state: Any) -> None:
    if state is None:
        return
    if type(state) is not dict:
        raise WireError("state is not a map")
    get, real, big = state.get, _REAL, _BIG  # every steps message carries one: tests inline, no generators
    step, last, in_step, phase = get("step"), get("last"), get("in_step"), get("phase")
    if not ((step is None or type(step) is int) and (last is None or type(last) is int)):
        raise WireError("state: bad step or last step")
    if not ((in_step is None or type(in_step) is bool) and (phase is None or type(phase) is str)):
        raise WireError("state: bad in_step or phase")
    age, median, rate = get("step_age"), get("median_step_s"), get("rate_hz")
    if not (
        (age is None or type(age) in real and 0 <= age <= big)
        and (median is None or type(median) in real and 0 <= median <= big)
        and (rate is None or type(rate) in real and 0 <= rate <= big)
    ):
        raise WireError("state: bad step_age, median_step_s or rate_hz")
    dropped, rejected = get("dropped"), get("rejected")
    if dropped is not None and not (type(dropped) is int and 0 <= dropped <= big):
        raise WireError("state: dropped is not a count")
    if rejected is not None and not (
        type(rejected) is dict and all(type(k) is str and type(v) is int and 0 <= v <= big for k, v in rejected.items())
    ):
        raise WireError("state: rejected is not counts by reason")
    collective = get("collective")
    if collective is not None and not (type(collective) is dict and _flat(collective)):
        raise WireError("state: bad collective")
    mem, gpu, cap = get("mem"), get("gpu"), get("cap")
    if mem is not None:
        if type(mem) is not dict or not _optional(mem.get("rss"), _amount):
            raise WireError("state: bad mem")
        cuda = mem.get("cuda")
        if cuda is not None and not (type(cuda) is dict and all(_amount(v) for v in cuda.values())):
            raise WireError("state: bad mem.cuda")
    if gpu is not None:
        _check_gpu(gpu)
    if cap is not None:
        _check_capture(cap)


_SCALARS = frozenset((str, int, bool, type(None)))


def _flat(mapping: dict) -> bool:
    """:func:`_plain` for a map of scalars (the usual case), without a call per value."""
    big, scalars = _BIG, _SCALARS
    for key, value in mapping.items():
        if type(key) is not str:
            return False
        kind = type(value)
        if kind is float:
            if not -big <= value <= big:
                return False
        elif kind not in scalars:
            return _plain(mapping)
    return True


def _check_gpu(gpu: Any) -> None:
    if type(gpu) is not dict or not all(type(k) is str for k in gpu):
        raise WireError("state: bad gpu")
    if "na" in gpu:
        if type(gpu["na"]) is not str:
            raise WireError("state: bad gpu")
        return
    seq, throttle = gpu.get("seq"), gpu.get("throttle")
    if not (
        (seq is None or type(seq) is int)
        and all(_optional(gpu.get(k), _figure) for k in GPU_FIGURES)
        and all(gpu.get(k) is None or type(gpu[k]) is str for k in GPU_TEXTS)
        and (throttle is None or type(throttle) is list and all(type(x) is str for x in throttle))
    ):
        raise WireError("state: bad gpu gauge")


def _check_work(work: Any) -> None:
    if work is not None and not (
        type(work) is dict and all(type(k) is str and (type(v) is str or _figure(v)) for k, v in work.items())
    ):
        raise WireError("hello: bad work")


def _check_capture(cap: Any) -> None:
    if not (isinstance(cap, dict) and isinstance(cap.get("id"), str) and cap.get("st") in _CAPTURE_STATES):
        raise WireError("state: bad cap")
    if not (type(cap.get("start")) is int and type(cap.get("steps")) is int and type(cap.get("kind")) is str):
        raise WireError("state: bad cap")
    for key in ("dir", "path", "err"):
        if cap.get(key) is not None and not isinstance(cap[key], str):
            raise WireError("state: bad cap")
    if cap.get("at") is not None and type(cap["at"]) is not int:
        raise WireError("state: bad cap")
    if cap.get("sum") is not None:
        _check_capture_summary(cap["sum"])


def _pair_list(entries: Any) -> bool:
    """A summary's top entries: ``[[name, microseconds, calls], ...]`` (probe/trace_summary.py)."""
    return type(entries) is list and all(
        type(e) is list and len(e) == 3 and type(e[0]) is str and _amount(e[1]) and type(e[2]) is int for e in entries
    )


def _check_capture_summary(summary: Any) -> None:
    """What watch/capture.py reads of a capture's summary: shares, times, top entries, a note."""
    if type(summary) is not dict or not _plain(summary):
        raise WireError("state: bad capture summary")
    get = summary.get
    steps, cost, note = get("steps"), get("train_ms"), get("note")
    ok = (
        all(_optional(get(k), _figure) for k in ("compute", "comm", "idle", "wall_us", "allocated", "reserved", "segments", "events"))
        and (steps is None or type(steps) is list and len(steps) == 2 and all(type(n) is int for n in steps))
        and (cost is None or type(cost) is list and len(cost) >= 2 and all(_figure(c) for c in cost))
        and all(_optional(get(k), _pair_list) for k in ("ops", "kernels"))
        and (note is None or type(note) is str)
    )
    if not ok or (get("compute") is not None and (get("comm") is None or get("idle") is None)):
        raise WireError("state: bad capture summary")


def _check_hello(msg: dict) -> None:
    _check_origin(msg)
    _check_meta(msg)


def _check_meta(msg: dict) -> None:
    """Who a rank is (its hello, or the hello a node digest carries for it)."""
    _need(msg, "host", str)
    world = _need(msg, "world", int)
    if not 0 < world <= MAX_RANKS:
        raise WireError("hello: world size out of range")
    _need(msg, "local_rank", int)
    _need(msg, "pid", int)
    if not _optional(msg.get("rate_hz"), _amount):
        raise WireError("hello: bad rate_hz")
    _check_work(msg.get("work"))
    relay = msg.get("relay")
    if relay is not None and not (type(relay) is dict and all(type(v) is str for v in relay.values())):
        raise WireError("hello: bad relay")
    if "groups" in msg and not _groups.check(msg["groups"], world):  # wire/parallel_groups.py (optional)
        raise WireError("hello: bad groups")


def _check_steps(msg: dict) -> None:
    _check_origin(msg)
    steps = _need(msg, "steps", list)
    real, big = _REAL, _BIG
    for rec in steps:
        if type(rec) is not dict:
            raise WireError("steps: record is not a map")
        n, t, w, p = rec.get("n"), rec.get("t"), rec.get("w"), rec.get("p")
        if type(n) is not int or type(t) not in real or type(w) not in real:
            raise WireError("steps: record lacks n/t/w")
        if not (-big <= t <= big and 0 <= w <= big) or type(p) is not dict or len(p) > MAX_PHASES:
            raise WireError("steps: bad start, wall time or phases")
        for name, sec in p.items():
            if type(name) is not str or type(sec) not in real or not 0 <= sec <= big:
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
    real, big = _REAL, _BIG
    for call in calls:
        if type(call) is not dict:
            raise WireError("steps: collective record is not a map")
        get = call.get
        op, seq, nbytes, dtype, group, dur, step, phase, start = (
            get("op"), get("seq"), get("b"), get("dt"), get("g"), get("d"), get("n"), get("ph"), get("t0")
        )  # fmt: skip
        if not (type(op) is str and type(seq) is int and type(nbytes) is int and 0 <= nbytes <= big):
            raise WireError("steps: collective record lacks op/seq/bytes")
        if not (type(dtype) is str and type(group) is int and type(step) is int):
            raise WireError("steps: collective record lacks dtype/group/step")
        if type(start) not in real or type(dur) not in real or not (-big <= start <= big and 0 <= dur <= big):
            raise WireError("steps: collective record has a bad start or duration")
        if not (type(phase) is str or phase is None and "ph" in call):
            raise WireError("steps: collective record lacks phase")
        # optional: the group's id and the kind of call (c collective, p point-to-point, f functional)
        if not (type(get("gi", "")) is str and len(get("gi", "")) <= _groups.MAX_DESC and get("k", "c") in ("c", "p", "f")):
            raise WireError("steps: collective record has a bad group id or kind")


def _check_summaries(summaries: Any) -> None:
    if type(summaries) is not list:
        raise WireError("steps: cs is not a list")
    real, big = _REAL, _BIG
    for entry in summaries:
        if type(entry) is not dict:
            raise WireError("steps: collective summary is not a map")
        n, w, phase, ops = entry.get("n"), entry.get("w"), entry.get("ph"), entry.get("ops")
        if type(n) is not int or type(w) not in real or not 0 <= w <= big:
            raise WireError("steps: collective summary lacks n/w")
        if not (type(phase) is str or phase is None and "ph" in entry):
            raise WireError("steps: collective summary lacks phase")
        if type(ops) is not dict:
            raise WireError("steps: collective summary has bad ops")
        _check_ops(ops)


def _check_ops(ops: dict) -> None:
    """Per op: [calls, bytes, waited, total, longest, group, dtype] (wire/collective_summary.py)."""
    real, big, size = _REAL, _BIG, _summary.OP_FIELDS
    for op, fields in ops.items():
        if type(op) is not str or type(fields) is not list or len(fields) != size:
            raise WireError("steps: collective summary has a bad op entry")
        calls, nbytes, waited, total, longest, group, dtype = fields  # the order of wire/collective_summary.py
        if not (type(calls) is int and 0 < calls <= big and type(nbytes) is int and 0 <= nbytes <= big):
            raise WireError("steps: collective summary has bad calls/bytes")
        if not (type(group) is int and type(dtype) is str):
            raise WireError("steps: collective summary has a bad group/dtype")
        if type(waited) not in real or type(total) not in real or type(longest) not in real:
            raise WireError("steps: collective summary has a bad wait")
        if not (0 <= waited <= big and 0 <= total <= big and 0 <= longest <= big):
            raise WireError("steps: collective summary has a bad wait")


def _check_device_times(g: Any) -> None:
    if type(g) is not dict or not _amount(g.get("w")):
        raise WireError("steps: bad device times")
    phases = g.get("p")
    if type(phases) is not dict or len(phases) > MAX_PHASES:
        raise WireError("steps: bad device times")
    for name, sec in phases.items():
        if type(name) is not str or not _amount(sec):
            raise WireError("steps: bad device phase entry")


def _check_heartbeat(msg: dict) -> None:
    _check_origin(msg)


def _check_reply(msg: dict) -> None:
    _check_origin(msg)
    _need(msg, "id", str)
    _need(msg, "cmd", str)
    _need(msg, "ok", bool)
    result = msg.get("result")
    if result is not None and not (type(result) is dict and _plain(result)):
        raise WireError("reply: result is not a plain map")


def _check_command(msg: dict) -> None:
    _need(msg, "job", str)
    _need(msg, "id", str)
    _need(msg, "cmd", str)
    _need(msg, "ts", (int, float))
    _need(msg, "args", dict)
    targets = msg.get("ranks")
    if targets is not None and not (isinstance(targets, list) and all(type(r) is int for r in targets)):
        raise WireError("command: ranks must be null or a list of ints")


def _check_node(msg: dict) -> None:
    _need(msg, "job", str)
    _need(msg, "host", str)
    if not _figure(_need(msg, "ts", (int, float))):
        raise WireError("node: bad ts")
    relay = msg.get("relay")
    if relay is not None and not (isinstance(relay, dict) and all(type(v) is str for v in relay.values())):
        raise WireError("node: bad relay addresses")
    entries = _need(msg, "ranks", list)
    real = _REAL
    for entry in entries:
        if type(entry) is not dict:
            raise WireError("node: rank entry is not a map")
        rank, ts = entry.get("r"), entry.get("ts")
        if type(rank) is not int or not 0 <= rank < MAX_RANKS or not _figure(ts):
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
    _check_meta(hello)


def _check_step_digest(s: Any) -> None:
    """A rank's steps of one interval (wire/node_digest.py): [last, count, start, mean wall, own times]."""
    real, big = _REAL, _BIG
    if type(s) is not list or len(s) != _digest.STEP_FIELDS:
        raise WireError("node: bad step record")
    last, count, start, wall, own = s
    if type(last) is not int or type(count) is not int or not 0 < count <= big or not _figure(start):
        raise WireError("node: step record lacks last/count/start")
    if type(wall) not in real or not 0 <= wall <= big or type(own) is not dict:
        raise WireError("node: step record has a bad wall or own times")
    for name, sec in own.items():
        if type(name) is not str or type(sec) not in real or not 0 <= sec <= big:
            raise WireError("node: bad own time entry")


#: One check per message kind, run by :func:`decode` after the envelope (version, kind, topic): a new kind
#: adds its function here, built from the helpers above (``_need``, ``_figure``, ``_amount``, ``_plain``).
_CHECKS = {
    HELLO: _check_hello,
    STEPS: _check_steps,
    HEARTBEAT: _check_heartbeat,
    REPLY: _check_reply,
    COMMAND: _check_command,
    NODE: _check_node,
}
