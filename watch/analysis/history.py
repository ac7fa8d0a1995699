"""The job's recent past: step time, per-rank phases and episodes, sampled from snapshots.

A snapshot says who is slow *now*; people ask *since when* and *what did it
cost*. :class:`History` keeps one small :class:`Sample` per second of the
aggregator's clock (live: wall time; replay: the recording's) in a bounded deque,
and turns the statuses it sees into :class:`Episode` s: a rank (or a whole node)
slow in one phase from a time to a time, or stalled waiting for others. The
TUI's history screen and the end-of-run report (watch/offline/report.py) both read it,
so the two can never tell different stories.

Cost of a straggler episode: in synchronous training every rank waits for the
slowest, so each step of the job is longer by the slow rank's excess over the
median (``RankRow.excess_s``). The cost is that excess summed over the steps the
job made during the episode: seconds of the whole job's time lost.
"""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ranktop.watch.model.rank_table import STATUS_CODE, RankTable
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.statuses import SLOW, STALLED

#: Seconds between samples (of the aggregator's clock).
SAMPLE_EVERY_S = 1.0
#: ... give or take this share of it: a big job's snapshots come once a second (watch/refresher.py: period_s), a
#: few ms early or late, and a sample due at exactly 1 s would skip every other one that came a little early.
SAMPLE_SLACK = 0.1
#: Samples kept for the TUI: the last 15 minutes.
DEFAULT_SAMPLES = 900
#: An episode ends after this many seconds without its status (one healthy sample is noise).
EPISODE_GAP_S = 3.0
#: An episode is kept (shown, reported, with its cost) once it lasted this long from its first sighting to its last
#: (3 s of a status seen once a second: its first and last sightings are 2 s apart) ...
MIN_EPISODE_S = 2.0
#: ... or once the job made this many steps after its first sighting (a fast job's short episode: 3 steps seen on
#: two looks). Shorter ones are blips (a window filling up, one noisy step): shown while open, then forgotten, so
#: that they never push a kept episode out.
MIN_EPISODE_STEPS = 3
#: Episodes kept of each sort, slowness (a rank or a node) and stalls, oldest forgotten first: a hang of thousands
#: of ranks opens a stall episode per rank, and must not push the stragglers of the hour before out.
MAX_EPISODES = 1000
#: Bytes the samples' per-rank figures may take: past it a sample keeps them only every k-th second
#: (at 4,096 ranks x 8 phases, every 5th over the 15 minutes kept); the job-wide figures are in every sample.
PER_RANK_BUDGET = 32 * 2**20

#: Slow ranks of a node that keep its open episode going on a look where the node is not named.
NODE_GOES_ON = 2

STRAGGLER = "straggler"
NODE = "node"  # every rank of a host slow: the node is the suspect
STALL = "stall"


@dataclass(frozen=True)
class Sample:
    t: float
    global_step: int
    step_s: float | None  # the median rank's step time
    max_step_s: float | None
    steps_per_s: float | None
    rank_step_s: Mapping[int, float]  # every rank with a step time (empty in a sample that keeps no per-rank figures)
    rank_phases: Mapping[int, Mapping[str, float]]  # every rank's own time per phase
    rank_excess_s: Mapping[int, float]  # every rank's time per step beyond the median rank (the straggler signal)
    slow: tuple[int, ...]
    stalled: tuple[int, ...]
    connected: int
    mfu: float | None = None
    tflops: float | None = None


class RankValues(Mapping[int, float]):
    """rank -> a figure, kept as two arrays (float32: a sample of 4,096 ranks is 16 KB, not a dict of floats)."""

    __slots__ = ("_ranks", "_values", "_index")

    def __init__(self, ranks: np.ndarray, values: np.ndarray):
        self._ranks, self._values = ranks, values.astype(np.float32)
        self._index: dict[int, int] | None = None

    def _position(self, rank: int) -> int | None:
        i = int(np.searchsorted(self._ranks, rank))
        return i if i < len(self._ranks) and self._ranks[i] == rank else None

    def __getitem__(self, rank: int) -> float:
        i = self._position(rank)
        if i is None:
            raise KeyError(rank)
        return float(self._values[i])

    def __contains__(self, rank: object) -> bool:
        return isinstance(rank, (int, np.integer)) and self._position(int(rank)) is not None

    def __iter__(self) -> Iterator[int]:
        return iter(self._ranks.tolist())

    def __len__(self) -> int:
        return len(self._ranks)

    # (overridden: a zip of the two columns, not an ItemsView, for callers that iterate them without a lookup per rank)
    def items(self) -> Iterable[tuple[int, float]]:  # type: ignore[override]
        return zip(self._ranks.tolist(), self._values.tolist())


class RankPhases(Mapping[int, dict[str, float]]):
    """rank -> {phase: own seconds}, kept as a float32 matrix."""

    __slots__ = ("_ranks", "_names", "_values")

    def __init__(self, ranks: np.ndarray, names: list[str], values: np.ndarray):
        self._ranks, self._names, self._values = ranks, list(names), values.astype(np.float32)

    def __getitem__(self, rank: int) -> dict[str, float]:
        i = int(np.searchsorted(self._ranks, rank))
        if i >= len(self._ranks) or self._ranks[i] != rank:
            raise KeyError(rank)
        return dict(zip(self._names, self._values[i].tolist()))

    def __contains__(self, rank: object) -> bool:
        if not isinstance(rank, (int, np.integer)):
            return False
        i = int(np.searchsorted(self._ranks, rank))
        return i < len(self._ranks) and self._ranks[i] == rank

    def __iter__(self) -> Iterator[int]:
        return iter(self._ranks.tolist())

    def __len__(self) -> int:
        return len(self._ranks)


_NO_WAITS: frozenset[int] = frozenset()
_NONE = RankValues(np.zeros(0, np.int64), np.zeros(0))
_NO_PHASES = RankPhases(np.zeros(0, np.int64), [], np.zeros((0, 0)))


@dataclass
class Episode:
    kind: str  # STRAGGLER | NODE | STALL
    who: str  # "rank 2" / "node gpu-07"
    rank: int | None
    host: str | None
    phase: str | None
    start: float
    end: float
    cost_s: float = 0.0  # job seconds lost (stragglers: excess x steps made; stalls: their duration)
    peak_excess_s: float = 0.0  # the largest excess per step seen in the episode
    steps: int = 0  # steps the job made during it
    waiting_for: list[int] = field(default_factory=list)  # stalls: the ranks the others waited for
    diagnosis: str | None = None
    step: int | None = None  # stalls: the step it hung in
    open: bool = True

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["duration_s"] = self.duration_s
        return out


class History:
    """Samples and episodes of one job, bounded; fed with every snapshot, keeps one a second."""

    def __init__(self, samples: int | None = DEFAULT_SAMPLES, every_s: float = SAMPLE_EVERY_S):
        self.samples: collections.deque[Sample] = collections.deque(maxlen=samples)
        self._slowness: collections.deque[Episode] = collections.deque(maxlen=MAX_EPISODES)  # kept: stragglers, nodes
        self._stalls: collections.deque[Episode] = collections.deque(maxlen=MAX_EPISODES)  # kept: stalls
        self._open: dict[tuple[str, str], Episode] = {}
        # open, not kept yet -> the steps it had once its first sighting counted them (None until its second)
        self._unkept: dict[tuple[str, str], int | None] = {}
        self._every = every_s
        self._last_t: float | None = None
        self._last_step: int | None = None
        self._samples_kept = samples or DEFAULT_SAMPLES
        self._taken = 0  # samples taken: every k-th keeps its per-rank figures (PER_RANK_BUDGET)
        # The ranks stalled ranks waited for, merged into each stall episode once per change, not once per rank
        # and sample: at 16,384 stalled ranks waiting for thousands, merging per episode took seconds a sample.
        self._waits: tuple[tuple[int, ...], frozenset[int]] = ((), frozenset())  # the last snapshot's waiting_for
        self._union_of: dict[tuple[str, str], frozenset[int]] = {}  # open stall episode -> the waits merged into it
        self._unions: dict[tuple[int, int], tuple[frozenset[int], frozenset[int], frozenset[int], list[int]]] = {}

    def note(self, snap: Snapshot, now: float) -> None:
        """Keep ``snap`` if a sample is due (the UI may take snapshots faster than once a second). Reads the
        snapshot's columns (watch/model/rank_table.py): no rank's row is built but those of the slow and stalled."""
        if self._last_t is not None and now - self._last_t < self._every * (1.0 - SAMPLE_SLACK):
            return
        if not snap.ranks:
            return
        self._last_t = now
        table = snap.ranks.table
        scored = ~np.isnan(table.step_s)
        steps = table.step_s[scored]
        ranks = table.rank[scored].astype(np.int32)  # one array for the sample's three maps
        per_rank_bytes = 4 * len(ranks) * (3 + len(table.names)) * self._samples_kept
        every = max(1, math.ceil(per_rank_bytes / PER_RANK_BUDGET))
        keep = self._taken % every == 0
        self._taken += 1
        job_tp = snap.throughput
        sample = Sample(
            t=now,
            global_step=snap.global_step,
            step_s=snap.median_step(),  # the median rank's, as the snapshot worked it out
            max_step_s=float(steps.max()) if len(steps) else None,
            steps_per_s=snap.steps_per_s,
            rank_step_s=RankValues(ranks, steps) if keep else _NONE,
            rank_phases=RankPhases(ranks, table.names, table.phases[scored]) if keep else _NO_PHASES,
            rank_excess_s=RankValues(ranks, table.excess_s[scored]) if keep else _NONE,
            slow=tuple(snap.ranks.having(SLOW)),
            stalled=tuple(snap.ranks.having(STALLED)),
            connected=snap.connected,
            mfu=job_tp.mfu if job_tp else None,
            tflops=job_tp.tflops if job_tp else None,
        )
        made = 0 if self._last_step is None else max(0, snap.global_step - self._last_step)
        self._last_step = snap.global_step
        self.samples.append(sample)
        self._track(snap, now, made)

    # -- episodes --------------------------------------------------------------------

    def _track(self, snap: Snapshot, now: float, made: int) -> None:
        seen: set[tuple[str, str]] = set()
        slow_hosts = set(snap.slow_hosts)
        table = snap.ranks.table
        if tuple(snap.waiting_for) != self._waits[0]:
            self._waits = (tuple(snap.waiting_for), frozenset(snap.waiting_for))
        # A stalled rank's episode is kept from the columns (a row is built for the slow ranks only: a hang of
        # 16,384 ranks would build every rank's row each second).
        flagged = []  # the slow ranks' rows
        stalled = STATUS_CODE[STALLED]
        for i in np.flatnonzero(table.statuses(SLOW, STALLED)).tolist():  # (episodes opened in rank order)
            if table.status[i] == stalled:
                self._stalled(table, i, snap, now, seen)
                continue
            flagged.append(snap.ranks[i])
        # A node's episode goes on while several of its ranks are slow, on a look where the engine named them one by
        # one (as a slow node's ranks are, now and then, and as it ends): a slow node is one strip on the timeline,
        # not eight ranks' episodes of a few seconds each.
        on_host = collections.Counter(r.host for r in flagged)
        slow_hosts |= {h for h, n in on_host.items() if n >= NODE_GOES_ON and (NODE, f"node {h}") in self._open}
        for row in flagged:
            if row.host not in slow_hosts:
                key = (STRAGGLER, f"rank {row.rank}")
                ep = self._extend(key, now, lambda: Episode(STRAGGLER, key[1], row.rank, row.host, row.culprit_phase, now, now))
                ep.cost_s += row.excess_s * made
                ep.steps += made
                ep.peak_excess_s = max(ep.peak_excess_s, row.excess_s)
                ep.phase = ep.phase or row.culprit_phase
                seen.add(key)
        for host in slow_hosts:
            rows = [r for r in flagged if r.host == host and r.status == SLOW]
            key = (NODE, f"node {host}")
            phases = collections.Counter(r.culprit_phase for r in rows if r.culprit_phase)
            ep = self._extend(key, now, lambda: Episode(NODE, key[1], None, host, None, now, now))
            ep.phase = ep.phase or (phases.most_common(1)[0][0] if phases else None)
            excess = max((r.excess_s for r in rows), default=0.0)
            ep.cost_s += excess * made
            ep.steps += made
            ep.peak_excess_s = max(ep.peak_excess_s, excess)
            seen.add(key)
        for key in [key for key in self._unkept if key in seen]:  # (only the episodes not kept yet: few)
            ep, first = self._open[key], self._unkept[key]
            if ep.duration_s >= MIN_EPISODE_S or (first is not None and ep.steps - first >= MIN_EPISODE_STEPS):
                del self._unkept[key]
                (self._stalls if ep.kind == STALL else self._slowness).append(ep)
        for key, ep in list(self._open.items()):
            if key not in seen and now - ep.end > EPISODE_GAP_S:
                ep.open = False
                del self._open[key]
                self._union_of.pop(key, None)
                self._unkept.pop(key, None)  # a blip: forgotten

    def _stalled(self, table: RankTable, i: int, snap: Snapshot, now: float, seen: set[tuple[str, str]]) -> None:
        """Row ``i`` of the snapshot's columns is stalled: its episode opened or extended, with the ranks it
        waited for (every snapshot's ``waiting_for`` while it was stalled, less itself)."""
        rank = int(table.rank[i])
        key = (STALL, f"rank {rank}")

        def opened() -> Episode:
            # its Position as its row reads it (watch/analysis/stalls.py), off the columns where they are kept
            where = getattr(table.stalled, "where", None)
            if where is not None:
                phase, stuck_s, step = where(rank)
            else:
                stuck = table.stalled[rank]
                phase, stuck_s, step = stuck.phase, stuck.stuck_s, stuck.step
            return Episode(STALL, key[1], rank, table.host[i], phase, now - (stuck_s or 0.0), now, step=step)

        ep = self._extend(key, now, opened)
        before = self._union_of.get(key, _NO_WAITS)
        union, ordered = self._merged(before, self._waits[1])
        if union is not before or key not in self._union_of:
            if rank in union:  # (itself left out: a slice either side, in C)
                at = bisect.bisect_left(ordered, rank)
                ep.waiting_for = ordered[:at] + ordered[at + 1 :]
            else:
                ep.waiting_for = ordered
            self._union_of[key] = union
        ep.diagnosis = snap.diagnosis or ep.diagnosis
        ep.cost_s = ep.duration_s
        seen.add(key)

    def _merged(self, before: frozenset[int], waits: frozenset[int]) -> tuple[frozenset[int], list[int]]:
        """``before | waits`` (``before`` itself when it holds them) and its ranks in order, worked out once per
        pair: the episodes of ranks stalled together share them. The pairs kept hold their sets, so that the
        ids they are found by stay theirs."""
        found = self._unions.get((id(before), id(waits)))
        if found is None:
            if len(self._unions) > 4096:
                self._unions.clear()
            union = before if waits <= before else before | waits
            found = self._unions[(id(before), id(waits))] = (before, waits, union, sorted(union))
        return found[2], found[3]

    def _extend(self, key: tuple[str, str], now: float, new: Callable[[], Episode]) -> Episode:
        """The open episode of ``key``, ``new()`` at its first sighting, extended to ``now``. A new one is not kept
        until it lasts (:data:`MIN_EPISODE_S`, :data:`MIN_EPISODE_STEPS`: _track), whenever nobody looks: the
        history is fed by every snapshot the viewer takes, whichever screen is open (watch/session.py), so an
        episode that began and ended while the history screen was closed is there when it opens."""
        ep = self._open.get(key)
        if ep is None:
            ep = self._open[key] = new()
            self._unkept[key] = None  # its steps are counted once its first sighting added them (below)
        elif key in self._unkept and self._unkept[key] is None:
            self._unkept[key] = ep.steps
        ep.end = now
        return ep

    def close(self) -> None:
        """The run is over: every episode still open ends at its last sighting."""
        for key, ep in self._open.items():
            ep.open = False
            if key in self._unkept and ep.duration_s >= MIN_EPISODE_S:  # (no next sighting to count steps after)
                (self._stalls if ep.kind == STALL else self._slowness).append(ep)
        self._open.clear()
        self._unkept.clear()
        self._union_of.clear()

    # -- reading -------------------------------------------------------------------------

    def since(self, seconds: float) -> list[Sample]:
        """The samples of the last ``seconds`` (by the latest sample's clock)."""
        if not self.samples:
            return []
        cut = self.samples[-1].t - seconds
        return [s for s in self.samples if s.t >= cut]

    @property
    def episodes(self) -> list[Episode]:
        """The episodes kept and those open, oldest first."""
        kept = list(self._slowness) + list(self._stalls)
        kept += [self._open[key] for key in self._unkept]
        kept.sort(key=lambda e: e.start)
        return kept

    def episodes_since(self, t: float) -> list[Episode]:
        """Episodes kept (they lasted beyond a blip) or open (they may), that reach past ``t``, oldest first."""
        return [e for e in self.episodes if e.end >= t]

    def culprits_since(self, t: float) -> list["Culprit"]:
        """Each rank or node with an episode reaching past ``t``: its episodes and what they cost the job, the
        costliest first (the history screen's timeline draws a strip for each)."""
        by: dict[str, Culprit] = {}
        for e in self.episodes_since(t):
            c = by.get(e.who)
            if c is None:
                c = by[e.who] = Culprit(e.who, e.kind, [])
            c.episodes.append(e)
            if e.kind != STALL or c.kind == STALL:
                c.kind = e.kind
        return sorted(by.values(), key=lambda c: (-c.cost_s, c.who))


@dataclass
class Culprit:
    """One rank or node and its episodes, oldest first: a strip of the history screen's timeline."""

    who: str  # "rank 2" / "node gpu-07"
    kind: str  # STRAGGLER | NODE | STALL (a rank both slow and stalled: slow)
    episodes: list[Episode]

    @property
    def cost_s(self) -> float:
        """Job seconds its episodes cost (a stall: its length)."""
        return sum(e.cost_s for e in self.episodes)

    @property
    def open(self) -> bool:
        return any(e.open for e in self.episodes)
