"""The one base of every error ranktop shows a user as a single line.

The engine raises them (a job that cannot be found, a SLURM job that is
pending, a command nobody can answer), the commands add their own, and
``ranktop``'s main catches this one class: the message is the whole story,
never a traceback.
"""


class RanktopError(Exception):
    """Something the user asked for cannot be done; ``str(exc)`` says why in one line."""
