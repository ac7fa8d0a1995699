"""``ranktop record JOB FILE``: the flight recorder without a screen (a login node's tmux).

Receives the job's telemetry like ``ranktop watch`` and writes every frame to
FILE (watch/offline/recording.py) until ``--duration`` runs out or Ctrl-C, with a status
line every ``--every`` seconds. ``ranktop watch JOB --record FILE`` records
while watching; both use :func:`make_recorder`.
"""

from __future__ import annotations

import argparse
import sys
import time

from ranktop.cli.errors import UserError, say, stop_on_sigterm
from ranktop.cli.options import Command, positive_float, rate
from ranktop.watch.offline.recording import DEFAULT_KEEP, DEFAULT_MAX_BYTES, FlightRecorder, RecordingError
from ranktop.watch import WatchSession, resolve_waiting

HELP = "record a running job's telemetry to a file, headless (replay, report)"
DESCRIPTION = (
    "Write every telemetry frame of a running job, with its arrival time, to FILE (compressed, "
    "in chunks: a crash loses at most the last few seconds). Stops after --duration seconds, on Ctrl-C, or when "
    "every rank of the job ended cleanly (exit 0). A job not running yet is waited for (start the recorder first); "
    "its restarts are recorded as they come. "
    "Then: ranktop replay FILE, ranktop report FILE. `ranktop watch JOB --record FILE` records while watching."
)


class RecordError(UserError):
    """A one-line reason ``ranktop record`` could not record (exit 1)."""


def add_record_options(p: argparse.ArgumentParser) -> None:
    """``--max-size`` and ``--keep``, shared by ``record`` and ``watch --record``."""
    p.add_argument(
        "--max-size",
        type=positive_float,
        default=DEFAULT_MAX_BYTES / 2**20,
        metavar="MB",
        help=f"rotate the recording past this size: FILE becomes FILE.1 (default {DEFAULT_MAX_BYTES >> 20} MB)",
    )
    p.add_argument(
        "--keep",
        type=int,
        default=DEFAULT_KEEP,
        metavar="N",
        help=f"older segments kept on rotation, FILE.1 .. FILE.N (default {DEFAULT_KEEP}; 0: only the current one)",
    )


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB", help="job name (see `ranktop jobs`) or tcp://HOST:PORT")
    p.add_argument("file", metavar="FILE", help="the recording to write (e.g. run.rec)")
    p.add_argument("--duration", type=positive_float, default=None, help="seconds to record (default: until Ctrl-C)")
    p.add_argument(
        "--rate",
        type=rate,
        default=None,
        metavar="HZ",
        help="ask every rank to send HZ messages a second (signed set_rate, for every watcher; default: theirs, 4). "
        "--rate 1 nearly halves a long recording of a slow-stepping job",
    )
    p.add_argument("--every", type=positive_float, default=10.0, help="seconds between status lines on stderr (default 10)")
    add_record_options(p)
    p.set_defaults(run=cmd_record)


def make_recorder(path: str, args: argparse.Namespace, job: str | None) -> FlightRecorder:
    if args.keep < 0:
        raise RecordError(f"--keep must be 0 or more, not {args.keep}")
    try:
        return FlightRecorder(path, job=job, max_bytes=int(args.max_size * 2**20), keep=args.keep)
    except RecordingError as exc:
        raise RecordError(str(exc)) from None


def status_line(recorder: FlightRecorder, ranks: int, elapsed: float) -> str:
    s = recorder.stats
    rate = s.bytes / elapsed if elapsed > 0 else 0.0
    dropped = f", {s.dropped} dropped" if s.dropped else ""
    return (
        f"recording {recorder.path}: {ranks} rank(s), {s.frames} frames, {s.bytes / 1e6:.2f} MB "
        f"({rate * 86400 / 1e6:.0f} MB/day at this rate){dropped}"
    )


def cmd_record(args: argparse.Namespace) -> int:
    stop_on_sigterm()
    target = resolve_waiting([args.job], args.dir, say=say, follow=True)
    recorder = make_recorder(args.file, args, target.job)
    session = WatchSession(target, recorder=recorder, rate_hz=args.rate)
    if args.rate is not None:
        session.set_rate_when_ready(args.rate)
    started = time.monotonic()
    deadline = started + args.duration if args.duration else float("inf")
    next_line = started + args.every
    ranks = 0
    try:
        with session:
            print(
                f"recording job {target.job or args.job} to {args.file}"
                + (f" for {args.duration:g}s" if args.duration else " (Ctrl-C stops)"),
                file=sys.stderr,
            )
            while time.monotonic() < deadline:
                time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
                if recorder.stats.error:
                    raise RecordError(recorder.stats.error)
                if session.ended():
                    say(f"job {target.job or args.job} ended: every rank exited cleanly")
                    break
                if time.monotonic() >= next_line:
                    ranks = len(session.aggregator.snapshot().ranks)
                    print(status_line(recorder, ranks, time.monotonic() - started), file=sys.stderr)
                    next_line += args.every
            ranks = len(session.aggregator.snapshot().ranks)
    except KeyboardInterrupt:
        ranks = len(session.aggregator.snapshot().ranks)
    print(status_line(recorder, ranks, time.monotonic() - started).replace("recording", "recorded", 1), file=sys.stderr)
    if recorder.stats.error:
        raise RecordError(recorder.stats.error)
    if not recorder.stats.frames:
        raise RecordError(f"no telemetry heard from job {target.job or args.job}; {args.file} holds nothing to replay")
    return 0


COMMAND = Command("record", HELP, configure, DESCRIPTION)
