"""``ranktop attach``: watch a job where it runs (a SLURM job by id), or print the ssh command to reach it.

``ranktop attach --slurm 123456`` asks SLURM for the job's nodes and watches
every node's relay (watch/session.py: records of a shared rendezvous folder, else
the port convention of transport/ports.py). ``--print-ssh`` prints instead the one
``ssh -L`` command that forwards every node's telemetry and control ports to a
laptop, and the ``ranktop watch`` line to run there: the control port of each
node is forwarded next to its telemetry port, which is how the TUI finds it
through a tunnel (watch/engine/receiver.py, :func:`~ranktop.watch.engine.receiver.tunnelled_control`).
"""

from __future__ import annotations

import argparse
import shlex
import socket
from urllib.parse import urlsplit

from ranktop.cli.errors import say
from ranktop.cli.options import Command, add_view_options, add_wait_option
from ranktop.cli.watch import cmd_watch
from ranktop.watch import Target, TargetError, live_nodes, resolve_slurm, resolve_waiting
from ranktop.transport import rendezvous

HELP = "watch a SLURM job by id (--slurm), or any job; --print-ssh for the tunnel from a laptop"
DESCRIPTION = (
    "Attach to a running job: --slurm JOBID finds a SLURM job's nodes with scontrol and "
    "connects to every node's relay (through the rendezvous folder when the home directory is shared, "
    "else the port convention: RANKTOP_PORT_BASE + 2 * (JOBID % 1000)). Without --slurm, TARGET is "
    "what `ranktop watch` takes; a numeric TARGET is tried as a SLURM job first, where SLURM is configured."
)


def configure(attach: argparse.ArgumentParser) -> None:
    attach.add_argument("targets", nargs="*", metavar="TARGET", help="job name, SLURM job id or tcp://HOST:PORT endpoints")
    attach.add_argument("--slurm", metavar="JOBID", default=None, help="a SLURM job id (123456, 123456_7 for an array task)")
    ssh = attach.add_argument_group("watching from a laptop")
    ssh.add_argument("--print-ssh", action="store_true", help="print the ssh command that forwards every node's ports, and exit")
    ssh.add_argument("--via", metavar="HOST", default=None, help="the host ssh logs in to (default: this one, the login node)")
    ssh.add_argument("--jump", metavar="HOST", default=None, help="a jump host on the way (ssh -J HOST)")
    ssh.add_argument("--local-port", type=int, default=None, help="first local port (default: the job's telemetry port)")
    add_view_options(attach)
    add_wait_option(attach)
    attach.set_defaults(run=cmd_attach)


def cmd_attach(args: argparse.Namespace) -> int:
    if args.print_ssh:
        return cmd_print_ssh(args)
    return cmd_watch(args, target_of(args))


def target_of(args: argparse.Namespace) -> Target:
    """The job to attach to; one that is not running yet (a SLURM job still pending) is waited for, up to --wait."""
    wait_s = 0.0 if args.print_ssh else args.wait
    if args.slurm is not None:
        if args.targets:
            raise TargetError("name the job either with --slurm JOBID or as TARGET, not both")
        return resolve_waiting([], args.dir, wait_s=wait_s, say=say, resolver=lambda: resolve_slurm(args.slurm, args.dir))
    follow = not args.print_ssh and not args.json and args.wait is None  # the TUI's waiting screen says it
    return resolve_waiting(args.targets, args.dir, wait_s=wait_s, say=None if follow else say, follow=follow)


def ssh_command(nodes: list[rendezvous.NodeRecord], via: str, jump: str | None, first_local: int) -> tuple[str, list[str]]:
    """The ssh command forwarding every node's telemetry and control ports, and the local telemetry URLs.

    Node i's telemetry lands on local port ``first_local + 2i``, its control on
    the next one: the same offset as on the relay (control = telemetry + 1 under
    the port convention), which is how the TUI finds the control port behind a tunnel.
    """
    forwards, local_urls = [], []
    for i, node in enumerate(nodes):
        tele, ctl = urlsplit(node.telemetry), urlsplit(node.control)
        local = first_local + 2 * i
        offset = (ctl.port or 0) - (tele.port or 0)
        forwards += [
            "-L",
            f"{local}:{_remote(tele.hostname, node)}:{tele.port}",
            "-L",
            f"{local + offset}:{_remote(ctl.hostname, node)}:{ctl.port}",
        ]
        local_urls.append(f"tcp://localhost:{local}")
    argv = ["ssh", "-N"] + (["-J", jump] if jump else []) + forwards + [via]
    return shlex.join(argv), local_urls


def _remote(address: str | None, node: rendezvous.NodeRecord) -> str:
    """The address ssh dials from the far end: a relay that bound loopback is reached through its node."""
    if address is None or address in ("127.0.0.1", "localhost", "::1"):
        return node.host
    return address


def cmd_print_ssh(args: argparse.Namespace) -> int:
    target = target_of(args)
    if target.job is None and target.slurm is None:
        raise TargetError("--print-ssh needs a job (a SLURM id or a rendezvous job), not bare endpoints")
    nodes = live_nodes(target)
    if not nodes:
        raise TargetError("no relay of this job is known yet: is it running ranktop's probe?")
    job = target.job or (target.slurm.job_id if target.slurm else "?")
    first = args.local_port or (urlsplit(nodes[0].telemetry).port or 24000)
    command, urls = ssh_command(nodes, args.via or socket.getfqdn(), args.jump, first)
    secret = rendezvous.job_dir(job, args.dir) / "secret"
    print(f"# on your laptop: forward the relays of job {job} ({len(nodes)} node{'s' if len(nodes) > 1 else ''}), then watch them")
    print(command + " &")
    read_secret = f"RANKTOP_SECRET=$(ssh {args.via or socket.getfqdn()} cat {secret}) " if secret.exists() else ""
    print(f"{read_secret}ranktop watch {' '.join(urls)}")
    if not read_secret:
        print(f"# no secret at {secret}: give the viewer the job's secret in RANKTOP_SECRET, or it reads nothing (docs/security.md)")
    return 0


COMMAND = Command("attach", HELP, configure, DESCRIPTION)
