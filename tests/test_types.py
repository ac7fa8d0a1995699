"""The contract and the viewer's engine pass a type checker: mypy over the installed package.

The wire's Structs (wire/messages.py) are the one definition of every field; the type checker holds the code
that builds them (the probe's sender and samplers, the relay's digest, the simulator) and reads them to it: a
misspelt field, a field read that may be None, a message of one kind taken for another fail here rather than at
a user's. Strict over wire/, relay/, the probe's producers, the simulator and the engine's modules that take
messages in and hand views out (numpy's many untyped returns aside: ``--no-warn-return-any``).
"""

from __future__ import annotations

import subprocess
import sys

#: Checked with ``--strict``: the contract, the relay, the probe's producers (the sender and what it sends: the
#: calls' summaries, the samplers, the collective tracker, the command handlers), the simulator, and the engine's
#: modules that receive and hold the job. A package name checks every module of it.
STRICT = [
    "ranktop.wire",
    "ranktop.relay",
    "ranktop.probe.sender",
    "ranktop.probe.collective_summary",
    "ranktop.probe.collective_tracker",
    "ranktop.probe.commands",
    "ranktop.probe.memory",
    "ranktop.probe.gpu_sampler",
    "ranktop.probe.resources",
    "ranktop.probe.collectives",
    "ranktop.probe.process_groups",
    "ranktop.demo.simulate",
    "ranktop.watch.aggregator",
    "ranktop.watch.engine.rank_store",
    "ranktop.watch.engine.step_window",
    "ranktop.watch.engine.step_columns",
    "ranktop.watch.engine.rank_scalars",
    "ranktop.watch.engine.endpoints",
    "ranktop.watch.engine.lifecycle",
    "ranktop.watch.engine.requests",
    "ranktop.watch.engine.collective_sums",
    "ranktop.watch.engine.resource_samples",
    "ranktop.watch.engine.receiver",
    "ranktop.watch.model.answers",
    "ranktop.watch.model.endpoint",
    "ranktop.watch.model.life",
    "ranktop.watch.model.stall",
    "ranktop.watch.engine.memory_history",
    "ranktop.watch.analysis.relays",
    "ranktop.watch.analysis.memory_creep",
    "ranktop.watch.analysis.silence",
    "ranktop.watch.analysis.peers",
    "ranktop.watch.analysis.node_groups",
    "ranktop.watch.analysis.job_pace",
    "ranktop.watch.analysis.slow_links",
    "ranktop.watch.engine.link_book",
]
#: The names of STRICT that are packages.
PACKAGES = ("ranktop.wire", "ranktop.relay")


def test_the_contract_and_the_engine_pass_the_type_checker_strictly(tmp_path):
    targets = [arg for name in STRICT for arg in (("-p", name) if name in PACKAGES else ("-m", name))]
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-warn-return-any", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), *targets],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_the_type_checker_finds_a_misspelt_field(tmp_path):
    """The check is no formality: a producer that misspells a field, or reads one a type does not have, fails."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from ranktop.wire.messages import Heartbeat, State\n"
        "def beat() -> Heartbeat:\n"
        "    return Heartbeat(job='j', rank=0, ts=1.0, stat=State())\n"
        "def last(state: State) -> int:\n"
        "    return state.last_step\n"
    )
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(bad)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 1
    assert 'Unexpected keyword argument "stat"' in out.stdout and '"State" has no attribute "last_step"' in out.stdout
