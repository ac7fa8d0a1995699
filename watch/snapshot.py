"""The aggregator's picture of a job at one instant: what every widget renders.

Widgets never read the aggregator's windows; they render one immutable
:class:`Snapshot`, taken at the UI's refresh rate. ``--json`` prints the same
object with its verdict (watch/json_doc.py), so the documented JSON schema and
the TUI can never disagree.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ranktop.wire import capture as wire_capture

from ranktop.watch.statuses import (  # noqa: F401  (read as snapshot.SILENT, ... everywhere)
    CONNECTED,
    ENDPOINT_STATES,
    LOST,
    OK,
    SILENT,
    SLOW,
    STALLED,
    STATUSES,
    WAITING,
)


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
    stalled_s: float | None = None  # when stalled: seconds since it last finished a step
    stalled_phase: str | None = None  # when stalled: the phase it is in (None: between phases or steps)
    stalled_step: int | None = None  # when stalled: the step it is in (or the next one, between steps)
    collective: dict | None = None  # the last collective it entered, as its probe reports it (op, seq, b, inside, ...)
    memory: MemoryStat | None = None  # RSS, CUDA allocator, history and creep (watch/memory.py); None before any
    throughput: Throughput | None = None  # samples/s, tokens/s, TFLOP/s, MFU, when the probe knows its work per step
    gpu: GpuStat | None = None  # NVML gauges of its GPU, or why there are none (probe/gpu_sampler.py)
    capture: CaptureStatus | None = None  # its latest trace or memory capture (wire/capture.py), running or finished
    rejected: dict[str, int] = field(default_factory=dict)  # commands it refused, by reason (forged, replayed, expired, ...)
    rate_hz: float | None = None  # telemetry messages a second it sends at (set_rate, --rate)
    last_step_end: float | None = None  # when its last step received ended: unix time by the rank's clock (t + w)
    missed: int = 0  # step records lost on the way to this viewer (gaps in the step numbers it received)
    coords: dict[str, int] | None = None  # its place in the parallel layout ({"pp": 1, "dp": 1}; watch/layout.py)


def coords_text(coords: dict[str, int] | None, roles: list[str]) -> str:
    """Coordinates in the layout's order of roles: "pp 1, dp 1" ("" for none)."""
    if not coords:
        return ""
    return ", ".join(f"{role} {coords[role]}" for role in roles if role in coords)


def _fast_constructor(cls):
    """``cls(**values)`` for a frozen dataclass without its generated ``__init__``, which sets each field
    through ``object.__setattr__`` (a snapshot of 4,096 ranks builds 4,096 rows of 27 fields twice a second:
    12 µs a row that way, 2 here). Every field must be given but those with defaults; the result is as frozen."""
    names, defaults, factories = set(), {}, {}
    for f in fields(cls):
        names.add(f.name)
        if f.default is not MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not MISSING:
            factories[f.name] = f.default_factory
    required = names - set(defaults) - set(factories)

    def build(**values: Any):
        if not required <= values.keys() or not values.keys() <= names:
            return cls(**values)  # let the generated __init__ say what is missing or unknown
        obj = object.__new__(cls)
        state = obj.__dict__
        state.update(defaults)
        for name, factory in factories.items():
            if name not in values:
                state[name] = factory()
        state.update(values)
        return obj

    return build


#: RankRow(**values), faster: what the aggregator builds every row with.
build_rank_row = _fast_constructor(RankRow)


@dataclass(frozen=True)
class CaptureStatus:
    """A rank's latest capture, as its probe reports it (the state's ``cap``, wire/schema.py)."""

    id: str
    kind: str  # "trace" | "memory"
    state: str  # waiting | recording | writing | done | failed (wire/capture.py STATES)
    start: int  # the first step captured, the same on every rank
    steps: int
    folder: str | None  # the capture folder, on the rank's host
    at: int | None = None  # the step being recorded
    path: str | None = None  # the rank's file, once written
    error: str | None = None  # why it failed
    summary: dict | None = None  # top ops and kernels, compute/comm/idle shares (probe/trace_summary.py)


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
class MemoryStat:
    """One rank's memory as its probe last reported it, with its recent history (watch/memory.py)."""

    rss_bytes: int | None  # process resident set size
    cuda_device: int | None = None  # the CUDA device index (None: the rank uses no CUDA)
    allocated: int | None = None  # CUDA caching allocator: bytes in tensors
    reserved: int | None = None  # ... bytes held from the device
    peak: int | None = None  # peak allocated since the process started (never reset by the probe)
    capacity: int | None = None  # the device's total memory
    fragmentation: float | None = None  # 1 - allocated/reserved
    alloc_retries: int | None = None  # cudaMalloc retries after freeing the cache (memory pressure)
    ooms: int | None = None  # out-of-memory errors the allocator raised
    tracked: str = "rss"  # the series of history and creep: "cuda" (allocated) or "rss"
    history_mb: list[float] = field(default_factory=list)  # recent samples of it, oldest first
    creep: bool = False  # a steady upward slope over many steps: a leak
    creep_mb_per_min: float | None = None  # the slope over the creep window


@dataclass(frozen=True)
class Throughput:
    """Work per second from the step rate and the work per step the probe reports (per rank, or summed for the job)."""

    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    tflops: float | None = None  # achieved TFLOP/s (model FLOPs per step x steps/s)
    mfu: float | None = None  # tflops / peak (None: no known peak, e.g. a CPU)
    peak_tflops: float | None = None
    device: str | None = None


@dataclass(frozen=True)
class GpuStat:
    """NVML gauges of one rank's GPU; a gauge NVML cannot read is None (shown "N/A")."""

    na: str | None = None  # why there are no gauges (no NVML binding, no driver, no GPU, rank on CPU)
    name: str | None = None
    bus: str | None = None
    util: float | None = None  # SM utilisation, %
    mem_util: float | None = None  # memory controller utilisation, %
    mem_used: int | None = None
    mem_total: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temp_c: float | None = None
    sm_mhz: float | None = None
    sm_max_mhz: float | None = None
    throttle: list[str] | None = None  # active slowdown reasons (power, thermal, hw, ...); None: unknown
    pcie_tx: float | None = None  # bytes/s
    pcie_rx: float | None = None
    util_history: list[float] = field(default_factory=list)  # recent SM utilisation, oldest first
    age_s: float | None = None  # how old the latest sample is, by the rank's clock


@dataclass(frozen=True)
class Endpoint:
    url: str
    host: str | None
    state: str  # one of ENDPOINT_STATES
    quiet_s: float  # seconds since the last message (or since we started waiting)
    ranks: tuple[int, ...] = ()  # the ranks last heard through it: those a lost relay took with it


@dataclass(frozen=True)
class Reply:
    id: str
    cmd: str
    rank: int
    ok: bool
    result: dict
    rtt_s: float | None  # seconds from sending the command, when this TUI sent it


@dataclass(frozen=True)
class RequestStatus:
    """The tally of one command this viewer sent, over every rank's answer (exact at any job size; watch/requests.py)."""

    id: str
    cmd: str
    sent_s: float  # when it was sent, on the viewer's clock
    answered: int
    failed: int
    answered_ranks: frozenset[int]
    max_rtt_s: float | None
    first_failure: tuple[int, str] | None = None  # (rank, reason) of the lowest failing rank

    @classmethod
    def count(cls, command_id: str, cmd: str, sent_s: float, replies: dict[int, Reply]) -> RequestStatus:
        """The tally of one command's answers, by rank."""
        rtts = [r.rtt_s for r in replies.values() if r.rtt_s is not None]
        failures = [r for r in replies.values() if not r.ok]
        first = min(failures, key=lambda r: r.rank) if failures else None
        return cls(
            command_id, cmd, sent_s, len(replies), len(failures), frozenset(replies),
            max(rtts) if rtts else None, (first.rank, failure_reason(first.result)) if first is not None else None,
        )

    @classmethod
    def of_replies(cls, command_id: str, replies: list[Reply]) -> RequestStatus | None:
        """The tally counted from a list of replies (a snapshot built without a request book), None if none."""
        mine = {r.rank: r for r in replies if r.id == command_id}
        if not mine:
            return None
        return cls.count(command_id, next(iter(mine.values())).cmd, 0.0, mine)


def failure_reason(result: Any) -> str:
    """The first line of a failed answer's error, or "failed" when it gives none."""
    error = result.get("error") if isinstance(result, dict) else None
    lines = str(error).splitlines() if error is not None else []
    return lines[0] if lines else "failed"


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
    replies: list[Reply] = field(default_factory=list)  # the latest answers heard, to anyone's command, most recent last
    requests: list[RequestStatus] = field(default_factory=list)  # our own recent commands, every answer counted
    dropped_messages: int = 0  # malformed or foreign frames this TUI threw away
    errors: list[str] = field(default_factory=list)  # one-line problems to show the user
    collectives: list[CollectiveStat] = field(default_factory=list)  # job-wide rows (rank -1) first
    waiting_for: list[int] = field(default_factory=list)  # ranks the stalled ones wait for (see watch/stalls.py)
    diagnosis: str | None = None  # one line on a hang: who is stalled where, waiting for whom
    slow_hosts: list[str] = field(default_factory=list)  # hosts all of whose ranks are slow: the node, not a rank
    throughput: Throughput | None = None  # the job's: sums over live ranks (MFU: their TFLOP/s over their peaks)
    device_time_ranks: list[int] = field(default_factory=list)  # ranks whose step records carry device (GPU) times ("g"): their figures are GPU time
    behind_s: float | None = None  # this viewer is this many seconds behind the job's messages (None: keeping up)
    # The job's life (watch/lifecycle.py): waiting (no rank yet), running, or ended (every rank ended cleanly)
    state: str = "waiting"
    ended_at: float | None = None  # when it ended (unix seconds)
    restarts: int = 0  # times its ranks came back as new processes (torchrun --max-restarts, a requeue)
    restarted_at: float | None = None  # when the latest restart was seen (unix seconds)
    not_back: list[int] = field(default_factory=list)  # ranks not back as new processes since the latest restart
    failed_ranks: list[int] = field(default_factory=list)  # ranks whose process said it died of an exception
    waiting: str | None = None  # before the job is up: what the viewer waits for, and the jobs there are (a typo shows)
    layout_roles: list[str] = field(default_factory=list)  # the parallel dimensions learned ("pp", "dp"), in coordinate order
    stages: list = field(default_factory=list)  # per pipeline stage: own work and wait per step (stragglers.Stage)
    imbalance: str | None = None  # one line when the pipeline's stages are unbalanced (never a rank's fault)

    @property
    def clock(self) -> str:
        """What the step and phase figures measure: ``gpu`` (every rank heard sends device times, CUDA
        events), ``host`` (CPU wall time) or ``mixed`` (GPU time for ``device_time_ranks``, host for the rest)."""
        if not self.device_time_ranks:
            return "host"
        return "gpu" if len(self.device_time_ranks) >= len(self.ranks) else "mixed"

    def clock_text(self) -> str:
        """The clock in words, as the header and the report say it."""
        if self.clock == "gpu":
            return "GPU time (CUDA events)"
        if self.clock == "mixed":
            return f"GPU time on {len(self.device_time_ranks)} ranks, CPU wall time on {len(self.ranks) - len(self.device_time_ranks)}"
        return "CPU wall time"

    @property
    def connected(self) -> int:
        return sum(1 for r in self.ranks if r.status != SILENT)

    @property
    def silent(self) -> int:
        return sum(1 for r in self.ranks if r.status == SILENT)

    def row(self, rank: int) -> RankRow | None:
        """The row of one rank (``ranks`` is sorted by rank, but a job may not have reported every rank)."""
        for row in self.ranks:
            if row.rank == rank:
                return row
        return None

    def where(self, row: RankRow) -> str:
        """A rank's coordinates as text, "pp 1, dp 1" ("" when the layout is not known)."""
        return coords_text(row.coords, self.layout_roles)

    def request(self, command_id: str) -> RequestStatus | None:
        """How one of our commands is answered: the exact tally, else counted from :attr:`replies`."""
        for status in self.requests:
            if status.id == command_id:
                return status
        return RequestStatus.of_replies(command_id, self.replies)

    def captures_running(self) -> dict[str, list[int]]:
        """Captures not yet done or failed on some rank: id -> those ranks (one capture at a time per job)."""
        running: dict[str, list[int]] = {}
        for r in self.ranks:
            if r.capture is not None and r.capture.state in wire_capture.RUNNING:
                running.setdefault(r.capture.id, []).append(r.rank)
        return running


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
