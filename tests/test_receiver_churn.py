"""A viewer watching a job whose relays keep moving (requeues, restarts, a relay per node that comes back on a
new port) replaces each node's socket and its handshake monitor every time. Those replacements must never stop the
receiver: it once named each monitor's in-process endpoint after the socket's file descriptor, which a new socket
may reuse while the old monitor is still being torn down ("receiver stopped: Address already in use", seen in CI
on a requeued simulated job)."""

from __future__ import annotations

import itertools
import time

import ranktop.watch.engine.receiver as receiver_module
from ranktop.transport.rendezvous import NodeRecord
from ranktop.watch.aggregator import Aggregator


def test_thousands_of_relay_moves_never_stop_the_receiver(monkeypatch):
    monkeypatch.setenv("RANKTOP_CURVE", "0")
    monkeypatch.setattr(receiver_module, "DISCOVERY_EVERY_S", 0.0)
    ports = itertools.count(21000, 2)
    looks = []

    def discover():
        """Every node's relay seen on a new port at every look, as after a requeue of the whole job."""
        looks.append(time.monotonic())
        records = []
        for host in range(64):
            port = next(ports)
            records.append(
                NodeRecord("churn", f"node{host}", f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}", 1, 0.0, encrypted=False)
            )
        return records

    aggregator = Aggregator()
    receiver = receiver_module.Receiver(aggregator, discover=discover)
    receiver.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and receiver.is_alive() and len(looks) < 60:
            time.sleep(0.1)
        errors = aggregator.snapshot().errors
        assert receiver.is_alive(), errors
        assert not [e for e in errors if "receiver stopped" in e], errors
        assert len(looks) >= 60, f"only {len(looks)} looks in a minute"
        assert len(aggregator.snapshot().endpoints) == 64  # each node once, at its latest address
    finally:
        receiver.stop()
