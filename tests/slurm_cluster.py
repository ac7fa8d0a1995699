"""A real one-node SLURM cluster for the tests: munged, slurmctld and slurmd of Debian's packages.

Everything lives in one temporary folder (munge key and socket, ``slurm.conf``,
state, spool, pid and log files), the daemons listen on free ports rather than
SLURM's defaults, and the commands find the cluster through ``SLURM_CONF`` and
nothing else, so a cluster of the machine's own (or another test run's) is never
touched. The node is this machine, under its own host name and with its own CPU
count, and the daemons run as the current user (root: slurmd starts job steps
as their owner). It starts in about a second; :meth:`SlurmCluster.stop` ends all
three daemons.

The packages are installed by ``make test`` when missing and root
(``apt-get install slurm-wlm munge``); :func:`unavailable` says why a cluster
cannot be started, for the tests to skip with that reason.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
INSTALL_HINT = "as root: apt-get install -y --no-install-recommends slurm-wlm munge (or `make test` as root)"


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def unavailable() -> str | None:
    """Why no cluster can be started here, or None."""
    missing = [name for name in (*DAEMONS, "sbatch", "scontrol") if _which(name) is None]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing): {INSTALL_HINT}"
    if os.geteuid() != 0:
        return "the test SLURM cluster runs its daemons as root (slurmd starts job steps as their owner)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, folder: Path):
        self.folder = folder
        self.node = socket.gethostname()
        self.conf = folder / "slurm.conf"
        self.munge_socket = folder / "munge" / "munge.socket"
        self._pids: dict[str, Path] = {}

    @property
    def env(self) -> dict:
        """The environment of now (a test's RANKTOP_DIR included), pointed at this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def start(self, timeout: float = 30.0) -> "SlurmCluster":
        for sub in ("munge", "state", "spool", "log"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        key = self.folder / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        m = self.folder / "munge"
        subprocess.run(
            [
                _which("munged"), "--force", f"--key-file={key}", f"--socket={self.munge_socket}",
                f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'munged.seed'}",
            ],
            check=True, capture_output=True, timeout=20,
        )  # fmt: skip
        self._pids["munged"] = m / "munged.pid"
        self.conf.write_text(self._config())
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([_which(daemon)], env=self.env, check=True, capture_output=True, timeout=20)
            self._pids[daemon] = self.folder / f"{daemon}.pid"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split()
            if out[-1:] in (["idle"], ["mix"], ["alloc"]):
                return self
            time.sleep(0.2)
        logs = "\n".join(
            (self.folder / "log" / f"{d}.log").read_text()[-1500:]
            for d in ("slurmctld", "slurmd")
            if (self.folder / "log" / f"{d}.log").exists()
        )
        self.stop()
        raise RuntimeError(f"the test SLURM node never became idle:\n{logs}")

    def _config(self) -> str:
        f = self.folder
        return f"""\
# Written by tests/slurm_cluster.py: a one-node cluster of this machine, private to one test run.
ClusterName=ranktoptest
SlurmctldHost={self.node}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={f / "state"}
SlurmdSpoolDir={f / "spool"}
SlurmctldPidFile={f / "slurmctld.pid"}
SlurmdPidFile={f / "slurmd.pid"}
SlurmctldLogFile={f / "log" / "slurmctld.log"}
SlurmdLogFile={f / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName={self.node} CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""

    def run(self, *argv: str, check: bool = True, timeout: float = 30, env: dict | None = None) -> subprocess.CompletedProcess:
        """A SLURM command against this cluster (``sbatch``, ``scontrol``, ...)."""
        return subprocess.run(list(argv), env=dict(self.env, **(env or {})), capture_output=True, text=True, check=check, timeout=timeout)

    def sbatch(self, script: str, *options: str, env: dict | None = None) -> str:
        """Submit a batch script (its text); returns the job id."""
        proc = subprocess.run(
            ["sbatch", "--parsable", *options], input=script, env=dict(self.env, **(env or {})),
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch failed: {proc.stderr.strip()}")
        return proc.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()

    def stop(self) -> None:
        """Cancel what still runs, then end the daemons."""
        jobs = self.run("squeue", "-h", "-o", "%A", check=False).stdout.split()
        if jobs:
            self.run("scancel", *jobs, check=False)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.run("squeue", "-h", check=False).stdout.strip():
                time.sleep(0.2)
        for daemon in ("slurmd", "slurmctld", "munged"):
            pid_file = self._pids.pop(daemon, None)
            try:
                pid = int(pid_file.read_text().split()[0]) if pid_file else None
            except (OSError, ValueError, IndexError):
                continue
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


if __name__ == "__main__":  # try it by hand: python tests/slurm_cluster.py start|stop FOLDER
    import sys

    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit("usage: python tests/slurm_cluster.py start|stop FOLDER")
    action, folder = sys.argv[1], Path(sys.argv[2]).resolve()
    cluster = SlurmCluster(folder)
    if action == "start":
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}    # then sbatch, squeue, ranktop attach --slurm JOBID")
    else:
        for daemon in DAEMONS:
            pid_file = folder / "munge" / "munged.pid" if daemon == "munged" else folder / f"{daemon}.pid"
            cluster._pids[daemon] = pid_file
        cluster.stop()
