"""The rank that starts its node's relay passes on what the relay said while starting, even when the relay was
slower to come up than the rank waits for it (a loaded machine: a Python start-up can take seconds)."""

import contextlib
import os
import socket
import time
from collections.abc import Iterator

import pytest

from ranktop.relay import keeper as keeper_module
from ranktop.relay.keeper import RelayKeeper
from ranktop.transport.identity import Identity


@pytest.fixture
def slow_relay(rdv, monkeypatch):
    """slow_relay(job): a keeper of rank 0 whose relay finds its port taken and is "slow" (the rank stops waiting
    for it at once), with that port; the keeper is stopped after."""

    @contextlib.contextmanager
    def start(job: str) -> Iterator[tuple[RelayKeeper, int]]:
        monkeypatch.setattr(keeper_module, "READY_TIMEOUT_S", 0.0)
        monkeypatch.setenv("RANKTOP_BIND", "127.0.0.1")
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            monkeypatch.setenv("RANKTOP_PORT", str(port))
            ident = Identity(job=job, rank=0, local_rank=0, world=1, local_world=1, host="node-a", pid=os.getpid(), launcher="single")
            keeper = RelayKeeper(ident, str(rdv))
            try:
                keeper.start()
                yield keeper, port
            finally:
                keeper.stop()

    return start


def test_a_relay_up_after_the_rank_stopped_waiting_still_has_what_it_said_passed_on(slow_relay, capfd):
    with slow_relay("slowrelay") as (keeper, port):
        deadline = time.monotonic() + 20
        while keeper.info is None and time.monotonic() < deadline:
            time.sleep(0.1)
            keeper.check()
        assert keeper.info is not None, "the relay never came up"
        keeper.check()  # (the check that found it up may have been the start's own)
        err = capfd.readouterr().err
        assert err.count(f"relay port 127.0.0.1:{port} is not free") == 1
        assert not keeper.info.telemetry.endswith(f":{port}")


def test_while_what_a_slow_relay_said_is_not_passed_on_the_rank_looks_at_the_senders_pace(slow_relay, capfd):
    """A rank ended by SIGTERM (torchrun's way with the ranks when one fails) never reaches atexit, where stop() would
    pass on what its relay said: so while that is pending the next check is due within UNSAID_EVERY_S, not the usual
    CHECK_EVERY_S, and once it is said the usual pace comes back."""
    with slow_relay("pacedrelay") as (keeper, port):
        if keeper.info is None:  # (on a fast machine the relay may be up by the start's own check)
            assert keeper.due(time.monotonic() + keeper_module.UNSAID_EVERY_S)
            assert keeper_module.UNSAID_EVERY_S < keeper_module.CHECK_EVERY_S
        deadline = time.monotonic() + 20
        while "is not free" not in (said := capfd.readouterr().err) and time.monotonic() < deadline:
            time.sleep(0.05)
            if keeper.due(time.monotonic()):
                keeper.check()
        assert f"relay port 127.0.0.1:{port} is not free" in said, "what the relay said was never passed on"
        keeper.check()
        assert not keeper.due(time.monotonic() + keeper_module.UNSAID_EVERY_S)  # the usual pace again
