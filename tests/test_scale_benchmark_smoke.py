"""The scale benchmark runs, tiny, and reports every figure (its figures are for people, not assertions)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "benchmarks" / "scale.py"
KEYS = {
    "ranks",
    "calls_per_step",
    "viewer_cpu_pct",
    "snapshot_ms_p50",
    "snapshot_ms_p95",
    "ingest_rank_steps_per_s",
    "latency_p95_s",
    "rss_mb",
    "dropped",
    "top_straggler",
    "injected_straggler",
}


@pytest.mark.slow
def test_the_scale_benchmark_runs_a_tiny_job_and_reports_every_figure(tmp_path):
    out = subprocess.run(
        [sys.executable, str(BENCH), "--ranks", "16", "--calls", "8", "--minutes", "0.1", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = json.loads(out.stdout)
    assert KEYS <= set(row)
    assert (row["ranks"], row["calls_per_step"], row["injected_straggler"]) == (16, 8, 11)
    assert row["ranks_seen"] == 16 and row["snapshots"] > 0 and row["ingest_rank_steps_per_s"] > 0
