"""The job's CURVE keys: who may read telemetry and push commands over TCP.

Every TCP socket of ranktop speaks ZeroMQ's CURVE (CurveZMQ: X25519 key
exchange, XSalsa20-Poly1305 boxes) unless ``RANKTOP_CURVE=0`` on both sides.
The keys are never stored: both sides derive them from the job's secret (the
``secret`` file of :mod:`ranktop.transport.rendezvous`, or ``RANKTOP_SECRET``), so
whoever can read the secret can read the telemetry and sign commands, and
nobody else can do either:

- the relay's *server* keypair: its secret half is
  HMAC-SHA256(job secret, "ranktop curve server"); a viewer with another secret
  derives another server key and its handshake fails;
- the viewers' one *client* keypair: HMAC-SHA256(job secret, "ranktop curve
  client"); the relay's ZAP handler (relay/zap.py) accepts no other client key.

The job's name is left out of the labels on purpose: a viewer given bare
endpoints (``ranktop watch tcp://localhost:24912`` through an ssh tunnel)
learns the name only from the telemetry it cannot read before the handshake.
The secret is random per job already; a ``RANKTOP_SECRET`` reused for several
jobs makes them share keys as they already share the command key.

``wire`` imports no ZeroMQ: the public halves are computed here (X25519 of the
base point, RFC 7748, checked against libzmq's ``zmq.curve_public`` by the
tests) and sockets are configured through pyzmq's option attributes, so the
probe and the viewer share this one module.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from ranktop.wire import settings

SERVER_LABEL = b"ranktop curve server"
CLIENT_LABEL = b"ranktop curve client"

_P = 2**255 - 19
_A24 = 121665


def enabled() -> bool:
    """Encryption is on unless ``RANKTOP_CURVE=0`` (debugging; both sides must agree)."""
    return settings.CURVE.on()


def x25519_public(secret_key: bytes) -> bytes:
    """The X25519 public key of a 32-byte secret key (RFC 7748, the scalar clamped as libsodium does)."""
    if len(secret_key) != 32:
        raise ValueError("a CURVE secret key is 32 bytes")
    k = int.from_bytes(secret_key, "little")
    k &= ~7
    k &= ~(1 << 255)
    k |= 1 << 254
    x1, x2, z2, x3, z3 = 9, 1, 0, 9, 1
    swap = 0
    for t in reversed(range(255)):  # the Montgomery ladder
        bit = (k >> t) & 1
        if swap ^ bit:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b, c, d = x2 + z2, x2 - z2, x3 + z3, x3 - z3
        aa, bb = a * a % _P, b * b % _P
        e = (aa - bb) % _P
        da, cb = d * a % _P, c * b % _P
        x3, z3 = (da + cb) ** 2 % _P, x1 * (da - cb) ** 2 % _P
        x2, z2 = aa * bb % _P, e * (aa + _A24 * e) % _P
    if swap:
        x2, z2 = x3, z3
    return (x2 * pow(z2, _P - 2, _P) % _P).to_bytes(32, "little")


@dataclass(frozen=True)
class Keys:
    """One job's CURVE keys, raw 32 bytes each (libzmq takes them as they are)."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes


_derived: dict[bytes, Keys] = {}


def keys_of(secret: bytes) -> Keys:
    """The job's keys, derived from its secret (the same on every node and in every viewer)."""
    keys = _derived.get(secret)
    if keys is None:
        server = hmac.new(secret, SERVER_LABEL, hashlib.sha256).digest()
        client = hmac.new(secret, CLIENT_LABEL, hashlib.sha256).digest()
        keys = _derived[secret] = Keys(x25519_public(server), server, x25519_public(client), client)
        if len(_derived) > 64:  # a long-lived viewer of many jobs: bounded
            _derived.pop(next(iter(_derived)))
    return keys


def make_server(sock: Any, keys: Keys, zap_domain: str) -> None:
    """Make a (bound) pyzmq socket a CURVE server; its ZAP handler is asked about each client under ``zap_domain``."""
    sock.curve_secretkey = keys.server_secret
    sock.curve_server = True
    sock.zap_domain = zap_domain.encode()


def make_client(sock: Any, keys: Keys) -> None:
    """Make a pyzmq socket, before it connects, a CURVE client of the job's relays."""
    sock.curve_serverkey = keys.server_public
    sock.curve_publickey = keys.client_public
    sock.curve_secretkey = keys.client_secret
