"""``ranktop jobs``: the jobs in the rendezvous directory, running or (``--all``) ended."""

from __future__ import annotations

import argparse

import sys

from ranktop.cli.options import Command
from ranktop.watch import job_folders, live_jobs, slurm
from ranktop.transport import rendezvous

HELP = "list the jobs in the rendezvous directory"


def configure(jobs: argparse.ArgumentParser) -> None:
    jobs.add_argument("--all", action="store_true", help="include ended jobs (stale records)")
    jobs.add_argument(
        "--prune",
        action="store_true",
        help="remove the records and secrets of ended jobs (dead relays; SLURM jobs SLURM says ended) now; without it, "
        f"those idle for over {job_folders.ENDED_GRACE_S / 3600:g} h are removed as jobs are listed (captures stay)",
    )
    jobs.set_defaults(run=cmd_jobs)


def cmd_jobs(args: argparse.Namespace) -> int:
    if args.prune:
        slurm_ended = slurm.EndedJobs()
        removed = rendezvous.prune(args.dir, is_dead=lambda record: not record.on_this_machine and slurm_ended(record.slurm_job))
        for path in removed:
            print(f"removed {path}")
    live = live_jobs(args.dir)
    ended = job_folders.ended_folders(live, args.dir)
    pruned = job_folders.prune(ended, 0.0 if args.prune else job_folders.ENDED_GRACE_S)
    if args.prune:
        for path in pruned:
            print(f"removed the secret and records of {path}")
    elif pruned:
        print(
            f"ranktop: removed the secrets and records of {len(pruned)} job(s) ended over {job_folders.ENDED_GRACE_S / 3600:g} h ago",
            file=sys.stderr,
        )
    left = [f for f in ended if f.path not in pruned]
    jobs = rendezvous.list_jobs(args.dir) if args.all else live
    if not jobs:
        print(f"no {'' if args.all else 'running '}jobs under {rendezvous.root(args.dir)}")
    for job, nodes in jobs.items():
        state = "running" if job in live else "ended"
        hosts = ", ".join(sorted({n.host for n in nodes}))
        slurm_ids = sorted({n.slurm_job for n in nodes if n.slurm_job and n.slurm_job != job})
        under = f"\tSLURM job {', '.join(slurm_ids)}" if slurm_ids else ""  # a SLURM job under a name of its own
        print(f"{job}\t{state}\t{len(nodes)} node(s): {hosts}{under}")
    if left and not args.all:
        print(
            f"{len(left)} ended job folder(s) with their secrets under {rendezvous.root(args.dir) / 'jobs'}: "
            f"`ranktop jobs --all` lists them, `ranktop jobs --prune` removes them "
            f"(done as jobs are listed once ended {job_folders.ENDED_GRACE_S / 3600:g} h)"
        )
    return 0


COMMAND = Command("jobs", HELP, configure)
