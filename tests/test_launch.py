"""``ranktop launch``: scripts that never import ranktop, timed in every rank and in no other process.

The slow tests run real torchrun jobs (2 ranks, gloo) under ``ranktop launch``
and read them with ``ranktop watch --json``: an unmodified DDP script
(tests/jobs/unmodified_ddp.py) and the demo with ``--no-probe`` (so only
automatic mode instruments it) with one rank slowed in one phase.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import JOBS, RANKTOP, run_cli

from ranktop.transport import rendezvous

TRAIN = importlib.util.find_spec("ranktop.demo.train").origin
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def test_launch_passes_the_exit_status_and_the_environment_through(rdv, tmp_path):
    code = "import os, sys; print(os.environ['RANKTOP_AUTO'], os.environ['RANKTOP_JOB'], sys.argv[1:]); sys.exit(3)"
    out = run_cli("launch", "--job", "j1", "--", sys.executable, "-c", code, "a", "--b", cwd=tmp_path)
    assert out.returncode == 3 and out.stdout.split() == ["1", "j1", "['a',", "'--b']"]
    assert "ranktop watch j1" in out.stderr


def test_launch_without_a_command_is_a_one_line_error(rdv):
    out = run_cli("launch", "--job", "j")
    assert out.returncode == 1 and out.stderr.strip().startswith("ranktop: error: nothing to launch")
    out = run_cli("launch", "--", "/no/such/program")
    assert out.returncode == 1 and "cannot run '/no/such/program'" in out.stderr and "Traceback" not in out.stderr


def test_a_process_that_never_imports_torch_is_left_alone(rdv, tmp_path):
    code = (
        "import sys, time; time.sleep(1); from ranktop.probe import runtime\n"
        "print('torch' in sys.modules, 'ranktop.probe.autostart' in sys.modules, runtime.active is runtime.DISABLED)"
    )
    out = run_cli("launch", "--job", "j2", "--", sys.executable, "-c", code, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.split() == ["False", "True", "True"]  # hooked, torch never imported, no probe
    assert not list(rdv.glob("jobs/j2/node-*.json"))


def test_a_single_process_script_is_timed_from_its_first_model_call(rdv, tmp_path):
    script = tmp_path / "single.py"
    script.write_text(
        "import torch\n"
        "from ranktop import probe\n"
        "from ranktop.probe.recorder import Recorder\n"
        "Recorder.drain = lambda self, *args: []  # keep every record in the buffer for the check below (the sender takes none)\n"
        "m = torch.nn.Linear(4, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "assert probe.get() is None  # not a launcher's rank: nothing until the model runs\n"
        "for _ in range(5):\n"
        "    m(torch.ones(2, 4)).sum().backward(); opt.step(); opt.zero_grad()\n"
        "p = probe.get(); rec = p.recorder\n"
        "print(p.identity.launcher, rec.produced, sorted(set().union(*(r['p'] for r in rec.buffer))))\n"
    )
    out = run_cli("launch", "--job", "j3", "--", sys.executable, str(script), cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split(maxsplit=2) == ["single", "4", "['backward', 'forward', 'optimizer']"]


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _parent(int(entry.name)) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass  # gone meanwhile
    return found


@pytest.mark.slow
def test_an_unmodified_ddp_script_shows_every_rank_and_no_other_process(launched):
    # spawn-started DataLoader workers: fresh interpreters that inherit the rank's environment
    launched("plain-ddp", *TORCHRUN, str(JOBS / "unmodified_ddp.py"), "--start-method", "spawn")
    out = run_cli("watch", "plain-ddp", "--json", "--duration", "4", timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["world_size"] == 2 and [r["rank"] for r in doc["ranks"]] == [0, 1]
    for row in doc["ranks"]:
        assert row["steps_seen"] >= 10, row
        for name in ("data", "forward", "backward", "optimizer"):
            assert row["phases"][name] > 0, (name, row)
        # the rank itself: the unmodified script, started by the torchrun agent (not a DataLoader worker)
        assert "unmodified_ddp.py" in _cmdline(row["pid"])
        assert "torch.distributed.run" in _cmdline(_parent(row["pid"]))
    assert len({r["pid"] for r in doc["ranks"]}) == 2
    assert len(rendezvous.read_nodes("plain-ddp")) == 1  # one relay: no other process claimed a rank
    # each rank took RANKTOP_AUTO out of its environment before starting its workers
    workers = [pid for rank in doc["ranks"] for pid in _children(rank["pid"]) if "multiprocessing" in _cmdline(pid)]
    assert len(workers) >= 4
    assert not any(b"RANKTOP_AUTO=" in Path(f"/proc/{pid}/environ").read_bytes() for pid in workers)


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["data", "forward", "optimizer"])
def test_a_slow_phase_in_the_uninstrumented_demo_is_found_on_the_right_rank(launched, phase):
    workers = ["--workers", "0"] if phase == "data" else []  # the data sleep then lies inside the DataLoader fetch
    launched(f"auto-{phase}", *TORCHRUN, TRAIN, "--no-probe", "--slow-rank", "1", "--slow-ms", "40", "--slow-phase", phase, *workers)
    out = run_cli("watch", f"auto-{phase}", "--json", "--duration", "6", timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["stragglers"][0] == 1, doc["stragglers"]
    slow, fast = doc["ranks"][1], doc["ranks"][0]
    assert slow["status"] == "slow" and slow["culprit_phase"] == phase, slow
    assert 0.030 < slow["phases"][phase] - fast["phases"][phase] < 0.060
    assert fast["status"] == "ok"


@pytest.mark.slow
def test_a_slow_backward_lands_in_the_slow_ranks_backward(launched):
    """Under DDP a slow backward cannot be told from the others' wait by phase times (see watch/analysis/stragglers.py):
    every rank's backward grows. What automatic mode must get right is where the slow rank's own sleep
    goes: into its backward (at least the 40 ms injected), not into other."""
    launched("auto-backward", *TORCHRUN, TRAIN, "--no-probe", "--slow-rank", "1", "--slow-ms", "40", "--slow-phase", "backward")
    out = run_cli("watch", "auto-backward", "--json", "--duration", "6", timeout=60)
    assert out.returncode == 0, out.stderr
    slow = json.loads(out.stdout)["ranks"][1]
    assert slow["phases"]["backward"] > 0.040, slow
    assert slow["phases"]["other"] < 0.010, slow


def test_device_timing_runs_through_the_real_sender_on_host_clock_events(rdv, tmp_path):
    """RANKTOP_DEVICE_TIMING=cpu: the CUDA code path (pool, marks, the sender's resolution) on CpuEvent."""
    script = tmp_path / "timed.py"
    script.write_text(
        "import time, torch\n"
        "from ranktop import probe\n"
        "m = torch.nn.Linear(4, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(50):\n"
        "    m(torch.ones(2, 4)).sum().backward(); opt.step(); opt.zero_grad()\n"
        "tl = probe.get().recorder.timeline\n"
        "end = time.monotonic() + 20  # the sender's flushes (four a second) resolve them: a second if quiet\n"
        "while (tl.pool.size - tl.pool.available > 8 or tl._held or tl._by_step) and time.monotonic() < end:\n"
        "    time.sleep(0.05)\n"
        "print(tl.label, tl.pool.size - tl.pool.available, len(tl._held), len(tl._by_step))\n"
    )
    env = dict(os.environ, RANKTOP_DEVICE_TIMING="cpu")
    out = subprocess.run(
        [RANKTOP, "launch", "--job", "j4", "--", sys.executable, str(script)], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    label, in_use, held, waiting = out.stdout.split()
    # every finished step was resolved and its events came back; only the open step's marks are out
    assert label == "cpu" and int(in_use) <= 8 and held == "0" and waiting == "0"
