"""benchmarks/gpu_check.py without a GPU: it imports, its verdicts and its tally are right, and its multi-rank
checks run on the CPU (gloo, a sleep on the host, host-clock events in place of CUDA's), so that what a GPU
session runs has run before."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


@pytest.fixture
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # a fresh tally each time
    return module


def test_a_skipped_check_says_skip_and_the_run_ends_with_passed_n_of_m_k_skipped(gpu_check, capsys):
    """docs/gpu.md said "passed every check" of a run where two were skipped: a skip is counted as one."""
    gpu_check.row("side-stream wait (ms)", "9.7", "9.7", "PASS: events around work.wait()")
    gpu_check.skip("NCCL waits", "needs 2 GPUs")
    gpu_check.row("phase forward (ms, GPU)", "1.0", "1.0", "profiler's kernels")  # figures only: no verdict
    gpu_check.row("DDP finalize wait (ms)", "none", "~0", "FAIL: 0 ddp_allreduce records")
    out = capsys.readouterr().out
    assert "skipped" in out and "SKIP: needs 2 GPUs" in out
    assert gpu_check.tally_line() == "passed 1 of 3, 1 skipped, 1 failed"
    assert gpu_check.tally_line({"PASS": 12, "FAIL": 0, "SKIP": 2}) == "passed 12 of 14, 2 skipped"


def test_a_pytorch_2_run_without_device_times_fails(gpu_check):
    counters = {"graph_breaks": 0, "unique_graphs": 1, "calls_captured": 5, "recompiles": 0}
    without = dict(counters, params=[1.0])

    def result(device_times):
        steps = [{"n": n, **({"g": {"w": 0.01}} if n < device_times else {})} for n in range(6)]
        return {"pattern": "compile", "without": without, "with": dict(counters, params=[1.0], steps=steps)}

    assert gpu_check.pt2_verdict(result(5), 6)[2].startswith("PASS")  # all but the step it attached in
    assert gpu_check.pt2_verdict(result(0), 6)[2].startswith("FAIL")  # host times only: passed before
    assert gpu_check.pt2_verdict(result(3), 6)[2].startswith("FAIL")


def test_the_one_gpu_job_passes_only_with_its_slow_rank_named_alone_in_forward_on_the_gpu_clock(gpu_check):
    def doc(clock="gpu", first=1, phase="forward", ranks=(1,)):
        rows = [{"rank": r, "status": "slow" if r == first else "ok", "culprit_phase": phase if r == first else None} for r in range(3)]
        return {"clock": clock, "stragglers": [first], "ranks": rows, "verdict": {"ranks": list(ranks), "text": f"rank {first} slow"}}

    assert gpu_check.one_gpu_verdict(doc(), 1)[2].startswith("PASS")
    assert gpu_check.one_gpu_verdict(doc(clock="host"), 1)[2].startswith("FAIL")
    assert gpu_check.one_gpu_verdict(doc(phase="comm"), 1)[2].startswith("FAIL")
    assert gpu_check.one_gpu_verdict(doc(first=2, ranks=(2,)), 1)[2].startswith("FAIL")
    assert gpu_check.one_gpu_verdict({"clock": "gpu", "stragglers": [], "ranks": []}, 1)[0] == "nobody"


def test_a_comm_hook_s_wait_passes_within_a_millisecond_or_ten_percent_of_the_true_stall(gpu_check):
    refs = [5.0] * 20
    near = {"refs": refs, "waits": {str(n): 5.4 for n in range(20)}}
    in_flight = {"refs": refs, "waits": {str(n): 25.0 for n in range(20)}}  # each bucket's time in flight counted
    assert gpu_check.hook_verdict("allreduce", near)[2].startswith("PASS")
    assert gpu_check.hook_verdict("allreduce", in_flight)[2].startswith("FAIL")
    assert gpu_check.hook_verdict("allreduce", {"refs": refs, "waits": {}})[2].startswith("FAIL: no ddp_allreduce wait")


def test_ddp_s_finalize_on_one_rank_is_checked_where_it_copies_nothing_not_passed_for_having_records(gpu_check):
    """The H100 run's "DDP finalize wait" read 0.606 ms against ~0 and passed: it had records. Without a comm hook
    the record holds finalize's copy into the gradients: shown as what it is, no verdict; with the gradients as
    bucket views finalize copies nothing and the record must be ~0."""
    (copy, copy_row), (pure, pure_row) = gpu_check.finalize_rows({False: [0.606] * 10, True: [0.004] * 10})
    assert copy_row[0] == "0.606" and copy_row[2].split(":")[0] not in gpu_check.TALLY and "copy" in copy
    assert pure_row[2].startswith("PASS")
    assert gpu_check.finalize_rows({False: [0.606], True: [0.606]})[1][1][2].startswith("FAIL")
    assert gpu_check.finalize_rows({False: [0.606], True: []})[1][1][2].startswith("FAIL")


@pytest.mark.slow
def test_the_one_gpu_job_runs_on_the_cpu_and_names_its_slow_rank(gpu_check, capsys, rdv):
    gpu_check.check_one_gpu_job(ranks=2, slow=1, sleep_ms=40.0, kind="cpu", watch_s=8.0, env_extra={"RANKTOP_DEVICE_TIMING": "cpu"})
    out = capsys.readouterr().out
    assert "2 ranks on one GPU, rank 1 slow" in out and "PASS" in out, out
    assert gpu_check.TALLY == {"PASS": 1, "FAIL": 0, "SKIP": 0}


@pytest.mark.slow
def test_the_comm_hook_check_runs_on_the_cpu_with_each_stock_hook(gpu_check, capsys, rdv):
    """What it measures is the DDP probe's business; here, that the check itself runs with every stock hook."""
    hooks = ("allreduce", "fp16_compress", "bf16_compress", "powerSGD")  # (batched PowerSGD: as PowerSGD)
    gpu_check.check_ddp_hooks(steps=8, sleep_ms=20.0, kind="cpu", hooks=hooks, env_extra={"RANKTOP_DEVICE_TIMING": "cpu"}, width=128)
    out = capsys.readouterr().out
    for hook in hooks:
        line = next(line for line in out.splitlines() if line.startswith(f"DDP {hook}_hook wait"))
        assert "failed" not in line and "timed out" not in line, line
    bf16 = next(line for line in out.splitlines() if line.startswith("DDP bf16_compress_hook"))
    assert "SKIP: BF16 all reduce communication hook required CUDA" in bf16  # torch's own refusal on a CPU, said
