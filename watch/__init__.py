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

The package is four rooms under the modules that join them: ``model/`` is what a snapshot says (the floor:
frozen records every room speaks), ``engine/`` receives and gathers, ``analysis/`` judges, ``offline/``
records, replays and exports (docs/architecture.md). The screens (``ranktop.tui``) and the commands
(``ranktop.cli``) read this face and ``ranktop.watch.model``, never the engine, the analysis, the aggregator or
the session's module (tests/test_layering.py): what they need of those is named here.
"""

from ranktop.watch.errors import RanktopError
from ranktop.watch.statuses import CONNECTED, LOST, OK, SILENT, SLOW, STALLED, STATUSES, WAITING
from ranktop.watch.model.answers import Answer
from ranktop.watch.model.rank_row import RankRow
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.engine.requests import RequestError
from ranktop.watch.analysis.history import NODE, STALL, Culprit, Episode, History, Sample
from ranktop.watch.analysis.slow_links import SLOW_FACTOR
from ranktop.watch.analysis.stacks import RankStacks, StackReport, build_report, report_json, report_lines, representatives, thread_lines
from ranktop.watch.analysis.stalls import DEFAULT_STALL_FACTOR, DEFAULT_STALL_FLOOR_S
from ranktop.watch.session import (
    Answers,
    Target,
    TargetError,
    WaitedTooLong,
    WatchSession,
    live_jobs,
    live_nodes,
    resolve,
    resolve_slurm,
    resolve_waiting,
)
from ranktop.watch.aggregator import DEFAULT_SILENT_AFTER_S, DEFAULT_WINDOW

Session = WatchSession

__all__ = [
    # a rank's status, worst first, and a relay's
    "OK",
    "SILENT",
    "SLOW",
    "STALLED",
    "STATUSES",
    "CONNECTED",
    "LOST",
    "WAITING",
    # watching a job
    "Answer",
    "Answers",
    "RankRow",
    "RanktopError",
    "RequestError",
    "Session",
    "Snapshot",
    "Target",
    "TargetError",
    "WaitedTooLong",
    "WatchSession",
    "live_jobs",
    "live_nodes",
    "resolve",
    "resolve_slurm",
    "resolve_waiting",
    # how long a rank's quiet makes it silent, and how many steps a rank's window keeps (--silent-after, --window)
    "DEFAULT_SILENT_AFTER_S",
    "DEFAULT_WINDOW",
    # the session's history (``session.history``): samples a second, episodes, culprits
    "NODE",
    "STALL",
    "Culprit",
    "Episode",
    "History",
    "Sample",
    # stack dumps grouped (``ranktop stacks``, the TUI's stacks screen)
    "RankStacks",
    "StackReport",
    "build_report",
    "report_json",
    "report_lines",
    "representatives",
    "thread_lines",
    # how slow a link or a stall must be to be called so (the network screen; --stall-factor, --stall-floor)
    "SLOW_FACTOR",
    "DEFAULT_STALL_FACTOR",
    "DEFAULT_STALL_FLOOR_S",
]
