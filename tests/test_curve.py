"""Telemetry and commands over TCP are encrypted and authenticated with keys derived from the job's secret.

Real relays and real ZeroMQ sockets: a relay in this process fed over its IPC
socket by a publisher that sends what a rank sends, and (slow tests) real rank
processes watched through the installed ``ranktop`` command.
"""

import contextlib
import dataclasses
import json
import os
import socket
import threading
import time

import pytest
import zmq
import zmq.utils.z85

from messages import frames, sender
from support import run_cli, wait_for

from ranktop.relay import zap
from ranktop.transport.identity import Identity
from ranktop.relay.proxy import Relay
from ranktop.transport.ipc import ipc_endpoints
from ranktop.tui.panes.status import status_text
from ranktop.tui.panes.waiting import waiting_text
from ranktop.watch.engine.requests import RequestError
from ranktop.watch.session import WatchSession, resolve
from ranktop.wire import auth, schema
from ranktop.wire.names import COMMAND, HEARTBEAT
from ranktop.transport import curve, rendezvous


def test_the_keys_come_from_the_secret_and_libzmq_agrees_with_their_public_halves():
    keys = curve.keys_of(b"one secret")
    assert keys == curve.keys_of(b"one secret")
    other = curve.keys_of(b"another secret")
    assert {keys.server_public, keys.client_public}.isdisjoint({other.server_public, other.client_public})
    for _ in range(20):
        secret = os.urandom(32)
        assert curve.x25519_public(secret) == zmq.utils.z85.decode(zmq.curve_public(zmq.utils.z85.encode(secret)))
    assert zmq.has("curve")


@contextlib.contextmanager
def relay_in_process(job):
    """A relay of ``job`` (1 rank, on node0) in this process, and a PUB socket on its IPC endpoint to send what a
    rank sends; both closed after, and the relay must stop cleanly."""
    ctx = zmq.Context()
    identity = Identity(job=job, rank=0, local_rank=0, world=1, local_world=1, host="node0", pid=os.getpid(), launcher="torchrun")
    relay = Relay(identity, ctx)
    relay.start()
    pub = ctx.socket(zmq.PUB)
    pub.connect(ipc_endpoints(job, "node0")[0])
    try:
        yield relay, ctx, pub
    finally:
        pub.close(linger=0)
        assert relay.stop()
        ctx.term()


@pytest.fixture
def relay(rdv, monkeypatch):
    """A relay of job "sealed" (1 rank) in this process, fed a hello and a heartbeat every 50 ms over its IPC socket."""
    monkeypatch.setenv("RANKTOP_BIND", "127.0.0.1")
    with relay_in_process("sealed") as (relay, ctx, pub):
        stop = threading.Event()

        def publish():
            rank = sender(0, world=1, host="node0", job="sealed")
            while not stop.is_set():
                pub.send_multipart(rank.message(rank.wire_hello()))
                pub.send_multipart(frames(HEARTBEAT, 0, {"state": {"step": 3}}, world=1, host="node0", job="sealed"))
                time.sleep(0.05)

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        yield relay, ctx
        stop.set()
        thread.join()


def received(ctx, url, seconds=1.0, keys=None, subscribe=b"", until=None):
    """How many messages a SUB socket (a CURVE client with ``keys``, else plain) receives from ``url`` in
    ``seconds``, or as soon as ``until`` have come: a count that must be reached is waited for (``seconds`` then
    only its generous bound), one that must stay at 0 is watched for the whole time."""
    sock = ctx.socket(zmq.SUB)
    if keys is not None:
        curve.make_client(sock, keys)
    sock.subscribe(subscribe)
    sock.connect(url)
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline and (until is None or count < until):
        if sock.poll(50):
            schema.decode(sock.recv_multipart())  # what arrives is readable telemetry
            count += 1
    sock.close(linger=0)
    return count


def test_a_plain_subscriber_on_the_relay_port_receives_nothing_while_the_job_key_reads_the_rank(relay):
    relay, ctx = relay
    secret = rendezvous.read_secret("sealed")
    refused = zap.refused(ctx)
    assert received(ctx, relay.telemetry_url) == 0
    assert received(ctx, relay.telemetry_url, keys=curve.keys_of(b"a guess")) == 0
    assert zap.refused(ctx) == refused  # a wrong server key: the relay could not even open its hello
    # the relay's public key is not enough: its ZAP handler admits only the job's client key
    stranger = dataclasses.replace(curve.keys_of(secret), client_public=curve.x25519_public(b"s" * 32), client_secret=b"s" * 32)
    assert received(ctx, relay.telemetry_url, keys=stranger) == 0
    assert zap.refused(ctx) > refused
    got = received(ctx, relay.telemetry_url, keys=curve.keys_of(secret), seconds=15, until=11)  # 20 a second
    assert got > 10, f"the job's key read {got} messages in 15 s"


def test_only_the_job_key_pushes_commands_and_they_arrive_still_signed(relay):
    relay, ctx = relay
    secret = rendezvous.read_secret("sealed")
    ranks = ctx.socket(zmq.SUB)  # where the node's ranks hear commands
    ranks.subscribe(COMMAND.encode())
    ranks.connect(ipc_endpoints("sealed", "node0")[1])
    verifier = auth.CommandVerifier(secret, "sealed")

    def push(keys, frames_):
        sock = ctx.socket(zmq.PUSH)
        if keys is not None:
            curve.make_client(sock, keys)
        sock.connect(relay.control_url)
        sock.send_multipart(frames_)
        return sock

    pushers = [push(None, auth.sign_command(secret, "sealed", "ping")[1])]  # signed, but no CURVE
    pushers.append(push(curve.keys_of(b"a guess"), auth.sign_command(secret, "sealed", "ping")[1]))
    assert not ranks.poll(800)
    command_id, signed = auth.sign_command(secret, "sealed", "ping")
    pushers.append(push(curve.keys_of(secret), signed))
    assert ranks.poll(10_000), "the job key's command never reached the ranks in 10 s"
    assert verifier.verify(ranks.recv_multipart()).id == command_id  # the HMAC travels inside, unchanged
    assert not ranks.poll(300)  # and it alone: the refused ones were never let through
    for sock in [*pushers, ranks]:
        sock.close(linger=0)


def test_a_viewer_with_a_wrong_secret_is_told_in_one_line_where_it_looks(relay, monkeypatch):
    monkeypatch.setenv("RANKTOP_SECRET", "not the job's")
    with WatchSession(resolve(["sealed"])) as session:
        line = wait_for(lambda: session.receiver.handshakes.problem, 10, "the refused handshake was never told")
        assert line.startswith("job sealed refused this viewer's key: RANKTOP_SECRET is not its secret")
        assert "~/.ranktop/jobs/sealed/secret" in line and "docs/security.md" in line
        snap = session.snapshot()
        assert snap.ranks == [] and snap.errors == [line]
        assert status_text(snap).plain.splitlines()[0] == line  # the TUI's status line
        assert line in waiting_text(snap).plain  # and in full on the empty screen
        with pytest.raises(RequestError, match="refused this viewer's key"):
            session.request("ping", timeout=1.0)  # what `ranktop ping` says


def test_a_viewer_without_the_secret_is_told_where_to_put_it(relay, rdv):
    (rdv / "jobs" / "sealed" / "secret").rename(rdv / "elsewhere")
    with WatchSession(resolve(["sealed"])) as session:
        line = wait_for(lambda: session.receiver.handshakes.problem, 10, "the missing key was never told")
    assert line == (
        f"job sealed is encrypted and this viewer has no key: copy the job's secret to {rdv}/jobs/sealed/secret "
        "or set RANKTOP_SECRET (docs/security.md)"
    )


def test_the_right_secret_reads_the_ranks_by_job_name_and_by_bare_endpoint(relay, monkeypatch):
    relay, _ = relay
    with WatchSession(resolve(["sealed"])) as session:
        wait_for(lambda: session.snapshot().ranks, 10, "the job's own viewer saw no rank")
    monkeypatch.setenv("RANKTOP_SECRET", rendezvous.read_secret("sealed").decode())  # as through an ssh tunnel
    with WatchSession(resolve([relay.telemetry_url])) as session:
        wait_for(lambda: session.snapshot().ranks, 10, "a viewer of the bare endpoint saw no rank")
        assert session.receiver.handshakes.problem is None


def test_encryption_on_one_side_only_is_one_line_either_way(relay, monkeypatch):
    monkeypatch.setenv("RANKTOP_CURVE", "0")
    with WatchSession(resolve(["sealed"])) as session:
        line = wait_for(lambda: session.receiver.handshakes.problem, 10, "the mismatch was never told")
    assert line == "job sealed is encrypted and this viewer is not: unset RANKTOP_CURVE=0 here (docs/security.md)"


def test_with_encryption_off_on_both_sides_a_plain_subscriber_reads_the_rank(rdv, monkeypatch):
    monkeypatch.setenv("RANKTOP_CURVE", "0")
    monkeypatch.setenv("RANKTOP_BIND", "127.0.0.1")
    with relay_in_process("open") as (relay, ctx, pub):
        sub = ctx.socket(zmq.SUB)
        sub.subscribe(b"")
        sub.connect(relay.telemetry_url)
        rank = sender(0, world=1, host="node0", job="open")
        got = wait_for(lambda: pub.send_multipart(rank.message(rank.wire_hello())) or sub.poll(100), 10, "nothing came")
        assert got and schema.decode(sub.recv_multipart()).job == "open"
        sub.close(linger=0)


# -- real rank processes, through the installed command --------------------------------------------


@pytest.mark.slow
def test_ranks_are_watched_with_the_secret_and_refused_without_it(launch_ranks, monkeypatch):
    launch_ranks("job-sealed", 2)
    out = run_cli("watch", "job-sealed", "--json", "--duration", "3")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["ranks"]) == 2
    (node,) = rendezvous.read_nodes("job-sealed")
    ctx = zmq.Context()
    assert received(ctx, node.telemetry, seconds=2.0) == 0  # a plain ZeroMQ subscriber, while the ranks send
    ctx.term()

    monkeypatch.setenv("RANKTOP_SECRET", "wrong")
    for command in (["watch", "job-sealed", "--json", "--duration", "2"], ["ping", "job-sealed", "--timeout", "2"]):
        out = run_cli(*command)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert out.stderr.splitlines()[-1].startswith("ranktop: error: job job-sealed refused this viewer's key: RANKTOP_SECRET")


@pytest.mark.slow
def test_a_job_run_unencrypted_is_read_by_an_unencrypted_viewer_and_named_to_an_encrypted_one(launch_ranks, monkeypatch):
    monkeypatch.setenv("RANKTOP_CURVE", "0")
    launch_ranks("job-open", 2)
    out = run_cli("watch", "job-open", "--json", "--duration", "3")
    assert out.returncode == 0, out.stderr
    monkeypatch.delenv("RANKTOP_CURVE")
    out = run_cli("watch", "job-open", "--json", "--duration", "3")
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == (
        "ranktop: error: job job-open is not encrypted (it runs with RANKTOP_CURVE=0): "
        "set RANKTOP_CURVE=0 here too to read it (docs/security.md)"
    )


def test_a_bare_endpoint_without_a_key_is_dialled_and_named_encrypted(relay, rdv):
    relay, _ = relay
    (rdv / "jobs" / "sealed" / "secret").rename(rdv / "elsewhere")  # nor does this machine's record help
    with WatchSession(resolve([relay.telemetry_url])) as session:
        line = wait_for(lambda: session.receiver.handshakes.problem, 10, "the missing key was never told")
    assert line.startswith(f"the job at {relay.telemetry_url} is encrypted and this viewer has no key: ")
    assert "RANKTOP_SECRET" in line


class Tunnel:
    """What ``ssh -L`` does, in threads: local ports forwarded byte for byte to a relay's two ports, side by side."""

    def __init__(self, telemetry_port: int, control_port: int):
        for _ in range(50):
            tele, ctl = socket.socket(), socket.socket()
            tele.bind(("127.0.0.1", 0))
            try:
                ctl.bind(("127.0.0.1", tele.getsockname()[1] + control_port - telemetry_port))
                break
            except (OSError, OverflowError):  # taken, or past 65535 (OverflowError): another free port
                tele.close()
                ctl.close()
        self.port = tele.getsockname()[1]
        for listener, target in ((tele, telemetry_port), (ctl, control_port)):
            listener.listen()
            threading.Thread(target=self._accept, args=(listener, target), daemon=True).start()

    def _accept(self, listener: socket.socket, target: int) -> None:
        while True:
            near, _ = listener.accept()
            far = socket.create_connection(("127.0.0.1", target))
            for a, b in ((near, far), (far, near)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            b.close()


@pytest.mark.slow
def test_through_a_tunnel_the_secret_reads_and_commands_the_ranks(launch_ranks, monkeypatch):
    launch_ranks("job-tunnel", 2)
    (node,) = rendezvous.read_nodes("job-tunnel")
    tunnel = Tunnel(int(node.telemetry.rsplit(":", 1)[1]), int(node.control.rsplit(":", 1)[1]))
    # as `ranktop attach --print-ssh` says: RANKTOP_SECRET=$(ssh login cat ~/.ranktop/jobs/JOB/secret) ranktop watch ...
    monkeypatch.setenv("RANKTOP_SECRET", rendezvous.read_secret("job-tunnel").decode())
    out = run_cli("ping", f"tcp://localhost:{tunnel.port}", "--timeout", "10")
    assert out.returncode == 0 and out.stdout.count("pong") == 2, out.stderr
