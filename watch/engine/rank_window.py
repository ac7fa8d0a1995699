"""One rank as the viewer remembers it: its last state and hello, its collective waits by step; its figures by row elsewhere.

The job state (watch/engine/job_state.py) owns one :class:`RankWindow` per rank and updates it as
messages arrive; its steps live in the job's step columns (watch/engine/step_columns.py); the analyses (watch/analysis/stalls.py,
watch/analysis/collectives.py) read these typed fields and never each other's state.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from ranktop.watch.engine.step_columns import StepColumns
from ranktop.watch.engine.rank_scalars import RankScalars
from ranktop.watch.engine.step_window import StepWindow
from ranktop.wire.capture import RUNNING
from ranktop.wire.messages import NO_STATE, RankInfo, State, Step

NAN = float("nan")
#: Raw collective calls per rank kept (the probes' samples) for the latency percentiles and the alpha-beta fit.
CALL_WINDOW = 16
#: Steps whose collective waits a window keeps (a step's own times are worked out when it arrives; a few
#: steps of slack for waits that come after their step).
WAITS_KEPT = 16


def _scalar(name: str, doc: str):
    """A property over the window's row of the job's :class:`RankScalars` (watch/engine/rank_scalars.py)."""

    def get(self: "RankWindow"):
        return self.scalars.views[name][self.row]

    def put(self: "RankWindow", value) -> None:
        self.scalars.views[name][self.row] = value

    return property(get, put, doc=doc)


def _optional(name: str, absent, doc: str):
    """As :func:`_scalar`, for a figure that may be absent: None in Python, ``absent`` in the array."""
    nan = absent != absent

    def get(self: "RankWindow"):
        value = self.scalars.views[name][self.row]
        return None if (value != value if nan else value == absent) else value

    def put(self: "RankWindow", value) -> None:
        self.scalars.views[name][self.row] = absent if value is None else value

    return property(get, put, doc=doc)


def _held(name: str, doc: str):
    """A property over the window's row of one of the job's object arrays (rank_scalars.HELD): a message's Struct."""

    def get(self: "RankWindow"):
        return getattr(self.scalars, name)[self.row]

    def put(self: "RankWindow", value) -> None:
        getattr(self.scalars, name)[self.row] = value

    return property(get, put, doc=doc)


@dataclass
class RankWindow:
    """One rank: its messages and caches here, its scalar figures in its row of the job's :class:`RankScalars`
    (gathered for every rank at once by a view, watch/engine/job_state.py), its steps in its row of the job's
    step columns."""

    rank: int
    window: int = 64  # steps (or a node digest's intervals) kept
    # per step the seconds its collectives waited, by phase (its summaries and calls are kept by row in the job's
    # collective store, watch/engine/collective_sums.py)
    waits: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    # read of its state and hello as they come (take_state, take_hello)
    rejected: dict[str, int] | None = None  # commands it refused, by reason
    columns: StepColumns | None = None  # the job's step columns its steps go in (None: columns of its own)
    own: StepWindow | None = None  # its last steps: number, start, wall and own time per phase (given: emptied, reused)
    scalars: RankScalars | None = None  # the job's per-rank figures (None: of its own); its row is its steps' row

    meta = _held("meta", "its hello, less the envelope (None: none heard yet)")
    state = _held("state", "its last state (immutable, as decoded: a view hands it on as it is)")
    capture_summary = _held("capture_summary", "(capture id, summary): kept after the rank stops sending it")
    last_seen = _scalar("last_seen", "viewer clock of its last message")
    raw_at = _scalar("raw_at", "viewer clock of its last own steps or heartbeat (not through a node digest)")
    steps_seen = _scalar("steps_seen", "steps received")
    first_step = _optional("first_step", -1, "the first step number received: where counting gaps begins")
    last_step = _scalar("last_step", "the last step number received (-1: none)")
    device_times = _scalar("device_times", "some of its step records carry GPU (device) times")
    state_at = _scalar("state_at", "viewer clock when its last state arrived")
    progress_at = _scalar("progress_at", "... and when that state's last finished step last changed (watch/analysis/stalls.py)")
    stepped_at = _scalar("stepped_at", "viewer clock when a step of it last arrived (watch/analysis/stalls.py: stuck_s)")
    step_age = _optional("step_age", float("nan"), "inside a step by its last state: the step's age then (watch/analysis/stalls.py)")
    dropped = _scalar("dropped", "records its probe could not send")
    rate_hz = _scalar("rate_hz", "the telemetry rate it says it sends at (NaN: not said)")
    works = _scalar("works", "its hello says its work per step")

    def __post_init__(self) -> None:
        if self.own is None:
            self.own = StepWindow(self.window, self.columns)
        else:
            self.own.clear()
        if self.scalars is None:
            self.scalars = RankScalars(self.own.row + 1)
        self.row = self.own.row
        self.scalars.reset(self.row)

    @property
    def endpoint(self) -> str | None:
        """The relay it was last heard through: a lost relay is shown with its ranks."""
        return self.scalars.urls[self.scalars.views["endpoint"][self.row]]

    @endpoint.setter
    def endpoint(self, url: str | None) -> None:
        self.scalars.views["endpoint"][self.row] = self.scalars.url_id(url)

    @property
    def steps(self) -> list[tuple[int, float, float]]:
        """(number, start, wall) of the steps in its window, oldest first (a node digest's: one per interval)."""
        return self.own.steps

    @property
    def last_step_end(self) -> float | None:
        """When its latest step ended, unix seconds by its clock."""
        return self.own.last_end

    def note_state(self, state: State, now: float) -> None:
        """Take a new state; remember when it came and when the rank last finished a step."""
        views, row = self.scalars.views, self.row
        if self.state.last != state.last or not views["progress_at"][row]:
            views["progress_at"][row] = now
        views["state_at"][row] = now
        self.take_state(state)
        cap = state.cap
        if cap is not None and cap.sum is not None:
            self.capture_summary = (cap.id, cap.sum)

    def take_state(self, state: State) -> None:
        """Its state, and what a snapshot reads of it for every rank, read here once per state rather than
        once per snapshot (at 4,096 ranks a snapshot gathers these as columns). Typed at decode (wire/messages.py)."""
        self.state = state
        views, row = self.scalars.views, self.row
        self.scalars.take_state(row, state)
        views["stated"][row] = state != NO_STATE
        age = state.step_age  # inside a step: how long it has been in it when the state was sent
        views["step_age"][row] = age if age is not None and state.in_step else NAN
        views["dropped"][row] = state.dropped or 0
        rate = state.rate_hz if state.rate_hz is not None else self.meta.rate_hz if self.meta is not None else None
        views["rate_hz"][row] = NAN if rate is None else rate
        self.rejected = state.rejected
        views["refused"][row] = bool(self.rejected)
        cap = state.cap
        views["capturing"][row] = cap is not None and cap.st in RUNNING

    def take_hello(self, meta: RankInfo) -> None:
        """Its hello (less the envelope), and what a snapshot reads of it for every rank."""
        self.meta = meta
        self.scalars.note_host(self.row, str(meta.host))
        self.works = meta.work is not None
        if self.state.rate_hz is None:
            rate = meta.rate_hz
            self.rate_hz = float("nan") if rate is None else float(rate)

    def add_step(self, record: Step) -> None:
        """One step record. Where it carries device times (``g``) they are the step's times: on a GPU the host
        only launches the work, and the rank's collective waits are timed on the device too."""
        g = record.g
        wall, phases = (g.w, g.p) if g is not None else (record.w, record.p)
        if g is not None:
            self.device_times = True
        n = record.n
        self.own.add(n, record.t, wall, phases, self.waits.get(n))
        self.steps_seen += 1
        if self.first_step is None or n < self.first_step:
            self.first_step = n
        self.last_step = max(self.last_step, n)

    @property
    def missed(self) -> int:
        """Step records this viewer never received between its first and its last (gaps in the numbers).

        The probe counts what it drops itself (``dropped``); what is lost after it (a
        relay queue or this viewer's own, while it was frozen or too slow, a relay
        that died) only shows as step numbers that never arrived."""
        if self.first_step is None:
            return 0
        return max(0, self.last_step - self.first_step + 1 - self.steps_seen)
