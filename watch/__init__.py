"""ranktop's viewer engine, a public Python API: find a job, receive its telemetry, aggregate, command.

No textual, no torch: ``ranktop watch --json``, every command, the TUI and any
script of yours build on the same pieces::

    from ranktop.watch import Session, resolve

    with Session(resolve(["my-job"])) as session:
        time.sleep(5)
        snap = session.snapshot()                       # a frozen Snapshot: ranks, stragglers, collectives, ...
        print(snap.row(snap.stragglers[0]), snap.diagnosis)
        answers = session.request("ping", timeout=5)    # every rank's answer, however many ranks
        print(answers.missing)

The package is four rooms under the modules that join them: ``engine/`` receives and gathers, ``model/`` is
what a snapshot says, ``analysis/`` judges, ``offline/`` records, replays and exports (docs/architecture.md).
"""

from ranktop.watch.errors import RanktopError
from ranktop.watch.engine.requests import RequestError
from ranktop.watch.session import Answers, Target, TargetError, WatchSession, resolve
from ranktop.watch.model.snapshot import (
    OK,
    SILENT,
    SLOW,
    STALLED,
    STATUSES,
    RankRow,
    Reply,
    Snapshot,
)

Session = WatchSession

__all__ = [
    "OK",
    "SILENT",
    "SLOW",
    "STALLED",
    "STATUSES",
    "Answers",
    "RankRow",
    "RanktopError",
    "Reply",
    "RequestError",
    "Session",
    "Snapshot",
    "Target",
    "TargetError",
    "WatchSession",
    "resolve",
]
