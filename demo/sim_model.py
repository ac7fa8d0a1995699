"""The simulated job's shape and timing: its layout on nodes and a mesh, and every rank's phase times per step.

The model is synchronous data parallel training with FSDP-like collectives:
each phase's own compute time has noise (a few percent, a per-rank bias, and
an occasional spike), forward ends in all-gathers and backward in
reduce-scatters, and at each of those every rank waits for the last to arrive.
So a rank slow in ``data`` makes the others wait in ``forward``'s collectives,
exactly the pattern the straggler scoring must see through. A stalled or
silent rank stops the whole job: the others wait inside a collective.

A layout (``--pp``, ``--tp``, ``--ep``; data parallel takes the rest) lays the
ranks out as ``init_device_mesh`` would, outermost first: pp, dp, ep, tp (a
tensor-parallel group within a node); pipeline stages cost what ``--stage-costs``
says (by default the last stage, which carries the loss head, 1.6 times the
others'): the lighter stages wait for it, their wait going to the pipeline's
receives ("recv@pp"), as a bubble does.

Pure computation: no sockets, no threads (demo/sim_node.py carries it, demo/simulate.py runs it).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np


from ranktop.probe.process_groups import state_layout
from ranktop.relay.links import KEPT, MAX_PEERS, MIN_CROSSING_S, probe_interval_s
from ranktop.wire.link_probes import PROBE_BYTES
from ranktop.wire import parallel_groups, settings
from ranktop.wire.messages import Call, CallSummary, Group, LinkRate, OpSummary
from ranktop.wire.messages import Step
from ranktop.wire.names import COMPILE_PHASE

RANKS_PER_NODE = 8
#: Each phase's share of a step; "other" gets the rest.
PHASE_SHARE = {"data": 0.10, "forward": 0.30, "backward": 0.40, "optimizer": 0.12}
PHASES = tuple(PHASE_SHARE)
#: Noise on a phase's compute time: gaussian, a per-rank bias, and now and then a spike.
NOISE_SD, BIAS_SD, SPIKE_P, SPIKE = 0.03, 0.005, 0.01, 0.25
#: The collectives: what forward and backward end in, how big, how fast the network is.
FORWARD_OP, BACKWARD_OP, SINGLE_OP = "all_gather_into_tensor", "reduce_scatter_tensor", "ddp_allreduce"
BUCKET_BYTES = (2 << 20, 5 << 20, 8 << 20, 12 << 20)
ALPHA_S, BETA_BPS = 40e-6, 25e9
DTYPE = "bfloat16"
#: Finished steps kept for nodes that have not sent them yet (a node sends every 1/rate s).
MAX_HELD_STEPS = 256
#: The loop's shortest sleep: nodes due within it send together (fewer wake-ups, same rates).
TICK_S = 0.025
#: A job this far behind its schedule skips ahead (the machine is too busy) and says so.
MAX_LAG_S = 2.0
#: The last pipeline stage's cost (its forward and backward) against the others', by default.
LAST_STAGE_COST = 1.6
#: The simulated mesh's dimensions, outermost first (tensor parallel innermost: within a node).
MESH_ORDER = ("pp", "dp", "ep", "tp")
#: What the relays' probes read on a healthy link (relay/links.py): the most they can tell, as on any link faster
#: than a 32 KiB probe's crossing can be timed (the real job's veths read it too: tests/test_slow_link_live.py).
PROBED_BPS = PROBE_BYTES / MIN_CROSSING_S
#: The least round trip a simulated probe reports (seconds).
PROBE_RTT_S = 150e-6
#: How many times slower a slowed node's network is, by default (``--slow-link-x``).
SLOW_LINK_X = 64.0


#: The causes a simulated straggler's evidence may say (``Scenario.slow_cause``), and the evidence field (probe/
#: evidence.py, seconds a second) its extra time goes to; ``unknown``: none (a plain sleep: nothing measured says it).
CAUSE_FIELDS = {"gc_pause": "gc", "cpu_contention": "runq", "data_loader": "ld", "host_bound": "cpu", "unknown": None}
#: A healthy rank's evidence (seconds a second, or a count a second), as a CPU training job's probe reads it, and
#: how much a node's differs from another's (a relative SD: the small figures, a few ms a second, wander most; the
#: CPU a step takes, least).
HEALTHY_EVIDENCE = {"gc": 0.002, "gc_n": 1.0, "runq": 0.004, "nvcsw": 20.0, "cpu": 0.55, "pcpu": 0.8, "ld": 0.03,
                    "ld_cpu": 0.02, "majflt": 0.2}  # fmt: skip
EVIDENCE_SD = {"gc": 0.3, "gc_n": 0.3, "runq": 0.3, "nvcsw": 0.2, "cpu": 0.02, "pcpu": 0.02, "ld": 0.05, "ld_cpu": 0.05,
               "majflt": 0.5}  # fmt: skip
#: The probe's evidence is a rate over its last seconds (probe/evidence.py WINDOW_S): a cause shows over as long.
EVIDENCE_WINDOW_S = 10.0


def node_name(index: int) -> str:
    return f"sim{index:04d}"


@dataclass(frozen=True)
class Scenario:
    """What to simulate; the command line's options, checked."""

    job: str
    ranks: int
    nodes: int
    calls_per_step: int = 8
    steps_per_s: float = 16.0
    rate_hz: float = settings.DEFAULT_RATE_HZ
    slow_rank: int | None = None
    slow_node: str | None = None
    slow_ms: float = 20.0
    slow_phase: str = "data"
    stall_rank: int | None = None
    stall_at_s: float = 10.0
    silent_rank: int | None = None
    silent_at_s: float = 10.0
    seed: int = 0
    pp: int = 1
    tp: int = 1
    ep: int = 1
    stage_costs: tuple[float, ...] | None = None  # per pipeline stage (default: the last LAST_STAGE_COST, the others 1)
    gpu: bool = False  # every rank's state carries memory and GPU samples, as the probe's on a GPU node
    slow_link: str | None = None  # a node whose network is slow: every collective crossing it, and its probed links
    slow_link_x: float = SLOW_LINK_X  # ... this many times slower
    evidence: bool = False  # every rank's state carries cause evidence (probe/evidence.py), the slow ranks' their cause's
    slow_cause: str = "unknown"  # the slow ranks' cause (CAUSE_FIELDS): its evidence carries their extra time

    @property
    def per_node(self) -> int:
        return math.ceil(self.ranks / self.nodes)

    @property
    def dp(self) -> int:
        return self.ranks // (self.pp * self.tp * self.ep)

    @property
    def layout(self) -> str | None:
        """The mesh as RANKTOP_LAYOUT states one ("pp=8,dp=64,tp=8"), or None for plain data parallel."""
        if self.pp == self.tp == self.ep == 1:
            return None
        sizes = {"pp": self.pp, "dp": self.dp, "ep": self.ep, "tp": self.tp}
        return ",".join(f"{role}={sizes[role]}" for role in MESH_ORDER if sizes[role] > 1 or role == "dp")

    def stage_of(self, rank: int) -> int:
        return rank // (self.ranks // self.pp)

    def costs(self) -> tuple[float, ...]:
        if self.stage_costs is not None:
            return self.stage_costs
        return (1.0,) * (self.pp - 1) + (LAST_STAGE_COST,) if self.pp > 1 else (1.0,)

    def groups(self, rank: int) -> list[Group]:
        """The groups this rank's hello lists, as a DeviceMesh job's probe describes them."""
        if self.layout is None:
            return []
        out = []
        for entry in state_layout(self.layout, rank, self.ranks):
            role = entry["role"]
            group = Group(id="", size=entry["size"], ranks=entry["ranks"], role=role, compact=entry.get("compact", False))
            start = parallel_groups.members(group)[0]
            out.append(Group(id=f"{role}{start}", desc=f"mesh_{role}", size=group.size, ranks=group.ranks, role=role,
                             compact=group.compact, p2p=role == "pp"))  # fmt: skip
        return out

    def host_of(self, rank: int) -> str:
        return node_name(rank // self.per_node)


# -- the job: step times of every rank -------------------------------------------------


#: A rank's draw for one step (:meth:`JobModel._row`): its own time per phase and "other", its arrival at each phase
#: that ends in collectives, the network's time for those, what follows the last of them, and what it adds to a sum.
Row = tuple[list[float], tuple[float, ...], tuple[float, ...], float, tuple[float, ...]]


@dataclass(frozen=True)
class JobStep:
    """One step of the whole job: every rank's draw, and when the last rank reached each collective."""

    n: int
    start: float
    rows: list[Row]  # per rank: JobModel row (own times, arrivals, transfers, tail)
    latest: tuple[float, ...]  # per phase that ends in collectives: the last rank's arrival (seconds into its segment)
    duration: float
    picks: np.ndarray | None = None  # per rank: its row's index in JobModel's arrays (where rows drawn from a table)
    special: dict[int, Row] = field(default_factory=dict)  # rank -> its row, for the ranks whose row is no table's (a slowed rank)
    early: np.ndarray | None = None  # per rank: how long before ``start`` it began the step (it ended the one before sooner)
    # rank -> (phase, seconds): the ranks that saved a checkpoint or evaluated in this step, at the end of their tail
    # ("other" in their row), or recompiled, at the start of their forward (in "forward" in their row), as the probe
    # times them: the phase ``checkpoint``, ``eval`` or ``compile`` (wire/names.py PAUSE_PHASES)
    pauses: dict[int, tuple[str, float]] = field(default_factory=dict)

    def early_of(self, rank: int) -> float:
        return float(self.early[rank]) if self.early is not None else 0.0


class JobModel:
    """Every rank's phase times, a whole step at a time; pure computation, no sockets.

    A rank's draw is a *row*: its own compute time per phase and for "other"
    (noisy), its arrival at each phase that ends in collectives (counted from
    the previous one), the network's time for those collectives, and what
    follows the last of them. Rows come from a table drawn once, so a step
    of 4,096 ranks costs one random pick per rank; a step's records are only
    built, per rank, when its node sends them (:meth:`records`).
    """

    #: Rows drawn per table (a rank's step picks one): many enough that a window of 64 steps repeats none.
    TABLE_ROWS = 8192

    def __init__(self, s: Scenario):
        self.s = s
        rng = random.Random(s.seed)
        self._rng = rng
        self.step_s = 1.0 / s.steps_per_s
        self.base = [PHASE_SHARE[p] * self.step_s for p in PHASES] + [self.step_s * (1 - sum(PHASE_SHARE.values()))]
        # Collectives: forward ends in all-gathers, backward in reduce-scatters (one DDP all-reduce when K is 1).
        k = s.calls_per_step
        if k == 1:
            ops = [(PHASES.index("backward"), SINGLE_OP, 1)]
        elif k > 1:
            ops = [(PHASES.index("forward"), FORWARD_OP, k // 2), (PHASES.index("backward"), BACKWARD_OP, k - k // 2)]
        else:
            ops = []
        if s.layout is not None:  # on a mesh: forward waits in the pipeline's receives (or dp's gathers), backward in dp's
            forward_op = "recv@pp" if s.pp > 1 else f"{FORWARD_OP}@dp"
            names = {FORWARD_OP: forward_op, BACKWARD_OP: f"{BACKWARD_OP}@dp", SINGLE_OP: f"{SINGLE_OP}@dp"}
            ops = [(i, names[op], count) for i, op, count in ops]
        # A slow node's network slows every collective that crosses it: in a ring, every rank's (the ring is as fast
        # as its slowest link), so every rank waits the longer transfer and nobody's own time grows.
        network_x = s.slow_link_x if s.slow_link is not None else 1.0
        self._link_rng = random.Random(s.seed + 7919)  # the probes' noise, apart from the steps' draws
        self.group_sizes = [2 if op == "recv@pp" else (s.dp if s.layout is not None else s.ranks) for _, op, _ in ops]
        self.ops = ops  # (phase index, op, calls), in phase order
        self.sizes = [[BUCKET_BYTES[j % len(BUCKET_BYTES)] for j in range(count)] for _, _, count in ops]
        self.transfer = [sum(ALPHA_S + b * network_x / BETA_BPS for b in sizes) for sizes in self.sizes]
        self.longest = [ALPHA_S + max(sizes) * network_x / BETA_BPS for sizes in self.sizes]
        self._op_sums = [(j, PHASES[i], op, count, sum(self.sizes[j]), self.longest[j]) for j, (i, op, count) in enumerate(ops)]
        self._table = [self._row([b * self._multiplier() for b in self.base], self._multiplier()) for _ in range(self.TABLE_ROWS)]
        # Pipeline stages of unequal cost: a table per cost, forward and backward scaled.
        self._tables: list[list[Row]] | None = None
        if s.pp > 1:
            scaled = {PHASES.index("forward"), PHASES.index("backward")}
            by_cost = {}
            for cost in set(s.costs()):
                if cost == 1.0:
                    by_cost[cost] = self._table
                    continue
                base = [b * cost if i in scaled else b for i, b in enumerate(self.base)]
                by_cost[cost] = [self._row([b * self._multiplier() for b in base], self._multiplier()) for _ in range(self.TABLE_ROWS)]
            self._tables = [by_cost[s.costs()[s.stage_of(r)]] for r in range(s.ranks)]
        # The tables as arrays, one after the other, for sums over many ranks at once (:meth:`node_sums`): what each
        # row adds to a sum of steps, its arrivals at the collectives, its tail; and each rank's table's first row.
        tables = [self._table] if self._tables is None else list({id(t): t for t in self._tables}.values())
        every = [row for table in tables for row in table]
        self._summed = np.array([row[4] for row in every], np.float64).reshape(len(every), -1)
        self._arrivals = np.array([row[1] for row in every], np.float64).reshape(len(every), -1)
        self._tails = np.array([row[3] for row in every], np.float64)
        if self._tables is None:
            self._first_row = None
        else:
            first = {id(t): i * self.TABLE_ROWS for i, t in enumerate(tables)}
            self._first_row = np.array([first[id(t)] for t in self._tables], np.int64)
        self._early: np.ndarray | None = None  # per rank, from the step before: how much sooner than the last it ended it
        self.extra: dict[int, list[float]] = {}
        slow = [s.slow_rank] if s.slow_rank is not None else []
        if s.slow_node is not None:
            slow += [r for r in range(s.ranks) if s.host_of(r) == s.slow_node]
        for r in slow:
            self.extra.setdefault(r, [0.0] * (len(PHASES) + 1))[PHASES.index(s.slow_phase)] += s.slow_ms / 1000

    def extra_of(self, rank: int, t: float) -> float:
        """Seconds per step ``rank`` adds to its own work ``t`` seconds into the job (its cause's time: the slow
        ranks' ``slow_ms``)."""
        return sum(self.extra.get(rank, ()))

    def cause_ranks(self) -> list[int]:
        """The ranks whose evidence is their cause's, not a healthy rank's."""
        return sorted(self.extra) if self.s.evidence and CAUSE_FIELDS.get(self.s.slow_cause) else []

    def cause_of(self, rank: int) -> str:
        return self.s.slow_cause

    def evidence(self, rank: int, t: float, step_s: float, node: int) -> dict[str, float] | None:
        """What ``rank``'s probe says of its causes ``t`` seconds into the job (its state's ``ev``), whose step is
        ``step_s``: its node's healthy figures (:data:`HEALTHY_EVIDENCE`, drawn around by :data:`EVIDENCE_SD` per
        node and 10 s), and for a slow rank its cause's field carrying its extra time as a rate over the probe's
        window (:data:`EVIDENCE_WINDOW_S`, read at ten moments of it); None without ``Scenario.evidence``."""
        if not self.s.evidence:
            return None
        draw = random.Random(hash((self.s.seed, node, int(t // EVIDENCE_WINDOW_S))))
        out = {"win": EVIDENCE_WINDOW_S, **{k: v * max(0.5, 1.0 + draw.gauss(0.0, EVIDENCE_SD[k])) for k, v in HEALTHY_EVIDENCE.items()}}
        field = CAUSE_FIELDS.get(self.cause_of(rank)) if rank in self.extra or self._has_extra(rank) else None
        if field is not None and step_s > 0:
            window = [self.extra_of(rank, t - EVIDENCE_WINDOW_S * k / 10.0) for k in range(10)]
            out[field] += sum(window) / len(window) / step_s
        return out

    def _has_extra(self, rank: int) -> bool:
        return False

    def link_factor(self, host: str, t: float) -> float:
        """How many times slower than healthy ``host``'s network is ``t`` seconds into the job (1: healthy). A
        model with faults of its own (benchmarks/accuracy.py) says its slowed node here, and its probes show it."""
        return self.s.slow_link_x if host == self.s.slow_link else 1.0

    def link_rates(self, index: int, t: float) -> list[LinkRate]:
        """What node ``index``'s relay says of its links ``t`` seconds into the job, as relay/links.py would: its
        next :data:`MAX_PEERS` nodes' links, each at the probes' ceiling less a little noise, over the slower end's
        factor (a probe crosses both ends' links) as its last :data:`KEPT` probes saw it, one every
        ``probe_interval_s`` (the least round trips: a link slowed shows once they all were, as live)."""
        s, rng = self.s, self._link_rng
        peers = min(MAX_PEERS, s.nodes - 1)
        every = probe_interval_s(peers)
        seen = [t - j * every for j in range(KEPT)]  # when its last probes went
        me = node_name(index)
        mine = [self.link_factor(me, at) for at in seen]
        out = []
        for step in range(1, peers + 1):
            peer = node_name((index + step) % s.nodes)
            slower = min(max(m, self.link_factor(peer, at)) for m, at in zip(mine, seen))
            rate = PROBED_BPS * (1.0 - 0.05 * rng.random()) / slower
            out.append(LinkRate(peer=peer, rate=rate, rtt=PROBE_RTT_S * (1.0 + 0.2 * rng.random()), probes=KEPT))
        if out:  # and itself, over loopback: no load of its own in the simulation
            out.append(LinkRate(peer=me, rate=PROBED_BPS * (1.0 - 0.05 * rng.random()), rtt=PROBE_RTT_S / 2, probes=KEPT))
        return out

    def _multiplier(self) -> float:
        value = max(0.5, 1.0 + self._rng.gauss(0.0, NOISE_SD))
        return value * (1.0 + SPIKE) if self._rng.random() < SPIKE_P else value

    def _row(self, own: list[float], network: float) -> Row:
        arrivals, first = [], 0
        for i, _, _ in self.ops:
            arrivals.append(sum(own[first : i + 1]))
            first = i + 1
        moved = [t * network for t in self.transfer]
        tail = sum(moved) + sum(own[first:])  # after the last collective: the rest of the step, "other" included
        # What the row adds to a sum of steps (see sums): its own phase times, its tail, and per collective
        # what it adds to the wait beyond when the last rank arrived (the network's time less its arrival).
        summed = (*own[: len(PHASES)], tail, *(m - a for m, a in zip(moved, arrivals)))
        return (own, tuple(arrivals), tuple(moved), tail, summed)

    def step(self, n: int, start: float) -> JobStep:
        """Step ``n`` of every rank: a row each, drawn (the same draws a pick of rows from the table makes)."""
        picks = self._rng.choices(range(self.TABLE_ROWS), k=self.s.ranks)
        if self._tables is None:
            rows = list(itemgetter(*picks)(self._table)) if len(picks) > 1 else [self._table[picks[0]]]
        else:
            rows = [table[i] for table, i in zip(self._tables, picks)]
        at = np.array(picks, np.int64)
        if self._first_row is not None:
            at += self._first_row
        special = {}
        for r, more in self.extra.items():
            own, _, moved, _, _ = rows[r]
            rows[r] = special[r] = self._row([a + b for a, b in zip(own, more)], moved[0] / self.transfer[0] if moved else 1.0)
        arrivals, tails = self._arrivals[at], self._tails[at]
        for r, row in special.items():
            arrivals[r], tails[r] = row[1], row[3]
        return self.settle(n, start, rows, arrivals, tails, at, special)

    def settle(
        self,
        n: int,
        start: float,
        rows: list[Row],
        arrivals: np.ndarray | None = None,
        tails: np.ndarray | None = None,
        picks: np.ndarray | None = None,
        special: dict[int, Row] | None = None,
        pauses: dict[int, tuple[str, float]] | None = None,
    ) -> JobStep:
        """The step of every rank's ``rows`` (``arrivals`` and ``tails``: theirs as arrays, where at hand): when the
        last rank reached each collective, and how long it lasts. A rank that ended the step before sooner than the
        last (its tail, optimizer and other, was shorter) begins this one that much earlier and waits that much
        longer at its first collective: a rank slow after its step's last collective holds the others back at the
        next step's first one, as in a real job (and arrives last there: watch/analysis/arrivals.py). ``pauses``:
        rank -> (phase, seconds) of its tail spent saving a checkpoint or evaluating, or of its forward compiling
        (:attr:`JobStep.pauses`). Called once per step, in order."""
        count = len(self.ops)
        if arrivals is None or tails is None:
            arrivals = np.array([row[1] for row in rows], np.float64).reshape(len(rows), count)
            tails = np.array([row[3] for row in rows], np.float64)
        longest = float(tails.max())
        early = self._early if count and self._early is not None and len(self._early) == len(rows) else None
        latest = arrivals.max(axis=0) if count else np.zeros(0)
        if early is not None:
            latest[0] = float((arrivals[:, 0] - early).max())
        self._early = (longest - tails) if count else None
        return JobStep(n, start, rows, tuple(latest.tolist()), float(latest.sum()) + longest, picks, special or {}, early, pauses or {})

    def records(self, step: JobStep, rank: int) -> tuple[Step, list[CallSummary]]:
        """Rank ``rank``'s step record and collective summaries of ``step``, as its probe sends them."""
        own, arrivals, moved, tail, _ = step.rows[rank]
        phases = {"data": own[0], "forward": own[1], "backward": own[2], "optimizer": own[3]}
        summaries = []
        early = step.early_of(rank)
        for j, (i, op, count) in enumerate(self.ops):
            wait = step.latest[j] - arrivals[j] + (early if j == 0 else 0.0)  # for the last rank to arrive
            waited = wait + moved[j]
            phases[PHASES[i]] += waited
            summaries.append(
                CallSummary(n=step.n, ph=PHASES[i], w=waited,
                            ops={op: OpSummary(count, sum(self.sizes[j]), waited, waited, wait + self.longest[j],
                                               self.group_sizes[j], DTYPE, waited, sum(self.sizes[j]))})
            )  # fmt: skip
        if rank in step.pauses:  # a checkpoint, an evaluation, a compilation: its own phase, as the probe times it
            name, seconds = step.pauses[rank]
            phases[name] = phases.get(name, 0.0) + seconds
            if name == COMPILE_PHASE:  # compiled in forward: a nested phase's time leaves its parent's (probe/recorder.py)
                phases["forward"] = max(0.0, phases["forward"] - seconds)
        return Step(n=step.n, t=step.start - early, w=sum(step.latest) + tail + early, p=phases), summaries

    @staticmethod
    def job_sums(steps: list[JobStep]) -> tuple[float, tuple[float, ...], float]:
        """What ``steps`` add to every rank's sums: the time until the last rank reached the collectives
        (in all, and per phase that ends in them), and that time in the last of them."""
        per = tuple(map(sum, zip(*(st.latest for st in steps))))
        return sum(per), per, sum(steps[-1].latest)

    def node_sums(self, steps: list[JobStep], ranks: np.ndarray) -> dict[str, Any]:
        """The sums :meth:`records` of ``steps`` add up to for each of ``ranks`` (an array of ranks) for ``steps``, as
        arrays, a row per rank, in a few numpy operations for all of them: ``last``, ``count`` (ints), ``end``, ``wall`` (total wall time),
        ``phases`` (ranks x PHASES, own plus waits), ``waits`` (ranks x ops: each op's wait, in its phase) and
        ``longest`` (ranks x ops: each op's longest call). The simulator of big jobs sums thousands of ranks' steps
        a tick this way (demo/simulate.py: fold): one rank at a time, 16,384 ranks took it more than a core."""
        if any(st.picks is None for st in steps):  # steps of rows given whole (a subclass's own draws: accuracy.py)
            return self._sums_of(steps, ranks, *self._row_arrays(steps, ranks))
        picks = np.stack([st.picks[ranks] for st in steps if st.picks is not None])  # (steps, ranks): every step's, as checked
        summed, arrivals, tails = self._summed[picks], self._arrivals[picks], self._tails[picks[-1]]
        for i, st in enumerate(steps):  # a slowed rank's rows are its own
            for r, row in st.special.items():
                for at in np.flatnonzero(ranks == r).tolist():
                    summed[i, at], arrivals[i, at] = row[4], row[1]
                    if i == len(steps) - 1:
                        tails[at] = row[3]
        return self._sums_of(steps, ranks, summed, arrivals, tails)

    def _row_arrays(self, steps: list[JobStep], ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`node_sums`' arrays (steps x ranks x what a row adds, its arrivals; the last step's tails), from the
        steps' rows themselves."""
        chosen = ranks.tolist()
        summed = np.array([[st.rows[r][4] for r in chosen] for st in steps], np.float64).reshape(len(steps), len(chosen), -1)
        arrivals = np.array([[st.rows[r][1] for r in chosen] for st in steps], np.float64).reshape(len(steps), len(chosen), -1)
        tails = np.array([steps[-1].rows[r][3] for r in chosen], np.float64)
        return summed, arrivals, tails

    def _sums_of(
        self, steps: list[JobStep], ranks: np.ndarray, summed: np.ndarray, arrivals: np.ndarray, tails: np.ndarray
    ) -> dict[str, Any]:
        total = summed.sum(axis=0)
        n = len(PHASES)
        job_total, job_per, job_last = self.job_sums(steps)
        # begun that much sooner than the step's start, and waited that much longer at its first collective
        early = np.stack([st.early[ranks] if st.early is not None else np.zeros(len(ranks)) for st in steps])
        phases = total[:, :n].copy()
        waits = np.empty((len(ranks), len(self.ops)))
        longest = np.empty((len(ranks), len(self.ops)))
        latest = np.array([st.latest for st in steps]).reshape(len(steps), len(self.ops))
        for j, phase, _, _, _, op_longest in self._op_sums:
            sooner = early if j == 0 else 0.0
            waits[:, j] = job_per[j] + total[:, n + 1 + j] + (early.sum(axis=0) if j == 0 else 0.0)
            phases[:, PHASES.index(phase)] += waits[:, j]
            longest[:, j] = op_longest + (latest[:, None, j] - arrivals[:, :, j] + sooner).max(axis=0)
        return {
            "count": len(steps), "last": steps[-1].n, "end": steps[-1].start + job_last + tails,
            "wall": job_total + total[:, n] + early.sum(axis=0), "phases": phases, "waits": waits, "longest": longest,
        }  # fmt: skip

    def op_summaries(self, count: int, waits: list[float], longest: list[float]) -> dict[str, OpSummary]:
        """One rank's collectives of ``count`` steps per op, from its waits and longest calls per op (:meth:`node_sums`)."""
        return {op: OpSummary(calls * count, size * count, waits[j], waits[j], longest[j], self.group_sizes[j], DTYPE,
                              waits[j], size * count)  # a blocking call's kernel time is its wait (docs/gpu.md)
                for j, _, op, calls, size, _ in self._op_sums}  # fmt: skip

    def sample(self, step: JobStep, rank: int, seq: int, t0: float) -> list[Call]:
        """A few raw calls of ``step`` (two sizes per op, in turn), as ``rank``'s probe samples them for the alpha-beta
        fit: launch to completion, so a call also takes its share of the rank's wait for the last to arrive."""
        calls = []
        n = step.n
        arrivals = step.rows[rank][1]
        for j, (i, op, count) in enumerate(self.ops):
            sizes = self.sizes[j]
            wait = (step.latest[j] - arrivals[j] + (step.early_of(rank) if j == 0 else 0.0)) / count
            for b in {sizes[(n + k) % len(sizes)] for k in range(2)}:  # sizes in turn: the fit sees them all
                d = wait + (ALPHA_S + b / BETA_BPS) * self._multiplier()
                calls.append(Call(op=op, seq=seq, b=b, dt=DTYPE, g=self.group_sizes[j], d=d, n=n, ph=PHASES[i], t0=t0))
        return calls
