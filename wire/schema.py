"""The messages that cross the wire, and the only code that encodes or decodes them.

Both ends import this module: the probe inside each rank and the TUI. A message is
a ZeroMQ multipart frame list ``[topic, body]``: the topic (the message kind, as
bytes) lets a subscriber filter without decoding, and the body is one msgpack map.
Every body carries ``v`` (the protocol version as ``[major, minor]``), so a peer
of another major version is recognised before anything else is read.

What each kind holds is written once, as types, in :mod:`.messages`; :func:`decode`
hands the kind's type to msgspec, which reads and checks the body in one call
and yields plain maps, lists, strings and numbers. Nothing here unpickles or
evaluates what arrives, and nothing downstream checks a field again.
"""

from __future__ import annotations

import re
from typing import Any, TypedDict

import msgspec

from . import messages as _messages
from . import parallel_groups as _groups
from . import step_block
from .messages import MAX_FIGURE, MAX_PHASES, MAX_RANKS  # noqa: F401  (read as schema.MAX_RANKS, ...)
from .names import (  # noqa: F401  (re-exported: schema.HELLO, schema.OTHER_PHASE, ... read as they always have)
    COMM_PHASE,
    COMMAND,
    HEARTBEAT,
    HELLO,
    KINDS,
    NODE,
    OTHER_PHASE,
    RANK_KINDS,
    REPLY,
    STANDARD_PHASES,
    STEPS,
    TELEMETRY_KINDS,
)

#: Bump the major version on any incompatible change; minor versions only add fields. One exception, named
#: where it is met: node digests' steps are packed since 1.6 (wire/step_block.py); a relay older than that is
#: told to upgrade, as a peer of another major version is.
PROTOCOL_VERSION = (1, 6)
#: The first version whose node digests a viewer reads.
PACKED_DIGESTS = (1, 6)

#: The largest body we accept. Bigger frames are foreign or malicious; dropped unread.
MAX_BODY_BYTES = 4 << 20
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

    def __init__(self, theirs: Any, what: str = "the same major version"):
        self.theirs = theirs
        super().__init__(
            f"peer speaks ranktop protocol {_fmt_version(theirs)}, this side speaks "
            f"{_fmt_version(PROTOCOL_VERSION)}: upgrade ranktop on both sides to {what}"
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
    return [kind.encode(), _encode(payload)]


def _plain_value(value: Any) -> Any:
    """What msgspec will not encode as it is: subclasses of plain types (torch's version string is a str),
    numbers that know how to be one (numpy scalars); anything else is an error, as it was."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


def _encode(payload: dict) -> bytes:
    return msgspec.msgpack.encode(payload, enc_hook=_plain_value)


def decode(frames: list[bytes]) -> dict[str, Any]:
    """Parse and check one telemetry or command message against its kind's type (wire/messages.py).

    Raises :class:`VersionMismatch` for a ranktop peer of another major version and
    :class:`WireError` for anything else that is not a well-formed message.
    """
    if len(frames) < 2:
        raise WireError("fewer than 2 frames")
    topic, body = frames[0], frames[1]
    if len(body) > MAX_BODY_BYTES:
        raise WireError(f"message body over {MAX_BODY_BYTES} bytes")
    decoder = _DECODERS.get(topic)
    if decoder is None:
        raise WireError("unknown message kind")
    try:
        msg = decoder.decode(body)
    except msgspec.ValidationError as exc:
        _envelope(body)  # another major version, an older relay's digest, or no ranktop message: said as such
        raise WireError(_fault(topic, exc)) from None
    except Exception:  # msgspec.DecodeError, and whatever a damaged body makes of the decoder
        raise WireError("body is not msgpack") from None
    if msg["v"][0] != PROTOCOL_VERSION[0]:
        raise VersionMismatch(list(msg["v"]))
    _CHECKS[msg["k"]](msg)
    return msg


class _Envelope(TypedDict):
    v: Any
    k: Any


_ENVELOPE = msgspec.msgpack.Decoder(_Envelope)


def _envelope(body: bytes) -> None:
    """A body that failed its kind's type: a peer of another major version is told so, whatever else it holds,
    and so is a relay whose digests are older than this side reads; a body that is no map, or no ranktop message,
    is named as such."""
    try:
        head = _ENVELOPE.decode(body)
    except msgspec.ValidationError:
        try:
            msgspec.msgpack.decode(body)
        except Exception:
            raise WireError("body is not msgpack") from None
        raise WireError("body is not a map with a protocol version and a kind") from None
    except Exception:
        raise WireError("body is not msgpack") from None
    version = head["v"]
    if not (isinstance(version, list) and len(version) == 2 and all(type(x) is int for x in version)):
        raise WireError("missing or malformed protocol version")
    if version[0] != PROTOCOL_VERSION[0]:
        raise VersionMismatch(version)
    if head["k"] not in KINDS:
        raise WireError("unknown message kind")
    if head["k"] == NODE and tuple(version) < PACKED_DIGESTS:
        raise VersionMismatch(version, f"{_fmt_version(PACKED_DIGESTS)} or later (node digests changed in it)")


_INDEX = re.compile(r"\[\d+\]")


def _fault(topic: bytes, exc: msgspec.ValidationError) -> str:
    """The decoder's complaint with positions in lists left out: the viewer names each kind of fault once, so
    the texts must be a small set (``steps: Expected `int`, got `str` - at `$.steps[].n` ``); no peer data."""
    return f"{topic.decode(errors='replace')}: {_INDEX.sub('[]', str(exc))}"


# What a type cannot say: free-form maps bounded in depth, and fields that come in sets.
_BIG = MAX_FIGURE


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


def _check_state(state: dict | None) -> None:
    cap = state.get("cap") if state else None
    summary = cap.get("sum") if cap else None
    if not summary:
        return
    if summary.get("compute") is not None and (summary.get("comm") is None or summary.get("idle") is None):
        raise WireError("state: bad capture summary")
    for key in ("ops", "kernels"):
        for name, micros, calls in summary.get(key) or ():
            if type(name) is not str or type(micros) not in (int, float) or type(calls) is not int:
                raise WireError("state: bad capture summary")


def _check_groups(info: dict) -> None:
    """A hello's groups: members within the world, as many as the size says (wire/parallel_groups.py)."""
    groups = info.get("groups")
    if groups is not None and not _groups.check(groups, info["world"]):
        raise WireError("hello: bad groups")


def _check_origin(msg: dict) -> None:
    _check_state(msg.get("state"))


def _check_hello(msg: dict) -> None:
    _check_state(msg.get("state"))
    _check_groups(msg)


def _check_reply(msg: dict) -> None:
    _check_state(msg.get("state"))
    result = msg.get("result")
    if result is not None and not _plain(result):
        raise WireError("reply: result is not a plain map")


def _check_command(msg: dict) -> None:
    if not _plain(msg["args"]):
        raise WireError("command: args is not a plain map")


def _check_node(msg: dict) -> None:
    for entry in msg["ranks"]:
        _check_state(entry.get("state"))
        if "hello" in entry:
            _check_groups(entry["hello"])
    steps = msg.get("steps")
    if steps is not None:
        _check_columns(steps)


def _check_columns(steps: dict) -> None:
    """A digest's packed step columns line up, one position per rank, each rank once (the viewer writes them by
    position, a rank's row at most once per message), every figure within bounds (wire/step_block.py)."""
    try:
        step_block.check(steps)
    except ValueError as exc:
        raise WireError(f"node: {exc}") from None


#: What each kind's type leaves to code, run by :func:`decode` after the type's own checks.
_CHECKS = {
    HELLO: _check_hello,
    STEPS: _check_origin,
    HEARTBEAT: _check_origin,
    REPLY: _check_reply,
    COMMAND: _check_command,
    NODE: _check_node,
}

#: One decoder per kind, by topic: the kind's type (wire/messages.py) checks every field it reads.
_DECODERS = {kind.encode(): msgspec.msgpack.Decoder(_messages.BY_KIND[kind]) for kind in KINDS}
