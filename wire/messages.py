"""Every message that crosses the wire, defined once as msgspec Structs: the schema, its bounds, its documentation.

A message body is one MessagePack map. Each kind below is a ``Struct`` tagged
with its kind (the ``k`` field: ``Hello``, ``Steps``, ... form one tagged
union, :data:`Message`), whose fields carry their types and bounds
(``Annotated[float, Meta(ge=0, le=...)]``). The producers build these Structs
(the probe's Sender, the relay's digest, the simulator): a misspelt field is
an error where it is written. :mod:`.schema` decodes any kind in one call, in
C, into the same Structs, checking every field on the way: the code downstream
reads attributes and checks nothing again. Fields not listed here are dropped
at decode (a newer peer's additions), so a field the viewer reads must be
listed here first.

Compact records are ``array_like`` Structs (an op's summary, a top entry of a
capture's summary): small on the wire, read by name, with no index constants.
A node digest's steps are columns, packed (wire/step_block.py).

On the wire the Structs encode as the maps and lists of protocol 1.6 did (a
field left at its default, ``None``, is left out, as the probe always left out
what it did not know): peers of 1.6 and of this version read each other.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Dict, Iterator, List, Literal, Optional, Tuple, Union

from msgspec import Meta, Struct, field


#: Bump the major version on any incompatible change; minor versions only add fields. One exception, named
#: where it is met: node digests' steps are packed since 1.6 (wire/step_block.py); a relay older than that is
#: told to upgrade, as a peer of another major version is.
PROTOCOL_VERSION = (1, 6)

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
#: A short name: a group's id, description or role.
Name = Annotated[str, Meta(max_length=64)]
#: The protocol version every body carries, ``[major, minor]``.
Version = Tuple[int, int]
#: How a rank's process is ending, as its last heartbeat says ("error": the script died of an uncaught exception).
Exit = Literal["clean", "error"]
#: What a rank stuck in a step is in, by its training thread's stack (probe/evidence.py ``doing``): compiling
#: (torch.compile), writing or reading a checkpoint, inside a DataLoader, or in Python's garbage collector.
Doing = Literal["compile", "checkpoint", "loader", "gc"]


class Record(Struct, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """What every type here is: built by keyword (a misspelt field fails where it is written), immutable once
    built (a view may hand it on without a copy), left out of the garbage collector's walks (a viewer holds
    one per rank, and none refers back to another), and encoded without the fields left at their default.
    Each subclass says ``kw_only`` and ``frozen`` again: msgspec applies ``kw_only`` to a class's own fields
    only, and a type checker wants ``frozen`` said on every class of a frozen family."""


# -- a rank's state: where its training thread is --------------------------------------------------------


class ByName(Record, kw_only=True, frozen=True):
    """A record whose fields are also read by name, as the map it is on the wire: ``gpu.get("util")``,
    ``"na" in gpu``, ``collective["seq"]``. The viewer's readers written against the map read it so (the
    analysis' reads are moved to attributes with the viewer's restructure, issue 50's items 1-4). A name
    that is no field raises, so that a misspelt gauge fails where it is read, as where it is written."""

    def get(self, name: str, default: Any = None) -> Any:
        """The field ``name``, or ``default`` where it is unset (None); a name that is no field is an error."""
        if name not in self.__struct_fields__:
            raise KeyError(f"{type(self).__name__} has no field {name!r}")
        value = getattr(self, name)
        return default if value is None else value

    def __getitem__(self, name: str) -> Any:
        """The field ``name`` (None where unset); a name that is no field is an error."""
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is set, as a key of the map on the wire is there or not."""
        return isinstance(name, str) and name in self.__struct_fields__ and getattr(self, name) is not None

    def __iter__(self) -> Iterator[str]:
        """The names of the fields set: the keys of the map on the wire."""
        return (name for name in self.__struct_fields__ if getattr(self, name) is not None)


class CudaMemory(ByName, kw_only=True, frozen=True):
    """probe/memory.py: the CUDA caching allocator's figures (``torch.cuda.memory_stats()``), bytes and counts."""

    dev: Optional[Amount] = None  # the CUDA device index the rank uses
    alloc: Optional[Amount] = None  # bytes allocated now
    resv: Optional[Amount] = None  # bytes the caching allocator reserved now
    peak: Optional[Amount] = None  # the most bytes allocated so far
    retries: Optional[Amount] = None  # num_alloc_retries: a failed cudaMalloc each, the cache flushed and tried again
    ooms: Optional[Amount] = None  # num_ooms
    cap: Optional[Amount] = None  # the device's memory, bytes


class Memory(ByName, kw_only=True, frozen=True):
    """probe/memory.py: the process's RSS and, on CUDA, the caching allocator's figures (bytes and counts)."""

    rss: Optional[Amount] = None
    cuda: Optional[CudaMemory] = None


#: A gauge as NVML reads it: a whole number (bytes, MHz, a percentage) stays one on the wire.
Gauge = Union[int, Figure]


class Gpu(ByName, kw_only=True, frozen=True):
    """probe/gpu_sampler.py: one round of NVML gauges of the rank's GPU (a gauge NVML cannot read is left out), or
    only ``na``, why there are none (no binding, no driver, no GPU, a rank on CPU)."""

    na: Optional[str] = None  # why there are no gauges
    seq: Optional[Whole] = None  # the sample's number (a repeat of the last sample has the same)
    t: Optional[Figure] = None  # when it was read, unix s by the rank's clock
    name: Optional[str] = None  # the device's name
    bus: Optional[str] = None  # its PCI bus id
    util: Optional[Gauge] = None  # SM utilisation, %
    mem_util: Optional[Gauge] = None  # memory-controller utilisation, %
    mem_used: Optional[Gauge] = None  # bytes
    mem_total: Optional[Gauge] = None  # bytes
    power_w: Optional[Gauge] = None
    power_limit_w: Optional[Gauge] = None
    temp_c: Optional[Gauge] = None
    sm_mhz: Optional[Gauge] = None  # the SM clock now
    sm_max_mhz: Optional[Gauge] = None  # ... and its maximum
    throttle: Optional[List[str]] = None  # active clock slowdown reasons (probe/gpu_sampler.py THROTTLE_REASONS)
    pcie_tx: Optional[Gauge] = None  # PCIe throughput, bytes/s (read every few samples)
    pcie_rx: Optional[Gauge] = None
    sm_avg: Optional[Gauge] = None  # the SM clock averaged over the sampler's window (probe/gpu_sampler.py WINDOW_S)
    held_power: Optional[Gauge] = None  # the share of that window power held the clocks down (0-1)
    held_thermal: Optional[Gauge] = None  # ... and heat


class LastCollective(ByName, kw_only=True, frozen=True):
    """probe/collective_tracker.py: the last collective a rank entered, and whether it is blocked in it now. Each figure
    is shown as it came (the viewer checks what it reads: watch/engine/rank_scalars.py), so each is a scalar; the
    names are fixed."""

    op: Scalar = None  # the op ("all_reduce", "ddp_allreduce", ...)
    seq: Scalar = None  # the rank's call counter
    b: Scalar = None  # bytes
    dt: Scalar = None  # dtype
    g: Scalar = None  # group size
    gi: Scalar = None  # the group's id (torch's group name)
    k: Scalar = None  # "c" a collective, "p" point-to-point, "f" a functional collective
    inside: Scalar = None  # blocked in it now
    age: Scalar = None  # seconds blocked in it (0 when not)


class TopEntry(Record, array_like=True, frozen=True):
    """One of a capture summary's top entries, ``[name, microseconds, calls]`` on the wire."""

    name: str
    us: Amount
    calls: Count


class CaptureSummary(Record, kw_only=True, frozen=True):
    """probe/trace_summary.py (a trace) or probe/capture.py (a memory snapshot): what watch/capture.py reads."""

    compute: Optional[Figure] = None  # a trace: the share of the captured steps spent computing
    comm: Optional[Figure] = None  # ... in communication
    idle: Optional[Figure] = None  # ... idle (the three come together: wire/schema.py)
    wall_us: Optional[Figure] = None  # the captured steps' wall time, microseconds
    allocated: Optional[Figure] = None  # a memory snapshot: bytes allocated
    reserved: Optional[Figure] = None  # ... bytes the caching allocator reserved
    segments: Optional[Figure] = None  # ... its segments
    events: Optional[Figure] = None  # ... allocator events recorded
    steps: Optional[Annotated[List[int], Meta(min_length=2, max_length=2)]] = None  # first and last
    train_ms: Optional[Annotated[List[Figure], Meta(min_length=2)]] = None
    cost_s: Optional[Amount] = None  # the longest any thread (training's too) waited for the GIL while it was written
    snapshot_s: Optional[Amount] = None  # a memory snapshot: torch's _snapshot() call (one GIL hold)
    ops: Optional[List[TopEntry]] = None  # the top ops
    kernels: Optional[List[TopEntry]] = None  # the top kernels
    basis: Optional[str] = None
    note: Optional[str] = None


class Capture(Record, kw_only=True, frozen=True):
    """A rank's latest capture (wire/capture.py's states, probe/capture.py)."""

    id: str
    kind: str
    st: Literal["waiting", "recording", "writing", "done", "failed"]  # wire/capture.STATES
    start: Whole
    steps: Whole
    dir: Optional[str] = None  # the capture folder on the rank's host
    at: Optional[Whole] = None  # the step being recorded
    path: Optional[str] = None  # the rank's file, once written
    err: Optional[str] = None  # why it failed
    sum: Optional[CaptureSummary] = None


class Evidence(Record, kw_only=True, frozen=True):
    """probe/evidence.py: what may explain a slow rank, as rates over the last ``win`` seconds, held against its
    peers' by watch/analysis/causes.py. A figure the rank cannot measure is left out."""

    win: Annotated[float, Meta(gt=0, le=86400)]  # the seconds the rates are over
    gc: Optional[Amount] = None  # seconds per second its training thread spent in Python's garbage collector
    gc_n: Optional[Amount] = None  # ... collections per second
    runq: Optional[Amount] = None  # seconds per second its training thread waited on a run queue for a CPU
    nvcsw: Optional[Amount] = None  # ... involuntary context switches per second
    a2a_rows: Optional[Amount] = None  # rows per second it received in all_to_all / all_to_all_single
    samples: Optional[Amount] = None  # samples it took in per step (probe.add_inputs, else its declared batch)
    tokens: Optional[Amount] = None  # ... tokens per step (probe.add_inputs, else its declared tokens_per_step)
    kids: Optional[Amount] = None  # CPUs its child processes (DataLoader workers) used: CPU seconds per second
    kids_n: Optional[Annotated[int, Meta(ge=0, le=4096)]] = None  # ... how many child processes it has
    swap: Optional[Amount] = None  # bytes of the process swapped out (VmSwap)
    retries: Optional[Amount] = None  # the CUDA caching allocator's retries per second (a failed cudaMalloc each)
    padded: Optional[Amount] = None  # tokens per step it computed on, padding included (probe.add_inputs(padded=...))
    cpu: Optional[Amount] = None  # seconds per second its training thread ran on a CPU (schedstat's first field)
    pcpu: Optional[Amount] = None  # ... CPU seconds per second its whole process used (all its threads)
    thr: Optional[Annotated[int, Meta(ge=0, le=1_000_000)]] = None  # threads its process has
    cores: Optional[Annotated[int, Meta(ge=1, le=1_000_000)]] = None  # CPUs its process may run on (its affinity)
    ld: Optional[Amount] = None  # seconds per second its training thread spent inside a DataLoader's __next__
    ld_cpu: Optional[Amount] = None  # ... of which on a CPU (the rest: blocked on its workers, I/O, a run queue)
    jit: Optional[Amount] = None  # seconds per second torch.compile spent compiling on it (dynamo's compile time)
    jit_n: Optional[Amount] = None  # ... frames compiled (first compiles and recompiles) per second
    breaks: Optional[Amount] = None  # ... graph breaks per second
    sys: Optional[Amount] = None  # seconds per second its training thread ran in the kernel (stime: page faults, system calls)
    majflt: Optional[Amount] = None  # major page faults per second of its process (a page read from disk: swap, a cold mapped file)
    node_cpu: Optional[Amount] = None  # CPU seconds per second busy on its node, every process's (/proc/stat)
    ncpu: Optional[Annotated[int, Meta(ge=1, le=1_000_000)]] = None  # ... the node's online CPUs
    doing: Optional[Doing] = None  # stuck in a step for seconds: what its training thread's stack is in now


class State(Record, kw_only=True, frozen=True):
    """Where a rank's training thread is, sent with its steps and heartbeats (probe/sender.py)."""

    step: Optional[Whole] = None  # the step it is in (or the next one, between steps)
    last: Optional[Whole] = None  # the last step it finished
    in_step: Optional[bool] = None
    phase: Optional[str] = None  # the phase it is in
    step_age: Optional[Amount] = None  # seconds since the current step began
    median_step_s: Optional[Amount] = None
    rate_hz: Optional[Amount] = None  # telemetry messages a second
    dropped: Optional[Count] = None  # records lost (buffer full, nobody listening)
    rejected: Optional[Dict[str, Count]] = None  # refused commands, by reason
    collective: Optional[LastCollective] = None  # the last collective entered
    mem: Optional[Memory] = None
    gpu: Optional[Gpu] = None
    cap: Optional[Capture] = None
    ev: Optional[Evidence] = None  # what may explain a slowdown (probe/evidence.py)


#: The state of a rank that has sent none yet.
NO_STATE = State()


# -- who a rank is ----------------------------------------------------------------------------------------


class Span(Record, array_like=True, frozen=True):
    """A compact group's members, ``[start, count, stride]`` on the wire: ranks ``start``, ``start + stride``, ...,
    ``count`` of them. Each number is bounded by what it is (a rank, a group's size, a positive step); that the
    last member is within the job's world is wire/parallel_groups.py's to check."""

    start: Rank
    count: World
    stride: Annotated[int, Meta(gt=0, lt=MAX_RANKS)]


class Group(Record, kw_only=True, frozen=True):
    """A process group the rank is in (wire/parallel_groups.py): torch's group name (the same on every
    member), its description and role, its members, and whether point-to-point ops ran on it.

    ``ranks`` has two shapes, told apart by ``compact``: the member ranks in group-rank order, or (``compact``)
    a :class:`Span`'s three numbers, ``[start, count, stride]`` (every DeviceMesh group steps evenly: a group
    of 4,096 ranks travels as three numbers). Read members with ``parallel_groups.members``; the decoder
    (wire/schema.py) drops a group whose shape does not hold and counts it in ``RankInfo.bad_groups``."""

    id: Name
    size: World
    ranks: Annotated[List[Rank], Meta(max_length=MAX_RANKS)]
    desc: Name = ""
    role: Annotated[str, Meta(max_length=16)] = ""
    compact: bool = False
    p2p: bool = False


class RankInfo(Record, kw_only=True, frozen=True):
    """Who a rank is: its hello's own fields (a node digest carries them for its ranks too)."""

    host: str
    world: World
    local_rank: Whole
    pid: Whole
    rate_hz: Optional[Amount] = None
    work: Optional[Dict[str, Union[str, Figure]]] = None  # probe/flops.py: dtype, batch, tokens, flops, device, peak_tflops
    relay: Optional[Dict[str, str]] = None  # its node's relay: {"telemetry": url, "control": url}
    local_world: Optional[Whole] = None  # ranks on its node
    launcher: Optional[str] = None  # torchrun, srun, mp.spawn, ...
    device: Optional[str] = None  # "cuda:3 NVIDIA H100 ...", or "cpu"
    torch: Optional[str] = None  # torch's version, if the script imported it
    probe: Optional[str] = None  # ranktop's version
    python: Optional[str] = None  # the interpreter's version
    argv: Optional[List[str]] = None  # the first words of its command line
    cwd: Optional[str] = None  # its working folder
    groups: Optional[Annotated[List[Group], Meta(max_length=64)]] = None  # its process groups (wire/parallel_groups.py)
    bad_groups: Optional[Count] = None  # groups the decoder dropped from ``groups`` (they did not fit the world)


#: A rank's hello fields, by name: what a hello carries beyond its envelope.
RANK_INFO_FIELDS = RankInfo.__struct_fields__


# -- step records and collectives ------------------------------------------------------------------------


class DeviceTimes(Record, kw_only=True, frozen=True):
    """A step's device-side times, where the rank measured them (CUDA events, probe/gpu_timing.py)."""

    w: Amount
    p: Phases


class Step(Record, kw_only=True, frozen=True):
    """One completed step: number, wall-clock start (unix s), wall duration (s), self time per phase."""

    n: Whole
    t: Figure
    w: Amount
    p: Phases  # "other" is w less the sum of p
    g: Optional[DeviceTimes] = None


class Call(Record, kw_only=True, frozen=True):
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
    gi: Optional[Name] = None  # its group's id (torch's group name)
    k: Optional[Literal["c", "p", "f"]] = None  # a collective, a point-to-point op, a functional collective
    kd: Optional[Amount] = None  # its kernel's seconds (the link's time, not a wait), where known (docs/gpu.md)


class OpSummary(Record, array_like=True, frozen=True):
    """One op's collectives over a step and phase (probe/collective_summary.py), a list on the wire:
    ``[calls, bytes, waited (the union of their waits), total (the sum), longest, group size, dtype, kernel, kbytes]``;
    ``kernel``: the seconds of their kernels, for the calls whose kernel time is known, and ``kbytes`` those calls'
    bytes (the link's rate is kbytes / kernel; both absent where no call's is known, and from older probes)."""

    calls: Annotated[int, Meta(gt=0, le=int(MAX_FIGURE))]
    bytes: Count
    waited: Amount
    total: Amount
    longest: Amount
    group: Whole
    dtype: str
    kernel: Optional[Amount] = None
    kbytes: Optional[Count] = None


class CallSummary(Record, kw_only=True, frozen=True):
    """The collectives of one step and phase: the union of their waits, and a summary per op."""

    n: Whole
    ph: Optional[str]
    w: Amount
    ops: Dict[str, OpSummary]


# -- the kinds ------------------------------------------------------------------------------------------


def _version() -> Version:
    """The version a body is built with: a factory, so that the field is always encoded (omit_defaults leaves
    out only a field equal to a plain default)."""
    return PROTOCOL_VERSION


class Kind(Record, tag_field="k", kw_only=True, frozen=True):
    """A message: ``k`` (its kind, the union's tag) and ``v`` (the protocol version) ride in every body."""

    KIND: ClassVar[str]
    v: Version = field(default_factory=_version)


class Origin(Kind, kw_only=True, frozen=True):
    """What a rank sends: which job and rank, when (unix s), and where its training thread is."""

    job: str
    rank: Rank
    ts: Figure
    state: Optional[State] = None


class Hello(RankInfo, tag_field="k", tag="hello", kw_only=True, frozen=True):
    """A rank's metadata; re-sent periodically so late viewers learn it. Its own fields are a ``RankInfo``'s
    (a node digest carries those alone); its envelope is an ``Origin``'s, spelt again (a Struct has one base)."""

    KIND: ClassVar[str] = "hello"
    v: Version = field(default_factory=_version)
    job: str
    rank: Rank
    ts: Figure
    state: Optional[State] = None

    def info(self) -> RankInfo:
        """Who the rank is, less the envelope (what a node digest carries, what a viewer keeps)."""
        return RankInfo(**{name: getattr(self, name) for name in RANK_INFO_FIELDS})


class Steps(Origin, tag="steps", kw_only=True, frozen=True):
    """A batch of completed steps, with the collectives they waited in."""

    KIND: ClassVar[str] = "steps"
    steps: List[Step]
    cs: Optional[List[CallSummary]] = None  # one summary per step and phase
    cx: Optional[List[Call]] = None  # a bounded sample of raw calls (for the alpha-beta fit, latency percentiles)


class Heartbeat(Origin, tag="heartbeat", kw_only=True, frozen=True):
    """Sent when a rank has nothing else to say: it is alive, and where it is."""

    KIND: ClassVar[str] = "heartbeat"
    # A rank's last heartbeat, sent as its probe shuts down: how its process is ending. A viewer that hears
    # every rank end cleanly says the job ended (watch/engine/lifecycle.py).
    exit: Optional[Exit] = None


class Reply(Origin, tag="reply", kw_only=True, frozen=True):
    """A rank's answer to a command."""

    KIND: ClassVar[str] = "reply"
    id: str
    cmd: str
    ok: bool
    result: Optional[Dict[str, Any]] = None  # a plain map, at most MAX_DEPTH deep (checked by schema.py)


# -- a rank's answers to commands (probe/commands.py): typed where they are made, plain maps on the wire ------


class Refused(ByName, kw_only=True, frozen=True):
    """A command the rank would not or could not carry out, and why."""

    error: str


class Pong(ByName, kw_only=True, frozen=True):
    """``ping``: the rank's clock (unix s) and where it is (its state, as plain values)."""

    pong: Figure
    state: Dict[str, Any]


class RateSet(ByName, kw_only=True, frozen=True):
    """``set_rate``: the telemetry rate the rank sends at now (messages a second)."""

    rate_hz: Amount


class CaptureArmed(ByName, kw_only=True, frozen=True):
    """``capture``: the capture the rank armed (its id made safe as a path component), and its folder."""

    capture: str
    kind: str
    start: Whole
    steps: Whole
    dir: str


#: What a command's handler answers. The stacks answer is a plain map (probe/stacks.py: a thread's frames, as the
#: viewer's stack analysis reads them). A reply carries it as a plain map (``Reply.result``): a reply does not say
#: its result's type, so the viewer reads it by name (watch/analysis/stacks.py, watch/engine/requests.py).
CommandResult = Union[Refused, Pong, RateSet, CaptureArmed, Dict[str, Any]]


class Command(Kind, tag="command", kw_only=True, frozen=True):
    """A viewer's command to the ranks, always signed (wire/auth.py)."""

    KIND: ClassVar[str] = "command"
    job: str
    id: str
    cmd: str
    ts: Figure
    args: Dict[str, Any]  # a plain map, at most MAX_DEPTH deep (checked by schema.py)
    ranks: Optional[List[Whole]] = None  # None: every rank


class NodeSteps(Record, kw_only=True, frozen=True):
    """The steps of a node's ranks in one digest interval, as packed columns (wire/step_block.py says the layout
    and checks it): a viewer decodes a few byte strings and writes a node's steps as one block instead of a
    record, or a hundred numbers, per rank."""

    r: bytes  # the ranks, int32 each
    n: bytes  # the interval's last step, int64 each
    c: bytes  # how many steps the interval stands for, int64 each
    f: bytes  # float64: each rank's start, mean wall time and mean own time per phase of p, rank by rank
    p: Annotated[List[str], Meta(max_length=MAX_PHASES)]  # the phases of f, in order
    g: Optional[bytes] = None  # one byte a rank: 1 where its steps carry device times (absent: no rank's do)


class NodeRank(Record, kw_only=True, frozen=True):
    """A rank's entry in its node's digest (relay/digest_fold.py), for a rank with more to say than its steps,
    or that said something but made no step (it is alive)."""

    r: Rank
    state: Optional[State] = None
    hello: Optional[RankInfo] = None
    ops: Optional[Dict[str, OpSummary]] = None
    cx: Optional[List[Call]] = None
    exit: Optional[Exit] = None  # its last heartbeat's word: its process is ending


class Node(Kind, tag="node", kw_only=True, frozen=True):
    """A relay's digest of its node's ranks, for the biggest jobs."""

    KIND: ClassVar[str] = "node"
    job: str
    host: str
    ts: Figure
    relay: Optional[Dict[str, str]] = None
    ranks: List[NodeRank]  # only the ranks with more to say than their steps
    steps: Optional[NodeSteps] = None  # absent: no rank of the node made a step in the interval


class LinkRate(Record, array_like=True, frozen=True):
    """One link as a relay measured it, ``[peer, rate, rtt, probes]`` on the wire: the rate its probes crossed
    from this relay's node to ``peer``'s (bytes a second, from its recent probes: relay/links.py), the round
    trip of a probe too small to be slowed by the rate (seconds, the least of them), and how many probes these are."""

    peer: Annotated[str, Meta(max_length=256)]
    rate: Amount
    rtt: Amount
    probes: Annotated[int, Meta(gt=0, le=1 << 20)]


#: The most links one relay reports (it probes at most this many peers: relay/links.py).
MAX_LINKS = 512


class Links(Kind, tag="links", kw_only=True, frozen=True):
    """A relay's measured links to the job's other relays (relay/links.py), about once a second: what
    watch/analysis/slow_links.py names a slow node's network from. ``cost``: the bytes a second its probing
    sent and answered, so that what it costs the job's network is seen, not assumed."""

    KIND: ClassVar[str] = "links"
    job: str
    host: Annotated[str, Meta(max_length=256)]
    ts: Figure
    links: Annotated[List[LinkRate], Meta(max_length=MAX_LINKS)]
    cost: Amount = 0.0


#: Any message: one tagged union, decoded in one call (wire/schema.py).
Message = Union[Hello, Steps, Heartbeat, Reply, Command, Node, Links]
#: What a rank itself sends.
RankMessage = Union[Hello, Steps, Heartbeat, Reply]

#: The type of each kind's body, by its kind.
BY_KIND: Dict[str, Any] = {kind.KIND: kind for kind in (Hello, Steps, Heartbeat, Reply, Command, Node, Links)}
