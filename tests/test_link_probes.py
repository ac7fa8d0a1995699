"""The relays' link probes: signed, answered only for the job's relays, within their budget, said as ``links`` messages.

Real relays (relay/proxy.py, each with its prober: relay/links.py) on
loopback, three "nodes" in this process under their own host names; a viewer's
SUB socket with the job's keys hears what they say.
"""

from __future__ import annotations

import os
import time

import pytest
import zmq

from support import wait_for

from ranktop.relay import links as prober
from ranktop.relay.proxy import Relay
from ranktop.transport import curve, rendezvous
from ranktop.transport.identity import Identity
from ranktop.wire import link_probes, schema
from ranktop.wire.link_probes import ACK, PROBE, Probe, ProbeError

JOB = "probed"
HOSTS = ("node-a", "node-b", "node-c")


@pytest.fixture
def relays(rdv, monkeypatch):
    """start(**env) -> three relays of JOB on loopback, stopped at the end."""
    monkeypatch.setenv("RANKTOP_BIND", "127.0.0.1")
    context = zmq.Context()
    started = []

    def start():
        for host in HOSTS:
            identity = Identity(job=JOB, rank=-1, local_rank=-1, world=0, local_world=None, host=host, pid=os.getpid(),
                                launcher="relay", machine=host, slurm_job=None)  # fmt: skip
            relay = Relay(identity, context, str(rdv))
            relay.start()
            started.append(relay)
        return started

    yield start
    for relay in started:
        relay.stop()
    context.term()


def listen(context: zmq.Context, relay: Relay, rdv) -> zmq.Socket:
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    if curve.enabled():
        curve.make_client(sub, curve.keys_of(rendezvous.load_or_create_secret(JOB, str(rdv))))
    sub.setsockopt(zmq.SUBSCRIBE, b"links")
    sub.connect(relay.telemetry_url)
    return sub


def test_every_relay_measures_its_links_to_the_others_and_says_so_within_its_budget(relays, rdv):
    started = relays()
    assert all(r.links for r in rendezvous.read_nodes(JOB, str(rdv)))  # the records say where probes are answered
    context = zmq.Context()
    subs = [listen(context, relay, rdv) for relay in started]  # (each relay says its own node's links)
    poller = zmq.Poller()
    for sub in subs:
        poller.register(sub, zmq.POLLIN)
    heard = {}
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and not (
            len(heard) == 3 and all(len(m.links) == 3 and min(r.probes for r in m.links) >= 4 for m in heard.values())
        ):
            for sub, _ in poller.poll(500):
                msg = schema.decode(sub.recv_multipart())
                heard[msg.host] = msg
    finally:
        for sub in subs:
            sub.close()
        context.term()
    assert set(heard) == set(HOSTS), heard
    for host, msg in heard.items():
        assert {r.peer for r in msg.links} == set(HOSTS)  # the two others, and itself over loopback (its noise floor)
        assert all(r.rate > 0 and r.rtt > 0 for r in msg.links)
        assert msg.cost <= prober.BUDGET_BPS * 1.25  # what it sent a second, answers included


def test_a_probe_signed_with_another_secret_gets_no_answer(relays, rdv, monkeypatch):
    monkeypatch.setenv("RANKTOP_CURVE", "0")  # (with CURVE, a stranger's connection is refused before any probe)
    monkeypatch.setenv("RANKTOP_LINK_PROBES", "1")
    started = relays()
    record = next(r for r in rendezvous.read_nodes(JOB, str(rdv)) if r.host == "node-a")
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(record.links)
    try:
        dealer.send_multipart(link_probes.frames(b"not the job's secret", PROBE, Probe(JOB, "stranger", 1, time.time(), b"x" * 100)))
        assert not dealer.poll(1000)
        ours = rendezvous.load_or_create_secret(JOB, str(rdv))
        dealer.send_multipart(link_probes.frames(ours, PROBE, Probe(JOB, "node-z", 2, time.time(), b"x" * 100)))
        assert dealer.poll(5000)
        ack = link_probes.read(ours, JOB, ACK, dealer.recv_multipart(), time.time())
        assert (ack.seq, ack.host, ack.pad) == (2, "node-a", b"")
    finally:
        dealer.close()
        context.term()
    wait_for(lambda: started[0]._links.refused >= 1, 5, "the forged probe was not counted as refused")


def test_probing_off_leaves_no_probe_address_in_the_records(relays, rdv, monkeypatch):
    monkeypatch.setenv("RANKTOP_LINK_PROBES", "0")
    relays()
    assert [r.links for r in rendezvous.read_nodes(JOB, str(rdv))] == ["", "", ""]


def test_probe_frames_of_another_job_forged_stale_or_malformed_are_refused():
    secret, now = b"s" * 64, 1000.0
    good = link_probes.frames(secret, PROBE, Probe("j", "a", 1, now, b"pad"))
    assert link_probes.read(secret, "j", PROBE, good, now).pad == b"pad"
    bad = [
        (link_probes.frames(b"other", PROBE, Probe("j", "a", 1, now)), "not signed"),
        (link_probes.frames(secret, PROBE, Probe("k", "a", 1, now)), "of job"),
        (link_probes.frames(secret, PROBE, Probe("j", "a", 1, now - 3600)), "off"),
        (link_probes.frames(secret, ACK, Probe("j", "a", 1, now)), "not a probe"),
        (good[:2], "not a probe"),
        ([PROBE, b"\xc1", link_probes._mac(secret, PROBE, b"\xc1")], "malformed"),
    ]
    for frames, why in bad:
        with pytest.raises(ProbeError, match=why):
            link_probes.read(secret, "j", PROBE, frames, now)


@pytest.mark.slow
def test_the_probe_cost_benchmark_runs_and_reports_the_cost_per_node(tmp_path):
    """Its figure is for people (benchmarks/link_probe_cost.py); here: it runs, and says every node's."""
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).parent.parent / "benchmarks" / "link_probe_cost.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--seconds", "4", "--json"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode in (0, 1), out.stderr[-2000:]
    import json

    doc = json.loads(out.stdout)
    assert [r["node"] for r in doc["rows"]] == ["node-0", "node-1", "node-2"] and doc["target_bps"] == 125_000
    assert all(r["counted_bps"] > 0 for r in doc["rows"])


def test_relays_of_a_big_job_say_their_links_less_often_but_before_the_viewer_forgets_them():
    """Each relay's links message is decoded by the viewer: up to 512 nodes every second, beyond that the job's relays
    together send about 512 a second, and never so seldom that the link book forgets a relay between two."""
    from ranktop.watch.engine.link_book import FORGET_S
    from ranktop.wire.pacing import links_every_s

    assert [links_every_s(n) for n in (1, 3, 512)] == [1.0, 1.0, 1.0]
    assert links_every_s(1024) == 2.0
    assert links_every_s(2048) == links_every_s(16_384) == 3.0
    assert all(links_every_s(n) * 3 <= FORGET_S for n in (1, 2048, 1 << 20))
