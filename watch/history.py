"""The job's recent past: step time, per-rank phases and episodes, sampled from snapshots.

A snapshot says who is slow *now*; people ask *since when* and *what did it
cost*. :class:`History` keeps one small :class:`Sample` per second of the
aggregator's clock (live: wall time; replay: the recording's) in a bounded deque,
and turns the statuses it sees into :class:`Episode` s: a rank (or a whole node)
slow in one phase from a time to a time, or stalled waiting for others. The
TUI's history screen and the end-of-run report (watch/report.py) both read it,
so the two can never tell different stories.

Cost of a straggler episode: in synchronous training every rank waits for the
slowest, so each step of the job is longer by the slow rank's excess over the
median (``RankRow.excess_s``). The cost is that excess summed over the steps the
job made during the episode: seconds of the whole job's time lost.
"""

from __future__ import annotations

import collections
import statistics
from dataclasses import asdict, dataclass, field

from ranktop.watch.snapshot import SLOW, STALLED, Snapshot

#: Seconds between samples (of the aggregator's clock).
SAMPLE_EVERY_S = 1.0
#: Samples kept for the TUI: the last 15 minutes.
DEFAULT_SAMPLES = 900
#: An episode ends after this many seconds without its status (one healthy sample is noise).
EPISODE_GAP_S = 3.0
#: Episodes shorter than this are blips (a window filling up, one noisy step): kept, but not shown or reported.
MIN_EPISODE_S = 2.0
#: Episodes kept (oldest forgotten first).
MAX_EPISODES = 500

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
    rank_step_s: dict[int, float]  # every rank with a step time
    rank_phases: dict[int, dict[str, float]]  # every rank's own time per phase
    rank_excess_s: dict[int, float]  # every rank's time per step beyond the median rank (the straggler signal)
    slow: tuple[int, ...]
    stalled: tuple[int, ...]
    connected: int
    mfu: float | None = None
    tflops: float | None = None


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

    def to_json(self) -> dict:
        out = asdict(self)
        out["duration_s"] = self.duration_s
        return out


class History:
    """Samples and episodes of one job, bounded; fed with every snapshot, keeps one a second."""

    def __init__(self, samples: int | None = DEFAULT_SAMPLES, every_s: float = SAMPLE_EVERY_S):
        self.samples: collections.deque[Sample] = collections.deque(maxlen=samples)
        self.episodes: collections.deque[Episode] = collections.deque(maxlen=MAX_EPISODES)
        self._open: dict[tuple[str, str], Episode] = {}
        self._every = every_s
        self._last_t: float | None = None
        self._last_step: int | None = None

    def note(self, snap: Snapshot, now: float) -> None:
        """Keep ``snap`` if a sample is due (the UI may take snapshots faster than once a second)."""
        if self._last_t is not None and now - self._last_t < self._every:
            return
        if not snap.ranks:
            return
        self._last_t = now
        live = [r for r in snap.ranks if r.step_s is not None]
        steps = [r.step_s for r in live]
        job_tp = snap.throughput
        sample = Sample(
            t=now,
            global_step=snap.global_step,
            step_s=statistics.median(steps) if steps else None,
            max_step_s=max(steps) if steps else None,
            steps_per_s=snap.steps_per_s,
            rank_step_s={r.rank: r.step_s for r in live},
            rank_phases={r.rank: dict(r.phases) for r in live},
            rank_excess_s={r.rank: r.excess_s for r in live},
            slow=tuple(r.rank for r in snap.ranks if r.status == SLOW),
            stalled=tuple(r.rank for r in snap.ranks if r.status == STALLED),
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
        for row in snap.ranks:
            if row.status == SLOW and row.host not in slow_hosts:
                key = (STRAGGLER, f"rank {row.rank}")
                ep = self._extend(key, now, lambda: Episode(STRAGGLER, key[1], row.rank, row.host, row.culprit_phase, now, now))
                ep.cost_s += row.excess_s * made
                ep.steps += made
                ep.peak_excess_s = max(ep.peak_excess_s, row.excess_s)
                ep.phase = ep.phase or row.culprit_phase
                seen.add(key)
            elif row.status == STALLED:
                key = (STALL, f"rank {row.rank}")
                ep = self._extend(
                    key, now,
                    lambda: Episode(STALL, key[1], row.rank, row.host, row.stalled_phase, now - (row.stalled_s or 0.0), now,
                                    step=row.stalled_step),
                )
                ep.waiting_for = sorted((set(ep.waiting_for) | set(snap.waiting_for)) - {row.rank})
                ep.diagnosis = snap.diagnosis or ep.diagnosis
                ep.cost_s = ep.duration_s
                seen.add(key)
        for host in slow_hosts:
            rows = [r for r in snap.ranks if r.host == host and r.status == SLOW]
            key = (NODE, f"node {host}")
            phases = collections.Counter(r.culprit_phase for r in rows if r.culprit_phase)
            ep = self._extend(key, now, lambda: Episode(NODE, key[1], None, host, None, now, now))
            ep.phase = ep.phase or (phases.most_common(1)[0][0] if phases else None)
            excess = max((r.excess_s for r in rows), default=0.0)
            ep.cost_s += excess * made
            ep.steps += made
            ep.peak_excess_s = max(ep.peak_excess_s, excess)
            seen.add(key)
        for key, ep in list(self._open.items()):
            if key not in seen and now - ep.end > EPISODE_GAP_S:
                ep.open = False
                del self._open[key]

    def _extend(self, key: tuple[str, str], now: float, new) -> Episode:
        ep = self._open.get(key)
        if ep is None:
            ep = self._open[key] = new()
            self.episodes.append(ep)
        ep.end = now
        return ep

    def close(self) -> None:
        """The run is over: every episode still open ends at its last sighting."""
        for ep in self._open.values():
            ep.open = False
        self._open.clear()

    # -- reading -------------------------------------------------------------------------

    def since(self, seconds: float) -> list[Sample]:
        """The samples of the last ``seconds`` (by the latest sample's clock)."""
        if not self.samples:
            return []
        cut = self.samples[-1].t - seconds
        return [s for s in self.samples if s.t >= cut]

    def episodes_since(self, t: float) -> list[Episode]:
        """Episodes that lasted (or, open, may last) beyond a blip and reach past ``t``."""
        return [e for e in self.episodes if e.end >= t and (e.open or e.duration_s >= MIN_EPISODE_S)]
