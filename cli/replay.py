"""``ranktop replay FILE``: a recording played through the live engine and the live TUI.

``--json --at T`` prints the snapshot at T (the document of ``watch --json``)
instead of opening the TUI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ranktop.cli.errors import UserError
from ranktop.cli.options import Command, positive_float, positive_int
from ranktop.watch import DEFAULT_SILENT_AFTER_S, DEFAULT_STALL_FACTOR, DEFAULT_STALL_FLOOR_S, DEFAULT_WINDOW
from ranktop.watch.offline.recording import Recording, RecordingError, read
from ranktop.watch.offline.replay import SPEEDS, Replay, parse_offset, snapshot_at
from ranktop.watch.model.json_doc import document


HELP = "play a recording (ranktop record / watch --record) in the TUI, or print its snapshot at a time"
DESCRIPTION = (
    "Play a recording through the same engine and screens as a live job. Keys: space pauses, "
    ", and . seek 10 s, < and > a minute, G jumps to a time, + - change the speed, H shows the history. "
    "Commands (ping, stacks, captures) are disabled: there is no job to send them to. "
    "Times: seconds, M:SS or H:MM:SS from the start; negative from the end; 'end'."
)


class ReplayError(UserError):
    """A one-line reason ``ranktop replay`` cannot play (exit 1)."""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a recording (its rotated older parts FILE.1 ... are read too)")
    p.add_argument(
        "--speed",
        type=positive_float,
        default=1.0,
        help=f"playback speed (default 1; keys step through {', '.join(f'{s:g}' for s in SPEEDS)})",
    )
    p.add_argument("--start", default="0", metavar="T", help="start at T (default: the beginning)")
    p.add_argument("--json", action="store_true", help="no TUI: print the snapshot at --at as JSON (as watch --json)")
    p.add_argument("--at", default="end", metavar="T", help="with --json: the time of the snapshot (default: end)")
    p.add_argument("--refresh", type=positive_float, default=2.0, help="screen refreshes per second (default 2)")
    p.add_argument(
        "--window", type=positive_int, default=DEFAULT_WINDOW, help=f"steps per rank in the statistics window (default {DEFAULT_WINDOW})"
    )
    p.add_argument("--silent-after", type=positive_float, default=DEFAULT_SILENT_AFTER_S, help=argparse.SUPPRESS)
    p.add_argument("--stall-factor", type=positive_float, default=DEFAULT_STALL_FACTOR, help=argparse.SUPPRESS)
    p.add_argument("--stall-floor", type=positive_float, default=DEFAULT_STALL_FLOOR_S, help=argparse.SUPPRESS)
    p.set_defaults(run=cmd_replay)


def load(path: str) -> Recording:
    """The recording at ``path``, damaged chunks said on stderr; ReplayError when there is nothing to play."""
    try:
        recording = read(path)
    except RecordingError as exc:
        raise ReplayError(str(exc)) from None
    for line in recording.torn:
        print(f"ranktop: {line}", file=sys.stderr)
    if not any(e.frames for e in recording.entries):
        raise ReplayError(f"{path} holds no telemetry (recorded before any rank spoke?)")
    return recording


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return dict(window=int(args.window), silent_after_s=args.silent_after, stall_factor=args.stall_factor, stall_floor_s=args.stall_floor)


def _offset(text: str, recording: Recording, flag: str) -> float:
    try:
        offset = parse_offset(text, recording.duration_s)
    except ValueError as exc:
        raise ReplayError(f"{flag}: {exc}") from None
    if not 0 <= offset <= recording.duration_s + 1e-6:
        raise ReplayError(f"{flag} {text}: outside the recording (0 .. {recording.duration_s:.0f} s)")
    return offset


def cmd_replay(args: argparse.Namespace) -> int:
    recording = load(args.file)
    if args.json:
        snap = snapshot_at(recording, _offset(args.at, recording, "--at"), **_options(args))
        print(json.dumps(document(snap), indent=2))
        return 0
    start = _offset(args.start, recording, "--start")
    try:
        from ranktop.tui.replay import ReplayApp  # type: ignore[import-untyped]  # the TUI is not checked yet (no py.typed)
    except ImportError as exc:
        raise ReplayError(f"the TUI needs textual ({exc}): pip install 'ranktop[tui]', or use --json --at T") from None
    replay = Replay(recording, speed=args.speed, start_s=start, **_options(args))
    ReplayApp(replay, refresh_hz=args.refresh, name=Path(args.file).name).run()
    return 0


COMMAND = Command("replay", HELP, configure, DESCRIPTION)
