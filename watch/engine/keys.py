"""The viewer's side of the job's CURVE keys: its client sockets, and a failed handshake told in one line.

Every SUB (receiver.py) and PUSH (requests.py) socket the viewer opens to a
relay is a CURVE client with the keys derived from the job's secret
(transport/curve.py). Without the secret there is nothing to read: a job found by
name is not dialled and the viewer says so; a bare endpoint is dialled in the
clear (a relay run with ``RANKTOP_CURVE=0`` is read, an encrypted one refuses).
With a wrong secret, or with encryption on one side only, the relay refuses
the handshake, and a ZeroMQ socket monitor on each SUB socket (until its first
handshake succeeds) turns that into one line: which job (or relay), where the
secret was looked for and what to do. The
line goes to the aggregator's errors (the TUI's status line, ``--json``'s
``errors``) and to :attr:`Handshakes.problem` (``ranktop ping`` and ``watch
--json`` end with it when no rank was heard).
"""

from __future__ import annotations

from typing import Callable

import zmq

from ranktop.transport import curve

MORE = "docs/security.md"
#: Handshakes a relay ends without a reason before this viewer says its key was refused.
VAGUE_FAILURES = 3
#: The monitor events a handshake reports (watch/engine/receiver.py dispatches them here).
HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


def secure(sock: zmq.Socket[bytes], secret: bytes | None) -> bool:
    """Make ``sock`` a CURVE client with the keys of ``secret`` (nothing when encryption is off); False without a secret."""
    if not curve.enabled():
        return True
    if secret is None:
        return False
    curve.make_client(sock, curve.keys_of(secret))
    return True


class ClientKeys:
    """The job's client keys as this viewer can find them.

    ``secret_of`` is asked each time until it answers (a job that is starting
    may not have written its secret yet); ``where`` says where it looks (the
    job folder's ``secret`` file, or ``RANKTOP_SECRET``), for the one line.
    """

    def __init__(self, secret_of: Callable[[], bytes | None], where: str | None, job_of: Callable[[], str | None]):
        self._secret_of = secret_of
        self.where = where
        self._job_of = job_of
        self.encrypted = curve.enabled()

    def secure(self, sock: zmq.Socket[bytes]) -> bool:
        """Make ``sock`` a CURVE client of the job's relays before it connects; False: no key to do it with
        (the socket stays plain: it reads a relay run with ``RANKTOP_CURVE=0``, and hears a mismatch from others)."""
        return not self.encrypted or secure(sock, self._secret_of())

    def home_secret(self) -> str:
        """Where the job's side keeps its secret by default."""
        return f"~/.ranktop/jobs/{self._job_of() or 'JOB'}/secret"

    def _job(self, url: str) -> str:
        job = self._job_of()
        return f"job {job}" if job else f"the job at {url}"

    def missing(self, url: str) -> str:
        """The line for a viewer that has no secret at all (one line for the whole job when its name is known)."""
        if self.where and self.where != "RANKTOP_SECRET":
            how = f"copy the job's secret to {self.where} or set RANKTOP_SECRET"
        else:
            how = f"set RANKTOP_SECRET to the job's secret ({self.home_secret()} where it runs)"
        return f"{self._job(url)} is encrypted and this viewer has no key: {how} ({MORE})"

    def plain(self, url: str) -> str:
        """The line for an encrypting viewer and a relay that does not encrypt."""
        return f"{self._job(url)} is not encrypted (it runs with RANKTOP_CURVE=0): set RANKTOP_CURVE=0 here too to read it ({MORE})"

    def refused(self, url: str, event: int, value: int) -> str | None:
        """The line for a failed handshake with ``url``; None for a success."""
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            return None
        job = self._job(url)
        if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            if self.encrypted and self._secret_of() is None:  # we dialled without a key, and it wants one
                return self.missing(url)
            if self.encrypted:
                return self.plain(url)
            return f"{job} is encrypted and this viewer is not: unset RANKTOP_CURVE=0 here ({MORE})"
        if self.where == "RANKTOP_SECRET":
            source = "RANKTOP_SECRET"
        else:
            source = self.where or "this viewer's secret"
        return (
            f"{job} refused this viewer's key: {source} is not its secret; copy {self.home_secret()} from where it "
            f"runs, or set RANKTOP_SECRET to it ({MORE})"
        )


class Handshakes:
    """What the handshakes with each relay said (the receiver reads them off its sockets' monitors): every
    failure said once per relay, in one line, until a handshake succeeds."""

    def __init__(self, keys: ClientKeys, note: Callable[[str], None]):
        self._keys = keys
        self._note = note
        self._problems: dict[str, str] = {}  # URL -> its latest failure
        self._vague: dict[str, int] = {}  # URL -> handshakes that failed without saying why

    @property
    def problem(self) -> str | None:
        """One failure line, when some relay refused us (or we had no key)."""
        return next(iter(self._problems.values()), None)

    def no_key(self, url: str) -> None:
        self._say(url, self._keys.missing(url))

    def plain(self, url: str) -> None:
        """A relay whose record says it does not encrypt, and this viewer does: said without dialling it
        (its handshakes would say it too, but often only as a hang-up, what a wrong key looks like)."""
        self._say(url, self._keys.plain(url))

    def event(self, sock: zmq.Socket[bytes], url: str, event: int, value: int) -> None:
        """One handshake event of ``sock``, the socket dialling ``url``."""
        line = self._keys.refused(url, event, value)
        if line is None:
            self._problems.pop(url, None)
            self._vague.pop(url, None)
            return
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            # The relay hung up mid-handshake (errno in the value): what a wrong server key looks like, but
            # also a relay going away, or the race of a mismatch; a plain dial waits for the mismatch itself,
            # a CURVE one says it when it happens again and again.
            self._vague[url] = self._vague.get(url, 0) + 1
            if sock.getsockopt(zmq.MECHANISM) != zmq.CURVE or self._vague[url] < VAGUE_FAILURES or url in self._problems:
                return
        self._say(url, line)

    def _say(self, url: str, line: str) -> None:
        if self._problems.get(url) != line:
            self._problems[url] = line
            self._note(line)
