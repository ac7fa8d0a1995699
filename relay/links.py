"""The relay's link prober: measures its node's network to the job's other nodes, and says what it found.

Why the relays and not the ranks: a slow link slows every member of a ring
alike, so no rank's own times single its node out (docs/detection.md), and
a measurement inside the ranks would add traffic to the training processes.
The relays run beside the job on every node, on the job's network (the
address ``RANKTOP_BIND`` names), and already hold the job's secret.

How: every :data:`PROBE_EVERY_S` (or less often: never more than
:data:`BUDGET_BPS` bytes a second) it takes the next peer relay in turn and
sends it a small probe, then, once that is answered, a probe of
:data:`PROBE_BYTES`. Both wait in the same queues on the way (a link busy
with the job's traffic delays both); the second also has to cross at the
link's rate, so ``PROBE_BYTES / (big round trip - small round trip)`` is
the rate the job's own traffic gets on that path now, from this node to the
peer. A link's rate is worked out from its last :data:`KEPT` probe pairs, as
``PROBE_BYTES / (least big round trip - least small round trip)``, the small
ones over a longer window (:data:`KEPT_SMALL`): the job's traffic queued
ahead of a probe, or a busy machine, only ever delays a round trip, so the
least of several is the one nearest the link itself (CapProbe's reasoning).
Not crossing by crossing: a small probe held up behind a burst of the job's
traffic, then a big one sent as the queue drained, make a crossing of
nothing on a link capped at 3 MB/s (and the small ones' least over five
pairs was still that burst's, on a link the job's traffic filled); and not
their median: on a 2-core machine at a load of 10 it read healthy links at
17 to 48 MB/s. A probe
not answered in :data:`PROBE_TIMEOUT_S` counts as a round trip of that long
(its link is that slow at least).

A relay probes itself too, in turn with its peers, through its own answering
socket (loopback, the same code and encryption, no network): on a machine
whose cores are oversubscribed, moving 32 KiB through the relays' threads
takes time of its own, and a link is slow only where its crossing is well
beyond what the node's own crossing says that time is (its ``links`` message
lists itself as a peer: watch/analysis/slow_links.py reads it so).

Once a second the relay publishes its links as a ``links`` message
(wire/messages.py ``Links``) into its own telemetry, beside its ranks'
messages, for any viewer (watch/analysis/slow_links.py judges them).

Who it probes: the relays whose node records (the rendezvous folder) carry a
``links`` address, of the same job, at most :data:`MAX_PEERS` of them, taken
at random where the job has more: the links of a node are measured by its
own probes and by the probes of every node that picked it (about as many),
so a slow node is seen from both ends in a job of any size, while each
relay's cost, and the time it takes to see a slowed link (five probes of
it: about 10 seconds), stay the same. Every probe and answer is signed with the job's secret
(wire/link_probes.py), the socket answering them is a CURVE server that
admits only the job's key (relay/zap.py), and a relay answers at most
:data:`ANSWERS_PER_S` probes a second, whoever sends them.
"""

from __future__ import annotations

from typing import Any, Callable

import collections
import random
import threading
import time
from dataclasses import dataclass, field

import zmq

from ranktop.transport import curve, rendezvous
from ranktop.wire import link_probes, schema
from ranktop.wire.link_probes import ACK, PROBE, PROBE_BYTES, Probe, ProbeError
from ranktop.wire.messages import Links, LinkRate
from ranktop.wire.pacing import links_every_s

#: At most one probe pair this often.
PROBE_EVERY_S = 0.4
#: What probing may send a second at most, answers included: under 0.1% of a 1 Gbit/s link (125,000 bytes a second).
BUDGET_BPS = 100_000
#: What a frame costs on the wire beyond its bytes (ZeroMQ's framing, CURVE's box, TCP/IP headers), as counted.
FRAME_OVERHEAD = 96
#: A probe unanswered this long is given up: its link is that slow at least.
PROBE_TIMEOUT_S = 2.0
#: Probe pairs a link's rate is worked out from (the median of their crossings).
KEPT = 5
#: Small probes the link's base round trip is the least of: more than the big ones, so that one of them has
#: likely found the link's queue empty even while the job's traffic fills it in bursts.
KEPT_SMALL = 20
#: A link not measured for this long is left out of what the relay says.
FORGET_S = 30.0
#: Peers probed at most (taken at random among more): each link is probed every ``probe_interval_s`` seconds, so a
#: slowed link shows once its last :data:`KEPT` are all slow, 10 seconds at this many peers (and itself).
MAX_PEERS = 4
#: Probes answered a second at most, whoever sends them.
ANSWERS_PER_S = 64
#: How often the relay looks for its job's other relays. It says what it measured every
#: ``links_every_s(nodes)`` (wire/pacing.py: each second, less often in a job of over 512 nodes).
DISCOVER_EVERY_S = 2.0
#: The least crossing time believed: below it a link is faster than this prober can tell.
MIN_CROSSING_S = 20e-6


#: A probe pair's bytes as the budget counts them: the two probes and their answers.
PAIR_BYTES = 2 * FRAME_OVERHEAD + PROBE_BYTES + 4 * 64


def pair_every_s() -> float:
    """Seconds between two probe pairs of one relay: the pace, or the budget's, whichever is slower."""
    return max(PROBE_EVERY_S, PAIR_BYTES / BUDGET_BPS)


def probe_interval_s(peers: int) -> float:
    """Seconds between two probes of one link, for a relay probing ``peers`` peers (and itself) in turn."""
    return pair_every_s() * (max(1, min(MAX_PEERS, peers)) + 1)


def _cost(frames: list[bytes]) -> int:
    return sum(len(f) for f in frames) + FRAME_OVERHEAD


@dataclass
class _Link:
    """One peer: its socket and what its probes measured."""

    url: str
    sock: zmq.Socket[bytes]
    bigs: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=KEPT))  # the big probes' round trips
    smalls: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=KEPT_SMALL))  # the small ones'; longer
    measured_at: float = 0.0

    def rate(self) -> float:
        """Bytes a second across it: the least big round trip less the least small one (the module docstring)."""
        return PROBE_BYTES / max(min(self.bigs) - min(self.smalls), MIN_CROSSING_S)


@dataclass
class _Pending:
    """The probe in flight: to whom, which, since when; ``small_rtt`` once the small one was answered."""

    peer: str
    seq: int
    sent: float
    small_rtt: float | None = None


class LinkProber(threading.Thread):
    def __init__(self, context: zmq.Context[Any], job: str, host: str, secret: bytes, keys: curve.Keys | None,
                 bind: str, advertised: str, publish: str, directory: str | None = None,
                 secure: Callable[[zmq.Socket[bytes]], None] | None = None):  # fmt: skip
        """``keys``: the job's CURVE keys (None: RANKTOP_CURVE=0); ``secure``: makes the answering socket a
        CURVE server before it binds (the relay's Gate.secure); ``publish``: where its ``links`` messages go
        (the relay's telemetry XSUB); ``bind``/``advertised``: the relay's own address."""
        super().__init__(name="ranktop-relay-links", daemon=True)
        self.job, self.host = job, host
        self._secret, self._keys, self._directory = secret, keys, directory
        self._context = context
        self._stop_event = threading.Event()
        self._server = context.socket(zmq.ROUTER)
        self._server.setsockopt(zmq.LINGER, 0)
        self._server.setsockopt(zmq.MAXMSGSIZE, link_probes.MAX_PAD + 4096)
        self._server.setsockopt(zmq.RCVHWM, 64)
        self._server.setsockopt(zmq.SNDHWM, 64)
        if secure is not None:
            secure(self._server)
        port = self._server.bind_to_random_port(f"tcp://{bind}")
        self.url = f"tcp://{advertised}:{port}"
        self._pub = context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, 16)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.connect(publish)
        self._links: dict[str, _Link] = {}
        self._order: list[str] = []
        self._turn = 0
        self._pending: _Pending | None = None
        self._seq = 0
        self._next_probe = 0.0
        self._tokens = float(ANSWERS_PER_S)
        self._tokens_at = time.monotonic()
        self.sent_bytes = 0  # every byte its probes and answers put on the wire, as counted (FRAME_OVERHEAD included)
        self.answered = 0
        self.refused = 0
        self.published = 0
        self.nodes = 1  # the job's relays that probe, itself among them (the rendezvous folder says: _discover)
        self._rng = random.Random()

    def stop(self, timeout: float = 1.0) -> bool:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)
        return not self.is_alive()

    # -- the loop ----------------------------------------------------------------------------------------

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._server, zmq.POLLIN)
        next_discover = next_publish = time.monotonic()
        published_bytes, published_at = 0, time.monotonic()
        try:
            while not self._stop_event.is_set():
                now = time.monotonic()
                if now >= next_discover:
                    next_discover = now + DISCOVER_EVERY_S
                    self._discover(poller)
                if now >= next_publish:
                    next_publish = now + links_every_s(self.nodes)
                    cost = (self.sent_bytes - published_bytes) / max(now - published_at, 1e-3)
                    published_bytes, published_at = self.sent_bytes, now
                    self._publish(now, cost)
                self._probe_due(now)
                wake = min(next_discover, next_publish, self._next_due())
                for sock, _ in poller.poll(max(1, min(250, int((wake - time.monotonic()) * 1000)))):
                    if sock is self._server:
                        self._answer()
                    else:
                        self._answered(sock)
        except zmq.ContextTerminated:
            pass
        finally:
            for link in self._links.values():
                link.sock.close(linger=0)
            self._server.close(linger=0)
            self._pub.close(linger=0)

    def _next_due(self) -> float:
        pending = self._pending
        if pending is not None:
            return pending.sent + PROBE_TIMEOUT_S
        return self._next_probe if self._order else time.monotonic() + 1.0

    # -- the peers -------------------------------------------------------------------------------------

    def _discover(self, poller: zmq.Poller) -> None:
        """The job's other relays that answer probes, from the rendezvous folder; sockets opened and closed to fit."""
        try:
            records = rendezvous.read_nodes(self.job, self._directory)
        except OSError:
            return
        found = {r.host: r.links for r in records if r.links and r.host != self.host and not r.is_stale()}
        self.nodes = len(found) + 1
        if len(found) > MAX_PEERS:
            kept = [h for h in self._order if h in found][:MAX_PEERS]
            rest = [h for h in sorted(found) if h not in kept]
            kept += self._rng.sample(rest, MAX_PEERS - len(kept))
            found = {h: found[h] for h in kept}
        if found:  # and itself, over loopback: what this machine's own load adds to a crossing (see the module docstring)
            found[self.host] = self.url
        for host in [h for h, link in self._links.items() if found.get(h) != link.url]:
            link = self._links.pop(host)
            poller.unregister(link.sock)
            link.sock.close(linger=0)
            if self._pending is not None and self._pending.peer == host:
                self._pending = None
        for host, url in found.items():
            if host in self._links:
                continue
            sock = self._context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.IMMEDIATE, 1)  # nothing queued for a peer not connected: no burst when it comes
            sock.setsockopt(zmq.SNDHWM, 4)
            sock.setsockopt(zmq.MAXMSGSIZE, 4096)  # answers are small
            if self._keys is not None:
                curve.make_client(sock, self._keys)
            try:
                sock.connect(url)
            except zmq.ZMQError:
                sock.close(linger=0)
                continue
            self._links[host] = _Link(url, sock)
            poller.register(sock, zmq.POLLIN)
        self._order = sorted(self._links)

    # -- probing ---------------------------------------------------------------------------------------

    def _probe_due(self, now: float) -> None:
        pending = self._pending
        if pending is not None:
            if now - pending.sent >= PROBE_TIMEOUT_S:
                if pending.small_rtt is not None:  # the big one did not cross in time: at most this fast
                    self._measured(pending.peer, PROBE_TIMEOUT_S, pending.small_rtt, now)
                self._pending = None
            return
        if not self._order or now < self._next_probe:
            return
        peer = self._order[self._turn % len(self._order)]
        self._turn += 1
        self._next_probe = now + pair_every_s()  # (the pair's bytes at the budget's rate, or the pace)
        self._send(peer, b"", now)

    def _send(self, peer: str, pad: bytes, now: float) -> None:
        self._seq += 1
        out = link_probes.frames(self._secret, PROBE, Probe(self.job, self.host, self._seq, time.time(), pad))
        try:
            self._links[peer].sock.send_multipart(out, flags=zmq.NOBLOCK)
        except zmq.Again:  # not connected (yet): try the next peer at the next turn
            self._pending = None
            return
        if peer != self.host:  # (its probes to itself cross no network)
            self.sent_bytes += _cost(out)
        if pad:
            assert self._pending is not None
            self._pending.seq, self._pending.sent = self._seq, time.monotonic()
        else:
            self._pending = _Pending(peer, self._seq, time.monotonic())

    def _answered(self, sock: zmq.Socket[bytes]) -> None:
        for _ in range(16):
            try:
                got = sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            now = time.monotonic()
            try:
                ack = link_probes.read(self._secret, self.job, ACK, got, time.time())
            except ProbeError:
                continue
            pending = self._pending
            if pending is None or ack.seq != pending.seq or ack.host != pending.peer:
                continue  # the answer to a probe given up on
            rtt = now - pending.sent
            if pending.small_rtt is None:
                pending.small_rtt = rtt
                self._send(pending.peer, bytes(PROBE_BYTES), now)
            else:
                self._measured(pending.peer, rtt, pending.small_rtt, now)
                self._pending = None

    def _measured(self, peer: str, big: float, small: float, now: float) -> None:
        link = self._links.get(peer)
        if link is not None:
            link.bigs.append(big)
            link.smalls.append(small)
            link.measured_at = now

    # -- answering -------------------------------------------------------------------------------------

    def _answer(self) -> None:
        for _ in range(16):
            try:
                got = self._server.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(got) < 2:
                continue
            now = time.monotonic()
            self._tokens = min(float(ANSWERS_PER_S), self._tokens + (now - self._tokens_at) * ANSWERS_PER_S)
            self._tokens_at = now
            try:
                probe = link_probes.read(self._secret, self.job, PROBE, got[1:], time.time())
            except ProbeError:
                self.refused += 1
                continue
            if self._tokens < 1.0:
                self.refused += 1
                continue
            self._tokens -= 1.0
            out = link_probes.frames(self._secret, ACK, Probe(self.job, self.host, probe.seq, time.time()))
            try:
                self._server.send_multipart([got[0], *out], flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                continue
            self.sent_bytes += _cost(out)
            self.answered += 1

    # -- saying it -------------------------------------------------------------------------------------

    def rates(self, now: float | None = None) -> list[LinkRate]:
        """Each link measured lately: its rate, least round trip, probes."""
        now = time.monotonic() if now is None else now
        return [
            LinkRate(peer=host, rate=link.rate(), rtt=float(min(link.smalls)), probes=len(link.bigs))
            for host, link in sorted(self._links.items())
            if link.bigs and now - link.measured_at <= FORGET_S
        ]

    def _publish(self, now: float, cost: float) -> None:
        links = self.rates(now)
        if not links:
            return
        msg = Links(job=self.job, host=self.host, ts=time.time(), links=links, cost=cost)
        try:
            self._pub.send_multipart(schema.encode(msg), flags=zmq.NOBLOCK)
            self.published += 1
        except zmq.Again:
            pass
