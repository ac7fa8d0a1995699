"""The ``ranktop`` command line: one subcommand per module of this package.

Every user error ends in one line on stderr (``ranktop: error: ...``) and a
non-zero exit, never a traceback: :data:`Exit.USAGE` for a bad command line,
:data:`Exit.FAILED` for anything a :class:`~ranktop.watch.errors.RanktopError` says,
:data:`Exit.NOT_STARTED` when ``--wait`` ran out before the job named started.
"""

from __future__ import annotations

import argparse
import sys

from ranktop.cli import attach, capture, demo, jobs, launch, ping, stacks, watch
from ranktop.cli import export, record, replay, report
from ranktop.cli.errors import Exit
from ranktop.watch.errors import RanktopError
from ranktop.watch.heap import settle_for_viewing
from ranktop.watch import WaitedTooLong
from ranktop.wire import __version__

#: The subcommands, in the order `ranktop --help` lists them; each one's parser sets its `run`.
COMMANDS = (
    watch.COMMAND,
    attach.COMMAND,
    jobs.COMMAND,
    ping.COMMAND,
    stacks.COMMAND,
    *capture.COMMANDS,
    launch.COMMAND,
    demo.COMMAND,
    record.COMMAND,
    replay.COMMAND,
    report.COMMAND,
    export.COMMAND,  # the flight recorder and monitoring
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ranktop",
        description="top for the ranks of a distributed PyTorch training job.",
        epilog="Start with `ranktop demo`; watch your own job with `ranktop watch JOB`. Keys: press ? in the TUI.",
    )
    parser.add_argument("--version", action="version", version=f"ranktop {__version__}")
    parser.add_argument("--dir", metavar="DIR", default=None, help="rendezvous directory (default: $RANKTOP_DIR or ~/.ranktop)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_to(sub)
    # `ranktop watch JOB --dir X` must work as well as `ranktop --dir X watch JOB`.
    for subparser in sub.choices.values():
        subparser.add_argument("--dir", metavar="DIR", default=argparse.SUPPRESS, help="rendezvous directory")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    takes_extra = getattr(args, "takes_extra", False)  # the demo passes unknown switches on to its job
    if extra and not takes_extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return Exit.USAGE
    if args.command != launch.COMMAND.name:  # launch runs the job itself: its interpreter is left as it is
        settle_for_viewing()
    try:
        return args.run(args, extra) if takes_extra else args.run(args)
    except WaitedTooLong as exc:
        print(f"ranktop: error: {exc}", file=sys.stderr)
        return Exit.NOT_STARTED
    except RanktopError as exc:
        print(f"ranktop: error: {exc}", file=sys.stderr)
        return Exit.FAILED
    except KeyboardInterrupt:
        return Exit.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
