"""The aggregator's picture of a job at one instant: what every widget renders.

Widgets never read the aggregator's windows; they render one immutable
:class:`Snapshot`, taken at the UI's refresh rate. ``--json`` prints the same
object with its verdict (watch/model/json_doc.py), so the documented JSON schema and
the TUI can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ranktop.watch.model.answers import Answer, RequestStatus
from ranktop.watch.model.endpoint import EndpointRows
from ranktop.watch.model.rank_row import Cause, RankRow, Throughput, coords_text
from ranktop.watch.model.rank_table import RankRows, median_of, phase_medians
from ranktop.watch.statuses import SILENT, STATUSES


#: Checkpoints or evaluations the job spends this share of its time in are the verdict's (watch/analysis/pauses.py).
PAUSE_SHARE_FROM = 0.05


@dataclass(frozen=True)
class Pause:
    """Checkpoints or evaluations, as the job pays for them."""

    kind: str  # "checkpoint", "eval" or "compile" (wire/names.py PAUSE_PHASES)
    ranks: list[int]  # the ranks in one now (the longest in it first) or, with none under way, those that had one
    # in their window (the costliest first); at most 8
    count: int  # how many ranks that is
    host: str | None  # the first one's node
    share: float  # the share of the job's time spent in them (0.9 = 90%), averaged over the last minute
    each_s: float | None = None  # seconds one takes, on the costliest rank (None: none in its window yet)
    every: float | None = None  # one in this many of its steps (None: fewer than two in its window)
    under_way_s: float | None = None  # the one under way has lasted this long (None: none under way)
    holding: bool = False  # ... past the stall limit: the job finishes no step meanwhile, its ranks wait for it
    everyone: bool = False  # every live rank is (or was) in it, as in an evaluation or a sharded checkpoint

    @property
    def costly(self) -> bool:
        """Worth the verdict: the job spends :data:`PAUSE_SHARE_FROM` of its time in them, or waits for one now."""
        return self.holding or self.share >= PAUSE_SHARE_FROM


@dataclass(frozen=True)
class JobSlower:
    """The job's step grew against its own baseline with no rank standing out (watch/analysis/job_pace.py)."""

    share: float  # how much slower: (step now - baseline) / baseline (0.55 = 55% slower)
    excess_s: float  # seconds a step is longer than its baseline
    since: float  # when it began, unix seconds (when first seen, back half a window)
    baseline_s: float  # the baseline step
    phase: str | None = None  # the phase that grew most
    phase_excess_s: float | None = None  # ... by this much (its median over the ranks)
    causes: list[Cause] = field(
        default_factory=list
    )  # why: the ranks' evidence against its own past (watch/analysis/causes.py JobEvidence)


#: Why a rank has collective rows of its own (:attr:`CollectiveStat.why`), besides its status word when it is flagged.
WAITED_FOR, MOST_WAIT, LEAST_WAIT = "waited for", "most wait", "least wait"
#: The reasons, most telling first (as watch/analysis/collectives.py chooses the ranks that matter).
WHY_ORDER = {reason: i for i, reason in enumerate((WAITED_FOR, *STATUSES, MOST_WAIT, LEAST_WAIT, ""))}
#: A job of this many ranks or fewer has every rank's collective rows; a bigger one, those of the ranks that matter
#: only (64 near-identical rows hide the answer).
ALL_RANKS_UP_TO = 16


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
    p95_s: float | None  # None: no raw call of it sampled yet (the pane shows "–", not 0)
    algbw_bps: float | None  # bytes / wait (on a GPU the compute stream's stall: no link rate)
    busbw_bps: float | None  # bytes / kernel time (the link's), scaled by the op's bus factor; None: no kernel time known
    alpha_s: float | None = None  # alpha-beta fit T = alpha + n/beta, once 3+ sizes are seen
    beta_bps: float | None = None
    fit_dev: float | None = None  # how far the latest calls sit from the fit: (observed - fit) / fit
    wait_is: str | None = None  # what the wait holds, where it is not the collective's alone (DDP's finalize)
    # why this rank's rows are shown (WHY_ORDER: waited for, its status when flagged, most or least wait; "" for the
    # job's rows and a small job's unremarkable ranks; None: not shown, a rank of a big job that does not matter):
    # the analysis' choice, which the screen shows as it is
    why: str | None = ""


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: the medians over its ranks, per step (watch/analysis/stragglers.py stage_columns)."""

    stage: int
    ranks: int  # how many ranks are at this stage
    work_s: float  # own time per step (the step less its waits)
    wait_s: float  # time waiting per step (bubble, and the stage's other collectives)


@dataclass(frozen=True)
class Link:
    """One measured link: from ``src``'s node to ``dst``'s, its rate (bytes a second) and least round trip
    (kept by watch/engine/link_book.py)."""

    src: str
    dst: str
    rate_bps: float
    rtt_s: float
    probes: int


@dataclass(frozen=True)
class SlowLink:
    """A node (``host``) or a pair of nodes (``hosts``) whose network is slow, and what it costs the job
    (watch/analysis/slow_links.py)."""

    host: str | None  # the node, when one node's links are slow (None: a pair)
    hosts: list[str]  # the node, or the pair's two ends
    rate_bps: float  # what its links measured (bytes a second: the median of its slow direction)
    expected_bps: float  # what the job's other links measured
    excess_s: float  # what it adds to every step
    loss: float  # the share of the job's step lost to it
    direction: str = "both"  # "out", "in", or "both": which of its links are slow (a pair: "both")
    text: str = field(default="", compare=False)  # "node-c's network is slow: its links at ... elsewhere, the job loses 38%"


@dataclass(frozen=True)
class Snapshot:
    job: str | None
    world_size: int | None  # as the ranks report it; None before any hello
    elapsed_s: float  # since this TUI started watching
    global_step: int  # the furthest step any rank completed (-1 before any)
    steps_per_s: float | None  # median over ranks of steps per second (recent)
    phase_names: list[str]  # column order: standard phases, user phases, then "other"
    ranks: RankRows  # sorted by rank; a list of rows given is made RankRows (watch/model/rank_table.py)
    stragglers: list[int]  # rank numbers, most suspicious first; only ranks with data
    endpoints: EndpointRows = field(default_factory=EndpointRows)  # a list of Endpoint (watch/model/endpoint.py) given is made EndpointRows
    replies: list[Answer] = field(default_factory=list)  # the latest answers heard, to anyone's command, most recent last
    requests: list[RequestStatus] = field(default_factory=list)  # our own recent commands, every answer counted
    dropped_messages: int = 0  # malformed or foreign frames this TUI threw away
    errors: list[str] = field(default_factory=list)  # one-line problems to show the user
    # job-wide rows (rank -1) first, then the ranks' shown (a small job's all, a big one's those that matter, most
    # telling first), then any others gathered, each with its why (watch/analysis/collectives.py rows_shown)
    collectives: list[CollectiveStat] = field(default_factory=list)
    waiting_for: list[int] = field(default_factory=list)  # ranks the stalled ones wait for (see watch/analysis/stalls.py)
    diagnosis: str | None = None  # one line on a hang: who is stalled where, waiting for whom
    slow_hosts: list[str] = field(default_factory=list)  # hosts all of whose ranks are slow: the node, not a rank
    throughput: Throughput | None = None  # the job's: sums over live ranks (MFU: their TFLOP/s over their peaks)
    device_time_ranks: list[int] = field(
        default_factory=list
    )  # ranks whose step records carry device (GPU) times ("g"): their figures are GPU time
    behind_s: float | None = None  # this viewer is this many seconds behind the job's messages (None: keeping up)
    # The job's life (watch/engine/lifecycle.py): waiting (no rank yet), running, or ended (every rank ended cleanly)
    state: str = "waiting"
    ended_at: float | None = None  # when it ended (unix seconds)
    restarts: int = 0  # times its ranks came back as new processes (torchrun --max-restarts, a requeue)
    restarted_at: float | None = None  # when the latest restart was seen (unix seconds)
    not_back: list[int] = field(default_factory=list)  # ranks not back as new processes since the latest restart
    failed_ranks: list[int] = field(default_factory=list)  # ranks whose process said it died of an exception
    waiting: str | None = None  # before the job is up: what the viewer waits for, and the jobs there are (a typo shows)
    layout_roles: list[str] = field(default_factory=list)  # the parallel dimensions learned ("pp", "dp"), in coordinate order
    stages: list[Stage] = field(default_factory=list)  # per pipeline stage: own work and wait per step
    imbalance: str | None = None  # one line when the pipeline's stages are unbalanced (never a rank's fault)
    median_step_s: float | None = None  # the median step of the ranks scored: what each rank's excess is measured against
    median_phases: dict[str, float] = field(default_factory=dict)  # each phase's median over the live, scored ranks
    pauses: list[Pause] = field(
        default_factory=list
    )  # checkpoints, evaluations and compilations with a share of the job's time or under way (watch/analysis/pauses.py Pause)
    links: list[Link] = field(default_factory=list)  # the links between nodes the relays measured (watch/engine/link_book.py)
    slow_links: list[SlowLink] = field(default_factory=list)  # the slow nodes and pairs, costliest first (watch/analysis/slow_links.py)
    job_slower: JobSlower | None = None  # the job slower than itself, no rank standing out (watch/analysis/job_pace.py)
    node_causes: dict[str, list[Cause]] = field(default_factory=dict)  # slow host -> its node-level causes (causes.of_nodes)

    def __post_init__(self) -> None:
        if not isinstance(self.ranks, RankRows):
            object.__setattr__(self, "ranks", RankRows.of(self.ranks, self.phase_names))
        if not isinstance(self.endpoints, EndpointRows):
            object.__setattr__(self, "endpoints", EndpointRows.of(self.endpoints))

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
        return len(self.ranks) - self.ranks.count(SILENT)

    @property
    def silent(self) -> int:
        return self.ranks.count(SILENT)

    def row(self, rank: int) -> RankRow | None:
        """The row of one rank (a job may not have reported every rank)."""
        return self.ranks.row(rank)

    def median_step(self) -> float | None:
        """The median step of the ranks scored: as the scoring worked it out, or (a snapshot made of rows)
        from the rows' step times."""
        if self.median_step_s is not None:
            return self.median_step_s
        return median_of(self.ranks.table.step_s)

    def phase_medians(self) -> dict[str, float]:
        """Each phase's median over the live, scored ranks: what "the median rank" does (as the builder worked
        it out, or, a snapshot made of rows, from them)."""
        if self.median_phases:
            return dict(self.median_phases)
        table = self.ranks.table
        return phase_medians(table.names, table.phases, ~np.isnan(table.step_s) & ~table.statuses(SILENT))

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
        return {id: list(ranks) for id, ranks in self.ranks.table.captures.items()}


EMPTY = Snapshot(
    job=None,
    world_size=None,
    elapsed_s=0.0,
    global_step=-1,
    steps_per_s=None,
    phase_names=[],
    ranks=RankRows.of([]),
    stragglers=[],
)


class SnapshotSource(Protocol):
    """Anything a view takes snapshots of: a live session, its aggregator, a replay (the TUI, the exporter)."""

    def snapshot(self) -> Snapshot: ...


@runtime_checkable
class PacedSource(SnapshotSource, Protocol):
    """A source that knows how often what its snapshots show can change (a live job: watch/aggregator.py);
    a view takes its snapshots no more often (watch/refresher.py: period_s)."""

    def changes_every_s(self) -> float: ...
