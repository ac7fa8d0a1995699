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
