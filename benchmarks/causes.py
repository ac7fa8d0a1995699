"""How often the cause ranktop names is right: real torchrun jobs (gloo, 2 to 3 ranks, a few seconds each) where
one rank is slowed by a known cause (benchmarks/causes_rank.py), read as a user reads them (``ranktop watch JOB
--json``), the verdict's cause scored against the truth.

Each job's truth is a cause kind, or ``unknown`` where nothing the probe measures explains it (a plain sleep; 1.6x
its peers' real tokens padded to the same compute, slowed by a sleep). A job is scored by its verdict: the cause
it names when it names the slow rank ("because" or "partly because"), ``unknown`` when it says "cause unknown" or
names no cause, ``missed`` when the slow rank is not the verdict's. Printed: a confusion matrix (truth x named),
and the figures:

- ``precision``: of the causes named (any kind but unknown), the share that is the truth;
- ``recall``: of the jobs whose truth is a kind with evidence, the share named with it;
- ``unknown_when_unmeasurable``: of the jobs with no measurable cause, the share called unknown (or none named);
- ``by_kind``: each truth's jobs, named right, and what was named instead.

    python benchmarks/causes.py --quick           # one job a kind (10 jobs), about 4 minutes on 2 cores
    python benchmarks/causes.py --jobs 70         # 7 rounds of the 10 kinds, worlds 2 and 3 in turn (about 18 minutes)
    python benchmarks/causes.py --quick --json    # {jobs, precision, recall, unknown_when_unmeasurable, by_kind, ...}

Not a test: the machine's own load moves the figures (every rank waits alike for a CPU on a busy machine, docs/
detection.md); tests/test_causes_bench_smoke.py checks its plumbing on one job.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the job helpers are shared with the tests

from support import RANKTOP, TORCHRUN4, run_cli, start_job, stop_group  # noqa: E402

SCRIPT = HERE / "causes_rank.py"
#: Seconds the viewer listens once every rank trains: the evidence's rates are over 10 s (probe/evidence.py).
LISTEN_S = 10.0
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Job:
    cause: str  # causes_rank.py --cause
    truth: str  # the cause kind a right verdict names, or "unknown"
    world: int = 2
    pin: bool = False  # each rank pinned to one CPU
    busy: int = 0  # busy processes pinned to the slow rank's CPU
    args: tuple[str, ...] = ()  # more of causes_rank.py's arguments

    @property
    def name(self) -> str:
        return f"cause-{self.cause}-{self.world}-{os.getpid()}"


#: One job a kind, in the order they run.
KINDS = (
    Job("gc", "gc_pause"), Job("busy", "cpu_contention", pin=True, args=("--compute-ms", "12")), Job("threads", "oversubscribed", pin=True),
    Job("imbalance", "input_imbalance"), Job("padded", UNKNOWN), Job("loader", "data_loader"),
    Job("recompile", "recompile"), Job("python", "host_bound"), Job("sleep", UNKNOWN), Job("faults", "page_faults"),
)  # fmt: skip
MEASURABLE = tuple(sorted({j.truth for j in KINDS} - {UNKNOWN}))


def jobs(count: int) -> list[Job]:
    """``count`` jobs: the kinds in turn, worlds 2 and 3 by round (a pinned job keeps 2: the machine's CPUs)."""
    out = []
    for k in range(count):
        job = KINDS[k % len(KINDS)]
        world = 3 if (k // len(KINDS)) % 2 and not job.pin else 2
        out.append(Job(job.cause, job.truth, world, job.pin, job.busy, job.args))
    return out


def run(job: Job, folder: Path, slow_rank: int = 1) -> dict:
    """The job's ``watch --json`` document once it has trained ``LISTEN_S`` seconds, and what it was scored."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    torchrun = [*TORCHRUN4[:-1], f"--nproc_per_node={job.world}"]
    extra = ["--pin"] if job.pin else []
    command = [RANKTOP, "launch", "--job", job.name, "--", *torchrun, str(SCRIPT), "--cause", job.cause,
               "--slow-rank", str(slow_rank), "--tag", job.name, *extra, *job.args]  # fmt: skip
    cpu = slow_rank % (os.cpu_count() or 1)
    busy = [subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"],
                             start_new_session=True) for _ in range(job.busy)]  # fmt: skip
    proc = None
    try:
        proc = start_job(command, job.name, job.world, folder, env)
        out = run_cli("watch", job.name, "--json", "--duration", f"{LISTEN_S:g}", timeout=120)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        doc = json.loads(out.stdout)
    finally:
        if proc is not None:
            stop_group(proc, 30, group=False)
        for spinner in busy:
            stop_group(spinner, 5)
        _end_leftovers(job.name)
    return {"job": job.name, "cause": job.cause, "truth": job.truth, "world": job.world, **scored(doc, slow_rank)}


def _end_leftovers(tag: str) -> None:
    """End this job's ranks (and their DataLoader workers) that outlived it, by their pids: a job killed while
    starting can leave its ranks running, orphaned, and they would weigh on every later job's CPUs."""
    import signal

    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"--tag" in args and tag.encode() in args and any(a.endswith(b"causes_rank.py") for a in args):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


def scored(doc: dict, slow_rank: int) -> dict:
    """What the verdict of ``doc`` named for the slow rank: a cause kind, ``unknown``, or ``missed``."""
    verdict = doc["verdict"]
    if verdict["kind"] != "slow_rank" or not verdict["ranks"] or verdict["ranks"][0] != slow_rank:
        return {"named": "missed", "verdict": verdict["text"]}
    cause = verdict.get("cause")
    named = UNKNOWN if cause is None or cause["kind"] == UNKNOWN else cause["kind"]
    row = next((r for r in doc["ranks"] if r["rank"] == slow_rank), {})
    return {"named": named, "explains": None if cause is None else cause.get("explains"), "verdict": verdict["text"],
            "causes": [(c["kind"], round(c.get("explains", 0.0), 2)) for c in row.get("causes", [])]}  # fmt: skip


def figures(outcomes: list[dict]) -> dict:
    named = [o for o in outcomes if o["named"] not in (UNKNOWN, "missed")]
    measurable = [o for o in outcomes if o["truth"] != UNKNOWN]
    unmeasurable = [o for o in outcomes if o["truth"] == UNKNOWN]
    by_kind: dict[str, dict] = {}
    for o in outcomes:
        k = by_kind.setdefault(o["truth"], {"jobs": 0, "right": 0, "named": collections.Counter()})
        k["jobs"] += 1
        k["right"] += o["named"] == o["truth"]
        k["named"][o["named"]] += 1
    rate = lambda hits, of: round(hits / len(of), 3) if of else None  # noqa: E731
    return {
        "jobs": len(outcomes),
        "precision": rate(sum(o["named"] == o["truth"] for o in named), named),
        "recall": rate(sum(o["named"] == o["truth"] for o in measurable), measurable),
        "unknown_when_unmeasurable": rate(sum(o["named"] == UNKNOWN for o in unmeasurable), unmeasurable),
        "missed": sum(o["named"] == "missed" for o in outcomes),
        "by_kind": {k: {**v, "named": dict(v["named"])} for k, v in sorted(by_kind.items())},
    }


def matrix(outcomes: list[dict]) -> str:
    """Truth (rows) x named (columns), counts."""
    truths = sorted({o["truth"] for o in outcomes})
    columns = sorted({o["named"] for o in outcomes} | set(truths))
    counts = collections.Counter((o["truth"], o["named"]) for o in outcomes)
    width = max(len(c) for c in columns + truths) + 1
    lines = ["truth \\ named".ljust(width) + "".join(c[:14].rjust(15) for c in columns)]
    for t in truths:
        lines.append(t.ljust(width) + "".join(str(counts[(t, c)] or ".").rjust(15) for c in columns))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=len(KINDS) * 7, help="how many jobs (the kinds in turn)")
    parser.add_argument("--quick", action="store_true", help="one job a kind")
    parser.add_argument("--only", default="", help="comma-separated causes_rank.py causes to run (for a look)")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.add_argument("--outcomes", default="", help="write each job's outcome to this file (JSON lines)")
    args = parser.parse_args()
    todo = jobs(len(KINDS) if args.quick else args.jobs)
    if args.only:
        todo = [j for j in todo if j.cause in args.only.split(",")]
    outcomes = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ranktop-causes-") as folder:
        for job in todo:
            try:
                outcome = run(job, Path(folder))
            except Exception as exc:  # a job that did not start is reported, not scored
                print(f"{job.name}: failed ({exc.__class__.__name__}: {str(exc)[-300:]})", file=sys.stderr)
                continue
            outcomes.append(outcome)
            print(f"{job.cause:>10} w{job.world}: truth {job.truth:<16} named {outcome['named']:<16} "
                  f"{outcome.get('causes') or outcome['verdict'][:160]}", file=sys.stderr, flush=True)  # fmt: skip
            if args.outcomes:
                with open(args.outcomes, "a") as f:
                    f.write(json.dumps(outcome) + "\n")
    result = figures(outcomes)
    result["seconds"] = round(time.monotonic() - started)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(matrix(outcomes))
        print(f"\n{result['jobs']} jobs in {result['seconds']} s: precision {result['precision']}, recall "
              f"{result['recall']}, unknown when unmeasurable {result['unknown_when_unmeasurable']}, "
              f"missed {result['missed']}")  # fmt: skip


if __name__ == "__main__":
    main()
