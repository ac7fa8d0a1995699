"""The messages that cross the wire, and the only code that encodes or decodes them.

Both ends import this module: the probe inside each rank and the viewer. A message is
a ZeroMQ multipart frame list ``[topic, body]``: the topic (the message kind, as
bytes) lets a subscriber filter without decoding, and the body is one msgpack map.
Every body carries ``v`` (the protocol version as ``[major, minor]``), so a peer
of another major version is recognised before anything else is read.

What each kind holds is written once, as msgspec Structs, in :mod:`.messages`:
producers build them and :func:`encode` writes them; :func:`decode` reads any
kind in one call (the tagged union) into the same Structs, every field checked
by its type and bounds. What a type cannot say is checked here, once (``_CHECKS``).
Nothing here unpickles or evaluates what arrives, and nothing downstream checks a
field again.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import msgspec

from . import parallel_groups as _groups
from . import step_block
from .messages import (
    MAX_FIGURE,
    PROTOCOL_VERSION,
    Command,
    Hello,
    Message,
    Node,
    Reply,
    State,
)
from .names import (
    COMMAND,
    HEARTBEAT,
    HELLO,
    KINDS,
    LINKS,
    NODE,
    REPLY,
    STEPS,
)

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


def encode(message: Message) -> list[bytes]:
    """Frames for one message: ``[topic, msgpack(body)]``; the body carries its kind and version."""
    return [message.KIND.encode(), _ENCODER.encode(message)]


def _plain_value(value: Any) -> Any:
    """What msgspec will not encode as it is: subclasses of plain types (torch's version string is a str),
    numbers that know how to be one (numpy scalars); anything else is an error, as it was."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_plain_value)
#: Any kind, in one call: the union is tagged by ``k`` (wire/messages.py).
_DECODER: msgspec.msgpack.Decoder[Message] = msgspec.msgpack.Decoder(Message)
_TOPICS = frozenset(kind.encode() for kind in KINDS)


def decode(frames: list[bytes]) -> Message:
    """Parse and check one telemetry or command message: the Struct of its kind (wire/messages.py).

    Raises :class:`VersionMismatch` for a ranktop peer of another major version and
    :class:`WireError` for anything else that is not a well-formed message.
    """
    if len(frames) < 2:
        raise WireError("fewer than 2 frames")
    topic, body = frames[0], frames[1]
    if len(body) > MAX_BODY_BYTES:
        raise WireError(f"message body over {MAX_BODY_BYTES} bytes")
    if topic not in _TOPICS:
        raise WireError("unknown message kind")
    try:
        msg = _DECODER.decode(body)
    except msgspec.ValidationError as exc:
        _envelope(body)  # another major version, an older relay's digest, or no ranktop message: said as such
        raise WireError(_fault(topic, exc)) from None
    except Exception:  # msgspec.DecodeError, and whatever a damaged body makes of the decoder
        raise WireError("body is not msgpack") from None
    if msg.v[0] != PROTOCOL_VERSION[0]:
        raise VersionMismatch(list(msg.v))
    if msg.KIND.encode() != topic:
        raise WireError(f"{topic.decode()}: the body is of another kind")
    return _CHECKS[msg.KIND](msg) or msg


class _Envelope(msgspec.Struct):
    """What every body has, whatever its version: read when a body fails its kind's type, to say why."""

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
    version = head.v
    if not (isinstance(version, list) and len(version) == 2 and all(type(x) is int for x in version)):
        raise WireError("missing or malformed protocol version")
    if version[0] != PROTOCOL_VERSION[0]:
        raise VersionMismatch(version)
    if head.k not in KINDS:
        raise WireError("unknown message kind")
    if head.k == NODE and tuple(version) < PACKED_DIGESTS:
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
        return bool(-_BIG <= value <= _BIG)
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(_plain(v, depth + 1) for v in value)
    return False


def _check_state(state: State | None) -> None:
    """A capture summary of a trace has its three shares together, or none."""
    summary = state.cap.sum if state is not None and state.cap is not None else None
    if summary is not None and summary.compute is not None and (summary.comm is None or summary.idle is None):
        raise WireError("state: bad capture summary")


def _sound_groups(info: Any) -> Any:
    """A hello (or a digest's hello) with only the groups that hold together (wire/parallel_groups.py), the
    others counted in ``bad_groups``: one bad group costs that group, never the hello or the rank's list."""
    if info.groups is None:
        return info
    kept, bad = _groups.sound(info.groups, info.world)
    if not bad:
        return info
    return msgspec.structs.replace(info, groups=kept, bad_groups=(info.bad_groups or 0) + bad)


def _check_origin(msg: Any) -> None:
    _check_state(msg.state)


def _check_hello(msg: Hello) -> Hello:
    _check_state(msg.state)
    return _sound_groups(msg)


def _check_reply(msg: Reply) -> None:
    _check_state(msg.state)
    if msg.result is not None and not _plain(msg.result):
        raise WireError("reply: result is not a plain map")


def _check_command(msg: Command) -> None:
    if not _plain(msg.args):
        raise WireError("command: args is not a plain map")


def _check_node(msg: Node) -> Node:
    entries = msg.ranks
    for i, entry in enumerate(msg.ranks):
        _check_state(entry.state)
        if entry.hello is not None:
            hello = _sound_groups(entry.hello)
            if hello is not entry.hello:
                if entries is msg.ranks:
                    entries = list(msg.ranks)
                entries[i] = msgspec.structs.replace(entry, hello=hello)
    if msg.steps is not None:
        try:
            step_block.check(msg.steps)
        except ValueError as exc:
            raise WireError(f"node: {exc}") from None
    return msg if entries is msg.ranks else msgspec.structs.replace(msg, ranks=entries)


#: What each kind's type leaves to code, run by :func:`decode` after the type's own checks: each raises
#: :class:`WireError`, or returns None (the message stands) or the message with what did not hold taken out.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    HELLO: _check_hello,
    STEPS: _check_origin,
    HEARTBEAT: _check_origin,
    REPLY: _check_reply,
    COMMAND: _check_command,
    NODE: _check_node,
    LINKS: lambda msg: None,  # (its type says every bound)
}
