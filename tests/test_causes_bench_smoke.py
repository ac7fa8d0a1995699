"""benchmarks/causes.py's plumbing: its scoring on outcomes written out, and one real job end to end (its figures
are for people, not assertions: see benchmarks/)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import causes as bench  # noqa: E402


def test_a_verdict_is_scored_by_the_cause_it_names_for_the_slow_rank_unknown_or_missed():
    def doc(kind, ranks, cause=None):
        return {"verdict": {"kind": kind, "ranks": ranks, "text": "...", "cause": cause}, "ranks": []}

    assert bench.scored(doc("slow_rank", [1], {"kind": "gc_pause", "explains": 0.9}), 1)["named"] == "gc_pause"
    assert bench.scored(doc("slow_rank", [1], {"kind": "unknown", "explains": 0.0}), 1)["named"] == "unknown"
    assert bench.scored(doc("slow_rank", [1]), 1)["named"] == "unknown"  # no cause named
    assert bench.scored(doc("slow_rank", [0], {"kind": "gc_pause"}), 1)["named"] == "missed"  # another rank
    assert bench.scored(doc("healthy", []), 1)["named"] == "missed"


def test_precision_counts_the_causes_named_recall_the_measurable_jobs_and_unknown_the_unmeasurable():
    outcomes = [{"truth": t, "named": n} for t, n in (
        ("gc_pause", "gc_pause"), ("gc_pause", "cpu_contention"), ("host_bound", "unknown"), ("data_loader", "missed"),
        ("unknown", "unknown"), ("unknown", "host_bound"))]  # fmt: skip
    got = bench.figures(outcomes)
    assert got["jobs"] == 6 and got["missed"] == 1
    assert got["precision"] == round(1 / 3, 3)  # 3 named (gc_pause, cpu_contention, host_bound), 1 right
    assert got["recall"] == 0.25  # 4 measurable jobs, 1 named right
    assert got["unknown_when_unmeasurable"] == 0.5
    assert got["by_kind"]["gc_pause"] == {"jobs": 2, "right": 1, "named": {"gc_pause": 1, "cpu_contention": 1}}
    assert "gc_pause" in bench.matrix(outcomes).splitlines()[0]


@pytest.mark.slow
def test_the_causes_benchmark_runs_one_real_job_and_prints_its_figures_as_json(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH / "causes.py"), "--jobs", "6", "--only", "loader", "--json"],
                         capture_output=True, text=True, timeout=400, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert set(got) >= {"jobs", "precision", "recall", "unknown_when_unmeasurable", "by_kind"}, got
    assert got["jobs"] == 1 and set(got["by_kind"]) == {"data_loader"}, (got, out.stderr[-2000:])
