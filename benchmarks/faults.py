"""What faults around a live job cost it, and what ranktop says about them: one row per scenario.

The demo job (demo/train.py under torchrun, DDP over gloo, ``--nproc`` ranks)
runs once; the scenarios are done to it one after the other, each after a
quiet stretch as long as the fault (at most 10 s), while a witness that no
fault touches (tests/faults.py ``StepLog``) keeps every step record the ranks
send. For each scenario:

- **steps lost**: step numbers, from the quiet stretch to a few seconds after
  the fault, that no record of any rank accounts for, plus records the probes
  themselves dropped (their ``dropped`` counter). 0 means every step the job
  ran reached a viewer;
- **step rate**: the job's steps/s by its ranks' clocks during the fault,
  against the quiet stretch before it, as a change in %. The first row, with
  no fault, is the noise of this machine;
- **shown**: what a real ``ranktop`` process said (a viewer's JSON, the
  capture command's lines).

Scenarios (issue 13 part 4): a viewer killed; a viewer frozen (SIGSTOP) 30 s;
a viewer far too slow (let run 5% of the time) 30 s; a flood of forged,
replayed, expired and malformed commands on the relay's control port
(10,000/s for 10 s); a trace capture onto a full disk (every file of the
ranks limited to 256 KB) and the next capture; the node's relay process
killed (SIGKILL; the ranks start another); local rank 0 frozen 10 s (the
job stops with it: its rate during the fault is 0 by design, the row shows
that no step is lost and what the viewer says). ``--quick`` shortens every
fault to a few seconds. Figures for people; no test asserts them.

    python benchmarks/faults.py            # about 4 minutes on 2 cores
    python benchmarks/faults.py --quick    # about 1.5 minutes
    python benchmarks/faults.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the fault helpers are shared with the tests

from faults import (  # noqa: E402
    DemoJob,
    Throttle,
    Window,
    expired_commands,
    file_size_limit,
    flood,
    forged_commands,
    frozen,
    kill_relay,
    malformed_commands,
    relay_pid,
    valid_command,
)
from support import RANKTOP, run_cli  # noqa: E402

from ranktop.watch.engine.receiver import connect_url  # noqa: E402
from ranktop.watch.statuses import CONNECTED, LOST, SILENT
from ranktop.transport import rendezvous

#: After a fault, how long the job runs before the steps are counted (records still on the way).
SETTLE_S = 2.0
#: A frozen or slow viewer needs this long to start and attach before its fault.
ATTACH_S = 4.0


@dataclass
class Row:
    scenario: str
    fault_s: float
    steps_in_fault: int  # steps the job ran while the fault lasted (rank 0)
    steps_lost: int
    rate_before: float | None  # steps/s
    rate_during: float | None
    shown: str

    @property
    def change_pct(self) -> float | None:
        if not self.rate_before or self.rate_during is None:
            return None
        return 100.0 * (self.rate_during - self.rate_before) / self.rate_before


class Bench:
    def __init__(self, job: DemoJob, seconds: dict[str, float]):
        self.job = job
        self.seconds = seconds
        self.rows: list[Row] = []
        self.ranks = list(range(job.nproc))

    def quiet(self, seconds: float) -> float:
        self.job.wait_steps(3)
        began = time.time()
        time.sleep(min(seconds, 10.0))
        return began

    def dropped(self) -> int:
        return sum(r.dropped for r in self.job.snapshot().ranks)

    def record(self, name: str, window: Window, dropped_before: int, shown: str) -> Row:
        log = self.job.log
        lost = sum(len(v) for v in window.steps_lost(log, self.ranks).values()) + self.dropped() - dropped_before
        before, during = window.rates(log)
        row = Row(name, window.end - window.start, len(log.numbers(0, window.start, window.end)), lost, before, during, shown)
        self.rows.append(row)
        print(f"  {name}: {fmt_row(row)}", file=sys.stderr, flush=True)
        return row

    def viewer(self, duration: float) -> subprocess.Popen:
        return subprocess.Popen(
            [RANKTOP, "watch", self.job.job, "--json", "--duration", f"{duration:g}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    # -- the scenarios ----------------------------------------------------------

    def no_fault(self) -> None:
        d = self.seconds["noise"]
        dropped = self.dropped()
        before = self.quiet(d)
        start = time.time()
        time.sleep(d)
        end = time.time()
        self.record("none (noise)", Window(before, start, end, end + SETTLE_S), dropped, "-")

    def viewer_killed(self) -> None:
        d = self.seconds["killed"]
        v = self.viewer(3600)
        time.sleep(ATTACH_S)
        dropped = self.dropped()
        before = self.quiet(d)
        start = time.time()
        v.send_signal(signal.SIGKILL)
        v.wait()
        time.sleep(d)
        end = time.time()
        time.sleep(SETTLE_S)
        out = run_cli("watch", self.job.job, "--json", "--duration", "2")
        doc = json.loads(out.stdout)
        shown = f"a new viewer: {diagnosis(doc)}, {len(doc['ranks'])} ranks"
        self.record("viewer killed", Window(before, start, end, time.time()), dropped, shown)

    def viewer_stopped(self, name: str, key: str, fault) -> None:
        d = self.seconds[key]
        v = self.viewer(ATTACH_S + min(d, 10.0) + d + 6.0)  # attach, the quiet stretch, the fault, then catch up
        try:
            time.sleep(ATTACH_S)
            dropped = self.dropped()
            before = self.quiet(d)
            start = time.time()
            with fault(v.pid):
                time.sleep(d)
            end = time.time()
            out, err = v.communicate(timeout=60)
        finally:
            if v.poll() is None:
                v.kill()
        after = time.time()
        try:
            doc = json.loads(out)
        except ValueError:
            shown = f"the viewer failed: {err.strip()[-200:]}"
        else:
            lag = max(self.job.log.step_at(r["rank"], after - 1.0) - r["step"] for r in doc["ranks"])
            missed = sum(r["missed"] for r in doc["ranks"])
            shown = f"caught up ({max(lag, 0)} steps behind at exit), {missed} records missed & counted, {diagnosis(doc)}"
        self.record(name, Window(before, start, end, after), dropped, shown)

    def flood(self) -> None:
        d = self.seconds["flood"]
        job = self.job.job
        secret = rendezvous.read_secret(job)
        node = rendezvous.read_nodes(job)[0]
        genuine_id, genuine = valid_command(secret, job)
        rejected_before = self.rejected()
        dropped = self.dropped()
        before = self.quiet(d)
        start = time.time()
        result = flood(
            connect_url(node.control, node.host),
            {
                "genuine": [genuine],
                "replayed": [genuine] * 50,
                "forged": forged_commands(job, 50),
                "expired": expired_commands(secret, job, 50),
                "malformed": malformed_commands() * 10,
            },
            rate=10_000,
            seconds=d,
            secret=secret,
        )  # past the encryption, as a viewer with the key
        end = time.time()
        time.sleep(SETTLE_S)
        after = time.time()
        counted = {
            rank: {k: v - rejected_before.get(rank, {}).get(k, 0) for k, v in reasons.items()} for rank, reasons in self.rejected().items()
        }
        obeyed = {r.rank for r in self.job.snapshot().replies if r.id == genuine_id}
        others = [r for r in self.job.snapshot().replies if r.id != genuine_id]
        per_rank = min(sum(c.values()) for c in counted.values()) if counted else 0
        sent_bad = result.total - 1
        shown = (
            f"{result.total:,} sent at {result.rate:,.0f}/s; each rank counted >= {per_rank:,} rejected "
            f"({per_rank / sent_bad:.0%}) {fmt_reasons(counted[0]) if 0 in counted else ''}; "
            f"obeyed: the genuine one on {len(obeyed)} ranks, {len(others)} others"
        )
        self.record(f"command flood {result.rate / 1000:.0f}k/s", Window(before, start, end, after), dropped, shown)

    def full_disk(self) -> None:
        dropped = self.dropped()
        before = self.quiet(5)
        start = time.time()
        with file_size_limit(list(self.job.pids().values()), 256 << 10):
            out = run_cli("capture", self.job.job, "--timeout", "60", timeout=90)
        end = time.time()
        again = run_cli("capture", self.job.job, "--timeout", "60", timeout=90)
        after = time.time()
        failed = [line for line in out.stdout.splitlines() if ": failed: " in line]
        done = [line for line in again.stdout.splitlines() if ": done: " in line]
        folder = failed[0].split("could not write the trace in ")[-1].split(":")[0] if failed else ""
        left = len(list(Path(folder).iterdir())) if folder and Path(folder).is_dir() else "?"
        reason = failed[0].split("writing failed: ")[-1].split(": ", 1)[-1] if failed else "no failure line"
        shown = (
            f"{len(failed)}/{len(self.ranks)} ranks failed ('{reason}'), {left} files left; "
            f"next capture done on {len(done)}/{len(self.ranks)}"
        )
        self.record("capture, disk full", Window(before, start, end, after), dropped, shown)

    def relay_killed(self) -> None:
        """SIGKILL the node's relay process; the ranks start another. Steps lost counts the job's steps,
        not the records sent while no relay ran (they had nowhere to go): from step numbers."""
        dropped = self.dropped()
        before = self.quiet(5)
        killed = relay_pid(self.job.job)
        seen: list[tuple[float, set, set]] = []
        start = time.time()
        kill_relay(self.job.job)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            snap = self.job.snapshot()
            seen.append((time.time() - start, {e.state for e in snap.endpoints}, {r.status for r in snap.ranks}))
            if relay_pid(self.job.job) != killed and seen[-1][1] == {CONNECTED} and SILENT not in seen[-1][2]:
                break
            time.sleep(0.1)
        end = time.time()
        self.job.wait_steps(10)
        after = time.time()
        lost_at = next((t for t, relays, _ in seen if LOST in relays), None)
        stalled = any("stalled" in ranks for _, _, ranks in seen)
        shown = (
            f"node lost after {lost_at:.1f}s (ranks silent{', once stalled' if stalled else ''}), back after {seen[-1][0]:.1f}s"
            if lost_at is not None
            else f"the node was never shown lost; back after {seen[-1][0]:.1f}s"
        )
        log = self.job.log
        undelivered = sum(len(log.missing(r, before, after)) for r in self.ranks)
        ran = (log.step_at(0, end) or 0) - (log.step_at(0, start) or 0)  # by step numbers: records of some never came
        # during: from the quiet stretch to after the outage, by step numbers (the steps of the outage have no records)
        row = Row(
            "relay killed",
            end - start,
            ran,
            self.dropped() - dropped,
            log.rate(before, start),
            log.rate(before, after),
            shown + f"; {undelivered} records had no relay to go to",
        )
        self.rows.append(row)
        print(f"  relay killed: {fmt_row(row)}", file=sys.stderr, flush=True)

    def rank0_frozen(self) -> None:
        """Freeze local rank 0 while a viewer watches; it prints while rank 0 is still frozen."""
        d = self.seconds["rank0"]
        v = self.viewer(ATTACH_S + 5 + d)
        try:
            time.sleep(ATTACH_S)
            dropped = self.dropped()
            before = self.quiet(5)
            rank0 = self.job.pids()[0]
            start = time.time()
            with frozen(rank0):
                out, err = v.communicate(timeout=60)
                end = time.time()
        finally:
            if v.poll() is None:
                v.kill()
        self.job.wait_steps(10)
        try:
            doc = json.loads(out)
            shown = f"{diagnosis(doc)}; rank 0 {doc['ranks'][0]['status']}, waiting_for {doc['waiting_for']}"
        except (ValueError, IndexError):
            shown = f"the viewer failed: {err.strip()[-200:]}"
        self.record(f"local rank 0 frozen {d:g}s", Window(before, start, end, time.time()), dropped, shown)

    def rejected(self) -> dict[int, dict[str, int]]:
        return {r.rank: dict(r.rejected) for r in self.job.snapshot().ranks}


def diagnosis(doc: dict) -> str:
    statuses = sorted({r["status"] for r in doc["ranks"]})
    return f"diagnosis: {doc['diagnosis'] or 'none'} (ranks {'/'.join(statuses)})"


def fmt_reasons(reasons: dict[str, int]) -> str:
    return "[" + ", ".join(f"{k} {v:,}" for k, v in sorted(reasons.items())) + "]"


def fmt_rate(rate: float | None) -> str:
    return f"{rate:6.1f}" if rate is not None else "     -"


def fmt_row(row: Row) -> str:
    change = f"{row.change_pct:+6.1f}%" if row.change_pct is not None else "      -"
    return f"{row.steps_in_fault:>6} {row.steps_lost:>5} {fmt_rate(row.rate_before)} {fmt_rate(row.rate_during)} {change}  {row.shown}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="faults of a few seconds (a smoke run)")
    p.add_argument("--json", action="store_true", help="print a JSON list of rows instead of the table")
    p.add_argument("--nproc", type=int, default=2, help="ranks of the demo job (default 2)")
    args = p.parse_args(argv)
    seconds = (
        dict(noise=4, killed=4, frozen=4, slow=4, flood=3, rank0=6)
        if args.quick
        else dict(noise=10, killed=10, frozen=30, slow=30, flood=10, rank0=10)
    )

    with tempfile.TemporaryDirectory(prefix="ranktop-faults-") as tmp:
        os.environ["RANKTOP_DIR"] = str(Path(tmp) / "rdv")
        os.environ.pop("RANKTOP_SECRET", None)
        job = DemoJob("faults-bench", args.nproc, Path(tmp), "--log-every", "1000000")
        print(f"starting the demo job ({args.nproc} ranks)...", file=sys.stderr, flush=True)
        job.start()
        try:
            bench = Bench(job, seconds)
            bench.no_fault()
            bench.viewer_killed()
            bench.viewer_stopped(f"viewer frozen {seconds['frozen']:g}s", "frozen", frozen)
            bench.viewer_stopped(f"viewer at 5% CPU {seconds['slow']:g}s", "slow", lambda pid: Throttle(pid, share=0.05))
            bench.flood()
            bench.full_disk()
            bench.relay_killed()
            bench.rank0_frozen()  # last: the job stops while rank 0 is frozen, by design
        finally:
            job.stop()

    if args.json:
        print(json.dumps([asdict(r) | {"change_pct": r.change_pct} for r in bench.rows], indent=2))
        return 0
    print(f"{args.nproc}-rank demo job, DDP over gloo on CPU; steps/s by the ranks' clocks, before vs during each fault")
    print(f"{'scenario':<24} {'steps':>6} {'lost':>5} {'before':>6} {'during':>6} {'change':>7}  shown")
    for row in bench.rows:
        print(f"{row.scenario:<24} {fmt_row(row)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
