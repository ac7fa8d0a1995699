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
    assert cause.explains == pytest.approx(1.0) and cause.basis == "measured"
    # 2.5 ms a step beyond its peers explains an eighth of a 20 ms excess: a cause, saying so (the verdict names
    # it only from a fifth: watch/model/verdict.py)
    (small,) = causes.judge(np.array([0.04]), np.array([0.015]), step, excess, GC)
    assert small.extra_s == pytest.approx(0.0025) and small.explains == pytest.approx(0.125)


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
    # estimated from the ratio and its own compute (here its whole 100 ms step): 3.1x its peers' rows cost it
    # 100 ms x (1 - 1/3.1) = 68 ms, more than its 30 ms excess: it explains all of it, and says it is estimated
    assert cause.extra_s == pytest.approx(0.1 * (1 - 1 / 3.1)) and cause.explains == 1.0 and cause.basis == "estimated"
    # with its collective wait (60 ms) and data phase (10 ms) taken out, its compute is 30 ms: 20 ms, two thirds
    found = causes.of_ranks(st, np.full(4, 0.1), np.array([0.03, 0, 0, 0]), slow_first(4), np.ones(4, bool), None,
                            names=["data", "forward"], phases=np.array([[0.01, 0.03]] * 4), comm_s=np.full(4, 0.06))  # fmt: skip
    (cause,) = found[0]
    assert cause.extra_s == pytest.approx(0.03 * (1 - 1 / 3.1)) and cause.explains == pytest.approx(0.03 * (1 - 1 / 3.1) / 0.03)


def test_routing_noise_under_half_again_its_peers_rows_is_no_expert_load_and_the_cause_is_unknown():
    st = [State(ev=Evidence(win=10.0, a2a_rows=rows)) for rows in (14_000.0, 10_000.0, 9_000.0, 11_000.0)]
    (cause,) = causes.of_ranks(st, np.full(4, 0.1), np.array([0.03, 0, 0, 0]), slow_first(4), np.ones(4, bool), None)[0]
    assert cause.kind == "unknown" and cause.ruled_out == ("input size",) and cause.text == "not input size"


def test_more_tokens_per_step_than_its_peers_is_input_imbalance_tokens_before_samples():
    st = [State(ev=Evidence(win=10.0, tokens=t, samples=8.0)) for t in (8192.0, 4096.0, 4096.0)]
    found = causes.of_ranks(st, np.full(3, 0.2), np.array([0.08, 0, 0]), slow_first(3), np.ones(3, bool), None)
    (cause,) = found[0]  # one input_imbalance a rank (the samples are even anyway)
    assert cause.kind == "input_imbalance" and cause.ratio == 2.0
    assert cause.text == "it takes in 2.0x the tokens of its peers, 8,192 a step against 4,096 (input imbalance)"
    assert cause.extra_s == pytest.approx(0.1) and cause.explains == 1.0  # half its 200 ms step: all its 80 ms excess
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
    # (one sample: its window's share held down by heat is that sample's reasons)
    assert cause.text == "its GPU runs at 1200 MHz against its peers' 1965 (held down by heat 100% of the time) (gpu throttle)"
    assert cause.extra_s == pytest.approx(0.1 * (1 - 1200 / 1965))
    # clocks within 10% of each other: no throttling worth the name, whatever the reasons say
    st = [State(gpu=_gpu_sample(1900, 0x4)), State(gpu=_gpu_sample(1980, 0)), State(gpu=_gpu_sample(1965, 0))]
    assert causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None) == {}


def test_a_gpu_clocked_lower_with_no_power_or_heat_holding_it_down_is_no_throttle():
    # a lower clock alone is a symptom (a GPU less busy, or waiting, clocks otherwise): evidence or nothing
    st = [State(gpu=_gpu_sample(1200, 0)), State(gpu=_gpu_sample(1980, 0)), State(gpu=_gpu_sample(1965, 0))]
    assert causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None) == {}
    # its window's clock and shares, where sent, decide: held down by power a tenth of the time is not enough
    gauges = lambda avg, power: {"sm_mhz": 1980, "sm_avg": avg, "held_power": power, "held_thermal": 0.0, "throttle": ["power"]}  # noqa: E731
    st = [State(gpu=gauges(1200.0, 0.1)), State(gpu=gauges(1980.0, 0.0)), State(gpu=gauges(1965.0, 0.0))]
    assert causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None) == {}
    st[0] = State(gpu=gauges(1200.0, 0.8))  # (its clock now, 1980, is no matter: the window's is read)
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert (
        cause.value == 1200
        and cause.text == "its GPU runs at 1200 MHz against its peers' 1965 (held down by power 80% of the time) (gpu throttle)"
    )


def test_allocator_retries_or_swapped_memory_beyond_its_peers_is_memory_pressure_with_no_cost_told():
    st = [State(ev=Evidence(win=10.0, retries=r)) for r in (2.5, 0.0, 0.0)]
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "memory_pressure" and cause.extra_s == 0.0 and cause.ratio is None
    assert cause.text.startswith("its CUDA allocator retries 2.5 allocations a second against its peers' 0.0")
    st = [State(ev=Evidence(win=10.0, swap=s, gc=g)) for s, g in ((3 * 2.0**30, 0.4), (0.0, 0.0), (2.0**20, 0.0))]
    first, second = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert (first.kind, second.kind) == ("gc_pause", "memory_pressure")  # a measured cost before one not told
    assert second.text == "3.0 GB of its memory is swapped out against its peers' 0 B (memory pressure)"  # lower median
    assert (first.explains, second.explains, second.basis) == (pytest.approx(0.8), 0.0, "untold")  # 40 of 50 ms
    st = [State(ev=Evidence(win=10.0, swap=s)) for s in (2.0**27, 0.0, 0.0)]  # 128 MiB: under the floor
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "unknown" and cause.ruled_out == ("memory",)


def test_a_slow_data_phase_alone_is_no_data_loader_cause():
    """The phase's name is no evidence: a rank slow in its data phase whose loader's own time says nothing (no
    ``ld``: an older probe, a loop without a DataLoader) gets no ``data_loader``."""
    names = ["data", "forward"]
    phases = np.array([[0.060, 0.02], [0.010, 0.02], [0.012, 0.02]])
    st = [State(ev=Evidence(win=10.0, kids=k, kids_n=n)) for k, n in ((3.8, 4), (1.1, 4), (1.2, 4))]
    found = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None,
                            culprit=np.array([0, -1, -1]), names=names, phases=phases)  # fmt: skip
    assert found == {}


def loader_states(ld, ld_cpu=None, runq=None, gc=None, kids=None, kids_n=None) -> list[State]:
    pick = lambda col, i: None if col is None or col[i] is None else col[i]  # noqa: E731
    return [State(ev=Evidence(win=10.0, ld=ld[i], ld_cpu=pick(ld_cpu, i), runq=pick(runq, i), gc=pick(gc, i),
                              kids=pick(kids, i), kids_n=pick(kids_n, i))) for i in range(len(ld))]  # fmt: skip


def test_a_rank_blocked_inside_its_data_loader_s_next_beyond_its_peers_is_named_with_data_loader_and_its_workers_cpu():
    # 60 ms a step (0.6 s a second at 100 ms steps) inside __next__ against its peers' 10 ms
    st = loader_states([0.6, 0.1, 0.12], kids=[3.8, 1.1, 1.2], kids_n=[4, 4, 4])
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "data_loader" and cause.extra_s == pytest.approx(0.05) and cause.workers_cpus == 3.8
    assert cause.explains == pytest.approx(1.0) and cause.basis == "measured"
    assert cause.text == ("it waits 60 ms per step inside its DataLoader's __next__, 6.0x its peers' 10 ms; its 4 "
                          "DataLoader workers use 3.8 CPUs against its peers' 1.1 (data loader)")  # fmt: skip
    st = loader_states([0.6, 0.1, 0.12], kids=[0.0] * 3, kids_n=[0] * 3)
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.text.endswith("loaded on its training thread (no DataLoader workers) (data loader)")


def test_two_ranks_blocked_in_their_data_loaders_are_each_named_with_their_own_workers_cpu():
    """The workers' column pair is read again for each slow rank: the figures told of the first must not take its
    place (they did, and the second rank's lookup failed: a KeyError out of the judge)."""
    st = loader_states([0.6, 0.6, 0.1, 0.12, 0.11], kids=[3.8, 3.6, 1.1, 1.2, 1.0], kids_n=[4] * 5)
    slow = np.array([True, True, False, False, False])
    found = causes.of_ranks(st, np.full(5, 0.1), np.array([0.05, 0.05, 0, 0, 0]), slow, np.ones(5, bool), None)
    (first,), (second,) = found[0], found[1]
    assert (first.kind, second.kind) == ("data_loader", "data_loader")
    assert (first.workers_cpus, second.workers_cpus) == (3.8, 3.6) and first.peers_workers_cpus == 1.1


def test_a_rank_whose_loader_is_slow_because_it_waits_for_a_cpu_is_named_with_cpu_contention_not_data_loader():
    """CPU contention inside the data phase: the loader's extra time is the run-queue wait measured meanwhile, so
    the loader is left what remains (nothing) and the contention is named."""
    st = loader_states([0.6, 0.1, 0.1], runq=[0.5, 0.0, 0.0])
    found = causes.of_ranks(st, np.full(3, 0.1), np.array([0.05, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert [c.kind for c in found] == ["cpu_contention"] and found[0].explains == pytest.approx(1.0)


# -- measured before estimated; the newer kinds ---------------------------------------------------------------


def ev_states(**columns) -> list[State]:
    n = len(next(iter(columns.values())))
    return [State(ev=Evidence(win=10.0, **{k: v[i] for k, v in columns.items() if v[i] is not None})) for i in range(n)]


def test_a_measured_time_ranks_ahead_of_a_ratio_and_a_ratio_s_cost_comes_from_its_compute_not_its_excess():
    """19 ms of measured GC beyond its peers' and 1.6x their tokens: the GC is named. The tokens' cost is estimated
    from its own compute (its 100 ms step less its 70 ms of collective wait): 30 ms x (1 - 1/1.6) = 11 ms, not the
    whole 25 ms excess."""
    st = ev_states(gc=[0.2, 0.01, 0.01, 0.01], tokens=[6553.6, 4096.0, 4096.0, 4096.0])
    found = causes.of_ranks(st, np.full(4, 0.1), np.array([0.025, 0, 0, 0]), slow_first(4), np.ones(4, bool), None,
                            comm_s=np.full(4, 0.07))[0]  # fmt: skip
    assert [c.kind for c in found] == ["gc_pause", "input_imbalance"]
    assert found[0].extra_s == pytest.approx(0.019) and found[0].explains == pytest.approx(0.76)
    assert found[1].extra_s == pytest.approx(0.03 * (1 - 1 / 1.6)) and found[1].explains == pytest.approx(0.45)


def test_padded_batches_of_the_same_length_are_no_input_imbalance_whatever_their_real_tokens():
    """1.6x its peers' real tokens, padded to the same length as theirs: the same compute, so no input cause; the
    slowdown is unmeasured and the cause is unknown, saying what was ruled out."""
    st = ev_states(tokens=[6553.6, 4096.0, 4096.0], padded=[8192.0] * 3, gc=[0.001] * 3, runq=[0.001] * 3, swap=[0.0] * 3)
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.03, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "unknown" and cause.text == "not GC, CPU contention, input size or memory"
    st = ev_states(tokens=[4096.0] * 3, padded=[16384.0, 8192.0, 8192.0])  # longer padded batches: more compute
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.03, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "input_imbalance" and cause.ratio == 2.0 and "padding included" in cause.text


def test_time_compiling_beyond_its_peers_is_recompile_and_the_cpu_it_took_is_not_host_bound():
    st = ev_states(jit=[0.4, 0.0, 0.0], jit_n=[6.0, 0.0, 0.0], breaks=[2.0, 0.0, 0.0], cpu=[0.9, 0.5, 0.5])
    found = causes.of_ranks(st, np.full(3, 0.1), np.array([0.04, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert [c.kind for c in found] == ["recompile"] and found[0].explains == 1.0
    assert found[0].text == ("torch.compile spends 40 ms per step compiling on it, against its peers' 0.0 ms, "
                             "6.0 frames compiled a second and 2.0 graph breaks (recompile)")  # fmt: skip


def test_cpu_time_of_the_training_thread_that_nothing_else_explains_is_host_bound():
    st = ev_states(cpu=[0.9, 0.5, 0.5], gc=[0.05, 0.01, 0.01])  # 40 ms more CPU a step, 4 ms of it GC
    found = causes.of_ranks(st, np.full(3, 0.1), np.array([0.04, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert [c.kind for c in found] == ["host_bound", "gc_pause"], found  # the GC listed, explaining a tenth
    assert found[0].extra_s == pytest.approx(0.036) and found[0].explains == pytest.approx(0.9)
    assert found[1].explains == pytest.approx(0.1)
    # the same CPU with 1.8x its peers' tokens: the work it was given explains it, not Python
    st = ev_states(cpu=[0.9, 0.5, 0.5], tokens=[7372.8, 4096.0, 4096.0])
    found = causes.of_ranks(st, np.full(3, 0.1), np.array([0.04, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert [c.kind for c in found] == ["input_imbalance"], found


def test_a_run_queue_wait_while_its_own_threads_fill_its_cores_is_oversubscribed_not_another_process():
    st = ev_states(runq=[0.4, 0.01, 0.01], cpu=[0.5, 0.5, 0.5], pcpu=[1.9, 0.55, 0.5], cores=[2, 2, 2], thr=[12, 4, 4])
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.04, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "oversubscribed" and "its own 12 threads use 1.9 of its 2 CPUs" in cause.text
    st = ev_states(runq=[0.4, 0.01, 0.01], cpu=[0.5, 0.5, 0.5], pcpu=[0.55, 0.55, 0.5], cores=[2, 2, 2])
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.04, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "cpu_contention"


def test_on_a_busy_machine_a_rank_that_asks_for_more_cpu_waits_more_and_that_is_host_bound_not_contention():
    """Its peers wait 0.5 s for a CPU per CPU second they run; it runs 0.6 s a second against their 0.2 and waits
    in proportion (0.3 against 0.1): the wait is what its extra CPU work meets, not another process. Its extra
    CPU, 40 ms a step, costs it 60 ms with that wait; the whole of its 60 ms excess."""
    st = ev_states(cpu=[0.6, 0.2, 0.2], runq=[0.3, 0.1, 0.1])
    found = causes.of_ranks(st, np.full(3, 0.1), np.array([0.06, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert [c.kind for c in found] == ["host_bound"], found
    assert found[0].extra_s == pytest.approx(0.06) and found[0].explains == pytest.approx(1.0)
    # the same CPU, waiting three times what its peers wait per CPU second: contention, against their 30 ms
    st = ev_states(cpu=[0.2, 0.2, 0.2], runq=[0.3, 0.1, 0.1])
    (cause,) = causes.of_ranks(st, np.full(3, 0.1), np.array([0.02, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert cause.kind == "cpu_contention" and cause.extra_s == pytest.approx(0.02)
    assert cause.text.startswith("its training thread waits 30 ms per step for a CPU, 3.0x its peers' 10 ms for as much CPU time")


def test_a_peer_that_never_compiled_nor_iterated_a_dataloader_counts_as_nothing_spent_there():
    """dynamo is imported on the slow rank only (its peers compile nothing): their evidence leaves ``jit`` out, which
    is 0 seconds compiling, a peer's figure all the same; a rank that sends no evidence at all is still no peer."""
    st = [State(ev=Evidence(win=10.0, jit=0.3, jit_n=2.0, cpu=0.5)), State(ev=Evidence(win=10.0, cpu=0.2)), State()]
    found = causes.of_ranks(st, np.full(3, 0.2), np.array([0.06, 0, 0]), slow_first(3), np.ones(3, bool), None)[0]
    assert found[0].kind == "recompile" and found[0].peers == 0.0 and found[0].explains == 1.0, found
