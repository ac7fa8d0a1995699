"""Argument types and option groups shared by several commands: one definition each."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, TypeVar

from ranktop.watch import DEFAULT_SILENT_AFTER_S, DEFAULT_STALL_FACTOR, DEFAULT_STALL_FLOOR_S, DEFAULT_WINDOW
from ranktop.wire import settings


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, its texts for ``--help``, and what fills its parser (which sets ``run``)."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    description: str | None = None  # default: the help line
    usage: str | None = None  # default: argparse's

    def add_to(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
        description = self.description or self.help[0].upper() + self.help[1:] + "."
        parser = sub.add_parser(self.name, help=self.help, description=description, usage=self.usage)
        self.configure(parser)
        return parser


#: What :func:`positive` parses to.
N = TypeVar("N", int, float)


def positive(kind: Callable[[str], N]) -> Callable[[str], N]:
    """An argparse type: a number of ``kind`` above zero."""

    def parse(text: str) -> N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
        return value

    return parse


positive_float = positive(float)
positive_int = positive(int)


def rate(text: str) -> float:
    """A telemetry rate, within the bounds of wire/settings.py."""
    value = positive_float(text)
    problem = settings.rate_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def rank_list(text: str) -> list[int]:
    try:
        ranks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated rank numbers, got {text!r}") from None
    if not ranks or any(r < 0 for r in ranks):
        raise argparse.ArgumentTypeError(f"expected non-negative rank numbers, got {text!r}")
    return ranks


def add_job_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("targets", nargs="*", metavar="JOB", help="job name (default: the only running job)")


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def add_wait_option(p: argparse.ArgumentParser) -> None:
    """``--wait S``: how long a command given a job that has not started waits for it (exit 3 past it)."""
    p.add_argument(
        "--wait",
        type=non_negative_float,
        default=None,
        metavar="S",
        help="a job named that is not running yet is waited for (started first, as in a batch script): at most S "
        "seconds, then exit 3 (default: until it starts; 0: not at all)",
    )


def add_view_options(p: argparse.ArgumentParser, json_mode: bool = True) -> None:
    """What every live view takes: refresh, statistics window, silence and stall thresholds (and --json, --rate)."""
    if json_mode:
        p.add_argument("--json", action="store_true", help="no TUI: print one JSON snapshot and exit")
        p.add_argument("--duration", type=positive_float, default=5.0, help="with --json: seconds to listen first (default 5)")
    p.add_argument("--refresh", type=positive_float, default=2.0, help="screen refreshes per second (default 2; 0.5 on a slow link)")
    if json_mode:
        p.add_argument(
            "--rate",
            type=rate,
            default=None,
            metavar="HZ",
            help="ask every rank to send HZ messages a second (signed set_rate, for every watcher; default: theirs, "
            f"{settings.DEFAULT_RATE_HZ:g}). On a slow link: --refresh 0.5 --rate 1",
        )
    p.add_argument(
        "--window", type=positive_int, default=DEFAULT_WINDOW, help=f"steps per rank in the statistics window (default {DEFAULT_WINDOW})"
    )
    p.add_argument(
        "--silent-after",
        type=positive_float,
        default=DEFAULT_SILENT_AFTER_S,
        help=f"seconds without a message before a rank is marked silent (default {DEFAULT_SILENT_AFTER_S:g})",
    )
    p.add_argument(
        "--stall-factor",
        type=positive_float,
        default=DEFAULT_STALL_FACTOR,
        help=f"a rank that finished no step for this many times its median step is stalled (default {DEFAULT_STALL_FACTOR:g})",
    )
    p.add_argument(
        "--stall-floor",
        type=positive_float,
        default=DEFAULT_STALL_FLOOR_S,
        help=f"... and for at least this many seconds (default {DEFAULT_STALL_FLOOR_S:g})",
    )
