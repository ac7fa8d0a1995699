"""The relay's gatekeeper: CURVE on its TCP sockets, and a ZAP handler that admits only the job's client key.

A CURVE server alone lets in any client that knows its public key; libzmq asks
the context's ZAP handler (ZeroMQ's authentication protocol, RFC 27, a REP
socket on ``inproc://zeromq.zap.01``) about every new connection, and ours
answers 200 only for the client key derived from the job's secret
(:mod:`ranktop.transport.curve`). A connection refused never reaches the proxy: a
stranger's SUB socket receives nothing, its PUSH socket delivers nothing.

One handler per ZeroMQ context (libzmq allows one), shared by every relay in
it (``ranktop demo --simulate`` runs hundreds in one process): each relay
registers its own ZAP domain and the key it admits. The handler's thread ends
when its context is terminated.
"""

from __future__ import annotations

from typing import Any

import sys
import threading

import zmq

from ranktop.transport import curve, rendezvous
from ranktop.wire.auth import new_secret

ZAP_ENDPOINT = "inproc://zeromq.zap.01"


class _Handler:
    """The ZAP replies of one context: domain -> the client key it admits."""

    def __init__(self, context: zmq.Context[Any]):
        self._context = context
        self.admits: dict[bytes, bytes] = {}
        self.refused = 0  # handshakes refused (a wrong key, or a plain client's credentials)
        self._sock = context.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(ZAP_ENDPOINT)
        threading.Thread(target=self._run, name="ranktop-relay-zap", daemon=True).start()

    def _run(self) -> None:
        try:
            while True:
                frames = self._sock.recv_multipart()
                self._sock.send_multipart(self._answer(frames))
        except zmq.ZMQError:  # ContextTerminated: the relay's process is closing its context
            pass
        finally:
            self._sock.close(linger=0)
            with _lock:
                if _handlers.get(self._context) is self:
                    del _handlers[self._context]

    def _answer(self, frames: list[bytes]) -> list[bytes]:
        # request: version, id, domain, address, identity, mechanism, credentials...
        if len(frames) < 6:
            return [b"1.0", b"", b"500", b"malformed ZAP request", b"", b""]
        version, request_id, domain, _, _, mechanism = frames[:6]
        admitted = self.admits.get(domain)
        if mechanism == b"CURVE" and admitted is not None and frames[6:7] == [admitted]:
            return [version, request_id, b"200", b"OK", b"ranktop-viewer", b""]
        self.refused += 1
        return [version, request_id, b"400", b"not this job's key", b"", b""]


_handlers: dict[zmq.Context[Any], _Handler] = {}  # an entry leaves when its context is terminated
_lock = threading.Lock()


class Gate:
    """CURVE and ZAP for one relay's TCP sockets; :meth:`close` when the relay stops."""

    def __init__(self, context: zmq.Context[Any], job: str, directory: str | None = None):
        self._context = context
        self._domain = f"ranktop-relay-{id(self)}".encode()
        self.encrypted = curve.enabled()
        if self.encrypted and not zmq.has("curve"):  # a libzmq built without libsodium: never fall back to plain text
            raise RuntimeError(
                f"libzmq {zmq.zmq_version()} has no CURVE: the relay will not serve telemetry in the clear "
                "unless RANKTOP_CURVE=0 says so (docs/security.md)"
            )
        self.secret = _job_secret(job, directory)  # (the relay's link probes are signed with it too: relay/links.py)
        self._keys = curve.keys_of(self.secret) if self.encrypted else None
        if self._keys is not None:
            with _lock:
                handler = _handlers.get(context)
                if handler is None:
                    handler = _handlers[context] = _Handler(context)
                handler.admits[self._domain] = self._keys.client_public

    @property
    def keys(self) -> curve.Keys | None:
        """The job's CURVE keys, None when encryption is off."""
        return self._keys

    def secure(self, sock: zmq.Socket[bytes]) -> None:
        """Make one of the relay's TCP sockets a CURVE server (before it binds); nothing when encryption is off."""
        if self._keys is not None:
            curve.make_server(sock, self._keys, self._domain.decode())

    def close(self) -> None:
        with _lock:
            handler = _handlers.get(self._context)
            if handler is not None:
                handler.admits.pop(self._domain, None)


def refused(context: zmq.Context[Any]) -> int:
    """How many handshakes the relays of ``context`` refused so far."""
    handler = _handlers.get(context)
    return handler.refused if handler is not None else 0


def _job_secret(job: str, directory: str | None) -> bytes:
    """The job's secret; when it cannot be read, a throwaway one: then no viewer gets in, and stderr says why."""
    try:
        return rendezvous.load_or_create_secret(job, directory)
    except OSError as exc:
        print(f"ranktop: cannot read the job secret ({exc}): no viewer can read this node's telemetry", file=sys.stderr)
        return new_secret()
