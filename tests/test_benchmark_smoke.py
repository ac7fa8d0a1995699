"""The overhead benchmark runs (its figures are for people, not assertions: see benchmarks/)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "benchmarks" / "probe_overhead.py"


@pytest.mark.slow
def test_the_overhead_benchmark_runs_and_reports_every_figure(rdv, tmp_path):
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--backend", "aot_eager"], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for expected in (
        "tiny step",
        "tiny torch step",
        "demo model step",
        "explicit",
        "auto",
        "sender thread:",
        "targets",
        "compiled (torch.compile, default",
        "fullgraph=True",
        "whole job",
        "ratio of medians",
    ):
        assert expected in out.stdout


@pytest.mark.slow
def test_the_whole_job_row_with_ranktop_on_cores_apart_finds_and_moves_ranktops_threads(rdv, tmp_path):
    # It exits non-zero if the launched job showed none of ranktop's threads to move.
    out = subprocess.run(
        [sys.executable, str(BENCH), "--job-only", "--cores-apart", "--quick", "--backend", "aot_eager"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ranktop's threads and relay moved to the others" in out.stdout and "cores of their own" in out.stdout


@pytest.mark.slow
def test_the_main_screen_benchmark_runs_and_prints_its_table(tmp_path):
    bench = Path(__file__).parent.parent / "benchmarks" / "main_screen.py"
    out = subprocess.run([sys.executable, str(bench), "--quick"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "CPU ms per refresh" in out.stdout and "80x24" in out.stdout
    assert out.stdout.splitlines()[-1].split()[0] == "4096"


def test_the_gpu_check_says_in_one_line_that_there_is_no_cuda_and_exits_0(tmp_path):
    bench = Path(__file__).parent.parent / "benchmarks" / "gpu_check.py"
    out = subprocess.run([sys.executable, str(bench)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no CUDA device here")


def test_the_memory_snapshot_cost_benchmark_runs_and_says_whether_its_target_is_met(tmp_path):
    bench = Path(__file__).parent.parent / "benchmarks" / "memory_snapshot_cost.py"
    out = subprocess.run([sys.executable, str(bench), "--events", "500", "--repeat", "1"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "pickle.dump (before)" in out.stdout and "memory_dump.dump" in out.stdout
    assert out.stdout.splitlines()[-1].startswith("target: training stall under 50 ms")


def test_the_drift_benchmark_runs_and_counts_episodes(tmp_path):
    """benchmarks/drift.py feeds the viewer steps messages as the probe's sender builds them: it broke once when the
    sender's API moved and nothing ran it."""
    bench = Path(__file__).parent.parent / "benchmarks" / "drift.py"
    out = subprocess.run([sys.executable, str(bench), "--amp", "0.04", "--minutes", "1"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    row = out.stdout.splitlines()[-1].split()
    assert row[0] == "±4%" and row[-2:] == ["of", "120"], out.stdout
