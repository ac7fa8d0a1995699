"""Signed control commands: who may tell a rank to do something.

Telemetry is read-only and travels unsigned; a command changes what a rank does,
so every command frame list is ``[b"command", body, mac]`` where ``mac`` is an
HMAC-SHA256 over topic and body with the job's secret. The body carries a
unique id and a timestamp: a rank drops a command whose MAC is wrong (forged), whose
id it has already seen (replayed) or whose timestamp lies outside a window
(an old capture replayed after the id cache forgot it).

The secret is a per-job random key, kept in a file only its owner can read (see
:mod:`ranktop.transport.rendezvous`) or given through ``RANKTOP_SECRET``.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
import time
from typing import Any

from . import schema, settings
from .messages import Command

#: A command older or newer than this many seconds is refused. Generous, since the
#: clocks of a cluster's nodes are only roughly in step.
MAX_SKEW_S = 60.0


class AuthError(schema.WireError):
    """A command whose signature, freshness or target job does not check out."""

    def __init__(self, reason: str, message: str):
        self.reason = reason  # "forged" | "replayed" | "expired" | "foreign-job"
        super().__init__(message)


def new_secret() -> bytes:
    return secrets.token_hex(32).encode()


def _mac(secret: bytes, topic: bytes, body: bytes) -> bytes:
    return hmac.new(secret, topic + b"\0" + body, hashlib.sha256).digest()


def sign_command(
    secret: bytes,
    job: str,
    cmd: str,
    args: dict[str, Any] | None = None,
    ranks: list[int] | None = None,
    *,
    now: float | None = None,
    command_id: str | None = None,
) -> tuple[str, list[bytes]]:
    """Build a signed command; returns its id (replies quote it) and its frames."""
    command_id = command_id or secrets.token_hex(8)
    command = Command(job=job, id=command_id, cmd=cmd, args=args or {}, ranks=ranks, ts=time.time() if now is None else now)
    topic, body = schema.encode(command)
    return command_id, [topic, body, _mac(secret, topic, body)]


class CommandVerifier:
    """Checks incoming command frames for one job; keeps a bounded memory of seen ids."""

    def __init__(self, secret: bytes, job: str, *, remember: int = 4096):
        self._secret = secret
        self._job = job
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._remember = remember

    def verify(self, frames: list[bytes], *, now: float | None = None) -> Command:
        """Return the command, or raise :class:`AuthError` / :class:`~ranktop.wire.schema.WireError`."""
        if len(frames) != 3:
            raise AuthError("forged", f"command has {len(frames)} frames, expected 3 (unsigned?)")
        topic, body, mac = frames
        if not hmac.compare_digest(_mac(self._secret, topic, body), mac):
            raise AuthError("forged", "command signature does not match this job's secret")
        msg = schema.decode([topic, body])
        if not isinstance(msg, Command):
            raise AuthError("forged", "signed frame is not a command")
        if msg.job != self._job:
            raise AuthError("foreign-job", f"command for job {msg.job!r}, this is {self._job!r}")
        now = time.time() if now is None else now
        if abs(now - msg.ts) > MAX_SKEW_S:
            raise AuthError("expired", f"command timestamp is {now - msg.ts:.0f}s off")
        if msg.id in self._seen:
            raise AuthError("replayed", f"command id {msg.id} was already used")
        self._seen[msg.id] = None
        if len(self._seen) > self._remember:
            self._seen.popitem(last=False)
        return msg


def read_secret_env() -> bytes | None:
    value = settings.SECRET.get()
    return value.encode() if value else None
