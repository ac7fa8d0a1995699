"""How a ``ranktop`` command ends: one base error for every user-facing failure, and named exit codes.

Every failure a user can cause or meet (a job that cannot be found, a rank
that does not answer, a bad ``--rate``) is a :class:`~ranktop.watch.errors.RanktopError`;
``main`` prints it as one line and exits :data:`Exit.FAILED`. A bad command
line is argparse's, :data:`Exit.USAGE`. A job that did not start within
``--wait`` seconds is :data:`Exit.NOT_STARTED`, so a batch script can tell it
from a job that failed.
"""

from __future__ import annotations

from enum import IntEnum

from ranktop.watch.errors import RanktopError


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # the command could not do what was asked (one line on stderr says why)
    USAGE = 2  # a bad command line
    NOT_STARTED = 3  # --wait ran out before the job named started (watch/session.py WaitedTooLong)
    INTERRUPTED = 130  # Ctrl+C


class UserError(RanktopError):
    """A command's own one-line failure (exit 1)."""


def stop_on_sigterm() -> None:
    """SIGTERM ends the command as Ctrl-C does (files closed, exit 130): how a batch script stops its sidecars."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


class Sayer:
    """``say``, remembering whether anything was said (a command that waited for its job to start)."""

    def __init__(self) -> None:
        self.said = False

    def __call__(self, line: str) -> None:
        self.said = True
        say(line)


def say(line: str) -> None:
    """One line for the user on stderr, as every headless command says what it waits for."""
    import sys

    print(f"ranktop: {line}", file=sys.stderr, flush=True)
