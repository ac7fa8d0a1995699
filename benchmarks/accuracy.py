"""How often ranktop names the right rank, how soon, and how right the size it tells is: a rate, not an anecdote.

A matrix of scenarios runs through the real engine on a simulated clock: the
simulator's phase model (demo/sim_model.py, :class:`NoisyJob` adds the noises
and faults below) makes every rank's steps, its ranks send them as a probe
does (or, from 128 ranks, their nodes' digests, as a big job's viewer takes
them, each node's relay sending at its own moment as live: demo/simulate.py
``Simulator.replay``), encoded; a real
``Aggregator`` decodes and ingests them, and its snapshot, judged by
watch/analysis/judge.py, gives the verdict (watch/model/verdict.py) every half
second of the job (every second from 128 ranks). No sockets, no sleeping: a
minute of a 64-rank job takes about a second.

Layouts: data parallel at 2, 8, 64, 1,024 and 4,096 ranks; data x tensor x
pipeline (pp=2, tp=2, dp=4); expert parallel (ep=4, dp=8).
Noises (on top of the model's per-step gaussian and its occasional 25% spike):
``bias`` (each rank up to +-2% slower or faster for good), ``pauses``
(heavy-tailed: Pareto pauses of GC or the OS, on random ranks), ``periodic``
(one rank checkpoints every 100 steps), ``input`` (per-rank input sizes that
vary step to step: forward and backward +-15%), ``warmup`` (the first 5 s
every rank 2 to 4 times slower, each its own), ``all`` (every one at once).
Faults: one slow rank at 2, 5, 10, 20 and 50% of a step (in data, forward,
backward or optimizer, in turn; a step is the job's, as it ran before the
fault: the median of its healthy steps, warm-up left out, so that 5% is 5%
of what its user sees on every layout: a pipeline whose last stage does 1.6
times the work steps 1.4 times as long as a plain data-parallel job), a slow
node (all 8 ranks of one), a slow link (a rank's collectives only), a
slowdown that starts mid-run, a transient episode (30 s; 10 min on the 8-rank
job), a throttling ramp (0 to 30% in 40 s), and none (healthy jobs, for false alarms: 30 s each, and one of 4,096
ranks with every noise for 15 minutes, 1,000 rank-hours).

Figures:

- **recall**: scenarios whose culprit was named (the verdict's first rank, or
  its node) while the fault lasted, per slowdown size; ``recall_at_5pct`` over
  the slow-rank, slow-node, mid-run, transient and ramp faults of 5% or more;
- **precision**: of every verdict that named a rank or node, the share that
  named the injected one (a verdict naming the culprit in the window's length
  after its fault ended is neither right nor wrong);
- **false alarms per 1,000 rank-hours**: episodes of a named rank on healthy
  noisy jobs, over their ranks x hours (warm-up left out);
- **time to detect** (p50, p90): from the fault's start (a ramp: from when it
  reached 5% of a step) to the first verdict naming the culprit;
- **size error** (p90): ``|excess_s - injected| / injected`` at the fault's
  last verdict (its window full of slow steps), slow-rank faults of 5% or more.

    python benchmarks/accuracy.py              # 1,139 scenarios
    python benchmarks/accuracy.py --quick      # 106 scenarios of the small layouts
    python benchmarks/accuracy.py --json
    python benchmarks/accuracy.py --json --outcomes FILE   # and each scenario's outcome, a JSON line each
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from ranktop.demo.sim_model import PHASES, JobModel, Scenario, Step
from ranktop.demo.simulate import Simulator
from ranktop.watch.aggregator import DEFAULT_WINDOW, Aggregator
from ranktop.watch.model.verdict import SLOW_NODE, SLOW_RANK, verdict
from ranktop.wire import settings

STEPS_PER_S = 16.0
STEP_S = 1.0 / STEPS_PER_S  # the model's compute per step; a job's step is longer (its waits), its own (NoisyJob.job_step_s)
#: From this many ranks the viewer takes node digests (it does from 16 nodes of 8: watch/engine/receiver.py).
DIGESTS_FROM = 128
#: Each node's relay sends its digest 4 times a second at its own moment, as live relays do (their digests end at
#: different steps): the replay ticks this many times as often, and a node's relay sends at every such tick from its own.
DIGEST_TURNS = 4
#: Layouts: ranks, nodes and the mesh (pp, tp, ep; data parallel takes the rest).
LAYOUTS = {
    "dp2": dict(ranks=2, nodes=1),
    "dp8": dict(ranks=8, nodes=1),
    "dp64": dict(ranks=64, nodes=8),
    "dp1024": dict(ranks=1024, nodes=128),
    "dp4096": dict(ranks=4096, nodes=512),
    "dp_tp_pp": dict(ranks=16, nodes=2, pp=2, tp=2),
    "expert": dict(ranks=32, nodes=4, ep=4),
}
SMALL = ("dp2", "dp8", "dp64", "dp_tp_pp", "expert")
NOISES = ("gauss", "bias", "pauses", "periodic", "input", "warmup", "all")
SIZES = (0.02, 0.05, 0.10, 0.20, 0.50)
FAULT_PHASES = ("data", "forward", "backward", "optimizer")
#: Noise figures.
BIAS = 0.02  # a rank's lasting bias, at most
PAUSE_P, PAUSE_MIN_S, PAUSE_ALPHA, PAUSE_MAX_S = 0.003, 0.005, 1.5, 2.0  # per rank-step; Pareto; capped
CHECKPOINT_EVERY, CHECKPOINT_S = 100, 0.4
INPUT_SD = 0.15
WARMUP_S, WARMUP_SLOWER = 5.0, (1.0, 3.0)
#: When a fault starts (the windows are full by then), how long a scenario runs after, a healthy job's length.
ONSET_S, AFTER_S, HEALTHY_S = 8.0, 12.0, 30.0
#: The long healthy job of the full matrix: 4,096 ranks for 15 minutes are 1,000 rank-hours, enough for a rate of
#: false alarms per 1,000 rank-hours to mean something.
LONG_HEALTHY = dict(layout="dp4096", lasts_s=900.0)
#: A verdict this long after its fault ended still sees the fault's steps in its windows.
LINGER_S = DEFAULT_WINDOW / STEPS_PER_S + 1.0
#: The faults whose recall counts toward recall_at_5pct (a slow link is communication: not a rank's own time).
RANK_FAULTS = ("slow_rank", "slow_node", "mid_run", "transient", "ramp")


@dataclass(frozen=True)
class Case:
    layout: str
    noise: str
    fault: str  # none | slow_rank | slow_node | slow_link | mid_run | transient | ramp
    size: float = 0.0  # of a step (a ramp: where it ends)
    phase: str = "forward"
    onset_s: float = ONSET_S
    lasts_s: float | None = None  # None: to the end
    seed: int = 0

    @property
    def length_s(self) -> float:
        if self.fault == "none":
            return (self.lasts_s or HEALTHY_S) + (WARMUP_S if self.noisy("warmup") else 0.0)
        if self.fault == "transient":
            return self.onset_s + (self.lasts_s or 0.0) + LINGER_S + 2.0
        if self.fault == "ramp":
            return self.onset_s + RAMP_S + 4.0
        return self.onset_s + AFTER_S

    def noisy(self, kind: str) -> bool:
        return self.noise in (kind, "all")


RAMP_S = 40.0


class NoisyJob(JobModel):
    """The simulator's job with the benchmark's noises and one fault (see the module docstring)."""

    TABLE_ROWS = 512

    def __init__(self, s: Scenario, case: Case, t0: float):
        self.case = case
        self.t0 = t0
        super().__init__(s)
        self.draw = np.random.default_rng(s.seed + 7919)
        ranks = s.ranks
        # Per-rank tables: its stage's cost, its lasting bias, input sizes that vary step to step.
        scaled = (PHASES.index("forward"), PHASES.index("backward"))
        levels = (-BIAS, -BIAS / 2, 0.0, BIAS / 2, BIAS) if case.noisy("bias") else (0.0,)
        tables: dict[tuple[float, float], list] = {}
        costs = s.costs()
        self._tables = []
        for r in range(ranks):
            key = (costs[s.stage_of(r)], levels[self._rng.randrange(len(levels))])
            if key not in tables:
                tables[key] = [self._draw_row(key[0], key[1], scaled) for _ in range(self.TABLE_ROWS)]
            self._tables.append(tables[key])
        self.warm = self.draw.uniform(*WARMUP_SLOWER, ranks) if case.noisy("warmup") else None
        self.checkpointer = self._rng.randrange(ranks)
        self.culprits = self._culprits()
        self._healthy: list[float] = []  # the job's steps before the fault (warm-up left out): what its size is a share of
        self._job_step_s: float | None = None
        self._clock = 0.0  # seconds into the job of the last step made

    @property
    def job_step_s(self) -> float:
        """The job's step as it ran before the fault: the median of its healthy steps (warm-up left out), fixed at
        the fault's onset; the model's compute per step until a step ran."""
        if self._job_step_s is not None:
            return self._job_step_s
        step = float(np.median(self._healthy)) if self._healthy else STEP_S
        if self._faulted():
            self._job_step_s = step
        return step

    def _faulted(self) -> bool:
        return self.case.fault != "none" and self._clock >= self.case.onset_s

    def _draw_row(self, cost: float, bias: float, scaled: tuple[int, ...]) -> tuple:
        own = []
        for i, b in enumerate(self.base):
            m = (1.0 + bias) * self._multiplier()
            if i in scaled:
                m *= cost
                if self.case.noisy("input"):
                    m *= max(0.5, 1.0 + self._rng.gauss(0.0, INPUT_SD))
            own.append(b * m)
        return self._row(own, self._multiplier())

    def _culprits(self) -> list[int]:
        case, s = self.case, self.s
        if case.fault == "none":
            return []
        if case.fault == "slow_node":
            node = self._rng.randrange(s.nodes)
            return list(range(node * s.per_node, min(s.ranks, (node + 1) * s.per_node)))
        return [self._rng.randrange(s.ranks)]

    def size_at(self, t: float) -> float:
        """The fault's size (a share of a step) ``t`` seconds into the job."""
        case = self.case
        if case.fault == "none" or t < case.onset_s:
            return 0.0
        if case.lasts_s is not None and t >= case.onset_s + case.lasts_s:
            return 0.0
        if case.fault == "ramp":
            return case.size * min(1.0, (t - case.onset_s) / RAMP_S)
        return case.size

    def step(self, n: int, start: float) -> Step:
        t = self._clock = start - self.t0
        picks = self._rng.choices(range(self.TABLE_ROWS), k=self.s.ranks)
        rows = [table[i] for table, i in zip(self._tables, picks)]
        for r, (scale, add, network) in self._perturbed(n, t).items():
            own, _, moved, _, _ = rows[r]
            base_net = moved[0] / self.transfer[0] if moved else 1.0
            rows[r] = self._row([o * scale + a for o, a in zip(own, add)], base_net * network)
        step = self.settle(n, start, rows)
        if not self._faulted() and not (self.warm is not None and t < WARMUP_S):
            self._healthy.append(step.duration)
        return step

    def _perturbed(self, n: int, t: float) -> dict[int, tuple[float, list[float], float]]:
        """Per rank touched this step: a factor on its own times, seconds added per phase, a factor on its network time."""
        case, out = self.case, {}
        width = len(PHASES) + 1

        def touch(r: int) -> tuple[float, list[float], float]:
            return out.setdefault(r, (1.0, [0.0] * width, 1.0))

        if self.warm is not None and t < WARMUP_S:
            fade = 1.0 - t / WARMUP_S
            for r in range(self.s.ranks):
                _, add, net = touch(r)
                out[r] = (1.0 + self.warm[r] * fade, add, net)
        if case.noisy("pauses"):
            for r in self.draw.choice(self.s.ranks, self.draw.poisson(PAUSE_P * self.s.ranks)).tolist():
                touch(r)[1][self._rng.randrange(width)] += min(PAUSE_MAX_S, PAUSE_MIN_S * (1.0 + self.draw.pareto(PAUSE_ALPHA)))
        if case.noisy("periodic") and n % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:
            touch(self.checkpointer)[1][len(PHASES)] += CHECKPOINT_S
        size = self.size_at(t)
        if size:
            seconds = size * self.job_step_s
            for r in self.culprits:
                scale, add, net = touch(r)
                if case.fault == "slow_link":
                    moved = sum(self.transfer) or 1.0
                    out[r] = (scale, add, net * (1.0 + seconds / moved))
                else:
                    add[PHASES.index(case.phase)] += seconds
        return out


@dataclass
class Outcome:
    case: Case
    culprits: list[int]
    detected: bool = False
    detect_s: float | None = None
    right: int = 0  # verdicts naming the culprit
    wrong: int = 0  # verdicts naming someone else, or anyone while no fault runs
    episodes: int = 0  # false alarms: runs of wrong verdicts
    rank_hours: float = 0.0  # healthy jobs: ranks x hours watched (warm-up left out)
    size_error: float | None = None
    reported_s: float | None = None
    step_s: float | None = None  # the job's step the fault's size is a share of (NoisyJob.job_step_s)
    wall_s: float = 0.0


def run_case(case: Case, directory: str) -> Outcome:
    """One scenario through the real engine; what its verdicts said."""
    began = time.perf_counter()
    spec = LAYOUTS[case.layout]
    digests = spec["ranks"] >= DIGESTS_FROM
    turns = DIGEST_TURNS if digests else 1
    s = Scenario(job="accuracy", steps_per_s=STEPS_PER_S, seed=case.seed, rate_hz=settings.DEFAULT_RATE_HZ * turns, **spec)
    t0 = 1.0e9
    sim = Simulator(s, directory)
    model = sim.model = NoisyJob(s, case, t0)
    culprits = model.culprits
    node = {s.host_of(r) for r in culprits} if case.fault == "slow_node" else set()
    out = Outcome(case, culprits)
    clock = [t0]
    agg = Aggregator("accuracy", clock=lambda: clock[0], wall_clock=lambda: clock[0])
    if not digests:
        agg.ingest_batch([(frames, None) for frames in sim.hellos(t0)])
    every = 1.0 if digests else 0.5
    next_look = t0 + every
    alarmed = False
    start_at = case.onset_s
    if case.fault == "ramp":
        start_at = case.onset_s + RAMP_S * min(1.0, 0.05 / case.size)
    quiet_after = WARMUP_S + LINGER_S if case.noisy("warmup") else 0.0
    last_active: float | None = None
    for now, frames in sim.replay(case.length_s, start=t0, digests=digests, turns=turns):
        clock[0] = now
        agg.ingest_batch([(f, None) for f in frames])
        if now < next_look:
            continue
        next_look += every
        t = now - t0
        v = verdict(agg.snapshot())
        named = v.kind in (SLOW_RANK, SLOW_NODE) and bool(v.ranks)
        active = model.size_at(t - turns / s.rate_hz) > 0  # the last steps sent ran under the fault
        lingering = not active and case.fault != "none" and t >= case.onset_s and (
            case.lasts_s is None or t < case.onset_s + case.lasts_s + LINGER_S)
        hit = named and (v.ranks[0] in culprits or (v.host in node if node else False))
        if named and hit and (active or lingering):
            out.right += 1
            if active and not out.detected:
                out.detected = True
                out.detect_s = max(0.0, t - start_at)
        elif named and t >= quiet_after:
            out.wrong += 1
            out.episodes += not alarmed
        alarmed = named and not hit
        if active and case.fault in ("slow_rank", "mid_run", "slow_node") and hit:
            last_active = v.excess_s
    if case.fault == "none":
        out.rank_hours = s.ranks * (case.length_s - quiet_after) / 3600.0
    else:
        out.step_s = model.job_step_s
    if last_active is not None and case.size:
        injected = case.size * model.job_step_s
        out.reported_s = last_active
        out.size_error = abs(last_active - injected) / injected
    out.wall_s = time.perf_counter() - began
    return out


def matrix(quick: bool, seeds: int | None = None) -> list[Case]:
    """The scenarios: every small layout x noise x fault, in ``seeds`` draws; the big layouts fewer."""
    cases: list[Case] = []
    seeds = seeds or (1 if quick else 3)
    noises = ("gauss", "all") if quick else NOISES
    for seed in range(seeds):
        for layout in SMALL:
            for k, noise in enumerate(noises):
                base = Case(layout, noise, "none", seed=seed * 1000 + k)
                cases += [replace(base, seed=base.seed + 500)]  # healthy
                for i, size in enumerate(SIZES):
                    phase = FAULT_PHASES[(i + k + seed) % len(FAULT_PHASES)]
                    cases.append(replace(base, fault="slow_rank", size=size, phase=phase))
                multi_node = LAYOUTS[layout]["nodes"] > 1
                if multi_node:
                    cases.append(replace(base, fault="slow_node", size=0.10, phase=FAULT_PHASES[(k + seed) % 4]))
                cases.append(replace(base, fault="slow_link", size=0.20))
                cases.append(replace(base, fault="mid_run", size=0.10, onset_s=20.0, phase=FAULT_PHASES[(k + seed + 1) % 4]))
                cases.append(replace(base, fault="transient", size=0.20, lasts_s=30.0, phase=FAULT_PHASES[(k + seed + 2) % 4]))
                cases.append(replace(base, fault="ramp", size=0.30, phase=FAULT_PHASES[(k + seed + 3) % 4]))
    if not quick:
        cases.append(Case("dp8", "all", "transient", 0.10, "backward", lasts_s=600.0, seed=77))
        cases.append(Case(LONG_HEALTHY["layout"], "all", "none", lasts_s=LONG_HEALTHY["lasts_s"], seed=99))
        for seed in range(seeds):
            for layout in ("dp1024", "dp4096"):
                cases.append(Case(layout, "all", "none", seed=seed))
                cases.append(Case(layout, "all", "slow_rank", 0.05, FAULT_PHASES[seed % 4], seed=seed))
                cases.append(Case(layout, "all", "slow_rank", 0.20, FAULT_PHASES[(seed + 1) % 4], seed=seed))
                cases.append(Case(layout, "bias", "slow_node", 0.10, FAULT_PHASES[(seed + 2) % 4], seed=seed))
    return cases


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize(outcomes: list[Outcome]) -> dict:
    """The figures (module docstring), over all and per layout, noise and fault."""

    def figures(group: list[Outcome]) -> dict:
        faulty = [o for o in group if o.case.fault in RANK_FAULTS]
        at5 = [o for o in faulty if o.case.size >= 0.05]
        right = sum(o.right for o in group)
        wrong = sum(o.wrong for o in group)
        hours = sum(o.rank_hours for o in group)
        healthy_alarms = sum(o.episodes for o in group if o.case.fault == "none")
        detect = [o.detect_s for o in group if o.detect_s is not None and o.case.fault in RANK_FAULTS]
        sizes = [o.size_error for o in at5 if o.size_error is not None]
        return {
            "scenarios": len(group),
            "recall_at_5pct": _share(sum(o.detected for o in at5), len(at5)),
            "precision": _share(right, right + wrong),
            "false_alarms_per_1000_rank_hours": round(1000.0 * healthy_alarms / hours, 3) if hours else None,
            "rank_hours": round(hours, 1),
            "detect_s_p50": _round(percentile(detect, 50)),
            "detect_s_p90": _round(percentile(detect, 90)),
            "size_error_p90": _round(percentile(sizes, 90)),
        }

    doc = figures(outcomes)
    doc["recall_by_size"] = {
        f"{size:.0%}": _share(sum(o.detected for o in chosen), len(chosen))
        for size in SIZES
        if (chosen := [o for o in outcomes if o.case.fault == "slow_rank" and o.case.size == size])
    }
    for key in ("layout", "noise", "fault"):
        doc[f"by_{key}"] = {name: figures([o for o in outcomes if getattr(o.case, key) == name])
                            for name in dict.fromkeys(getattr(o.case, key) for o in outcomes)}  # fmt: skip
    if "slow_link" in doc["by_fault"]:  # (not in every selection of layouts)
        doc["by_fault"]["slow_link"]["recall"] = _share(*_counts([o for o in outcomes if o.case.fault == "slow_link"]))
    doc["missed"] = [_brief(o) for o in outcomes if o.case.fault in RANK_FAULTS and o.case.size >= 0.05 and not o.detected][:20]
    doc["wrong"] = [_brief(o) for o in outcomes if o.wrong][:20]
    return doc


def _counts(group: list[Outcome]) -> tuple[int, int]:
    return sum(o.detected for o in group), len(group)


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _brief(o: Outcome) -> str:
    c = o.case
    return f"{c.layout}/{c.noise}/{c.fault} {c.size:.0%} {c.phase} seed {c.seed}: culprit {o.culprits[:2]}, right {o.right}, wrong {o.wrong}"


def _work(args: tuple[Case, str]) -> Outcome:
    return run_case(*args)


def run(cases: list[Case], workers: int, progress: bool) -> list[Outcome]:
    with tempfile.TemporaryDirectory(prefix="ranktop-accuracy-") as directory:
        todo = [(c, directory) for c in sorted(cases, key=lambda c: -LAYOUTS[c.layout]["ranks"] * c.length_s)]
        if workers <= 1:
            results = map(_work, todo)
        else:
            pool = multiprocessing.get_context("fork").Pool(workers)
            results = pool.imap_unordered(_work, todo)
        outcomes = []
        for i, outcome in enumerate(results, 1):
            outcomes.append(outcome)
            if progress and (i % 50 == 0 or i == len(todo)):
                print(f"  {i}/{len(todo)} scenarios", file=sys.stderr, flush=True)
        if workers > 1:
            pool.close()
            pool.join()
    return outcomes


def table(doc: dict) -> str:
    """The figures as a table for people (docs/detection.md shows one)."""
    keys = ("scenarios", "recall_at_5pct", "precision", "false_alarms_per_1000_rank_hours", "detect_s_p50", "detect_s_p90", "size_error_p90")
    heads = ("", "scenarios", "recall>=5%", "precision", "FA/1k rank-h", "detect p50", "detect p90", "size err p90")
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]

    def row(name: str, fig: dict) -> str:
        cells = ["-" if fig.get(k) is None else (f"{fig[k]:g}" if isinstance(fig[k], float) else str(fig[k])) for k in keys]
        return f"| {name} | " + " | ".join(cells) + " |"

    lines.append(row("**all**", doc))
    for key in ("layout", "noise", "fault"):
        for name, fig in doc[f"by_{key}"].items():
            lines.append(row(f"{key} {name}", fig))
    lines.append("")
    lines.append("recall by slowdown size (one slow rank): " + ", ".join(f"{k} {v:g}" for k, v in doc["recall_by_size"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small layouts, two noises, one draw (under 2 minutes)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--seeds", type=int, default=None, help="draws of the matrix (default 3; --quick 1)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="processes (default: 2)")
    p.add_argument("--layouts", default=None, help="only these layouts, comma separated (" + ", ".join(LAYOUTS) + ")")
    p.add_argument("--outcomes", metavar="FILE", default=None, help="also write every scenario's outcome to FILE, one JSON object a line")
    args = p.parse_args(argv)
    cases = matrix(args.quick, args.seeds)
    if args.layouts:
        wanted = set(args.layouts.split(","))
        unknown = wanted - set(LAYOUTS)
        if unknown:
            p.error(f"unknown layout {sorted(unknown)[0]!r}: one of {', '.join(LAYOUTS)}")
        cases = [c for c in cases if c.layout in wanted]
    began = time.perf_counter()
    outcomes = run(cases, args.workers, progress=True)
    doc = summarize(outcomes)
    doc["wall_s"] = round(time.perf_counter() - began, 1)
    doc["workers"] = args.workers
    if args.outcomes:
        with open(args.outcomes, "w") as f:
            for o in outcomes:
                f.write(json.dumps({**asdict(o), "case": asdict(o.case)}) + "\n")
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(table(doc))
        print(f"\n{doc['scenarios']} scenarios in {doc['wall_s']:.0f} s ({args.workers} processes)")
        for line in doc["missed"]:
            print(f"missed: {line}")
        for line in doc["wrong"]:
            print(f"wrong: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
