"""How often a PyTorch Lightning DDP job under ``ranktop launch`` shows both its ranks: N runs, one line each.

    python benchmarks/lightning_runs.py [RUNS]

Each run starts tests/jobs/lightning_ddp.py (``Trainer(devices=2, accelerator="cpu",
strategy="ddp")``) under ``ranktop launch``, waits until the viewer hears both ranks
train (at most 120 s), reads ``ranktop watch JOB --json``, counts the node's relay
processes and records, stops the job and checks that no relay is left. Lightning is
not a dependency of ranktop: ``pip install lightning`` first (it leaves torch alone).
Uses a rendezvous folder of its own under the temp directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ranktop.relay.claim import process_start
from ranktop.watch.session import WatchSession, resolve
from ranktop.transport import rendezvous

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the process-group helper is the tests'
from support import stop_group  # noqa: E402

RANKTOP = str(Path(sys.executable).parent / "ranktop")
SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "jobs" / "lightning_ddp.py"


def relay_pids(job: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if b"ranktop.relay.process" in argv and job.encode() in argv and process_start(int(entry.name)) is not None:
            found.append(int(entry.name))
    return found


def one_run(job: str, logs: Path) -> tuple[bool, str]:
    started = time.monotonic()
    with open(logs / f"{job}.log", "wb") as log:
        proc = subprocess.Popen(
            [RANKTOP, "launch", "--job", job, "--", sys.executable, str(SCRIPT), "--seconds", "60"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
        )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not rendezvous.read_nodes(job):
            time.sleep(0.2)
        if not rendezvous.read_nodes(job):
            return False, "no relay"
        with WatchSession(resolve([job])) as session:
            while time.monotonic() < deadline:
                rows = session.snapshot().ranks
                if len(rows) == 2 and all(r.steps_seen >= 5 and r.local_rank >= 0 for r in rows):
                    break
                time.sleep(0.2)
        out = subprocess.run([RANKTOP, "watch", job, "--json", "--duration", "3"], capture_output=True, text=True, timeout=60)
        doc = json.loads(out.stdout) if out.returncode == 0 else {"ranks": []}
        ranks = [(r["rank"], r["local_rank"], r["status"]) for r in doc["ranks"]]
        relays, records = len(relay_pids(job)), len(rendezvous.read_nodes(job))
        ok = [r[:2] for r in ranks] == [(0, 0), (1, 1)] and relays == records == 1
        return ok, f"ranks (rank, local rank, status) {ranks}, {relays} relay, {records} record, {time.monotonic() - started:.0f} s to see"
    finally:
        stop_group(proc, 20)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    logs = Path(tempfile.mkdtemp(prefix="ranktop-lightning-"))
    os.environ["RANKTOP_DIR"] = str(logs / "rdv")
    shown = 0
    for i in range(runs):
        job = f"lightning-{os.getpid()}-{i}"
        ok, text = one_run(job, logs)
        time.sleep(1.0)
        shown += ok
        print(f"run {i}: {'both ranks' if ok else 'NOT both ranks'}: {text}; relays left after the job: {len(relay_pids(job))}", flush=True)
    print(f"{shown} of {runs} runs showed both ranks through one relay (logs in {logs})")


if __name__ == "__main__":
    main()
