"""Every message that crosses the wire, defined once as types: the schema, its bounds and its documentation.

A message body is one MessagePack map. Each kind below is a ``TypedDict`` whose
fields carry their types and bounds (``Annotated[float, Meta(ge=0, le=...)]``);
:mod:`.schema` hands the matching type to msgspec's decoder, which reads and
checks a body in one call in C and yields plain dicts, lists and numbers: the
code downstream reads what the type says and checks nothing again. Fields not
listed here are dropped at decode (a newer peer's additions), so a field the
viewer reads must be listed here first.

Compact records are fixed-length arrays typed position by position (an op's
summary): small on the wire, and their layout is written here, not in index
constants alone. A node digest's steps are columns, packed (wire/step_block.py).

The probe builds these maps as plain dicts (it must stay cheap and import
nothing it need not), the relay's digest and the simulator too; the tests hold
what they build to these types through the same decoder.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Tuple, TypedDict, Union

from msgspec import Meta

try:
    from typing import Annotated, NotRequired
except ImportError:  # Python < 3.11
    from typing_extensions import Annotated, NotRequired

#: The most ranks a job may have: a rank or world size beyond it is no job's (a world of 2**60 would make
#: the viewer count the ranks that never reported for ever).
MAX_RANKS = 1 << 22
#: The largest magnitude a time, duration or gauge may have (seconds, bytes, counts): every figure read is
#: finite and below it, so sums and differences stay finite and a figure always formats.
MAX_FIGURE = 1e18
#: The most phases one step record may name.
MAX_PHASES = 256

# -- the figures every field is made of ------------------------------------------------------------------

#: Any finite number within +-MAX_FIGURE (NaN and infinities fail the bounds; a bool is no number).
Figure = Annotated[float, Meta(ge=-MAX_FIGURE, le=MAX_FIGURE)]
#: A duration, a size, a rate: finite, within [0, MAX_FIGURE].
Amount = Annotated[float, Meta(ge=0, le=MAX_FIGURE)]
#: A count: a whole number within [0, MAX_FIGURE].
Count = Annotated[int, Meta(ge=0, le=int(MAX_FIGURE))]
#: A whole number within +-MAX_FIGURE (a step number, a pid, a sequence number): fits every int64 column.
Whole = Annotated[int, Meta(ge=-int(MAX_FIGURE), le=int(MAX_FIGURE))]
#: A rank of the job.
Rank = Annotated[int, Meta(ge=0, lt=MAX_RANKS)]
#: A job's size.
World = Annotated[int, Meta(gt=0, le=MAX_RANKS)]
#: A scalar shown as it came: text, a whole number, a finite figure, a flag or nothing.
Scalar = Union[str, int, Figure, bool, None]
#: A map of seconds per phase (a step's self times, its device times, its own times).
Phases = Annotated[Dict[str, Amount], Meta(max_length=MAX_PHASES)]


# -- a rank's state: where its training thread is --------------------------------------------------------


class Memory(TypedDict, total=False):
    """probe/memory.py: the process's RSS and, on CUDA, the caching allocator's figures (bytes and counts)."""

    rss: Optional[Amount]
    cuda: Optional[Dict[str, Amount]]  # dev, alloc, resv, peak, retries, ooms, cap


#: probe/gpu_sampler.py: NVML gauges ({"seq", "t", "name", "bus", "util", ..., "throttle": [reasons]}), or
#: {"na": why} for a rank without one. A map of gauges, so a new gauge needs no new type.
Gpu = Dict[str, Union[str, int, Figure, List[str], None]]


#: One of a summary's top entries, [name, microseconds, calls]: a list, shown as it came.
TopEntry = Annotated[List[Union[str, Count, Amount]], Meta(min_length=3, max_length=3)]


class CaptureSummary(TypedDict, total=False):
    """probe/trace_summary.py (a trace) or probe/capture.py (a memory snapshot): what watch/capture.py reads."""

    compute: Optional[Figure]
    comm: Optional[Figure]
    idle: Optional[Figure]
    wall_us: Optional[Figure]
    allocated: Optional[Figure]
    reserved: Optional[Figure]
    segments: Optional[Figure]
    events: Optional[Figure]
    steps: Optional[Annotated[List[int], Meta(min_length=2, max_length=2)]]  # first and last
    train_ms: Optional[Annotated[List[Figure], Meta(min_length=2)]]
    ops: Optional[List[TopEntry]]  # the top entries: [name, microseconds, calls] (schema.py checks the positions)
    kernels: Optional[List[TopEntry]]
    basis: Optional[str]
    note: Optional[str]


class Capture(TypedDict):
    """A rank's latest capture (wire/capture.py's states, probe/capture.py)."""

    id: str
    kind: str
    st: Literal["waiting", "recording", "writing", "done", "failed"]  # wire/capture.STATES
    start: Whole
    steps: Whole
    dir: NotRequired[Optional[str]]  # the capture folder on the rank's host
    at: NotRequired[Optional[Whole]]  # the step being recorded
    path: NotRequired[Optional[str]]  # the rank's file, once written
    err: NotRequired[Optional[str]]  # why it failed
    sum: NotRequired[Optional[CaptureSummary]]


class State(TypedDict, total=False):
    """Where a rank's training thread is, sent with its steps and heartbeats (probe/sender.py)."""

    step: Optional[Whole]  # the step it is in (or the next one, between steps)
    last: Optional[Whole]  # the last step it finished
    in_step: Optional[bool]
    phase: Optional[str]  # the phase it is in
    step_age: Optional[Amount]  # seconds since the current step began
    median_step_s: Optional[Amount]
    rate_hz: Optional[Amount]  # telemetry messages a second
    dropped: Optional[Count]  # records lost (buffer full, nobody listening)
    rejected: Optional[Dict[str, Count]]  # refused commands, by reason
    collective: Optional[Dict[str, Scalar]]  # the last collective entered: op, seq, b, dt, g, inside, age (shown as sent)
    mem: Optional[Memory]
    gpu: Optional[Gpu]
    cap: Optional[Capture]


# -- who a rank is ----------------------------------------------------------------------------------------


class Group(TypedDict):
    """A process group the rank is in (wire/parallel_groups.py): torch's group name (the same on every
    member), its description and role, its members (``[start, count, stride]`` when ``compact``), and
    whether point-to-point ops ran on it."""

    id: Annotated[str, Meta(max_length=64)]
    size: World
    ranks: Annotated[List[Rank], Meta(max_length=MAX_RANKS)]
    desc: NotRequired[Annotated[str, Meta(max_length=64)]]
    role: NotRequired[Annotated[str, Meta(max_length=16)]]
    compact: NotRequired[bool]
    p2p: NotRequired[bool]


class RankInfo(TypedDict):
    """Who a rank is: its hello's own fields (a node digest carries them for its ranks too)."""

    host: str
    world: World
    local_rank: Whole
    pid: Whole
    rate_hz: NotRequired[Optional[Amount]]
    work: NotRequired[Optional[Dict[str, Union[str, Figure]]]]  # probe/flops.py: dtype, batch, tokens, flops, device, peak_tflops
    relay: NotRequired[Optional[Dict[str, str]]]  # its node's relay: {"telemetry": url, "control": url}
    local_world: NotRequired[Optional[Whole]]
    launcher: NotRequired[Optional[str]]
    device: NotRequired[Optional[str]]
    torch: NotRequired[Optional[str]]
    probe: NotRequired[Optional[str]]
    python: NotRequired[Optional[str]]
    argv: NotRequired[Optional[List[str]]]
    cwd: NotRequired[Optional[str]]
    groups: NotRequired[Annotated[List[Group], Meta(max_length=64)]]  # its process groups (wire/parallel_groups.py)


# -- step records and collectives ------------------------------------------------------------------------


class DeviceTimes(TypedDict):
    """A step's device-side times, where the rank measured them (CUDA events, probe/gpu_timing.py)."""

    w: Amount
    p: Phases


class Step(TypedDict):
    """One completed step: number, wall-clock start (unix s), wall duration (s), self time per phase."""

    n: Whole
    t: Figure
    w: Amount
    p: Phases  # "other" is w less the sum of p
    g: NotRequired[DeviceTimes]


class Call(TypedDict):
    """One collective call (raw): op, the rank's call counter, bytes, dtype, group size, seconds waited
    (launch to completion), step, phase (None: outside every phase), start on the rank's monotonic clock."""

    op: str
    seq: Whole
    b: Count
    dt: str
    g: Whole
    d: Amount
    n: Whole
    ph: Optional[str]  # present, even when None
    t0: Figure
    gi: NotRequired[Annotated[str, Meta(max_length=64)]]  # its group's id (torch's group name)
    k: NotRequired[Literal["c", "p", "f"]]  # a collective, a point-to-point op, a functional collective


#: One op's summary over a step and phase (wire/collective_summary.py):
#: [calls, bytes, waited (the union), total (the sum), longest, group size, dtype].
OpSummary = Tuple[Annotated[int, Meta(gt=0, le=int(MAX_FIGURE))], Count, Amount, Amount, Amount, Whole, str]


class CallSummary(TypedDict):
    """The collectives of one step and phase: the union of their waits, and a summary per op."""

    n: Whole
    ph: Optional[str]
    w: Amount
    ops: Dict[str, OpSummary]


# -- the kinds ------------------------------------------------------------------------------------------

Version = Annotated[List[int], Meta(min_length=2, max_length=2)]


class _Origin(TypedDict):
    v: Version
    job: str
    rank: Rank
    ts: Figure
    state: NotRequired[Optional[State]]


class Hello(_Origin, RankInfo):
    """A rank's metadata; re-sent periodically so late viewers learn it."""

    k: Literal["hello"]


class Steps(_Origin):
    """A batch of completed steps, with the collectives they waited in."""

    k: Literal["steps"]
    steps: List[Step]
    cs: NotRequired[List[CallSummary]]  # one summary per step and phase
    cx: NotRequired[List[Call]]  # a bounded sample of raw calls (for the alpha-beta fit, latency percentiles)


class Heartbeat(_Origin):
    """Sent when a rank has nothing else to say: it is alive, and where it is."""

    k: Literal["heartbeat"]
    # A rank's last heartbeat, sent as its probe shuts down: how its process is ending ("error": the script died
    # of an uncaught exception). A viewer that hears every rank end cleanly says the job ended (watch/lifecycle.py).
    exit: NotRequired[Literal["clean", "error"]]


class Reply(_Origin):
    """A rank's answer to a command."""

    k: Literal["reply"]
    id: str
    cmd: str
    ok: bool
    result: NotRequired[Optional[Dict[str, Any]]]  # a plain map, at most MAX_DEPTH deep (checked by schema.py)


class Command(TypedDict):
    """A viewer's command to the ranks, always signed (wire/auth.py)."""

    v: Version
    k: Literal["command"]
    job: str
    id: str
    cmd: str
    ts: Figure
    args: Dict[str, Any]
    ranks: NotRequired[Optional[List[Whole]]]  # None: every rank
    sig: NotRequired[str]
    nonce: NotRequired[str]


class NodeSteps(TypedDict):
    """The steps of a node's ranks in one digest interval, as packed columns (wire/step_block.py says the layout
    and checks it): a viewer decodes a few byte strings and writes a node's steps as one block instead of a
    record, or a hundred numbers, per rank."""

    r: bytes  # the ranks, int32 each
    n: bytes  # the interval's last step, int64 each
    c: bytes  # how many steps the interval stands for, int64 each
    f: bytes  # float64: each rank's start, mean wall time and mean own time per phase of p, rank by rank
    p: Annotated[List[str], Meta(max_length=MAX_PHASES)]  # the phases of f, in order
    g: NotRequired[bytes]  # one byte a rank: 1 where its steps carry device times (absent: no rank's do)


class NodeRank(TypedDict):
    """A rank's entry in its node's digest (wire/node_digest.py), for a rank with more to say than its steps,
    or that said something but made no step (it is alive)."""

    r: Rank
    state: NotRequired[State]
    hello: NotRequired[RankInfo]
    ops: NotRequired[Dict[str, OpSummary]]
    cx: NotRequired[List[Call]]
    exit: NotRequired[Literal["clean", "error"]]  # its last heartbeat's word: its process is ending


class Node(TypedDict):
    """A relay's digest of its node's ranks, for the biggest jobs."""

    v: Version
    k: Literal["node"]
    job: str
    host: str
    ts: Figure
    relay: NotRequired[Optional[Dict[str, str]]]
    ranks: List[NodeRank]  # only the ranks with more to say than their steps
    steps: NotRequired[NodeSteps]  # absent: no rank of the node made a step in the interval


#: The type of each kind's body, by its topic.
BY_KIND: dict[str, Any] = {
    "hello": Hello,
    "steps": Steps,
    "heartbeat": Heartbeat,
    "reply": Reply,
    "command": Command,
    "node": Node,
}
