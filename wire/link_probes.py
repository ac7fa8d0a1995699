"""The probes one relay sends another to measure the link between their nodes, and the answers: signed frames.

Relays of one job measure their links to each other (relay/links.py); nothing
of it reaches a rank. A probe is ``[b"probe", body, mac]``, an answer
``[b"ack", body, mac]``, where ``mac`` is an HMAC-SHA256 over topic and body
with the job's secret (the key wire/auth.py signs commands with): a relay
answers only its job's relays, and a prober believes only answers its job's
relays signed, so nobody outside the job can make a relay send, nor fake a
link's rate. The body says which job and host, a sequence number (an answer
quotes its probe's), a timestamp (a probe outside :data:`~ranktop.wire.auth.MAX_SKEW_S`
of the answering relay's clock is refused: a capture replayed later makes no
answer) and, in a probe, the padding whose crossing is timed.

The padding's size is bounded (:data:`MAX_PAD`), so a forged or foreign probe
costs at most the small answer it is refused without.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated

import msgspec
from msgspec import Meta

from .auth import MAX_SKEW_S

PROBE, ACK = b"probe", b"ack"
#: The padding of the probe whose crossing is timed (relay/links.py): small beside any link's second of traffic,
#: big enough that crossing it at a slowed rate takes longer than a busy machine's scheduling noise. A viewer
#: reads a link's rate against it (watch/analysis/slow_links.py: what a crossing of a millisecond means).
PROBE_BYTES = 32 << 10
#: The most padding a probe carries (relay/links.py sends 32 KiB).
MAX_PAD = 256 << 10


class ProbeError(ValueError):
    """A frame list that is no probe or answer of this job: unsigned, forged, of another job, stale, malformed."""


class Probe(msgspec.Struct, array_like=True, frozen=True):
    """``[job, host, seq, ts, pad]``: the host that sends it, its number, when (unix s), and the padding."""

    job: str
    host: Annotated[str, Meta(max_length=256)]
    seq: Annotated[int, Meta(ge=0, le=1 << 62)]
    ts: float
    pad: Annotated[bytes, Meta(max_length=MAX_PAD)] = b""


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Probe)


def _mac(secret: bytes, topic: bytes, body: bytes) -> bytes:
    return hmac.new(secret, topic + b"\0" + body, hashlib.sha256).digest()


def frames(secret: bytes, topic: bytes, probe: Probe) -> list[bytes]:
    """A probe (``topic`` :data:`PROBE`) or an answer (:data:`ACK`), signed."""
    body = _ENCODER.encode(probe)
    return [topic, body, _mac(secret, topic, body)]


def read(secret: bytes, job: str, topic: bytes, got: list[bytes], now: float) -> Probe:
    """The probe or answer ``got`` holds, if it is a ``topic`` frame of ``job`` signed with ``secret`` and fresh;
    else :class:`ProbeError`."""
    if len(got) != 3 or got[0] != topic:
        raise ProbeError(f"not a {topic.decode()} frame")
    _, body, mac = got
    if len(body) > MAX_PAD + 1024 or not hmac.compare_digest(_mac(secret, topic, body), mac):
        raise ProbeError("not signed with this job's secret")
    try:
        probe = _DECODER.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProbeError(f"malformed: {exc}") from None
    if probe.job != job:
        raise ProbeError(f"of job {probe.job!r}")
    if not abs(now - probe.ts) <= MAX_SKEW_S:  # (NaN fails too)
        raise ProbeError(f"stamped {now - probe.ts:.0f} s off")
    return probe
