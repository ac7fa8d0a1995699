"""The accuracy benchmark's live row: real torchrun jobs (gloo, 2 to 8 ranks, own work of sleeps or real compute)
under ``ranktop launch``, a fault each, their verdicts counted as benchmarks/accuracy.py counts the simulated ones.

Each job (benchmarks/accuracy_live_rank.py) runs one family the CPU can make: a slow rank (5 to 50% of the job's
step, in a phase), two stragglers, a rank slow one step in 3 or 10, a throttled rank (every phase x), a short episode,
a rank that stops (the job hangs), the job slower (every rank, one phase), a different rank slow each step, a
checkpoint on rank 0, an evaluation on every rank, a recompilation pause on one rank, and healthy jobs. A viewer
attached as ``ranktop watch`` attaches (watch/session.py: the same engine and verdict ``ranktop watch --json``
prints) looks every half second from when every rank trains until the fault has run its course; at the end one
``ranktop watch JOB --json`` reads the verdict a user would, and says whether it agrees with the last look.
Sizes are the share of the job's healthy step the job loses: the ranks measure their step before the fault and add
that share of it (rank 0 says so in its log: ``ONSET``), and the told size of each flagged culprit is scored against it.

    python benchmarks/accuracy_live.py            # 26 jobs, about 25 minutes on 2 cores
    python benchmarks/accuracy_live.py --quick    # 5 of them, about 5 minutes
    python benchmarks/accuracy_live.py --json [--outcomes FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # the job helpers are shared with the tests

import accuracy as bench  # noqa: E402
from support import RANKTOP, start_job, stop_group  # noqa: E402

from ranktop.watch.model.verdict import verdict  # noqa: E402
from ranktop.watch.session import WatchSession, resolve  # noqa: E402

SCRIPT = HERE / "accuracy_live_rank.py"
#: A fault starts this long after the ranks' first step; the job is watched this long after it (a healthy one: in all).
ONSET_S, AFTER_S, HEALTHY_S = 10.0, 14.0, 30.0
LOOK_EVERY_S = 0.5
for world in (2, 4, 8):
    bench.LAYOUTS.setdefault(f"gloo{world}", dict(ranks=world, nodes=1))


@dataclass(frozen=True)
class Job:
    family: str  # a family of benchmarks/accuracy.py
    world: int
    fault: str  # accuracy_live_rank.py --fault
    size: float = 0.0
    phase: str = "forward"
    culprits: tuple[int, ...] = ()
    every: int = 1
    lasts_s: float = 0.0
    event_s: float = 3.0
    compute: bool = False

    @property
    def name(self) -> str:
        return f"live-{self.family}-{self.world}-{int(self.size * 100)}{'-c' if self.compute else ''}"

    def case(self) -> bench.Case:
        fault = {"slow": "slow", "two": "slow", "intermittent": "intermittent", "multiplicative": "multiplicative",
                 "stall": "stall", "job_slower": "job_slower_phase", "rotating": "rotating", "checkpoint": "checkpoint",
                 "eval": "eval", "recompile": "recompile", "none": "none"}[self.fault]  # fmt: skip
        extra = ((round(self.size * 0.6, 3), "optimizer" if self.phase != "optimizer" else "data"),) if self.fault == "two" else ()
        return bench.Case(f"gloo{self.world}", "live", fault, self.size or (1.0 if self.fault == "stall" else 0.0), self.phase,
                          onset_s=ONSET_S,
                          lasts_s=self.lasts_s or (self.event_s if self.fault in ("checkpoint", "eval", "recompile") else None),
                          seed=0, family=self.family, rate=0.0, every=self.every, extra=extra)  # fmt: skip


JOBS = (
    Job("healthy", 2, "none"),
    Job("healthy", 4, "none"),
    Job("healthy", 8, "none"),
    Job("healthy", 4, "none", compute=True),
    Job("slow_rank", 2, "slow", 0.05, "forward", (1,)),
    Job("slow_rank", 4, "slow", 0.10, "backward", (2,)),
    Job("slow_rank", 4, "slow", 0.20, "data", (3,), compute=True),
    Job("slow_rank", 8, "slow", 0.20, "optimizer", (5,)),
    Job("slow_rank", 4, "slow", 0.50, "forward", (1,)),
    Job("slow_rank", 8, "slow", 0.05, "backward", (6,), compute=True),
    Job("two_diff", 4, "two", 0.30, "forward", (1, 3)),
    Job("two_diff", 8, "two", 0.20, "backward", (2, 7)),
    Job("intermittent_3", 4, "intermittent", 0.20, "forward", (2,), every=3),
    Job("intermittent_10", 4, "intermittent", 0.20, "backward", (1,), every=10),
    Job("multiplicative", 4, "multiplicative", 0.20, culprits=(3,)),
    Job("multiplicative", 2, "multiplicative", 0.30, culprits=(1,), compute=True),
    Job("short_5s", 4, "slow", 0.20, "forward", (2,), lasts_s=5.0),
    Job("short_10s", 4, "slow", 0.20, "backward", (1,), lasts_s=10.0),
    Job("stall", 2, "stall", culprits=(1,)),
    Job("stall", 4, "stall", culprits=(2,)),
    Job("job_slower_phase", 4, "job_slower", 0.20, "forward"),
    Job("rotating", 8, "rotating", 0.20, "forward"),
    Job("checkpoint", 4, "checkpoint", culprits=(0,), event_s=4.0),
    Job("eval", 4, "eval", event_s=6.0),
    Job("recompile", 4, "recompile", culprits=(1,), event_s=3.0),
    Job("recompile", 2, "recompile", culprits=(1,), event_s=1.5),
)
QUICK = ("healthy-2", "slow_rank-4-10", "stall-2", "checkpoint-4", "two_diff-4")


def run_job(job: Job, folder: Path) -> tuple[bench.Outcome, dict]:
    """One real job, watched; its outcome and what ``ranktop watch --json`` said at the end."""
    case = job.case()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={job.world}"]
    args = ["--fault", job.fault, "--culprits", ",".join(map(str, job.culprits)), "--size", str(job.size), "--phase", job.phase,
            "--every", str(job.every), "--onset-s", str(ONSET_S), "--lasts-s", str(job.lasts_s), "--event-s", str(job.event_s)]  # fmt: skip
    if job.compute:
        args.append("--compute")
    command = [RANKTOP, "launch", "--job", job.name, "--", *torchrun, str(SCRIPT), *args]
    began = time.perf_counter()
    proc = start_job(command, job.name, job.world, folder, env)
    log = folder / f"{job.name}.log"
    try:
        with WatchSession(resolve([job.name])) as session:
            t0 = time.time()  # every rank trains (start_job waited): about its first steps
            length = (
                HEALTHY_S
                if case.fault == "none"
                else ONSET_S
                + (job.lasts_s or 0.0)
                + AFTER_S
                + (2 * bench.LINGER_S if job.lasts_s or case.healthy else 0.0)
                + (15.0 + job.event_s if case.fault == "checkpoint" else 0.0)
            )
            tally = bench.Tally(case, list(job.culprits), set(), 0.0, 0.0)
            step_s, rate = None, None
            while time.time() - t0 < length:
                time.sleep(LOOK_EVERY_S)
                onset, step_s, begun, events = _said(log)
                snap = session.snapshot()
                v = verdict(snap)
                now = time.time()
                start = onset or (begun[0] if begun else None)
                if start is not None:
                    tally.start_at = start - t0
                median = snap.median_step()
                if median and start is None:
                    rate = 1.0 / median  # the job's step rate before its fault
                active, ended = _active(case, job, onset, begun, events, now)
                costs = {r: job.size * step_s * (0.6 if i else 1.0) for i, r in enumerate(job.culprits)} if step_s else {}
                tally.look(v, now - t0, active, None if ended is None else ended - t0, lambda: bench._told_sizes(v, snap, costs))  # noqa: B023 (called at once)
            watched = time.time() - t0
        cli = subprocess.run([RANKTOP, "watch", job.name, "--json", "--duration", "5"], capture_output=True, text=True, timeout=90)
        said = json.loads(cli.stdout)["verdict"] if cli.returncode == 0 else {"kind": None, "error": cli.stderr[-300:]}
    finally:
        stop_group(proc, 20, group=False)
    tally.case = case = replace(case, rate=round(rate or 0.0, 1))  # the job's own step rate, as it ran
    out = tally.done(job.world, watched, step_s)
    out.case = case
    if out.detect_s is not None:
        out.detect_steps = out.detect_s * case.rate
    out.wall_s = time.perf_counter() - began
    return out, said


def _said(log: Path) -> tuple[float | None, float | None, list[float], list[tuple[float, float]]]:
    """What rank 0 printed: the fault's onset and the job's step then; when each healthy event began, and ended."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None, None, [], []
    found = re.search(r"ONSET ([\d.]+) ([\d.e-]+)", text)
    onset, step_s = (float(found.group(1)), float(found.group(2))) if found else (None, None)
    begun = [float(a) for a in re.findall(r"BEGIN ([\d.]+)", text)]
    events = [(float(a), float(b)) for a, b in re.findall(r"EVENT ([\d.]+) ([\d.]+)", text)]
    return onset, step_s, begun, events


def _active(
    case: bench.Case, job: Job, onset: float | None, begun: list[float], events: list[tuple[float, float]], now: float
) -> tuple[bool, float | None]:
    """Whether the fault (or a healthy event) is on now, and when it ended (None: it lasts, or has not yet)."""
    if case.fault == "none":
        return False, None
    if case.healthy:
        on = len(begun) > len(events) or any(a <= now - LOOK_EVERY_S < b for a, b in events)
        planned = 2 if case.fault == "checkpoint" else 1
        return on, events[-1][1] if len(events) == planned else None
    if onset is None:
        return False, None
    if job.lasts_s:
        return onset <= now - LOOK_EVERY_S < onset + job.lasts_s, onset + job.lasts_s
    return now - LOOK_EVERY_S >= onset, None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="five jobs (about 5 minutes)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--jobs", default=None, help="only the jobs whose name contains one of these, comma separated")
    p.add_argument("--outcomes", metavar="FILE", default=None, help="also write every job's outcome to FILE, one JSON object a line")
    args = p.parse_args(argv)
    if shutil.which("ranktop", path=str(Path(sys.executable).parent)) is None:
        p.error("the installed ranktop command is not next to this interpreter: run it with the venv's python")
    jobs = list(JOBS)
    wanted = QUICK if args.quick else (args.jobs.split(",") if args.jobs else None)
    if wanted:
        jobs = [j for j in jobs if any(w in j.name for w in wanted)]
        jobs = list({j.name: j for j in jobs}.values())
    outcomes, said = [], []
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ranktop-live-") as folder:
        os.environ["RANKTOP_DIR"] = str(Path(folder) / "rdv")
        for i, job in enumerate(jobs, 1):
            out, cli = run_job(job, Path(folder))
            outcomes.append(out)
            said.append({"job": job.name, "cli_kind": cli.get("kind"), "cli_ranks": cli.get("ranks"),
                         "most_said": max(out.kinds, key=out.kinds.get) if out.kinds else None})  # fmt: skip
            print(f"  {i}/{len(jobs)} {job.name}: detected {out.detected} right {out.right} wrong {out.wrong}"
                  f" (watch --json: {cli.get('kind')} {cli.get('ranks')})", file=sys.stderr, flush=True)  # fmt: skip
    doc = bench.summarize(outcomes, held_out=True)
    doc["live"] = True
    doc["jobs"] = said
    doc["wall_s"] = round(time.perf_counter() - began, 1)
    if args.outcomes:
        with open(args.outcomes, "w") as f:
            for o in outcomes:
                f.write(json.dumps({**asdict(o), "case": asdict(o.case)}) + "\n")
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(bench.table(doc))
        print(f"\n{doc['scenarios']} live jobs in {doc['wall_s']:.0f} s")
        for line in doc["missed"] + [f"wrong: {w}" for w in doc["wrong"]]:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
