"""The ``ranktop`` command line: watch, jobs, ping, stacks, capture, memsnap, launch, demo.

Every user error ends in one line on stderr (``ranktop: error: ...``) and a
non-zero exit, never a traceback: exit 2 for a bad command line, 1 for a job or
endpoint that cannot be watched.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ranktop.cli import attach, launch
from ranktop.cli import capture as capture_cli
from ranktop.cli import stacks as stacks_cli
from ranktop.cli import export as export_cli, record as record_cli, replay as replay_cli, report as report_cli
from ranktop.watch import slurm
from ranktop.watch.aggregator import DEFAULT_SILENT_AFTER_S, DEFAULT_WINDOW
from ranktop.watch.session import Target, TargetError, WatchSession, live_jobs, resolve
from ranktop.watch.stalls import DEFAULT_STALL_FACTOR, DEFAULT_STALL_FLOOR_S
from ranktop.wire import __version__, rendezvous, settings

#: How long an endpoint may stay silent before the user is told (then we keep waiting).
WAITING_NOTICE_S = 3.0


class UserError(Exception):
    """Ends the command with its message on one line and exit code 1."""


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ranktop",
        description="top for the ranks of a distributed PyTorch training job.",
        epilog="Start with `ranktop demo`; watch your own job with `ranktop watch JOB`. Keys: press ? in the TUI.",
    )
    parser.add_argument("--version", action="version", version=f"ranktop {__version__}")
    parser.add_argument(
        "--dir", metavar="DIR", default=None, help="rendezvous directory (default: $RANKTOP_DIR or ~/.ranktop)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    watch = sub.add_parser(
        "watch",
        help="watch a running job live (TUI), or print a JSON snapshot",
        description="Attach to a running job. TARGET is a job name (see `ranktop jobs`) or one or more "
        "relay endpoints tcp://HOST:PORT; with no TARGET, the only running job.",
    )
    watch.add_argument("targets", nargs="*", metavar="TARGET", help="job name or tcp://HOST:PORT endpoints")
    _add_view_options(watch)
    watch.add_argument("--record", metavar="FILE", default=None, help="also record the job's telemetry to FILE (ranktop replay, report)")
    record_cli.add_record_options(watch, _positive(float))

    jobs = sub.add_parser("jobs", help="list the jobs in the rendezvous directory")
    jobs.add_argument("--all", action="store_true", help="include ended jobs (stale records)")
    jobs.add_argument("--prune", action="store_true", help="remove the records of ended jobs (dead relays; SLURM jobs SLURM says ended)")

    ping = sub.add_parser("ping", help="send a signed ping to every rank and report who answers")
    ping.add_argument("targets", nargs="*", metavar="TARGET", help="job name (default: the only running job)")
    ping.add_argument("--timeout", type=_positive(float), default=5.0, help="seconds to wait for answers (default 5)")
    ping.add_argument("--ranks", type=_rank_list, default=None, help="comma-separated ranks (default: all)")

    attach.add_parser(sub, _positive(float), _add_view_options)
    stacks_cli.add_parser(sub, _positive(float))
    capture_cli.add_parsers(sub, _positive(float), _rank_list)
    launch.add_parser(sub, _positive(float))
    # The flight recorder and monitoring (issue 14): one module per command.
    record_cli.add_parser(sub, _positive(float))
    replay_cli.add_parser(sub, _positive(float))
    report_cli.add_parser(sub)
    export_cli.add_parser(sub)

    demo = sub.add_parser(
        "demo",
        help="run the demo training job (torchrun, gloo on CPU) and watch it",
        description="Launch the demo job with torchrun and open the TUI on it. Demo switches "
        "(--slow-rank R --slow-ms MS --slow-phase P, --hang-rank R --hang-at-step S, "
        "--leak-mb-per-step X, --steps N, ...) are passed to the job; see `python -m ranktop.demo.train --help`.",
    )
    demo.add_argument("--nproc", type=_positive(int), default=4, help="ranks to launch (default 4)")
    demo.add_argument("--no-tui", action="store_true", help="run the job in the foreground without the TUI")
    demo.add_argument("--job", default=None, help="job name (default: demo-<pid>)")
    _add_view_options(demo, json_mode=False)
    # `ranktop watch JOB --dir X` must work as well as `ranktop --dir X watch JOB`.
    for command in sub.choices.values():
        command.add_argument("--dir", metavar="DIR", default=argparse.SUPPRESS, help="rendezvous directory")
    return parser


def _rate(text: str) -> float:
    value = _positive(float)(text)
    problem = settings.rate_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def _rank_list(text: str) -> list[int]:
    try:
        ranks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated rank numbers, got {text!r}") from None
    if not ranks or any(r < 0 for r in ranks):
        raise argparse.ArgumentTypeError(f"expected non-negative rank numbers, got {text!r}")
    return ranks


def _add_view_options(p: argparse.ArgumentParser, json_mode: bool = True) -> None:
    if json_mode:
        p.add_argument("--json", action="store_true", help="no TUI: print one JSON snapshot and exit")
        p.add_argument(
            "--duration", type=_positive(float), default=5.0, help="with --json: seconds to listen first (default 5)"
        )
    p.add_argument("--refresh", type=_positive(float), default=2.0, help="screen refreshes per second (default 2; 0.5 on a slow link)")
    if json_mode:
        p.add_argument(
            "--rate",
            type=_rate,
            default=None,
            metavar="HZ",
            help="ask every rank to send HZ messages a second (signed set_rate, for every watcher; default: theirs, 4). "
            "On a slow link: --refresh 0.5 --rate 1",
        )
    p.add_argument(
        "--window", type=_positive(int), default=DEFAULT_WINDOW, help=f"steps per rank in the statistics window (default {DEFAULT_WINDOW})"
    )
    p.add_argument(
        "--silent-after",
        type=_positive(float),
        default=DEFAULT_SILENT_AFTER_S,
        help=f"seconds without a message before a rank is marked silent (default {DEFAULT_SILENT_AFTER_S:g})",
    )
    p.add_argument(
        "--stall-factor",
        type=_positive(float),
        default=DEFAULT_STALL_FACTOR,
        help=f"a rank that finished no step for this many times its median step is stalled (default {DEFAULT_STALL_FACTOR:g})",
    )
    p.add_argument(
        "--stall-floor",
        type=_positive(float),
        default=DEFAULT_STALL_FLOOR_S,
        help=f"... and for at least this many seconds (default {DEFAULT_STALL_FLOOR_S:g})",
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "demo":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "watch":
            return cmd_watch(args)
        if args.command == "attach":
            if args.print_ssh:
                return attach.cmd_print_ssh(args)
            return cmd_watch(args, attach.target_of(args))
        if args.command == "jobs":
            return cmd_jobs(args)
        if args.command == "stacks":
            return stacks_cli.cmd_stacks(args)
        if args.command in ("capture", "memsnap"):
            return capture_cli.cmd_capture(args)
        if args.command == "launch":
            return launch.cmd_launch(args)
        if args.command == "ping":
            return cmd_ping(args)
        if args.command == "demo":
            from ranktop.cli.demo import run_demo

            return run_demo(args, extra)
        if args.command in ISSUE14_COMMANDS:
            return ISSUE14_COMMANDS[args.command](args)
    except (
        TargetError, UserError, stacks_cli.StacksError, capture_cli.CaptureError, launch.LaunchError, slurm.SlurmError,
        record_cli.RecordError, replay_cli.ReplayError, report_cli.ReportError, export_cli.ExportError,
    ) as exc:
        print(f"ranktop: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 2


def _session(args, target: Target | None = None) -> WatchSession:
    """The session of ``watch``/``attach``: ``target`` if already resolved (``attach --slurm``), else what the user named."""
    target = target if target is not None else resolve(args.targets, args.dir)
    record = getattr(args, "record", None)
    return WatchSession(
        target,
        window=args.window,
        silent_after_s=args.silent_after,
        stall_factor=args.stall_factor,
        stall_floor_s=args.stall_floor,
        rate_hz=args.rate,
        recorder=record_cli.make_recorder(record, args, target.job) if record else None,
    )


def cmd_watch(args, target: Target | None = None) -> int:
    session = _session(args, target)
    if session.rate_hz is not None:
        attach.request_rate(session, session.rate_hz)  # its own thread: waits for the first rank, then asks
    if args.json:
        return _watch_json(session, args.duration)
    return run_tui(session, args.refresh)


def run_tui(session: WatchSession, refresh_hz: float, title: str = "ranktop", on_app=None) -> int:
    """Run the TUI until the user quits; ``on_app(app)`` runs first (the demo watches its job with it)."""
    try:
        from ranktop.tui.app import RanktopApp
    except ImportError as exc:
        raise UserError(f"the TUI needs textual ({exc}): pip install 'ranktop[tui]', or use --json") from None
    with session:
        app = RanktopApp(session, session.controller, refresh_hz=refresh_hz, title=title)
        if on_app is not None:
            on_app(app)
        app.run()
    return 0


def _watch_json(session: WatchSession, duration: float) -> int:
    told: set[str] = set()
    with session:
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
            for e in session.snapshot().endpoints:
                if e.state == "waiting" and e.quiet_s >= WAITING_NOTICE_S and e.url not in told:
                    told.add(e.url)
                    print(f"ranktop: no answer from {e.url} after {e.quiet_s:.0f}s; still waiting", file=sys.stderr)
        snap = session.snapshot()
    print(json.dumps(snap.to_json(), indent=2))
    for error in snap.errors:
        print(f"ranktop: {error}", file=sys.stderr)
    if not snap.ranks:
        job = session.target.slurm
        hint = ""
        if job is not None:  # the commonest cause: a job that does not run ranktop, or another port base
            hint = (
                f" from the {len(job.nodes)} node(s) of SLURM job {job.label}: does it run ranktop "
                "(probe.init() or ranktop launch), with the same RANKTOP_PORT_BASE?"
            )
        raise UserError(f"no rank reported within {duration:g}s{hint}")
    return 0


def cmd_jobs(args) -> int:
    if args.prune:
        ended = slurm.EndedJobs()
        removed = rendezvous.prune(args.dir, is_dead=lambda record: not record.on_this_machine and ended(record.slurm_job))
        for path in removed:
            print(f"removed {path}")
    live = live_jobs(args.dir)
    jobs = rendezvous.list_jobs(args.dir) if args.all else live
    if not jobs:
        print(f"no {'' if args.all else 'running '}jobs under {rendezvous.root(args.dir)}")
        return 0
    for job, nodes in jobs.items():
        state = "running" if job in live else "ended"
        hosts = ", ".join(sorted({n.host for n in nodes}))
        slurm_ids = sorted({n.slurm_job for n in nodes if n.slurm_job and n.slurm_job != job})
        under = f"\tSLURM job {', '.join(slurm_ids)}" if slurm_ids else ""  # a SLURM job under a name of its own
        print(f"{job}\t{state}\t{len(nodes)} node(s): {hosts}{under}")
    return 0


def cmd_ping(args) -> int:
    session = WatchSession(resolve(args.targets, args.dir), window=DEFAULT_WINDOW)
    with session:
        if not session.controller.available:
            raise UserError(session.controller.unavailable_reason)
        # Learn the world size and give the relays' subscriptions time to settle.
        deadline = time.monotonic() + args.timeout
        # Endpoints given by URL learn their relay's control port from a hello of its local rank 0.
        while time.monotonic() < deadline and (session.snapshot().world_size is None or not session.controller.endpoints()):
            time.sleep(0.1)
        snap = session.snapshot()
        if snap.world_size is None:
            raise UserError(f"no rank reported within {args.timeout:g}s")
        expected = set(args.ranks) if args.ranks else set(range(snap.world_size))
        unknown = expected - set(range(snap.world_size))
        if unknown:
            raise UserError(f"no such rank(s) {sorted(unknown)} in a job of {snap.world_size}")
        try:
            command_id = session.controller.send("ping", ranks=args.ranks)
        except RuntimeError as exc:
            raise UserError(str(exc)) from None
        answered: dict[int, float | None] = {}
        while time.monotonic() < deadline and set(answered) < expected:
            time.sleep(0.05)
            for reply in session.snapshot().replies:
                if reply.id == command_id:
                    answered[reply.rank] = reply.rtt_s
    for rank in sorted(expected):
        if rank in answered:
            rtt = answered[rank]
            print(f"rank {rank}: pong in {rtt * 1000:.1f} ms" if rtt is not None else f"rank {rank}: pong")
        else:
            print(f"rank {rank}: no answer within {args.timeout:g}s")
    missing = expected - set(answered)
    if missing:
        raise UserError(f"{len(missing)} of {len(expected)} rank(s) did not answer")
    return 0


#: Commands of the flight recorder and monitoring (cli/record.py, replay.py, report.py, export.py).
ISSUE14_COMMANDS = {
    "record": record_cli.cmd_record,
    "replay": replay_cli.cmd_replay,
    "report": report_cli.cmd_report,
    "export": export_cli.cmd_export,
}


if __name__ == "__main__":
    sys.exit(main())
