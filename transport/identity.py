"""Who this process is in the job: rank numbers, host, and the job's name.

Read once at ``init`` from what the launcher put in the environment, in order of
trust: torchrun (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE), then SLURM's
srun (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS), then an already initialised
``torch.distributed`` (never imported by us: only consulted if the script did),
else a single process.

The local rank is ``LOCAL_RANK`` whenever a launcher set it, whatever else is
missing: PyTorch Lightning's second process has ``LOCAL_RANK=1`` and no
``RANK``. Without it (``torch.multiprocessing.spawn`` passes ranks as
arguments) the rank modulo the node's GPU count, else the rank itself: right
for one node, a guess beyond. The local rank only names the rank's GPU and
what the viewer shows; which process runs the node's relay is settled by a
claim in the node's claim folder (relay/claim.py), never by it.

The host is the name this node goes by in the TUI and, when the relay listens
on every interface, the address it advertises: ``RANKTOP_HOST`` overrides the
machine's host name (a name that resolves on the cluster network, an address on
the high-speed network, or a fake name for several "nodes" on one machine in
tests). ``machine`` stays the real host name: whether a process is alive can
only be checked there.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ranktop.wire import settings


@dataclass(frozen=True)
class Identity:
    job: str
    rank: int
    local_rank: int
    world: int
    local_world: int | None  # unknown under some launchers
    host: str
    pid: int
    launcher: str  # "torchrun" | "slurm" | "torch.distributed" | "single"
    machine: str = ""  # the real host name (``host`` may be RANKTOP_HOST's); "" = same as host
    slurm_job: str | None = None  # SLURM_JOB_ID when run in a SLURM job, whatever the job's name


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _ranks_from_env(env: Mapping[str, str]) -> tuple[int, int, int, int | None, str]:
    rank, world = _int_env(env, "RANK"), _int_env(env, "WORLD_SIZE")
    if rank is not None and world is not None:
        local = _int_env(env, "LOCAL_RANK")
        return rank, rank if local is None else local, world, _int_env(env, "LOCAL_WORLD_SIZE"), "torchrun"
    rank, world = _int_env(env, "SLURM_PROCID"), _int_env(env, "SLURM_NTASKS")
    if rank is not None and world is not None:
        local = _int_env(env, "SLURM_LOCALID")
        local = _int_env(env, "LOCAL_RANK") if local is None else local
        return rank, 0 if local is None else local, world, _int_env(env, "SLURM_NTASKS_PER_NODE"), "slurm"
    local = _int_env(env, "LOCAL_RANK")
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            rank = dist.get_rank()
            local = _guess_local_rank(rank) if local is None else local
            return rank, local, dist.get_world_size(), _int_env(env, "LOCAL_WORLD_SIZE"), "torch.distributed"
    except Exception:
        pass
    return 0, 0 if local is None else local, 1, 1, "single"


def _guess_local_rank(rank: int) -> int:
    """A rank with no launcher's local rank (mp.spawn): modulo the node's GPUs, which is how such scripts pick theirs."""
    torch = sys.modules.get("torch")
    try:
        count = torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0
    except Exception:
        count = 0
    return rank % count if count else rank


def _job_from_env(env: Mapping[str, str], host: str, pid: int) -> str:
    for name in (settings.JOB.name, "SLURM_JOB_ID"):
        if env.get(name):
            return env[name]
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":  # torchrun's placeholder when no --rdzv-id was given
        return run_id
    if env.get("MASTER_PORT") and env.get("MASTER_ADDR"):
        # Every rank of one torchrun job, on every node, agrees on these.
        return f"torchrun-{env['MASTER_ADDR']}-{env['MASTER_PORT']}"
    return f"{host}-{pid}"


def detect(job: str | None = None, env: Mapping[str, str] | None = None) -> Identity:
    env = os.environ if env is None else env
    machine = socket.gethostname()
    host = settings.HOST.get(env) or machine
    pid = os.getpid()
    rank, local_rank, world, local_world, launcher = _ranks_from_env(env)
    return Identity(
        job=job or _job_from_env(env, host, pid),
        rank=rank,
        local_rank=local_rank,
        world=world,
        local_world=local_world,
        host=host,
        pid=pid,
        launcher=launcher,
        machine=machine,
        slurm_job=env.get("SLURM_JOB_ID") or None,
    )
