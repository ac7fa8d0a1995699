"""``ranktop stacks``: every rank's Python stacks, grouped, without the TUI.

Sends the signed ``stacks`` command, waits up to ``--timeout`` seconds for every
rank of the job to answer (each rank answers from its probe's thread, so a
hung training thread does not stop it), then prints one line per group of
ranks with identical main-thread stacks, the ranks that did not answer, and
each group's stack. The grouping is :mod:`ranktop.watch.analysis.stacks`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ranktop.cli.errors import Sayer, UserError
from ranktop.cli.options import Command, add_job_target, add_wait_option, positive_float
from ranktop.watch import WatchSession, build_report, report_json, report_lines, representatives, resolve_waiting


class StacksError(UserError):
    """A one-line reason ``ranktop stacks`` could not do its job (exit 1)."""


HELP = "dump every rank's Python stacks (all threads), grouped by identical main-thread stack"
DESCRIPTION = (
    "Ask every rank of a job for the Python stacks of all its threads and print the ranks "
    "grouped by identical main-thread stack, biggest group first. Works while the job hangs: each "
    "rank answers from its probe's own thread. Ranks that do not answer within --timeout are listed "
    "as unresponsive. Needs the job secret."
)


def configure(p: argparse.ArgumentParser) -> None:
    add_job_target(p)
    p.add_argument("--timeout", type=positive_float, default=5.0, help="seconds to wait for the answers (default 5)")
    p.add_argument("--json", action="store_true", help="print the groups and every rank's stacks as JSON")
    p.add_argument("--all-threads", action="store_true", help="print every thread of every rank, not just the main one")
    add_wait_option(p)
    p.set_defaults(run=cmd_stacks)


def collect(session: WatchSession, timeout: float) -> tuple[Any, float]:  # (a StackReport, seconds)
    """Ask every rank for the fingerprint of its stacks, then one rank per distinct fingerprint for
    the stacks themselves; returns (report, seconds waited for answers).

    Two small rounds instead of one big one: 4,096 ranks send a few bytes each and
    only a handful send text, so the answers come fast and fit in memory. Ranks
    whose probe predates fingerprints answer the first round in full.
    """
    answers = session.request("stacks", {"fingerprint": True}, timeout=timeout)
    replies = [(r.rank, r.ok, r.result) for r in answers.replies]
    wanted = representatives(replies)
    full, waited = [], answers.waited_s
    if wanted:
        more = session.request("stacks", ranks=wanted, timeout=max(2.0, timeout - waited))
        full, waited = [(r.rank, r.ok, r.result) for r in more.replies], waited + more.waited_s
    return build_report(answers.expected, replies, full), waited


def cmd_stacks(args: argparse.Namespace) -> int:
    sayer = Sayer()
    session = WatchSession(resolve_waiting(args.targets, args.dir, wait_s=args.wait, say=sayer))
    with session:
        if sayer.said:  # the job has just started: its ranks are still coming up
            session.wait_for_every_rank(args.timeout)
        report, waited = collect(session, args.timeout)
        job = session.snapshot().job
    answered = len(report.ranks) + len(report.failed)
    if args.json:
        print(json.dumps(dict(report_json(report, waited_s=args.timeout), job=job), indent=2))
    else:
        took = f"in {waited:.1f}s" if report.complete else f"within {args.timeout:g}s"
        print(f"job {job}: {answered} of {len(report.expected)} ranks answered {took}")
        for line in report_lines(report, waited_s=args.timeout, all_threads=args.all_threads):
            print(line)
    if report.unresponsive:
        raise StacksError(f"{len(report.unresponsive)} of {len(report.expected)} rank(s) did not answer within {args.timeout:g}s")
    return 0


COMMAND = Command("stacks", HELP, configure, DESCRIPTION)
