"""What SLURM knows about a job: its state, owner and nodes, through SLURM's own commands.

Everything ranktop asks SLURM goes through here: ``scontrol show job -o ID``
(one line of ``Key=Value`` per job record) and ``scontrol show hostnames LIST``
(the compressed node list expanded). Parsing is pure (:func:`parse_show_job`,
tested on output captured from a real cluster); :func:`find_job` runs the
commands and turns every way a job cannot be watched into one
:class:`SlurmError` line: SLURM not installed, unknown job, pending, ended,
another user's, an array with several running tasks.

Job arrays: ``ID_TASK`` names one task; an array id names its one running
task, or the error lists them. Heterogeneous jobs: the nodes of every
component, under the leader's id (what its job steps see as ``SLURM_JOB_ID``).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Callable

from ranktop.watch.errors import RanktopError

#: States in which a job's steps may be running (SUSPENDED: stopped, but its relays are alive).
#: COMPLETING is not one: the job is over and SLURM is cleaning up after it.
ACTIVE_STATES = ("RUNNING", "SUSPENDED", "CONFIGURING", "SIGNALING")
WAITING_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "RESIZING")
COMMAND_TIMEOUT_S = 10.0
#: ``123``, ``123_4`` (an array task), ``123+1`` (a component of a heterogeneous job).
JOB_ID = re.compile(r"^\d+([_+]\d+)?$")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_:/]*=")


class SlurmError(RanktopError):
    """A job that cannot be watched, or SLURM that cannot be asked; the message is the whole story.

    ``answered``: SLURM knows the job and said why not (pending, ended, another
    user's, an ambiguous array), as opposed to an unknown job or a SLURM that
    could not be asked, where a rendezvous job of that name may still be meant.
    ``pending``: the job has not started yet (pending, requeued): a monitor started first waits for it.
    """

    def __init__(self, message: str, answered: bool = False, pending: bool = False):
        super().__init__(message)
        self.answered = answered
        self.pending = pending


@dataclass(frozen=True)
class SlurmJob:
    job_id: str  # the id the job's steps see as SLURM_JOB_ID (an array task's own id, a het job's leader)
    name: str
    state: str  # RUNNING, PENDING, COMPLETED, ...
    user: str
    uid: int | None
    nodes: tuple[str, ...]  # expanded host names, every component of a heterogeneous job
    reason: str = ""
    array: str | None = None  # "ARRAYID_TASK" for an array task
    het_components: int = 0  # components of a heterogeneous job (0: not one)
    node_list: str = ""  # as SLURM writes it, compressed (node[01-04])

    @property
    def label(self) -> str:
        return f"{self.job_id} ({self.array})" if self.array else self.job_id


def is_job_id(text: str) -> bool:
    return bool(JOB_ID.match(text))


def parse_show_job(text: str) -> list[dict[str, str]]:
    """``scontrol show job -o`` output: one dict per line.

    Values may contain spaces (a command with arguments, a comment): a
    whitespace-separated token that does not start with ``Key=`` belongs to the
    previous value. Values may contain ``=`` themselves (``TRES=cpu=2,node=1``).
    """
    records = []
    for line in text.splitlines():
        record: dict[str, str] = {}
        key = None
        for token in line.split():
            if _KEY.match(token):
                key, value = token.split("=", 1)
                record[key] = value
            elif key is not None:
                record[key] += " " + token
        if "JobId" in record:
            records.append(record)
    return records


def _uid(user_field: str) -> tuple[str, int | None]:
    """``root(0)`` -> ("root", 0)."""
    match = re.match(r"^(.*?)\((\d+)\)$", user_field)
    return (match.group(1), int(match.group(2))) if match else (user_field, None)


def job_from_records(requested: str, records: list[dict[str, str]], expand: Callable[[str], list[str]] | None = None) -> SlurmJob:
    """The one job to watch among what ``scontrol show job -o REQUESTED`` printed; raises SlurmError.

    ``expand`` turns a compressed node list into host names (``scontrol show hostnames``).
    """
    expand = expand or (lambda nodelist: [nodelist] if nodelist else [])
    if not records:
        raise SlurmError(f"SLURM job {requested} is unknown (or ended long enough ago that SLURM forgot it)")
    if len(records) > 1 and "ArrayJobId" in records[0] and "HetJobId" not in records[0]:
        active = [r for r in records if r.get("JobState") in ACTIVE_STATES]
        waiting = [r for r in records if r.get("JobState") in WAITING_STATES]
        if len(active) == 1:
            records = active
        elif not active and not waiting:
            records = records[:1]  # every task has ended: say so, as for one job
        else:
            tasks = ", ".join(f"{r['ArrayJobId']}_{r.get('ArrayTaskId', '?')} ({r.get('JobState', '?').lower()})" for r in records)
            raise SlurmError(f"SLURM job {requested} is an array of {len(records)} tasks, name one: {tasks}", answered=True)
    first = records[0]
    user, uid = _uid(first.get("UserId", "?"))
    job_id = first.get("HetJobId") or first["JobId"]
    array = None
    if "ArrayJobId" in first and "ArrayTaskId" in first:
        array = f"{first['ArrayJobId']}_{first['ArrayTaskId']}"
    states = [r.get("JobState", "UNKNOWN") for r in records]
    state = next((s for s in states if s in ACTIVE_STATES), states[0])
    nodes: list[str] = []
    node_lists = []
    for r in records:
        node_list = r.get("NodeList", "")
        if node_list and node_list != "(null)":
            node_lists.append(node_list)
            nodes.extend(n for n in expand(node_list) if n not in nodes)
    return SlurmJob(
        job_id=job_id,
        name=first.get("JobName", ""),
        state=state,
        user=user,
        uid=uid,
        nodes=tuple(nodes),
        reason=first.get("Reason", ""),
        array=array,
        het_components=len(records) if "HetJobId" in first else 0,
        node_list=",".join(node_lists),
    )


def check_watchable(job: SlurmJob, requested: str, uid: int | None = None) -> None:
    """Raise SlurmError unless the job is running, has nodes, and is ours."""
    uid = os.getuid() if uid is None else uid
    if job.uid is not None and uid not in (0, job.uid):
        raise SlurmError(
            f"SLURM job {requested} belongs to {job.user}, not to you ({_user_name(uid)}): its relays' ranktop folder "
            "and job secret are theirs; watch it as them, or name its relays' endpoints (tcp://HOST:PORT)",
            answered=True,
        )
    if job.state in WAITING_STATES:
        why = f" ({job.reason})" if job.reason and job.reason != "None" else ""
        raise SlurmError(
            f"SLURM job {requested} is {job.state.lower()}{why}: nothing to watch until it starts", answered=True, pending=True
        )
    if job.state not in ACTIVE_STATES:
        raise SlurmError(f"SLURM job {requested} has ended ({job.state.lower()})", answered=True)
    if not job.nodes:
        raise SlurmError(f"SLURM job {requested} is {job.state.lower()} but has no nodes yet", answered=True, pending=True)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


#: Where SLURM's commands find their configuration when SLURM_CONF does not say (the last: a configless node's cache).
CONF_PATHS = (
    "/etc/slurm/slurm.conf",
    "/etc/slurm-llnl/slurm.conf",
    "/run/slurm/conf/slurm.conf",
    "/var/spool/slurmd/conf-cache/slurm.conf",
)


def configured() -> bool:
    """Whether SLURM's commands are here and have a configuration to read.

    Asked before consulting SLURM on a guess (a numeric job name, the records of
    ``ranktop jobs``): scontrol without a configuration looks for a controller
    through DNS, which can take a minute to fail. ``--slurm`` asks regardless.
    """
    if shutil.which("scontrol") is None:
        return False
    conf = os.environ.get("SLURM_CONF")
    return os.path.isfile(conf) if conf else any(os.path.isfile(p) for p in CONF_PATHS)


def _scontrol() -> str:
    path = shutil.which("scontrol")
    if path is None:
        raise SlurmError(
            "SLURM's commands are not installed here (no scontrol on PATH): run ranktop on a login node of the "
            "cluster, or name the relays' endpoints (tcp://HOST:PORT)"
        )
    return path


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([_scontrol(), *argv], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        hint = "" if configured() else " (SLURM has no configuration here: set SLURM_CONF, or run this on a login node)"
        raise SlurmError(f"scontrol {' '.join(argv)} did not answer within {COMMAND_TIMEOUT_S:g}s{hint}") from None
    except OSError as exc:
        raise SlurmError(f"cannot run scontrol: {exc.strerror or exc}") from None


def expand_hostnames(node_list: str) -> list[str]:
    """``node[01-03]`` -> node01, node02, node03, by SLURM itself."""
    out = _run("show", "hostnames", node_list)
    if out.returncode != 0:
        raise SlurmError(f"scontrol show hostnames {node_list}: {_first_line(out.stderr)}")
    return out.stdout.split()


def _first_line(text: str) -> str:
    """The line that says why: scontrol's last (its fatal error comes after the details)."""
    return (text.strip().splitlines() or ["failed"])[-1]


def show_job(job_id: str) -> SlurmJob:
    """The job as SLURM sees it now, whatever its state; raises SlurmError for an unknown one."""
    if not is_job_id(job_id):
        raise SlurmError(f"not a SLURM job id: {job_id!r} (expected 123456, 123456_7 or 123456+1)")
    out = _run("show", "job", "-o", job_id)
    if out.returncode != 0:
        message = _first_line(out.stderr)
        if "Invalid job id" in message:
            raise SlurmError(f"SLURM job {job_id} is unknown (or ended long enough ago that SLURM forgot it)")
        raise SlurmError(f"cannot ask SLURM about job {job_id}: {message}")
    return job_from_records(job_id, parse_show_job(out.stdout), expand_hostnames)


def find_job(job_id: str) -> SlurmJob:
    """A running job of ours to watch, or a SlurmError that says why not."""
    job = show_job(job_id)
    check_watchable(job, job_id)
    return job


def has_ended(job_id: str) -> bool | None:
    """True when SLURM says the job is over (or forgot it), None when it cannot be asked."""
    try:
        return show_job(job_id).state not in ACTIVE_STATES + WAITING_STATES
    except SlurmError as exc:
        if exc.answered:
            return False  # an array with several tasks: alive
        return True if "is unknown" in str(exc) else None


@dataclass
class EndedJobs:
    """Memoised :func:`has_ended` for the records of one command (a job is asked about once)."""

    answers: dict[str, bool | None] = field(default_factory=dict)

    def __call__(self, slurm_job: str | None) -> bool:
        if not slurm_job or not configured():
            return False
        if slurm_job not in self.answers:
            self.answers[slurm_job] = has_ended(slurm_job)
        return bool(self.answers[slurm_job])
