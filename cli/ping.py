"""``ranktop ping``: a signed ping through the control path; who answers, in how long."""

from __future__ import annotations

import argparse

from ranktop.cli.errors import Sayer, UserError
from ranktop.cli.options import Command, add_job_target, add_wait_option, positive_float, rank_list
from ranktop.watch import format as fmt
from ranktop.watch import DEFAULT_WINDOW, Answers, WatchSession, resolve_waiting

HELP = "send a signed ping to every rank and report who answers"


def configure(ping: argparse.ArgumentParser) -> None:
    add_job_target(ping)
    ping.add_argument("--timeout", type=positive_float, default=5.0, help="seconds to wait for answers (default 5)")
    ping.add_argument("--ranks", type=rank_list, default=None, help="comma-separated ranks (default: all)")
    add_wait_option(ping)
    ping.set_defaults(run=cmd_ping)


def cmd_ping(args: argparse.Namespace) -> int:
    waited = Sayer()
    target = resolve_waiting(args.targets, args.dir, wait_s=args.wait, say=waited)
    with WatchSession(target, window=DEFAULT_WINDOW) as session:
        if waited.said:  # the job has just started: its ranks are still coming up
            session.wait_for_every_rank(args.timeout)
        answers = session.request("ping", ranks=args.ranks, timeout=args.timeout)
    for line in answer_lines(answers, args.timeout):
        print(line)
    if answers.missing:
        raise UserError(f"{len(answers.missing)} of {len(answers.expected)} rank(s) did not answer")
    return 0


def answer_lines(answers: Answers, timeout: float) -> list[str]:
    """One line per rank expected: its round trip, or that it did not answer."""
    by_rank = {r.rank: r for r in answers.replies}
    lines = []
    for rank in answers.expected:
        reply = by_rank.get(rank)
        if reply is None:
            lines.append(f"rank {rank}: no answer within {timeout:g}s")
        elif reply.rtt_s is not None:
            lines.append(f"rank {rank}: pong in {fmt.ms_unit(reply.rtt_s)}")
        else:
            lines.append(f"rank {rank}: pong")
    return lines


COMMAND = Command("ping", HELP, configure)
