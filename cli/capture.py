"""``ranktop capture`` and ``ranktop memsnap``: a step-aligned trace (or memory snapshot) of every rank, headless.

Watches the job long enough to learn its ranks and their steps, picks a start
step ahead of the furthest rank (wire/capture.py), sends the signed
``capture`` command, then prints each rank's progress as it changes, where
the files are, and each rank's summary. ``--out DIR`` copies the files the CLI
can reach (same host, or a shared file system) into DIR once the ranks wrote
them; the ranks themselves only ever write under the job's capture folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from typing import Any, Callable
from pathlib import Path

from ranktop.cli.errors import UserError
from ranktop.cli.options import Command, add_job_target, positive_float, rank_list
from ranktop.watch.capture import (
    ASKED,
    CapturePlan,
    CaptureRefused,
    finished,
    plan,
    progress,
    summary_lines,
    table_lines,
)
from ranktop.watch.format import ranks_text
from ranktop.watch import WatchSession, resolve
from ranktop.wire import capture as wire_capture

#: How long to wait for the ranks to show up and for their answers to the command.
ANSWER_TIMEOUT_S = 10.0


class CaptureError(UserError):
    """A one-line reason the capture could not be taken (exit 1)."""


def _steps(text: str) -> int:
    try:
        steps = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of steps, got {text!r}") from None
    problem = wire_capture.check_steps(steps)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return steps


def _configure(kind: str) -> Callable[[argparse.ArgumentParser], None]:
    def configure(p: argparse.ArgumentParser) -> None:
        p.set_defaults(capture_kind=kind, run=cmd_capture)
        add_job_target(p)
        p.add_argument(
            "--steps",
            type=_steps,
            default=wire_capture.DEFAULT_STEPS,
            help=f"steps to capture, 1 to {wire_capture.MAX_STEPS} (default {wire_capture.DEFAULT_STEPS})",
        )
        p.add_argument("--ranks", type=rank_list, default=None, help="comma-separated ranks (default: all)")
        p.add_argument("--out", metavar="DIR", default=None, help="copy the files into DIR once written (where reachable)")
        p.add_argument("--timeout", type=positive_float, default=120.0, help="seconds to wait for the capture (default 120)")
        p.add_argument("--json", action="store_true", help="print the outcome as JSON instead of lines")
        if kind == wire_capture.TRACE:
            p.add_argument("--shapes", action="store_true", help="record input shapes")
            p.add_argument("--memory", action="store_true", help="record tensor allocations (profile_memory)")
            p.add_argument("--stacks", action="store_true", help="record Python stacks of ops (bigger traces)")

    return configure


def _command(kind: str, name: str, what: str) -> Command:
    description = (
        f"Take {what} over --steps steps, every rank starting at the same step, a little ahead of the "
        "furthest rank. Each rank writes its own file under the job's capture folder "
        "(<rendezvous>/jobs/<job>/captures/<id>/, or $RANKTOP_CAPTURE_DIR/<id>/ as set on the job) and sends back a "
        "summary. One capture at a time per job. Needs the job secret."
    )
    return Command(name, f"{what}, all ranks from the same step", _configure(kind), description)


def cmd_capture(args: argparse.Namespace) -> int:
    kind = args.capture_kind
    options = {k: getattr(args, k, False) for k in ("shapes", "memory", "stacks")} if kind == wire_capture.TRACE else {}
    session = WatchSession(resolve(args.targets, args.dir))
    with session:
        request, command_id = _request(session, kind, args.steps, args.ranks, options)
        rows = _follow(session, request, command_id, args.timeout, quiet=args.json)
        snap = session.snapshot()
    hosts = {r.rank: r.host for r in snap.ranks}
    done = [row for row in rows if row.state == wire_capture.DONE]
    folder = next((row.status.folder for row in rows if row.status is not None and row.status.folder), None)
    copied = _copy(done, args.out) if args.out and done else []
    if args.json:
        print(
            json.dumps(
                {
                    "job": snap.job,
                    "id": request.id,
                    "kind": kind,
                    "start": request.start,
                    "steps": request.steps,
                    "folder": folder,
                    "copied_to": args.out if copied else None,
                    "ranks": {
                        str(row.rank): {
                            "state": row.state,
                            "text": row.text,
                            "host": hosts.get(row.rank),
                            "path": row.status.path if row.status else None,
                            "summary": row.status.summary if row.status else None,
                        }
                        for row in rows
                    },
                },
                indent=2,
            )
        )
    else:
        if done:
            print(f"files: {folder}" + (f" (copied to {args.out})" if copied else ""))
        for line in table_lines(rows):
            print(line)
        for row in done:
            for i, line in enumerate(summary_lines(row.status)):
                print(f"rank {row.rank}: {line}" if i == 0 else f"  {line}")
        missing = [row for row in done if row.status.path not in copied]
        if args.out and missing:
            for row in missing:
                print(f"rank {row.rank}: not reachable from here, on host {hosts.get(row.rank, '?')}: {row.status.path}")
    bad = [row for row in rows if row.state != wire_capture.DONE]
    if bad:
        raise CaptureError(f"{len(bad)} of {len(rows)} rank(s) did not complete the capture ({ranks_text(r.rank for r in bad)})")
    return 0


def _request(session: WatchSession, kind: str, steps: int, ranks: list[int] | None, options: dict[str, bool]) -> tuple[CapturePlan, str]:
    """Learn the job, plan the capture, send it and wait for the answers; refusals by every rank end it here."""
    requests = session.requests
    if not requests.available:
        raise CaptureError(requests.unavailable_reason)
    started = time.monotonic()

    def everyone_steps() -> bool:  # every rank, with a step rate: the start step must lie ahead of the furthest one
        snap = session.snapshot()
        return snap.world_size is not None and len(snap.ranks) >= snap.world_size and bool(snap.steps_per_s)

    session.wait_until(everyone_steps, ANSWER_TIMEOUT_S)
    try:
        request = plan(session.snapshot(), kind, steps, ranks)
    except CaptureRefused as exc:
        raise CaptureError(str(exc)) from None
    try:
        wait_s = max(0.0, ANSWER_TIMEOUT_S - (time.monotonic() - started))
        command_id, replies = requests.ask(
            "capture",
            request.ranks,
            request.args(**options),
            only=None if request.all_ranks else list(request.ranks),
            timeout=ANSWER_TIMEOUT_S,
            wait_s=wait_s,
        )
    except RuntimeError as exc:
        raise CaptureError(str(exc)) from None
    refusals = {r.result.get("error", "refused") for r in replies if not r.ok}
    if replies and len(replies) == len(request.ranks) and not any(r.ok for r in replies):
        raise CaptureError("; ".join(sorted(refusals)))
    if not replies:
        raise CaptureError(f"no rank answered the capture command within {ANSWER_TIMEOUT_S:g}s")
    return request, command_id


def _follow(session: WatchSession, request: CapturePlan, command_id: str, timeout: float, quiet: bool) -> list[Any]:  # (RankProgress)
    if not quiet:
        print(
            f"job {session.snapshot().job}: {request.kind} capture {request.id}, {request.steps} step(s) from step "
            f"{request.start}, {ranks_text(request.ranks)}",
            flush=True,
        )
    shown: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    rows = []
    while True:
        rows = progress(session.snapshot(), request, session.replies_to(command_id))
        for row in rows:
            key = row.state
            if shown.get(row.rank) != key and row.state != ASKED:
                shown[row.rank] = key
                if not quiet:
                    print(f"rank {row.rank}: {row.text}", flush=True)
        if finished(rows) or time.monotonic() >= deadline:
            return rows
        time.sleep(0.1)


def _copy(done: list[Any], out: str) -> list[str]:  # (RankProgress)
    """Copy each rank's file that exists here into ``out``; the paths copied."""
    target = Path(out).expanduser()
    copied = []
    for row in done:
        path = row.status.path
        if path and os.path.isfile(path):
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / Path(path).name)
            copied.append(path)
    return copied


COMMANDS = (
    _command(wire_capture.TRACE, "capture", "a torch.profiler trace of every rank (Chrome/Perfetto JSON, loads in HTA)"),
    _command(wire_capture.MEMORY, "memsnap", "a CUDA memory snapshot of every rank (pickle for pytorch.org/memory_viz)"),
)
