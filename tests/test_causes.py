"""watch/analysis/causes.py: a slow rank's evidence held against its peers', on plain columns and states."""

from __future__ import annotations

import numpy as np
import pytest

from ranktop.watch.analysis import causes
from ranktop.wire.messages import Evidence, State

GC, RUNQ = causes.KINDS


def states(gc=None, runq=None, nvcsw=None) -> list[State]:
    n = len(gc if gc is not None else runq)
    pick = lambda col, i: None if col is None or col[i] is None else float(col[i])  # noqa: E731
    return [State(ev=Evidence(win=10.0, gc=pick(gc, i), runq=pick(runq, i), nvcsw=pick(nvcsw, i))) for i in range(n)]


def test_a_healthy_peer_is_the_lower_median_of_the_others_own_figure_left_out():
    values = np.array([0.30, 0.01, 0.02, 0.03, np.nan])
    assert causes.peer_reference(values, None, np.array([0]))[0] == 0.02  # peers 0.01, 0.02, 0.03
    assert causes.peer_reference(values, None, np.array([1]))[0] == 0.03  # peers 0.02, 0.03, 0.30: lower median
    assert causes.peer_reference(np.array([0.3, 0.1]), None, np.array([0]))[0] == 0.1  # one peer: its figure
    assert np.isnan(causes.peer_reference(np.array([0.3, np.nan]), None, np.array([0]))[0])  # no peer says: nothing


def test_peers_are_the_ranks_of_its_class_only():
    values = np.array([0.30, 0.25, 0.01, 0.01])
    classes = np.array([0, 0, 1, 1])
    assert causes.peer_reference(values, classes, np.array([0]))[0] == 0.25


def test_a_figure_is_a_cause_past_twice_its_peers_a_floor_and_a_good_part_of_the_excess():
    step, excess = np.array([0.1]), np.array([0.02])
    cause = causes.judge(np.array([0.25]), np.array([0.05]), step, excess, GC)[0]
    assert cause.kind == "gc_pause" and cause.ratio == pytest.approx(5.0) and cause.extra_s == pytest.approx(0.02)
    assert cause.text == "it spends 25 ms per step in Python's garbage collector, 5.0x its peers' 5.0 ms (gc pause)"
    assert causes.judge(np.array([0.09]), np.array([0.05]), step, excess, GC) == [None]  # under 2x
    assert causes.judge(np.array([0.008]), np.array([0.0]), step, excess, GC) == [None]  # under the 1% floor
    # 2.5 ms a step beyond its peers explains little of a 20 ms excess: no cause
    assert causes.judge(np.array([0.04]), np.array([0.015]), step, excess, GC) == [None]


def test_only_slow_ranks_get_causes_and_a_healthy_job_has_none():
    st = states(gc=[0.30, 0.01, 0.01, 0.01])
    step, excess = np.full(4, 0.1), np.array([0.03, 0, 0, 0])
    live = np.ones(4, bool)
    assert causes.of_ranks(st, step, excess, np.zeros(4, bool), live, None) == {}
    found = causes.of_ranks(st, step, excess, np.array([True, False, False, False]), live, None)
    assert list(found) == [0] and [c.kind for c in found[0]] == ["gc_pause"]


def test_cpu_contention_says_the_involuntary_switches_and_causes_come_costliest_first():
    st = states(gc=[0.12, 0.0, 0.0], runq=[0.40, 0.02, 0.03], nvcsw=[900, 20, 30])
    found = causes.of_ranks(st, np.full(3, 0.1), np.array([0.04, 0, 0]), np.array([True, False, False]), np.ones(3, bool), None)
    first, second = found[0]
    assert (first.kind, second.kind) == ("cpu_contention", "gc_pause")
    assert first.switches_per_s == 900 and first.peers_switches_per_s == 20
    assert first.text == (
        "its training thread waits 40 ms per step for a CPU, 20.0x its peers' 2.0 ms, "
        "900 involuntary context switches a second against 20 (cpu contention)"
    )


def test_a_rank_that_sends_no_evidence_gets_no_cause():
    st = [State(), State(), State()]
    assert causes.of_ranks(st, np.full(3, 0.1), np.array([0.04, 0, 0]), np.array([True, False, False]), np.ones(3, bool), None) == {}


def slow_first(n: int) -> np.ndarray:
    return np.array([True] + [False] * (n - 1))


def test_a_rank_that_receives_far_more_all_to_all_rows_is_named_with_expert_load():
    st = [State(ev=Evidence(win=10.0, a2a_rows=rows)) for rows in (31_000.0, 10_000.0, 9_000.0, 11_000.0)]
    found = causes.of_ranks(st, np.full(4, 0.1), np.array([0.03, 0, 0, 0]), slow_first(4), np.ones(4, bool), None)
    (cause,) = found[0]
    assert cause.kind == "expert_load" and cause.ratio == pytest.approx(3.1) and cause.peers == 10_000.0
    assert cause.text == "it receives 3.1x the all-to-all rows of its peers, 3,100 a step against 1,000 (expert load)"
    # if its whole step grew with its rows, 3.1x costs it 2/3 of its step; it cannot cost more than its excess
    assert cause.extra_s == pytest.approx(0.03)


def test_routing_noise_under_half_again_its_peers_rows_is_no_expert_load():
    st = [State(ev=Evidence(win=10.0, a2a_rows=rows)) for rows in (14_000.0, 10_000.0, 9_000.0, 11_000.0)]
    assert causes.of_ranks(st, np.full(4, 0.1), np.array([0.03, 0, 0, 0]), slow_first(4), np.ones(4, bool), None) == {}


def test_more_tokens_per_step_than_its_peers_is_input_imbalance_tokens_before_samples():
    st = [State(ev=Evidence(win=10.0, tokens=t, samples=8.0)) for t in (8192.0, 4096.0, 4096.0)]
    found = causes.of_ranks(st, np.full(3, 0.2), np.array([0.08, 0, 0]), slow_first(3), np.ones(3, bool), None)
    (cause,) = found[0]  # one input_imbalance a rank (the samples are even anyway)
    assert cause.kind == "input_imbalance" and cause.ratio == 2.0
    assert cause.text == "it takes in 2.0x the tokens of its peers, 8,192 a step against 4,096 (input imbalance)"
    assert cause.extra_s == pytest.approx(0.08)  # half its 200 ms step, at most its 80 ms excess
    st = [State(ev=Evidence(win=10.0, samples=s)) for s in (48.0, 16.0, 16.0)]
    (cause,) = causes.of_ranks(st, np.full(3, 0.2), np.array([0.08, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.text == "it takes in 3.0x the samples of its peers, 48 a step against 16 (input imbalance)"


def _gpu_sample(clock_mhz: int, reasons: int) -> dict:
    """A GPU's gauges as probe/gpu_sampler.py reads them, from the fake NVML with this SM clock and throttle mask."""
    from fake_cuda import fake_nvml
    from ranktop.probe.gpu_sampler import GpuSampler

    nvml = fake_nvml()
    nvml.nvmlDeviceGetClockInfo = lambda handle, which: clock_mhz
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: reasons
    sampler = GpuSampler(lambda: {"bus": "00000000:3B:00.0", "index": 0}, nvml=nvml, clock=lambda: 1.0)
    assert sampler.open()
    return sampler.sample()


def test_a_gathered_view_s_sm_clock_column_is_read_instead_of_a_pass_over_every_rank_s_gauges(monkeypatch):
    """A job of thousands of GPU ranks: the SM clocks come as a column the job state keeps from each state as it
    arrives (watch/engine/rank_scalars.py), not from a pass over the states per snapshot; the same cause."""
    from ranktop.watch.engine.rank_scalars import RankScalars

    st = [State(gpu=_gpu_sample(1200, 0x20)), State(gpu=_gpu_sample(1980, 0)), State(gpu=_gpu_sample(1965, 0))]
    scalars = RankScalars(rows=4)
    for row, state in enumerate(st + [State(gpu={"sm_mhz": True})]):
        scalars.take_state(row, state)
    assert scalars.gpu_sm_mhz[:3].tolist() == [1200.0, 1980.0, 1965.0] and np.isnan(scalars.gpu_sm_mhz[3])  # (a bool: none)
    scalars.take_state(2, State())  # its last state says no clock: none, as its state says
    assert np.isnan(scalars.gpu_sm_mhz[2])
    evidence = {"sm_mhz": np.array([1200.0, 1980.0, 1965.0])}
    by_states = causes.figures
    monkeypatch.setattr(causes, "figures", lambda states, field, part="ev": pytest.fail("a pass over every rank's gauges")
                        if part == "gpu" else by_states(states, field, part))  # fmt: skip
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None, evidence)[0]
    assert cause.kind == "gpu_throttle" and cause.value == 1200 and cause.peers == 1965


def test_a_gpu_clocked_below_its_peers_is_named_with_gpu_throttle_and_its_reasons():
    st = [State(gpu=_gpu_sample(1200, 0x20)), State(gpu=_gpu_sample(1980, 0)), State(gpu=_gpu_sample(1965, 0))]
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "gpu_throttle" and cause.value == 1200 and cause.peers == 1965
    assert cause.text == "its GPU runs at 1200 MHz against its peers' 1965 (thermal throttling) (gpu throttle)"
    assert cause.extra_s == pytest.approx(0.1 * (1 - 1200 / 1965))
    # clocks within 10% of each other: no throttling worth the name, whatever the reasons say
    st = [State(gpu=_gpu_sample(1900, 0x4)), State(gpu=_gpu_sample(1980, 0)), State(gpu=_gpu_sample(1965, 0))]
    assert causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None) == {}


def test_allocator_retries_or_swapped_memory_beyond_its_peers_is_memory_pressure_with_no_cost_told():
    st = [State(ev=Evidence(win=10.0, retries=r)) for r in (2.5, 0.0, 0.0)]
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "memory_pressure" and cause.extra_s == 0.0 and cause.ratio is None
    assert cause.text.startswith("its CUDA allocator retries 2.5 allocations a second against its peers' 0.0")
    st = [State(ev=Evidence(win=10.0, swap=s, gc=g)) for s, g in ((3 * 2.0**30, 0.4), (0.0, 0.0), (2.0**20, 0.0))]
    first, second = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert (first.kind, second.kind) == ("gc_pause", "memory_pressure")  # a measured cost before one not told
    assert second.text == "3.0 GB of its memory is swapped out against its peers' 0 B (memory pressure)"  # lower median
    st = [State(ev=Evidence(win=10.0, swap=s)) for s in (2.0**27, 0.0, 0.0)]  # 128 MiB: under the floor
    assert causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None) == {}


def test_a_rank_slow_in_its_data_phase_is_named_with_data_loader_and_its_workers_cpu():
    names = ["data", "forward"]
    phases = np.array([[0.060, 0.02], [0.010, 0.02], [0.012, 0.02]])
    st = [State(ev=Evidence(win=10.0, kids=k, kids_n=n)) for k, n in ((3.8, 4), (1.1, 4), (1.2, 4))]
    culprit = np.array([0, -1, -1])
    found = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None,
                            culprit=culprit, names=names, phases=phases)  # fmt: skip
    (cause,) = found[0]
    assert cause.kind == "data_loader" and cause.extra_s == pytest.approx(0.05) and cause.workers_cpus == 3.8
    assert cause.text == (
        "its data phase takes 60 ms per step against its peers' 10 ms; its 4 DataLoader workers use 3.8 CPUs "
        "against its peers' 1.1 (data loader)"
    )
    st = [State(ev=Evidence(win=10.0, kids=0.0, kids_n=0)) for _ in range(3)]
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None,
                               culprit=culprit, names=names, phases=phases)[0]  # fmt: skip
    assert cause.text.endswith("loaded on its training thread (no DataLoader workers) (data loader)")
    # slow in forward: its data phase is no cause
    assert causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None,
                           culprit=np.array([1, -1, -1]), names=names, phases=phases) == {}  # fmt: skip
