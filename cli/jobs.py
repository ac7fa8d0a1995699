"""``ranktop jobs``: the jobs in the rendezvous directory, running or (``--all``) ended."""

from __future__ import annotations

import argparse

from ranktop.cli.options import Command
from ranktop.watch import slurm
from ranktop.watch.session import live_jobs
from ranktop.transport import rendezvous

HELP = "list the jobs in the rendezvous directory"


def configure(jobs: argparse.ArgumentParser) -> None:
    jobs.add_argument("--all", action="store_true", help="include ended jobs (stale records)")
    jobs.add_argument("--prune", action="store_true", help="remove the records of ended jobs (dead relays; SLURM jobs SLURM says ended)")
    jobs.set_defaults(run=cmd_jobs)


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


COMMAND = Command("jobs", HELP, configure)
