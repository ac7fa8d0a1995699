"""The accuracy benchmark runs through the real engine and reports every figure (its rates are for people: see
benchmarks/accuracy.py and docs/detection.md; no test asserts them)."""

import json
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent.parent / "benchmarks" / "accuracy.py"
FIGURES = ("scenarios", "recall_at_5pct", "precision", "false_alarms_per_1000_rank_hours", "detect_s_p50", "detect_s_p90",
           "size_error_p90", "recall_by_size", "by_layout", "by_noise", "by_fault")  # fmt: skip


def test_the_quick_matrix_of_small_jobs_runs_and_reports_every_figure_per_family(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", "--layouts", "dp2,dp8", "--workers", "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    for key in FIGURES:
        assert key in doc, key
    assert doc["scenarios"] == sum(f["scenarios"] for f in doc["by_layout"].values()) > 20
    assert set(doc["by_layout"]) == {"dp2", "dp8"}
    assert {"none", "slow_rank", "slow_link", "mid_run", "transient", "ramp"} <= set(doc["by_fault"])
    # A rank half a step slow is named on the real engine's verdict, every time: the path from model to verdict works.
    assert doc["recall_by_size"]["50%"] == 1.0


def test_an_unknown_layout_is_one_line_and_exit_2(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH), "--layouts", "dp3"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "unknown layout 'dp3'" in out.stderr


def test_every_scenario_s_outcome_can_be_written_a_json_line_each(tmp_path):
    """To see which scenarios were missed and why (docs/detection.md), not only the rates."""
    target = tmp_path / "outcomes.jsonl"
    out = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", "--layouts", "dp2", "--workers", "1", "--outcomes", str(target)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(lines) == json.loads(out.stdout)["scenarios"]
    assert {"case", "culprits", "detected", "right", "wrong", "size_error"} <= set(lines[0])
    assert {o["case"]["fault"] for o in lines} >= {"none", "slow_rank"}


def test_a_fault_s_size_is_a_share_of_the_job_s_step_as_it_ran_before_the_fault():
    """"5% of a step" is 5% of the step the job's user sees: a pipeline whose last stage does 1.6 times the work
    steps slower than the model's compute per step, and its faults are sized on its own step, fixed at the onset."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        import accuracy as bench
    finally:
        sys.path.remove(str(BENCH.parent))
    from ranktop.demo.sim_model import Scenario

    case = bench.Case("dp_tp_pp", "gauss", "slow_rank", 0.05, "backward", onset_s=2.0, seed=3)
    s = Scenario(job="a", steps_per_s=bench.STEPS_PER_S, seed=case.seed, **bench.LAYOUTS[case.layout])
    model = bench.NoisyJob(s, case, 0.0)
    start, durations = 0.0, []
    for n in range(60):
        step = model.step(n, start)
        if start < case.onset_s:
            durations.append(step.duration)
        start += step.duration
    assert model.job_step_s > 1.3 * bench.STEP_S  # the pipeline steps at its heavy stage's pace
    assert abs(model.job_step_s - statistics.median(durations)) < 1e-12
    fixed = model.job_step_s
    model.step(60, start)  # more steps under the fault do not move it
    assert model.job_step_s == fixed
    (culprit,) = model.culprits
    _, added, _ = model._perturbed(61, start)[culprit]
    assert abs(added[bench.PHASES.index("backward")] - 0.05 * fixed) < 1e-12
