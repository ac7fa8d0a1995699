"""The accuracy benchmark runs through the real engine, reports every figure, and its held-out quick subset holds
the floors issue 45 sets in CI (benchmarks/accuracy.py and docs/detection.md: its full rates are for people).

The floors, over the held-out ``--quick`` subset (seeds 1000-1001, every family, small layouts): recall for faults
of 10% or more at least 0.95, precision at least 0.98, over every family but the ones in ``KNOWN_BLIND``; and each
family at those floors itself (so no family's recall is 0; a healthy family: no false alarm), each blind one asserted
blind with a strict xfail, so that the day the detector sees a family its test fails until the family leaves the
list. The quick subset is deterministic (its seeds are fixed): a change of its figures is the detector's.
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "benchmarks" / "accuracy.py"
FIGURES = ("scenarios", "recall_at_5pct", "precision", "false_alarms_per_1000_rank_hours", "detect_s_p50", "detect_s_p90",
           "size_error_p90", "recall_by_size", "by_layout", "by_noise", "by_fault",
           "recall_5pct_only", "detect_steps_p90", "by_family", "held_out", "small_job_rank_hours")  # fmt: skip
FAMILY_FIGURES = ("recall", "precision", "size_error_p90", "detect_s_p90", "detect_steps_p90")

#: Families today's detector does not see, or not well enough, in the held-out quick subset (docs/detection.md:
#: "What ranktop cannot see yet"). Blind (recall 0, or a healthy job's events named as faults): the answer is a kind
#: it has no verdict for (rotating; job_slower is told only when the median rank's own phases grew, not seen enough
#: yet), a rank slow 1 step in 30 (1 in 3 and 1 in 10 are seen since issue 46 from what the job pays it at its
#: collectives, watch/analysis/intermittent.py; 1 in 30 has too few slow steps in a scenario's 12 s), an episode
#: shorter than half a window
#: (checkpoints, evaluations and recompilations are seen: the simulator times them as the probe does,
#: demo/sim_model.py Step.pauses, and the viewer tells them as what they are; the slow link is seen since issue 47:
#: its relays' probes are simulated). Seen, but under the floor (recall for 10% or more
#: below 0.95): two stragglers in one phase (the smaller one), slow step rates with heavy-tailed inputs. (Half the job
#: slow on two nodes of 16 is seen since issue 46: watch/analysis/node_groups.py.)
KNOWN_BLIND = {
    "intermittent_30", "rotating", "job_slower_phase", "job_slower_all",
    "short_3s",
    "two_same", "rate_0.5", "rate_2",
}  # fmt: skip
RECALL_AT_10PCT_FLOOR = 0.95
PRECISION_FLOOR = 0.98


def _bench(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def _load_bench():
    sys.path.insert(0, str(BENCH.parent))
    try:
        import accuracy
    finally:
        sys.path.remove(str(BENCH.parent))
    return accuracy


@pytest.fixture(scope="module")
def held_out(tmp_path_factory) -> dict:
    """The held-out quick subset's figures (run once for every test below)."""
    folder = tmp_path_factory.mktemp("accuracy")
    out = _bench("--quick", "--json", "--workers", "2", cwd=folder)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _seen(fig: dict) -> bool:
    """The family's own floors: recall for 10% or more at the floor (a family of smaller faults: above 0), precision
    at the floor; a healthy family: nobody named."""
    if fig["faults_at_10pct"]:
        recall_ok = fig["recall_at_10pct"] >= RECALL_AT_10PCT_FLOOR
    elif fig["recall"] is not None:
        recall_ok = fig["recall"] > 0
    else:
        recall_ok = fig["wrong"] == 0
    return recall_ok and (fig["precision"] is None or fig["precision"] >= PRECISION_FLOOR)


@pytest.mark.slow
def test_the_held_out_quick_subset_reports_every_figure_for_every_family(held_out):
    bench = _load_bench()
    for key in FIGURES:
        assert key in held_out, key
    assert held_out["held_out"] is True and held_out["seeds"] == [1000, 1001]
    assert set(held_out["by_family"]) == set(bench.FAMILIES)
    for name, fig in held_out["by_family"].items():
        assert set(FAMILY_FIGURES) <= set(fig), name
    assert held_out["scenarios"] == sum(f["scenarios"] for f in held_out["by_family"].values())
    assert set(bench.HELD_OUT_NOISES) <= set(held_out["by_noise"])
    assert KNOWN_BLIND <= set(bench.FAMILIES)


@pytest.mark.slow
def test_the_held_out_floors_hold_over_every_family_the_detector_sees(held_out):
    """Recall for faults of 10% or more >= 0.95 and precision >= 0.98, pooled over the families not known blind."""
    seen = {name: fig for name, fig in held_out["by_family"].items() if name not in KNOWN_BLIND}
    found = sum(f["found_at_10pct"] for f in seen.values())
    faults = sum(f["faults_at_10pct"] for f in seen.values())
    right = sum(f["right"] for f in seen.values())
    wrong = sum(f["wrong"] for f in seen.values())
    brief = {name: (f["recall"], f["found_at_10pct"], f["faults_at_10pct"], f["right"], f["wrong"]) for name, f in seen.items()}
    assert faults > 20 and found / faults >= RECALL_AT_10PCT_FLOOR, brief
    assert right > 0 and right / (right + wrong) >= PRECISION_FLOOR, brief


def _family_params():
    bench = _load_bench()
    return [pytest.param(name, marks=[pytest.mark.xfail(strict=True, reason="known blind")] if name in KNOWN_BLIND else [])
            for name in bench.FAMILIES]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("family", _family_params())
def test_the_detector_sees_each_family(held_out, family):
    """Each family meets its own floors (recall for 10% or more >= 0.95, so never 0; precision >= 0.98; a healthy
    family: no false alarm); a family in KNOWN_BLIND must not (strict xfail): seen, it leaves the list."""
    fig = held_out["by_family"][family]
    assert _seen(fig), fig


def test_an_unknown_layout_or_family_is_one_line_and_exit_2(tmp_path):
    out = _bench("--layouts", "dp3", cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and "unknown layout 'dp3'" in out.stderr
    out = _bench("--families", "slow_rank,nope", cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and "unknown family 'nope'" in out.stderr


def test_every_scenario_s_outcome_can_be_written_a_json_line_each(tmp_path):
    """To see which scenarios were missed and why (docs/detection.md), not only the rates."""
    target = tmp_path / "outcomes.jsonl"
    out = _bench("--quick", "--json", "--seeds", "1", "--layouts", "dp2,dp8", "--families", "slow_rank,healthy,stall",
                 "--workers", "1", "--outcomes", str(target), cwd=tmp_path, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(lines) == doc["scenarios"] == 2  # (the quick subset's first healthy job runs on 16 ranks)
    assert {"case", "culprits", "detected", "right", "wrong", "size_errors", "detect_steps", "kinds"} <= set(lines[0])
    assert {o["case"]["family"] for o in lines} == {"slow_rank", "stall"}
    # A rank that stops is named as the one the hung job waits for, on the real engine's verdict.
    (stall,) = [o for o in lines if o["case"]["family"] == "stall"]
    assert stall["detected"] and stall["culprits"] and stall["detect_s"] <= 4.0, stall


def test_the_held_out_part_is_the_one_declared_and_tuning_never_sees_it():
    """docs/detection.md declares the held-out seeds and noises; the benchmark's default part is that, its
    ``--tuning`` part shares none of it."""
    bench = _load_bench()
    doc = (BENCH.parent.parent / "docs" / "detection.md").read_text()
    assert "Held-out seeds: 1000-1099" in doc.replace("**", "") and "`node_correlated`" in doc and "`heavy_input`" in doc
    assert list(bench.HELD_OUT_SEEDS) == list(range(1000, 1100)) and set(bench.HELD_OUT_NOISES) == {"node_correlated", "heavy_input"}
    held, tuning = bench.matrix(), bench.matrix(tuning=True)
    assert {c.seed for c in held} <= set(bench.HELD_OUT_SEEDS) and len({c.seed for c in held}) == 100
    assert not {c.seed for c in tuning} & set(bench.HELD_OUT_SEEDS)
    assert not {c.noise for c in tuning} & set(bench.HELD_OUT_NOISES)
    assert set(bench.HELD_OUT_NOISES) <= {c.noise for c in held}
    assert {c.family for c in held} == set(bench.FAMILIES)


def test_a_fault_s_size_is_the_share_of_the_job_s_healthy_step_the_job_loses():
    """ "5% of a step" is 5% of the step the job's user sees, fixed at the onset: a pipeline whose last stage does 1.6
    times the work steps slower than the model's compute per step; a rank slow 1 step in 10 is slowed ten times its
    share on those steps; a throttled rank's factor is what costs the job its share."""
    bench = _load_bench()
    from ranktop.demo.sim_model import Scenario

    def run(case, steps=60):
        s = Scenario(job="a", steps_per_s=case.rate, seed=case.seed, **bench.LAYOUTS[case.layout])
        model = bench.NoisyJob(s, case, 0.0)
        start, durations = 0.0, []
        for n in range(steps):
            step = model.step(n, start)
            if start < case.onset_s:
                durations.append(step.duration)
            start += step.duration
        return model, durations, start

    case = bench.Case("dp_tp_pp", "gauss", "slow", 0.05, "backward", onset_s=2.0, seed=3, family="slow_rank")
    model, durations, start = run(case)
    assert model.job_step_s > 1.3 * bench.STEP_S  # the pipeline steps at its heavy stage's pace
    assert abs(model.job_step_s - statistics.median(durations)) < 1e-12
    fixed = model.job_step_s
    model.step(60, start)  # more steps under the fault do not move it
    assert model.job_step_s == fixed
    (culprit,) = model.culprits
    assert model.costs[culprit] == pytest.approx(0.05 * fixed)
    _, added, _ = model._perturbed(61, start)[culprit]
    assert abs(added[bench.PHASES.index("backward")] - 0.05 * fixed) < 1e-12

    case = bench.Case("dp8", "gauss", "intermittent", 0.10, "forward", onset_s=2.0, seed=4, family="intermittent_10", every=10)
    model, _, start = run(case)
    (culprit,) = model.culprits
    added = [model._perturbed(n, start).get(culprit, (1.0, [0.0] * 5, 1.0))[1][1] for n in range(100, 130)]
    assert sum(a > 0 for a in added) == 3 and max(added) == pytest.approx(10 * 0.10 * model.job_step_s)
    assert model.costs[culprit] == pytest.approx(0.10 * model.job_step_s)

    case = bench.Case("dp8", "gauss", "multiplicative", 0.20, onset_s=2.0, seed=5, family="multiplicative")
    model, _, _ = run(case)
    (culprit,) = model.culprits
    assert model._factors[culprit] == pytest.approx(1.0 + 0.20 * model.job_step_s / model.own_s(culprit))
    assert 1.1 < model._factors[culprit] < 1.5


def test_a_slow_link_slows_every_rank_s_collectives_and_the_links_its_node_s_relay_probes():
    """The slow_link family: one node's network fallen to a few MB/s. Every rank waits the longer transfer (a ring is
    as fast as its slowest link: nobody's own time grows), by what costs the job the fault's size; the relays' links
    touching that node read its rate once their last probes all crossed it slowed, the others the probes' ceiling."""
    bench = _load_bench()
    from ranktop.demo.sim_model import PROBED_BPS, Scenario
    from ranktop.watch.analysis.slow_links import RESOLVED_BPS

    case = bench.Case("dp64", "gauss", "slow_link", 0.20, onset_s=2.0, seed=7, family="slow_link")
    s = Scenario(job="a", steps_per_s=case.rate, seed=case.seed, **bench.LAYOUTS["dp64"])
    model = bench.NoisyJob(s, case, 0.0)
    assert len(model.culprits) == s.per_node and {s.host_of(r) for r in model.culprits} == {model.slow_host}
    start = 0.0
    for n in range(60):
        start += model.step(n, start).duration
    touched = model._perturbed(61, start)
    slower = 1.0 + 0.20 * model.job_step_s / sum(model.transfer)
    assert sorted(touched) == list(range(s.ranks))
    assert all(scale == 1.0 and not any(added) and net == pytest.approx(slower) for scale, added, net in touched.values())
    index = int(model.slow_host[3:])
    before, after = model.link_rates(index, 1.0), model.link_rates(index, start + 30.0)
    assert min(link.rate for link in before) > 0.9 * PROBED_BPS
    peers = [link for link in after if link.peer != model.slow_host]
    assert peers and all(link.rate < RESOLVED_BPS and link.rate == pytest.approx(model.link_bps, rel=0.06) for link in peers)
    assert all(link.rate > 0.9 * PROBED_BPS for i in range(s.nodes) if i != index for link in model.link_rates(i, start + 30.0)
               if model.slow_host not in (link.peer, f"sim{i:04d}"))  # fmt: skip


def test_the_noises_the_detector_was_never_tuned_on_are_what_they_say():
    """drift: a rank's slowness wanders slowly; node_correlated: a node's ranks move together; wide_bias: some ranks
    lastingly beyond the detector's 2% allowance; heavy_input: a long tail of long inputs."""
    bench = _load_bench()
    from ranktop.demo.sim_model import Scenario

    def model_of(noise, layout="dp64"):
        case = bench.Case(layout, noise, "none", seed=11, family="healthy")
        return bench.NoisyJob(Scenario(job="a", seed=11, **bench.LAYOUTS[layout]), case, 0.0)

    drift = model_of("drift")
    series = []
    for n in range(1600):  # 100 s at 16 steps/s
        drift._perturbed(n, 10.0)
        series.append(drift.drift.copy())
    series = statistics.pstdev([float(x) for x in (s[0] for s in series)]), [s for s in series]
    lag = [float(a[0] * b[0]) for a, b in zip(series[1], series[1][16:])]  # one second apart: still alike
    assert 0.003 < series[0] < 0.04 and sum(lag) > 0
    node = model_of("node_correlated")
    scales = node._perturbed(0, 10.0)
    per = node.s.per_node
    assert scales[0][0] == scales[per - 1][0] != scales[per][0]
    wide = model_of("wide_bias")
    assert any(abs(b) > bench.BIAS for b in wide._biases())
    heavy = model_of("heavy_input", "dp8")
    lengths = [heavy._length() for _ in range(4000)]
    assert max(lengths) > 2.0 and 0.9 < statistics.median(lengths) < 1.1


@pytest.mark.slow
def test_the_live_row_runs_a_real_job_and_counts_it_as_the_simulated_ones(tmp_path, monkeypatch):
    """benchmarks/accuracy_live.py: a 4-rank torchrun/gloo job under ``ranktop launch``, one rank 10% of the job's step
    slower from 10 s in; its looks counted with the same Tally, its figures the same JSON as the simulated matrix."""
    monkeypatch.setenv("RANKTOP_DIR", str(tmp_path / "rdv"))
    target = tmp_path / "live.jsonl"
    out = subprocess.run([sys.executable, str(BENCH.parent / "accuracy_live.py"), "--jobs", "slow_rank-4-10", "--json",
                          "--outcomes", str(target)], capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    for key in FIGURES:
        assert key in doc, key
    assert doc["live"] is True and doc["scenarios"] == 1
    (line,) = [json.loads(line) for line in target.read_text().splitlines()]
    assert line["case"]["family"] == "slow_rank" and line["culprits"] == [2]
    assert line["detected"] and line["wrong"] == 0, line
    assert line["step_s"] and line["case"]["rate"] > 5  # the job's own step, measured by its ranks before the fault
    (said,) = doc["jobs"]
    assert said["cli_kind"] == "slow_rank" and said["cli_ranks"][:1] == [2], said  # what `ranktop watch --json` printed
