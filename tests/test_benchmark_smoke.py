"""The overhead benchmark runs (its figures are for people, not assertions: see benchmarks/)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "benchmarks" / "probe_overhead.py"


@pytest.mark.slow
def test_the_overhead_benchmark_runs_and_reports_every_figure(rdv, tmp_path):
    out = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    for expected in ("tiny step", "tiny torch step", "demo model step", "explicit", "auto", "sender thread:", "targets"):
        assert expected in out.stdout
