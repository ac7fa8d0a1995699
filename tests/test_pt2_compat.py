"""Automatic mode is invisible to the PyTorch 2 stack (issue 29): for each pattern a 2026 trainer uses, the
same tiny job runs in one process without ranktop and then under ``probe.automatic()`` (what ``ranktop launch``
starts): dynamo's counters (graph breaks, unique graphs, captured calls, recompiles) are equal, the trained
parameters are bit-identical, and automatic mode still timed every step with its forward, backward and
optimizer (and, for DDP, its waits: one ``ddp_allreduce`` per synchronised backward). The job is
tests/jobs/pt2_patterns.py (one subprocess for all patterns, so torch is imported once).
The multi-rank cases under ``ranktop launch`` are in tests/test_pt2_launch.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import JOBS

torch = pytest.importorskip("torch")

STEPS, ACCUMULATE = 6, 2
#: Every pattern of the matrix, with aot_eager (dynamo and AOTAutograd, no C++ compiler); inductor below.
PATTERNS = (
    "compile", "compile_fullgraph", "compile_dynamic", "module_compile", "per_block_compile",
    "checkpoint", "checkpoint_reentrant", "checkpoint_compiled", "compiled_autograd",
    "ddp_compile_outside", "ddp_compile_outside_no_sync", "ddp_compile_inside", "fsdp2_per_block_compile",
    "compiled_train_step",
)  # fmt: skip
#: DDP patterns: each synchronised backward waits for DDP's gradient all-reduce (one ddp_allreduce record each:
#: every micro-batch's, or with no_sync accumulation only the last one's).
DDP_WAITS = {"ddp_compile_outside": STEPS * ACCUMULATE, "ddp_compile_outside_no_sync": STEPS, "ddp_compile_inside": STEPS * ACCUMULATE}
#: Patterns where automatic mode cannot see the steps (docs/auto-mode.md): a whole step compiled in one function.
UNTIMED = ("compiled_train_step",)
COUNTERS = ("graph_breaks", "unique_graphs", "calls_captured", "recompiles")


def run_patterns(tmp_path_factory, patterns, backend: str) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("pt2")
    env = {"RANKTOP_DIR": str(folder / "rdv"), "PYTHONUNBUFFERED": "1", "MASTER_PORT": "0"}
    import os

    env = {**os.environ, **env}
    env.pop("RANKTOP_AUTO", None)
    out = subprocess.run(
        [sys.executable, str(JOBS / "pt2_patterns.py"), "--backend", backend, "--steps", str(STEPS),
         "--accumulate", str(ACCUMULATE), *patterns],
        capture_output=True, text=True, timeout=900, cwd=folder, env={**env, "MASTER_PORT": "29561"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    results = {r["pattern"]: r for r in map(json.loads, out.stdout.splitlines())}
    results["_stderr"] = out.stderr
    return results


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    return run_patterns(tmp_path_factory, PATTERNS, "aot_eager")


def check_invisible(result: dict) -> None:
    without, with_probe = result["without"], result["with"]
    assert "error" not in without, without
    assert "error" not in with_probe, with_probe  # before issue 29: Unsupported ... _thread.get_ident
    for name in COUNTERS:
        assert with_probe[name] == without[name], (name, without, with_probe)
    assert with_probe["params"] == without["params"]  # the probe never changes numerics
    assert with_probe["loss"] == without["loss"]


def check_ddp_waits(result: dict) -> None:
    """DDP's waits seen (issue 51: ``torch.compile(DDP(model))`` had none once DDP's comm hook was gone), in
    backward, one per synchronised backward."""
    calls = [c for c in result["with"]["calls"] if c["op"] == "ddp_allreduce"]
    assert len(calls) == DDP_WAITS[result["pattern"]], result["with"]["calls"]
    assert all(c["ph"] == "backward" and c["d"] >= 0 for c in calls), calls


def check_timed(result: dict) -> None:
    steps = result["with"]["steps"]
    assert len(steps) == STEPS, steps  # one step per optimizer step: accumulation is one step
    for step in steps[1:]:  # the first includes compilation
        phases = step["p"]
        assert {"data", "forward", "backward", "optimizer"} <= set(phases), step
        assert all(phases[name] > 0 for name in ("forward", "backward", "optimizer")), step
        assert step["w"] >= sum(phases.values()) * 0.999, step


@pytest.mark.slow
@pytest.mark.parametrize("pattern", PATTERNS)
def test_automatic_mode_is_invisible_to_the_compiler_and_times_every_step(matrix, pattern):
    check_invisible(matrix[pattern])
    if pattern not in UNTIMED:
        check_timed(matrix[pattern])
    if pattern in DDP_WAITS:
        check_ddp_waits(matrix[pattern])


@pytest.mark.slow
def test_torch_compile_of_a_module_says_nothing_of_ranktop_s_hooks(matrix):
    assert "when there are global hooks" not in matrix["_stderr"]


@pytest.mark.slow
def test_fullgraph_with_inductor_compiles_the_same_graphs_under_ranktop(tmp_path_factory):
    """The real compiler once (C++ code generation for the CPU): fullgraph and per-block fullgraph."""
    results = run_patterns(tmp_path_factory, ("compile_fullgraph", "per_block_compile"), "inductor")
    for pattern in ("compile_fullgraph", "per_block_compile"):
        check_invisible(results[pattern])
        check_timed(results[pattern])


@pytest.mark.slow
def test_compile_around_ddp_with_inductor_compiles_the_same_graphs_and_sees_ddp_s_waits(tmp_path_factory):
    """``torch.compile(DDP(model))`` with the real compiler (issue 51's job), with and without no_sync accumulation."""
    patterns = ("ddp_compile_outside", "ddp_compile_outside_no_sync")
    results = run_patterns(tmp_path_factory, patterns, "inductor")
    for pattern in patterns:
        check_invisible(results[pattern])
        check_timed(results[pattern])
        check_ddp_waits(results[pattern])


def test_a_fullgraph_model_compiles_under_automatic_mode_in_process():
    """The quick check of the matrix, in the test process (the eager backend: dynamo alone)."""
    from torch._dynamo.utils import counters

    from ranktop.probe import auto
    from ranktop.probe.recorder import Recorder

    def train(model, opt, steps=3):
        for _ in range(steps):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()

    results = []
    for with_hooks in (False, True):
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        rec = Recorder()
        hooks = auto.TorchHooks(auto.AutoTimer(rec)).install() if with_hooks else None
        try:
            train(torch.compile(net, fullgraph=True, backend="eager"), torch.optim.SGD(net.parameters(), lr=0.1))
        finally:
            if hooks is not None:
                hooks.remove()
        results.append((sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"],
                        [p.detach().clone() for p in net.parameters()], rec.drain()))  # fmt: skip
    (breaks0, graphs0, params0, _), (breaks1, graphs1, params1, steps) = results
    assert (breaks1, graphs1) == (breaks0, graphs0) == (0, 1)
    assert all(torch.equal(a, b) for a, b in zip(params0, params1))
    assert len(steps) == 2 and all(s["p"]["forward"] > 0 for s in steps)  # the third ends at the next fetch/forward
