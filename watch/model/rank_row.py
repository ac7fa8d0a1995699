"""One rank's row of a snapshot and what it holds: its memory, GPU, throughput and capture.

Rows are built only when read (watch/model/rank_table.py), so at 4,096 ranks a screen
that shows forty pays for forty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from ranktop.wire.messages import Scalar

if TYPE_CHECKING:  # typeshed's name for "a dataclass", known to the type checker only
    from _typeshed import DataclassInstance

_Row = TypeVar("_Row", bound="DataclassInstance")


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
    collective: dict[str, Scalar] | None = None  # the last collective it entered, as its probe reports it (op, seq, b, inside, ...)
    memory: MemoryStat | None = None  # RSS, CUDA allocator, history and creep (watch/analysis/memory_creep.py); None before any
    throughput: Throughput | None = None  # samples/s, tokens/s, TFLOP/s, MFU, when the probe knows its work per step
    gpu: GpuStat | None = None  # NVML gauges of its GPU, or why there are none (probe/gpu_sampler.py)
    capture: CaptureStatus | None = None  # its latest trace or memory capture (wire/capture.py), running or finished
    rejected: dict[str, int] = field(default_factory=dict)  # commands it refused, by reason (forged, replayed, expired, ...)
    rate_hz: float | None = None  # telemetry messages a second it sends at (set_rate, --rate)
    last_step_end: float | None = None  # when its last step received ended: unix time by the rank's clock (t + w)
    missed: int = 0  # step records lost on the way to this viewer (gaps in the step numbers it received)
    coords: dict[str, int] | None = None  # its place in the parallel layout ({"pp": 1, "dp": 1}; watch/analysis/layout.py)
    causes: list[Cause] = field(default_factory=list)  # when slow: what explains it, against its peers, likeliest first
    last_arrivals: float | None = None  # share of its last steps it arrived last at the collectives (watch/analysis/arrivals.py)
    every: float | None = None  # an intermittent straggler: slow on one step in this many (watch/analysis/intermittent.py)


def coords_text(coords: dict[str, int] | None, roles: list[str]) -> str:
    """Coordinates in the layout's order of roles: "pp 1, dp 1" ("" for none)."""
    if not coords:
        return ""
    return ", ".join(f"{role} {coords[role]}" for role in roles if role in coords)


def _fast_constructor(cls: type[_Row]) -> Callable[..., _Row]:
    """``cls(**values)`` for a frozen dataclass without its generated ``__init__``, which sets each field
    through ``object.__setattr__`` (a snapshot of 4,096 ranks builds 4,096 rows of 27 fields twice a second:
    12 µs a row that way, 2 here). Every field must be given but those with defaults; the result is as frozen."""
    names: set[str] = set()
    defaults: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    for f in fields(cls):
        names.add(f.name)
        if f.default is not MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not MISSING:
            factories[f.name] = f.default_factory
    required = names - set(defaults) - set(factories)

    def build(**values: Any) -> _Row:
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
class Cause:
    """Why a slow rank is slow: a figure of its own far beyond its peers' (watch/analysis/causes.py)."""

    kind: str  # one of watch/analysis/causes.py ALL_KINDS: gc_pause | cpu_contention | ... | unknown
    text: str  # "it spends 12 ms per step in Python's garbage collector, 9.5x its peers' 1.3 ms (gc pause)"
    value: float  # its figure, per second (seconds per second for time)
    peers: float  # a healthy peer's (its peers' lower median)
    ratio: float | None  # value / peers (None: the peers' is nil)
    extra_s: float  # what the difference costs it per step, seconds
    explains: float = 1.0  # the share of its excess this explains, 0-1 (the verdict: "because" from 0.5, "partly" from 0.2)
    basis: str = "measured"  # measured (a time it lost) | estimated (from a ratio) | untold (no cost) | none (unknown)
    ruled_out: tuple[str, ...] = ()  # unknown: what its evidence ruled out ("GC", "CPU contention", ...)
    switches_per_s: float | None = None  # cpu_contention: its training thread's involuntary context switches a second
    peers_switches_per_s: float | None = None  # ... a healthy peer's
    workers: float | None = None  # data_loader: its DataLoader workers (child processes), where /proc shows them
    workers_cpus: float | None = None  # ... the CPUs they use
    peers_workers_cpus: float | None = None  # ... a healthy peer's


#: A cause that explains this share of its rank's excess is the verdict's "because" ...
BECAUSE = 0.5
#: ... from this share "partly because"; below it, a cause is in the rank's ``causes`` only.
PARTLY = 0.2
#: The kind of a slow rank's last cause when none explains :data:`PARTLY` (its text: what was ruled out).
UNKNOWN_CAUSE = "unknown"


def named_cause(causes: "list[Cause] | tuple[Cause, ...]") -> Cause | None:
    """The cause a verdict names among a rank's (in their order: measured first): the first that explains
    :data:`BECAUSE` of its excess, else the first that explains :data:`PARTLY`; None: none does."""
    for at_least in (BECAUSE, PARTLY):
        for cause in causes:
            if cause.kind != UNKNOWN_CAUSE and cause.explains >= at_least:
                return cause
    return None


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
    summary: dict[str, Any] | None = None  # (as its JSON) top ops and kernels, compute/comm/idle shares (probe/trace_summary.py)


@dataclass(frozen=True)
class MemoryStat:
    """One rank's memory as its probe last reported it, with its recent history (kept by
    watch/engine/memory_history.py, its creep judged by watch/analysis/memory_creep.py)."""

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
    sm_avg: float | None = None  # the SM clock's mean over its sampler's last 10 s (gpu_throttle reads it)
    held_power: float | None = None  # ... the share of those 10 s power held its clocks down
    held_thermal: float | None = None  # ... and heat (a thermal or board slowdown)
    pcie_tx: float | None = None  # bytes/s
    pcie_rx: float | None = None
    util_history: list[float] = field(default_factory=list)  # recent SM utilisation, oldest first
    age_s: float | None = None  # how old the latest sample is, by the rank's clock
