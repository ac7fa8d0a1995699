"""What the viewer costs at 64, 512 and 4,096 ranks (16,384 on request), measured side by side in one run.

For each job size and each number of collective calls per step, the simulator
(``ranktop.demo.simulate``: real relays, real wire) runs a job at 16 steps/s
with one injected straggler (the rank three quarters of the way up, 20 ms slow
in forward). Once every simulated node's relay is up (its rendezvous record
written), a *viewer process* watches it as the TUI does: a
``WatchSession`` whose snapshot is taken at a 2 Hz refresh (through the same
call the App makes), paced as the App's refresher paces it (a snapshot that
took T seconds is followed by at least 2T without one, so the receiver keeps
the interpreter two thirds of the time; and no more often than the job's
digests come, once a second from 2,048 nodes: watch/refresher.py ``period_s``).
The viewer process reports:

- its CPU use, as % of one core (user + system, receiver thread included; the
  benchmark's own bookkeeping is left out);
- how long a snapshot takes (p50, p95);
- event -> screen latency p95: from the end of a simulated step (its record's
  start plus its wall time) to the first snapshot that includes it;
- its RSS at the end (and at the start of the measurement, to see it is flat);
- messages dropped: step records that never arrived (gaps in a rank's step
  numbers) plus frames the viewer threw away;
- whether the injected straggler is the top row, and how soon it got there;
- how many of the job's ranks it saw (a note under the table when not all).

Ingest capacity (rank-steps/s on one core) is measured apart, in this
process: the frames the viewer would receive for a few seconds of the job
(the ranks' own messages, or from 16 nodes up the nodes' digests, as
watch/engine/receiver.py chooses), fed to a fresh aggregator, by CPU time.

16,384 ranks (``--ranks 16384``: 2,048 nodes of 8) fit on a machine whose
hard limit on open files (``ulimit -Hn``) is 20,000: the simulated ranks take 4
files a node in the simulator's process, and their relays run in processes of
their own (demo/sim_relays.py), 14 files a relay and 2 more per viewer, three
processes for 2,048; the viewer takes 6 a relay and raises its own soft limit
to fit them (watch/engine/receiver.py). Its 2,048 nodes send their digests once
a second, as the relays of a job that size do (the digest budget: wire/pacing.py
``digest_hz``; 4 a second up to 512 nodes), so its latency has up to a second
more in it than at 4,096 ranks. On 2 cores the simulator of 16,384 ranks may not keep up
with 16 steps/s beside the viewer: when it does not, it says how (schedule
skipped, late sends, messages dropped at the source) and the table's notes
repeat it, since the viewer's latency and drops then include the simulator's.

Targets (issue 12), at 4,096 ranks x 32 calls: viewer CPU <= 25% of a core,
snapshot p95 <= 50 ms, ingest >= 200k rank-steps/s, latency p95 <= 1 s, RSS
<= 300 MB and flat, the injected straggler on top within 10 s. These are
figures for people; no test asserts them.

    python benchmarks/scale.py                          # 64, 512, 4096 ranks x 8, 32 calls, 10 minutes each
    python benchmarks/scale.py --ranks 64,512 --minutes 1
    python benchmarks/scale.py --ranks 16384 --calls 32 --minutes 1
    python benchmarks/scale.py --json
"""

from __future__ import annotations

import argparse
import array
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS_PER_S = 16.0
REFRESH_HZ = 2.0
SLOW_MS = 20.0
SLOW_PHASE = "forward"
#: The viewer waits this long for every rank before it starts measuring.
WARMUP_S = 15.0
#: Messages per go in the ingest measurement: about what one poll of 512 relays finds (watch/engine/receiver.py).
INGEST_BATCH = 40
#: The simulator's relays must all be up within this (2,048 take about 10 s on 2 cores).
RELAYS_UP_S = 120.0
KEYS = (
    "ranks", "calls_per_step", "viewer_cpu_pct", "snapshot_ms_p50", "snapshot_ms_p95", "ingest_rank_steps_per_s",
    "latency_p95_s", "rss_mb", "dropped", "top_straggler", "injected_straggler",
)  # fmt: skip


def straggler_of(ranks: int) -> int:
    return max(0, ranks * 3 // 4 - 1)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Histogram:
    """Counts of values in millisecond bins up to a minute (longer ones in the last bin): a percentile to the
    millisecond in a fixed 480 KB. The viewer process measures a latency per rank per snapshot (about 6,500 a
    second at 4,096 ranks); kept as a list of floats they would be this process's RSS growing 13 MB a minute,
    counted as the viewer's."""

    BIN_S = 0.001
    BINS = 60_000

    def __init__(self) -> None:
        self.counts = array.array("q", bytes(8 * (self.BINS + 1)))
        self.total = 0

    def add(self, value: float) -> None:
        self.counts[min(self.BINS, max(0, int(value / self.BIN_S)))] += 1
        self.total += 1

    def percentile(self, q: float) -> float | None:
        """The middle of the bin the ``q``-th percentile falls in (None: no values)."""
        if not self.total:
            return None
        rank, seen = q / 100 * (self.total - 1), 0
        for i, count in enumerate(self.counts):
            seen += count
            if seen > rank:
                return (i + 0.5) * self.BIN_S
        return self.BINS * self.BIN_S


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the viewer process ----------------------------------------------------------------


def viewer(job: str, directory: str, seconds: float, ranks: int, straggler: int) -> dict:
    """Watch ``job`` as the TUI does for ``seconds`` after warm-up; the figures as a dict."""
    from ranktop.watch.heap import settle_for_viewing
    from ranktop.watch.refresher import BUSY_RATIO, period_s
    from ranktop.watch.session import WatchSession, resolve

    settle_for_viewing()  # as the ranktop commands do
    session = WatchSession(resolve([job], directory, allow_pending=True))
    take = session.snapshot  # what the App's refresher calls
    started = time.monotonic()
    snapshot_ms: list[float] = []
    snapshot_cpu_ms: list[float] = []  # the same on the CPU clock: what a busy machine does not inflate
    latencies = Histogram()  # (a list of every one would grow this process by 13 MB a minute at 4,096 ranks)
    first_top: float | None = None
    base: dict[int, tuple[int, int]] = {}  # rank -> (step, steps seen) when the measurement began
    last: dict[int, int] = {}
    bookkeeping = 0.0
    measuring_since = None
    cpu_start = rss_start = 0.0
    snap = None
    with session:
        # Paced as the App's refresher (watch/refresher.py Refresher.run) paces them: the next a period after this
        # one began (never a burst to catch up), and at least BUSY_RATIO times a snapshot's time after it ended.
        next_tick = time.monotonic() + period_s(REFRESH_HZ, session.changes_every_s())
        while True:
            pause = next_tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            next_tick = max(next_tick + period_s(REFRESH_HZ, session.changes_every_s()), time.monotonic())
            t0, c0 = time.perf_counter(), time.thread_time()
            snap = take()
            took, took_cpu = time.perf_counter() - t0, time.thread_time() - c0
            next_tick = max(next_tick, time.monotonic() + BUSY_RATIO * took)
            now_wall, now = time.time(), time.monotonic()
            b0 = time.thread_time()
            if snap.stragglers and snap.stragglers[0] == straggler and first_top is None:
                first_top = now - started
            if measuring_since is None:
                if len(snap.ranks) >= ranks or now - started > WARMUP_S:  # every rank heard, or as many as came
                    measuring_since, cpu_start, rss_start = now, cpu_s(), rss_mb()
                    t = snap.ranks.table  # the columns: reading rows would build every rank's (watch/model/rank_table.py)
                    base = dict(zip(t.rank.tolist(), zip(t.step.tolist(), t.steps_seen.tolist())))
                    last = dict(zip(t.rank.tolist(), t.step.tolist()))
            else:
                snapshot_ms.append(took * 1000)
                snapshot_cpu_ms.append(took_cpu * 1000)
                t = snap.ranks.table
                for rank, step, end, step_s, seen in zip(t.rank.tolist(), t.step.tolist(), t.last_step_end.tolist(),
                                                         t.step_s.tolist(), t.steps_seen.tolist()):  # fmt: skip
                    before = last.get(rank)
                    if before is not None and step > before and end == end:  # (NaN: no step yet)
                        step_s = step_s if step_s == step_s and step_s else 1.0 / STEPS_PER_S
                        # the oldest step first shown now ended (step - before - 1) steps before the newest
                        latencies.add(now_wall - end + (step - before - 1) * step_s)
                    last[rank] = step
                    if rank not in base:
                        base[rank] = (step, seen)
                if now - measuring_since >= seconds:
                    break
            bookkeeping += time.thread_time() - b0
        elapsed = time.monotonic() - measuring_since
        cpu = cpu_s() - cpu_start - bookkeeping
    lost = 0
    t = snap.ranks.table
    for rank, step, seen in zip(t.rank.tolist(), t.step.tolist(), t.steps_seen.tolist()):
        if rank in base:
            step0, seen0 = base[rank]
            lost += max(0, (step - step0) - (seen - seen0))
    return {
        "viewer_cpu_pct": round(100 * cpu / elapsed, 1),
        "snapshot_ms_p50": _round(percentile(snapshot_ms, 50)),
        "snapshot_ms_p95": _round(percentile(snapshot_ms, 95)),
        "snapshot_cpu_ms_p95": _round(percentile(snapshot_cpu_ms, 95)),
        "latency_p95_s": _round(latencies.percentile(95), 3),
        "rss_mb": round(rss_mb(), 1),
        "rss_mb_start": round(rss_start, 1),
        "dropped": lost + snap.dropped_messages,
        "top_straggler": snap.stragglers[0] if snap.stragglers else None,
        "top_after_s": _round(first_top, 1),
        "ranks_seen": len(snap.ranks),
        "silent_at_end": snap.silent,
        "snapshots": len(snapshot_ms),
        "measured_s": round(elapsed, 1),
    }


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


# -- ingest capacity -------------------------------------------------------------------


def ingest_capacity(ranks: int, calls: int, seconds: float = 4.0) -> float:
    """Rank-steps per CPU second that one aggregator ingests (decode included), from the simulator's frames
    (every rank's hello first, as a viewer that attaches meets them), with the collector set as the viewer's."""
    from ranktop.demo.simulate import Scenario, Simulator
    from ranktop.watch.aggregator import Aggregator
    from ranktop.watch.heap import settle_for_viewing
    from ranktop.watch.engine.receiver import DIGESTS_FROM_NODES

    settle_for_viewing()

    scenario = Scenario(
        job="ingest", ranks=ranks, nodes=max(1, ranks // 8), calls_per_step=calls, steps_per_s=STEPS_PER_S,
        slow_rank=straggler_of(ranks), slow_ms=SLOW_MS, slow_phase=SLOW_PHASE,
    )  # fmt: skip
    digests = scenario.nodes >= DIGESTS_FROM_NODES  # what the viewer takes at this size (watch/engine/receiver.py)
    with tempfile.TemporaryDirectory() as folder:
        sim = Simulator(scenario, folder)
        frames = [f for _, tick in sim.replay(seconds, digests=digests) for f in tick]
    aggregator = Aggregator("ingest")
    start = time.process_time()
    for i in range(0, len(frames), INGEST_BATCH):  # in goes, as the receiver hands them over (watch/engine/receiver.py)
        aggregator.ingest_batch([(message, None) for message in frames[i : i + INGEST_BATCH]])
    spent = time.process_time() - start
    return ranks * sim.steps_done / spent


# -- one configuration -----------------------------------------------------------------


def run_config(ranks: int, calls: int, minutes: float) -> dict:
    straggler = straggler_of(ranks)
    job = f"scale-{ranks}-{calls}"
    seconds = minutes * 60
    with tempfile.TemporaryDirectory(prefix="ranktop-scale-") as folder:
        sim = subprocess.Popen(
            [
                sys.executable, "-m", "ranktop.demo.simulate", "--ranks", str(ranks), "--job", job, "--dir", folder,
                "--calls-per-step", str(calls), "--steps-per-s", str(STEPS_PER_S), "--slow-rank", str(straggler),
                "--slow-ms", str(SLOW_MS), "--slow-phase", SLOW_PHASE, "--duration", str(seconds + WARMUP_S * 4 + 30),
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            _wait_for_relays(sim, job, folder, -(-ranks // 8))
            out = subprocess.run(
                [sys.executable, __file__, "--viewer", job, "--dir", folder, "--seconds", str(seconds), "--ranks", str(ranks),
                 "--straggler", str(straggler)],
                capture_output=True, text=True, timeout=seconds + WARMUP_S * 4 + 120,
            )  # fmt: skip
        finally:
            sim.terminate()
            try:
                _, sim_err = sim.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                sim.kill()
                _, sim_err = sim.communicate()
        if out.returncode != 0:
            raise SystemExit(f"the viewer failed at {ranks} ranks x {calls} calls:\n{out.stderr[-2000:]}")
        figures = json.loads(out.stdout.strip().splitlines()[-1])
    behind = [line for line in sim_err.splitlines() if "could not keep up" in line]
    figures.update(ranks=ranks, calls_per_step=calls, injected_straggler=straggler, simulator_behind=behind[0] if behind else None)
    figures["ingest_rank_steps_per_s"] = round(ingest_capacity(ranks, calls))
    return figures


def _wait_for_relays(sim: subprocess.Popen, job: str, folder: str, nodes: int) -> None:
    """Until every simulated node's record is written: the viewer's warm-up then measures the viewer, not the simulator's start."""
    from ranktop.transport import rendezvous

    deadline = time.monotonic() + RELAYS_UP_S
    while len(rendezvous.read_nodes(job, folder)) < nodes:
        if sim.poll() is not None:
            raise SystemExit(f"the simulator of {job} ended before its relays were up:\n{sim.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the simulator of {job} did not bring up its {nodes} relays in {RELAYS_UP_S:g} s")
        time.sleep(0.5)


def table(rows: list[dict]) -> str:
    head = (
        "ranks",
        "calls",
        "viewer CPU",
        "snapshot p50/p95 (CPU p95)",
        "ingest",
        "latency p95",
        "RSS (start)",
        "dropped",
        "top row",
        "on top after",
    )
    lines = [head]
    for r in rows:
        lines.append(
            (
                str(r["ranks"]),
                str(r["calls_per_step"]),
                f"{r['viewer_cpu_pct']}%",
                f"{r['snapshot_ms_p50']} / {r['snapshot_ms_p95']} ms ({r['snapshot_cpu_ms_p95']})",
                f"{r['ingest_rank_steps_per_s'] / 1000:.0f}k rank-steps/s",
                f"{r['latency_p95_s']} s",
                f"{r['rss_mb']:.0f} MB ({r['rss_mb_start']:.0f})",
                str(r["dropped"]),
                f"{r['top_straggler']} "
                f"({'injected' if r['top_straggler'] == r['injected_straggler'] else 'expected ' + str(r['injected_straggler'])})",
                "-" if r["top_after_s"] is None else f"{r['top_after_s']} s",
            )  # fmt: skip
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    for r in rows:
        if r.get("ranks_seen", r["ranks"]) < r["ranks"]:
            out.append(f"note ({r['ranks']} x {r['calls_per_step']}): the viewer saw {r['ranks_seen']} of the {r['ranks']} ranks")
        if r.get("simulator_behind"):
            out.append(f"note ({r['ranks']} x {r['calls_per_step']}): {r['simulator_behind']}")
    return "\n".join(out)


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The viewer's cost at 64 to 16,384 simulated ranks (see the module's docstring).")
    p.add_argument("--ranks", type=_ints, default=[64, 512, 4096], help="job sizes, comma-separated (default 64,512,4096)")
    p.add_argument("--calls", type=_ints, default=[8, 32], help="collective calls per step, comma-separated (default 8,32)")
    p.add_argument("--minutes", type=float, default=10.0, help="minutes measured per configuration (default 10)")
    p.add_argument("--json", action="store_true", help="print a JSON list of objects instead of the table")
    p.add_argument("--viewer", metavar="JOB", help=argparse.SUPPRESS)  # the viewer process (internal)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    p.add_argument("--straggler", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.viewer:
        print(json.dumps(viewer(args.viewer, args.dir, args.seconds, args.ranks[0], args.straggler)))
        return 0
    if not args.minutes > 0:
        p.error("--minutes must be positive")
    rows = []
    for ranks in args.ranks:
        for calls in args.calls:
            print(f"measuring {ranks} ranks x {calls} calls per step for {args.minutes:g} min ...", file=sys.stderr)
            rows.append(run_config(ranks, calls, args.minutes))
    if args.json:
        print(json.dumps([{k: r[k] for k in KEYS} | {k: v for k, v in r.items() if k not in KEYS} for r in rows], indent=2))
    else:
        print(f"ranktop scale benchmark: {STEPS_PER_S:g} steps/s, {REFRESH_HZ:g} Hz refresh, {args.minutes:g} min per row, "
              f"{os.cpu_count()} CPUs ({_cpu_name()}), load average {os.getloadavg()[0]:.1f} at the end")  # fmt: skip
        print(table(rows))
        print("targets at 4096 x 32: viewer CPU <= 25%, snapshot p95 <= 50 ms, ingest >= 200k rank-steps/s, "
              "latency p95 <= 1 s, RSS <= 300 MB and flat, injected straggler on top within 10 s")  # fmt: skip
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
