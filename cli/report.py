"""``ranktop report FILE [FILE_B]``: the end-of-run summary of a recording, or two side by side.

Text by default (read in a minute: the stragglers and stalls first), ``--json``
for scripts, ``--html PAGE`` for a self-contained page with plots (plotly:
``pip install 'ranktop[report]'``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ranktop.cli.errors import UserError
from ranktop.cli.options import Command
from ranktop.cli.replay import load
from ranktop.watch.offline.report import build, compare_lines, text_lines

HELP = "end-of-run summary of a recording: stragglers, stalls, step time, phases (or compare two)"
DESCRIPTION = (
    "Summarise a recording (ranktop record / watch --record): job, ranks, duration, step time over the "
    "run, the median rank's phases, every straggler episode (who, which phase, from when to when, what it cost), "
    "stalls and whom they waited for, memory creep, GPU throttling, MFU, captures. With two files: side by side."
)


class ReportError(UserError):
    """A one-line reason ``ranktop report`` cannot report (exit 1)."""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="a recording; a second one to compare with")
    p.add_argument("--json", action="store_true", help="print the report as JSON (with the samples behind it)")
    p.add_argument("--html", metavar="PAGE", default=None, help="also write a self-contained HTML page with plots (needs plotly)")
    p.set_defaults(run=cmd_report)


def _build(path: str) -> dict[str, Any]:
    return build(load(path))


def cmd_report(args: argparse.Namespace) -> int:
    if len(args.files) > 2:
        raise ReportError("one recording, or two to compare")
    reports = [_build(f) for f in args.files]
    if args.html:
        if len(reports) == 2:
            raise ReportError("--html takes one recording (compare two as text or --json)")
        from ranktop.watch.optional import MissingDependency
        from ranktop.watch.offline.report_html import page

        try:
            text = page(reports[0])
        except MissingDependency as exc:
            raise ReportError(str(exc)) from None
        try:
            Path(args.html).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ReportError(f"cannot write {args.html}: {exc.strerror or exc}") from None
        print(f"wrote {args.html} ({len(text) / 1e6:.1f} MB, self-contained)", file=sys.stderr)
    if args.json:
        doc = reports[0] if len(reports) == 1 else {"a": reports[0], "b": reports[1]}
        print(json.dumps(doc, indent=2, default=list))
    elif len(reports) == 2:
        print("\n".join(compare_lines(*reports)))
    else:
        print("\n".join(text_lines(reports[0])))
    return 0


COMMAND = Command("report", HELP, configure, DESCRIPTION)
