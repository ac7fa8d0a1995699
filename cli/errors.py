"""How a ``ranktop`` command ends: one base error for every user-facing failure, and named exit codes.

Every failure a user can cause or meet (a job that cannot be found, a rank
that does not answer, a bad ``--rate``) is a :class:`~ranktop.watch.errors.RanktopError`;
``main`` prints it as one line and exits :data:`Exit.FAILED`. A bad command
line is argparse's, :data:`Exit.USAGE`.
"""

from __future__ import annotations

from enum import IntEnum

from ranktop.watch.errors import RanktopError


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # the command could not do what was asked (one line on stderr says why)
    USAGE = 2  # a bad command line
    INTERRUPTED = 130  # Ctrl+C


class UserError(RanktopError):
    """A command's own one-line failure (exit 1)."""
