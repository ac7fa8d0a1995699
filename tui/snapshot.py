"""The aggregator's picture of a job at one instant: what every widget renders.

Widgets never read the aggregator's windows; they render one immutable
:class:`Snapshot`, taken at the UI's refresh rate. ``--json`` prints the same
object through :meth:`Snapshot.to_json`, so the documented JSON schema and the
TUI can never disagree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Rank statuses, worst first (the order used when sorting by status).
SILENT = "silent"  # no message for a while: dead, hung hard, or cut off
SLOW = "slow"  # persistently slower than the median rank
OK = "ok"
STATUSES = (SILENT, SLOW, OK)


@dataclass(frozen=True)
class RankRow:
    rank: int
    host: str
    local_rank: int
    pid: int
    step: int  # the last completed step number, -1 before the first
    steps_seen: int  # step records received in total
    step_s: float | None  # median wall time of a step over the window (seconds)
    phases: dict[str, float]  # median self time per phase (seconds), "other" included
    score: float  # slowdown vs the median rank, as a fraction of the median step (0.25 = 25% slower)
    excess_s: float  # the same slowdown in seconds
    culprit_phase: str | None  # the phase that explains most of the slowdown
    status: str  # one of STATUSES
    last_seen_s: float  # seconds since this rank's last message
    dropped: int  # records the probe dropped (buffer full or nobody listening)
    collective_s: float | None = None  # median per step of the time this rank waited in collectives
    compute_s: float | None = None  # median per step of the rest: its own work (step - collective wait)


@dataclass(frozen=True)
class CollectiveStat:
    """One op on one rank (rank -1: the whole job), over the calls in the window."""

    rank: int
    op: str
    group_size: int
    dtype: str
    calls: int  # every call seen since the TUI started (exact)
    bytes: int  # every byte of those calls (exact)
    calls_per_s: float | None
    bytes_per_s: float | None
    mean_s: float  # mean duration (this rank's wait, launch to completion)
    p95_s: float
    algbw_bps: float | None  # bytes / time, nccl-tests convention
    busbw_bps: float | None  # algbw scaled by the op's bus factor
    alpha_s: float | None = None  # alpha-beta fit T = alpha + n/beta, once 3+ sizes are seen
    beta_bps: float | None = None
    fit_dev: float | None = None  # how far the latest calls sit from the fit: (observed - fit) / fit


@dataclass(frozen=True)
class Endpoint:
    url: str
    host: str | None
    state: str  # "waiting" (nothing heard yet) | "connected" | "lost" (quiet after talking)
    quiet_s: float  # seconds since the last message (or since we started waiting)


@dataclass(frozen=True)
class Reply:
    id: str
    cmd: str
    rank: int
    ok: bool
    result: dict
    rtt_s: float | None  # seconds from sending the command, when this TUI sent it


@dataclass(frozen=True)
class Snapshot:
    job: str | None
    world_size: int | None  # as the ranks report it; None before any hello
    elapsed_s: float  # since this TUI started watching
    global_step: int  # the furthest step any rank completed (-1 before any)
    steps_per_s: float | None  # median over ranks of steps per second (recent)
    phase_names: list[str]  # column order: standard phases, user phases, then "other"
    ranks: list[RankRow]  # sorted by rank
    stragglers: list[int]  # rank numbers, most suspicious first; only ranks with data
    endpoints: list[Endpoint] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)  # most recent last
    dropped_messages: int = 0  # malformed or foreign frames this TUI threw away
    errors: list[str] = field(default_factory=list)  # one-line problems to show the user
    collectives: list[CollectiveStat] = field(default_factory=list)  # job-wide rows (rank -1) first
    slow_hosts: list[str] = field(default_factory=list)  # hosts all of whose ranks are slow: the node, not a rank

    @property
    def connected(self) -> int:
        return sum(1 for r in self.ranks if r.status != SILENT)

    @property
    def silent(self) -> int:
        return sum(1 for r in self.ranks if r.status == SILENT)

    def to_json(self) -> dict:
        """The ``--json`` document (schema in docs/json-schema.md)."""
        out = asdict(self)
        out["connected"] = self.connected
        out["silent"] = self.silent
        return out


EMPTY = Snapshot(
    job=None,
    world_size=None,
    elapsed_s=0.0,
    global_step=-1,
    steps_per_s=None,
    phase_names=[],
    ranks=[],
    stragglers=[],
)
