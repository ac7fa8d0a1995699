"""The demo job's fault switches (demo/train.py, demo/faults.py): what a user types is checked once, alike on every
rank, and the slow rank sleeps where and when it was asked to."""

from __future__ import annotations

import pytest
import torch

from ranktop.demo import faults as demo_faults
from ranktop.demo.faults import Faults
from ranktop.demo.train import parse_args


def test_slow_every_sleeps_on_one_step_in_n_in_its_phase_only(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(demo_faults.time, "sleep", slept.append)
    f = Faults(2, device=torch.device("cpu"), slow_rank=2, slow_ms=40.0, slow_phase="data", slow_every=10)
    for _ in range(30):
        f.delay("forward")  # not its phase
        f.delay("data")
    assert slept == [0.04] * 3
    other = Faults(1, device=torch.device("cpu"), slow_rank=2, slow_ms=40.0, slow_every=10)
    for _ in range(30):
        other.delay("data")
    assert slept == [0.04] * 3  # another rank never sleeps


def test_without_slow_every_the_slow_rank_sleeps_at_every_step(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(demo_faults.time, "sleep", slept.append)
    f = Faults(0, device=torch.device("cpu"), slow_rank=0, slow_ms=5.0, slow_phase="backward")
    for _ in range(4):
        f.delay("backward")
    assert slept == [0.005] * 4


def test_slow_every_is_read_with_its_rank_and_checked(capsys):
    args = parse_args(["--slow-rank", "2", "--slow-ms", "40", "--slow-every", "10"], world=4)
    assert (args.slow_rank, args.slow_ms, args.slow_every) == (2, 40.0, 10)
    assert parse_args(["--slow-rank", "1"], world=4).slow_every == 1
    with pytest.raises(SystemExit):
        parse_args(["--slow-every", "10"], world=4)
    assert "--slow-every needs --slow-rank" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--slow-rank", "1", "--slow-every", "0"], world=4)
    assert "must be at least 1" in capsys.readouterr().err
