"""The receiver thread: one SUB socket per relay, everything it hears goes to the aggregator.

A socket per endpoint (rather than one socket connected everywhere) lets the
TUI say *which* endpoint has not answered. New endpoints come from a discovery
callable polled once a second, so nodes that start after the TUI, or relays
that restart on a new port, are picked up without a restart: a node is known
by its host name, and a new endpoint for a host replaces the old one (its
ranks then come back through the new one). Each socket has a monitor, so a
connection that drops (a relay killed) shows as a lost node at once, its
ranks silent rather than stalled.

Each relay costs the viewer a few open files (:data:`FDS_PER_RELAY`), so the
receiver raises its process's soft limit as relays are found, up to the hard
limit; a job with more relays than the hard limit allows is said in one line,
and the relays that fit are watched.
"""

from __future__ import annotations

import socket
import sys
import threading
import itertools
import time
from typing import Any, Callable, Iterable, Protocol, Sequence, cast
from urllib.parse import urlsplit

import zmq
from zmq.utils.monitor import recv_monitor_message

from ranktop.watch.errors import RanktopError
from ranktop.watch.engine.keys import HANDSHAKE_EVENTS, ClientKeys, Handshakes
from ranktop.watch.engine.socket_set import EVENTS, POLLIN, SocketSet
from ranktop.wire import auth, schema, settings
from ranktop.wire.messages import Hello, Links, Node, RankMessage
from ranktop.wire.names import LINKS, NODE, RANK_KINDS, REPLY
from ranktop.wire.pacing import digest_hz
from ranktop.transport import fd_limit, rendezvous


class Inbox(Protocol):
    """What the receiver hands what it hears to: relays found, connections made or lost, each poll's frames.
    watch/aggregator.py's ``Aggregator`` is one; the engine's receiver never imports it (it builds snapshots with
    the analysis side)."""

    @property
    def job(self) -> str | None: ...

    def add_endpoint(self, url: str, host: str | None = None) -> None: ...

    def replace_endpoint(self, old: str, new: str, host: str | None = None) -> None: ...

    def note_link(self, url: str, up: bool) -> None: ...

    def ingest_batch(self, batch: Sequence[tuple[list[bytes], str | None]]) -> list[RankMessage | Node | Links | None]: ...

    def note_dropped(self, error: str | None = None, *, fault: str | None = None) -> None: ...

    def note_error(self, error: str) -> None: ...


DISCOVERY_EVERY_S = 1.0
#: From this many nodes on (``RANKTOP_DIGESTS=auto``) the viewer takes one digest per node and interval instead
#: of every rank's own messages (relay/digest_fold.py): a few ranks are seen step by step, thousands in digests.
DIGESTS_FROM_NODES = 16
#: What a viewer subscribes to, step by step or in digests (replies to its commands always come from the ranks).
RANK_TOPICS = tuple(kind.encode() for kind in RANK_KINDS) + (LINKS.encode(),)
DIGEST_TOPICS = (NODE.encode(), REPLY.encode(), LINKS.encode())
#: Seconds between two waits on the relays' sockets and their monitors at least. A wait costs what is ready
#: (watch/engine/socket_set.py: the sockets are registered with the kernel once), and each ready socket is
#: drained: waited on as each message arrives, 512 relays sending four digests a second would wake the receiver
#: 2,000 times a second; at most 10 times, their messages are ingested in goes (watch/aggregator.py), for 100 ms
#: more latency at most. Monitors (connections made or dropped, handshakes) are read in the same wait: often
#: enough that a relay dropped and back within a second is seen dropped (at 0.25 s a CI run under load missed one).
POLL_EVERY_S = 0.1
#: Messages handed to the aggregator in one go at most (watch/aggregator.py: ingest_batch): a poll of 512
#: relays finds about 40 digests; far behind, it finds up to :data:`DRAIN_MAX` a relay.
BATCH_MAX = 512
#: Messages taken off one relay's socket per poll at most.
DRAIN_MAX = 256
#: Messages queued per relay while this viewer is behind (about 30 s of a node of 8 ranks at 4 Hz);
#: past that ZeroMQ drops the newest: a viewer that cannot keep up with 512 nodes loses messages
#: (counted as gaps in the ranks' steps) instead of its memory.
RECEIVE_QUEUE = 1000
#: ... and while it takes digests, this many seconds of a node's digests (wire/pacing.py: digest_hz, at the
#: job's size as the relays found so far say it): a viewer that fell behind a 16,384-rank job held some 200 of each
#: node's digests (1.7 GB) where it would never catch up; 30 s of them is the most it can use.
DIGEST_QUEUE_S = 30.0
#: Names each socket's monitor endpoint uniquely within this process (see _connect).
_MONITOR_IDS = itertools.count()
#: What a socket's monitor reports: a connection dropped, or made (the ZMTP handshake done).
LINK_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
#: Open files a relay costs the viewer: its SUB socket and TCP connection, the socket's monitor (two sockets),
#: and the PUSH socket and connection that commands go through (watch/engine/requests.py).
FDS_PER_RELAY = 6
#: What a viewer holds open besides: the interpreter's files, the terminal, a recording, libzmq's contexts.
FDS_BESIDES = 256


class Tap(Protocol):
    """Hears every frame the receiver gets, before decoding (the flight recorder): must not block."""

    def tap(self, frames: list[bytes], endpoint: str | None) -> None: ...

    def endpoint(self, url: str, host: str | None = None) -> None: ...


def connect_url(url: str, host: str | None = None) -> str:
    """The URL to dial from here: a relay on this very host is reached over loopback.

    A relay that bound every interface advertises its host name, which may not
    resolve (containers, laptops); loopback always works from the same host.
    """
    parts = urlsplit(url)
    if host is not None and parts.hostname == host == socket.gethostname():
        return f"tcp://127.0.0.1:{parts.port}"
    return url


def parse_endpoint(text: str) -> str:
    """Check a user-given endpoint (``tcp://host:port`` or ``host:port``); raise ValueError if bad."""
    url = text if "://" in text else f"tcp://{text}"
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "tcp" or not parts.hostname or port is None:
        raise ValueError(f"not an endpoint: {text!r} (expected tcp://HOST:PORT)")
    return f"tcp://{parts.hostname}:{port}"


def _checked(url: str) -> str:
    """``url`` itself if it is a tcp://HOST:PORT address (IPv6 in brackets included); else ValueError."""
    parts = urlsplit(url)
    if parts.scheme != "tcp" or not parts.hostname or parts.port is None:
        raise ValueError(f"not an endpoint: {url!r}")
    return url


def tunnelled_control(dialled: str, telemetry: str, control: str) -> str:
    """Where to send commands to a relay reached at ``dialled`` rather than at its own ``telemetry`` URL.

    Behind an ``ssh -L`` tunnel the relay's own addresses are unreachable; the
    control port is then sought at the same offset from the dialled port as on
    the relay (``ranktop attach --print-ssh`` forwards them that way).
    """
    d, t, c = urlsplit(dialled), urlsplit(telemetry), urlsplit(control)
    if dialled == telemetry or d.port is None or t.port is None or c.port is None or d.hostname in (t.hostname, None):
        return control
    return f"tcp://{d.hostname}:{d.port + c.port - t.port}"


class Receiver(threading.Thread):
    def __init__(
        self,
        aggregator: Inbox,
        endpoints: Iterable[str] = (),
        discover: Callable[[], Iterable[rendezvous.NodeRecord]] | None = None,
        on_control: Callable[[str], None] | None = None,
        recorder: "Tap | None" = None,
        digests: str | None = None,
        keys: ClientKeys | None = None,
    ):
        """``digests``: "on", "off" or "auto" (default: ``RANKTOP_DIGESTS``), see :data:`DIGESTS_FROM_NODES`."""
        super().__init__(name="ranktop-receiver", daemon=True)
        mode = (digests or settings.DIGESTS.get() or "auto").lower()
        if mode not in ("on", "off", "auto"):
            raise RanktopError(f"{settings.DIGESTS.name} must be on, off or auto, not {mode!r}")
        self._digest_mode = mode
        self.digests = mode == "on"  # taking node digests now (auto switches once, when the job turns out big)
        self._recorder = recorder
        self._aggregator = aggregator
        self._static = list(endpoints)
        self._discover = discover
        self._on_control = on_control
        self._stop_event = threading.Event()
        self._sockets: dict[str, zmq.Socket[bytes]] = {}  # advertised URL -> socket
        self._urls: dict[zmq.Socket[bytes], str] = {}  # and back
        self._monitors: dict[zmq.Socket[bytes], str] = {}  # a socket's monitor -> its advertised URL
        self._waiting = SocketSet()  # the relays' SUB sockets and their monitors, registered once
        self._controls: dict[str, dict[str, Any]] = {}  # a relay's telemetry URL -> the addresses its messages last gave
        self._by_host: dict[str, str] = {}  # discovered node -> its relay's advertised telemetry URL
        self._told: dict[str, str] = {}  # discovered node -> its relay's control URL as told to on_control
        self._room = 0  # relays the limit on open files has room for (see make_room)
        self._context = zmq.Context()
        self._context.set(zmq.MAX_SOCKETS, 16384)  # a SUB socket per relay, and its handshake monitor for a while
        # CURVE keys from the job's secret (watch/engine/keys.py); a failed handshake is said once, in one line
        keys = keys or ClientKeys(auth.read_secret_env, "RANKTOP_SECRET", lambda: aggregator.job)
        self._keys = keys
        self.handshakes = Handshakes(keys, aggregator.note_error)
        for url in self._static:
            aggregator.add_endpoint(url)
            if recorder is not None:
                recorder.endpoint(url)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        try:
            self.make_room(len(self._static))
            for url in self._static:
                self._connect(url, url)
            next_discovery = 0.0
            while not self._stop_event.is_set():
                if self._discover is not None and time.monotonic() >= next_discovery:
                    self._run_discovery()
                    next_discovery = time.monotonic() + DISCOVERY_EVERY_S
                if not self.digests and self._digest_mode == "auto" and len(self._sockets) >= DIGESTS_FROM_NODES:
                    self._take_digests()
                polled = time.monotonic()
                batch: list[tuple[list[bytes], str]] = []
                for sock in self._waiting.wait(POLL_EVERY_S / 2):
                    if sock in self._monitors:
                        self._monitor_events(sock)
                    elif sock in self._urls:
                        self._drain(sock, batch)
                    if len(batch) >= BATCH_MAX:  # a viewer far behind: in bounded goes, every relay served in turn
                        self._take(batch)
                        batch = []
                        if self._stop_event.is_set():  # a backlog of hundreds of relays must not delay a stop
                            break
                if batch:
                    self._take(batch)
                rest = POLL_EVERY_S - (time.monotonic() - polled)
                if rest > 0:
                    self._stop_event.wait(rest)
        except Exception as exc:  # never die silently: the UI shows why the data stopped
            self._aggregator.note_error(f"receiver stopped: {exc.__class__.__name__}: {exc}")
            print(f"ranktop: receiver stopped: {exc}", file=sys.stderr)
        finally:
            self._waiting.close()
            for monitor in self._monitors:
                monitor.close(linger=0)
            for sock in self._sockets.values():
                sock.close(linger=0)
            self._context.term()

    def _run_discovery(self) -> None:
        discover, on_control = self._discover, self._on_control
        if discover is None:
            return
        try:
            records = list(discover())
        except OSError as exc:
            self._aggregator.note_error(f"cannot read rendezvous directory: {exc}")
            return
        self.make_room(len(records) + len(self._static))
        for rec in records:
            old = self._by_host.get(rec.host)
            if old is not None and old != rec.telemetry and old in self._sockets:
                sock = self._sockets.pop(old)
                del self._urls[sock]
                self._waiting.remove(sock)
                self._unmonitor(sock, old)
                sock.close(linger=0)
                self._aggregator.replace_endpoint(old, rec.telemetry, rec.host)
            self._by_host[rec.host] = rec.telemetry
            try:
                if rec.telemetry not in self._sockets:
                    if len(self._sockets) >= self._room:
                        continue  # no room for its sockets: said once, by make_room
                    self._aggregator.add_endpoint(rec.telemetry, rec.host)
                    if self._recorder is not None:
                        self._recorder.endpoint(rec.telemetry, rec.host)
                    guessed = rec.pid == 0  # no relay wrote it: where the SLURM port convention puts one (watch/session.py)
                    if rec.encrypted is False and self._keys.encrypted:  # its record says: it reads nothing either way
                        self.handshakes.plain(rec.telemetry)
                    else:
                        self._connect(rec.telemetry, connect_url(rec.telemetry, rec.host), guessed)
                if on_control is not None and self._told.get(rec.host) != rec.control:  # (once per change)
                    on_control(connect_url(rec.control, rec.host))
                    self._told[rec.host] = rec.control
            except ValueError as exc:  # a record whose URL is no URL (a bad port): skip it, say why
                self._aggregator.note_error(f"node record of {rec.host}: {exc}")

    def make_room(self, relays: int) -> None:
        """Raise the limit on open files for ``relays`` relays, as far as the hard limit allows; short of it, say once
        how many fit (the rest stay unwatched: a socket past the limit would fail wherever it came)."""
        if relays <= self._room:
            return
        limit = fd_limit.room_for(FDS_BESIDES + FDS_PER_RELAY * relays)
        self._room = max(0, (limit - FDS_BESIDES) // FDS_PER_RELAY)
        if self._room < relays:  # the same words however many relays come: one line
            self._aggregator.note_error(
                f"this viewer watches only {self._room} relays: each takes {FDS_PER_RELAY} open files and this machine "
                f"allows {fd_limit.hard_limit()} (`ulimit -Hn`); raise the hard limit to watch every node"
            )  # fmt: skip

    def _connect(self, url: str, dial: str, guessed: bool = False) -> None:
        if len(self._sockets) >= self._room:
            return  # no room for its sockets: said once, by make_room
        sock = self._context.socket(zmq.SUB)
        queue = max(8, int(DIGEST_QUEUE_S * digest_hz(len(self._sockets) + 1))) if self.digests else RECEIVE_QUEUE
        sock.setsockopt(zmq.RCVHWM, queue)
        sock.setsockopt(zmq.MAXMSGSIZE, schema.MAX_BODY_BYTES + 4096)
        sock.setsockopt(zmq.LINGER, 0)
        for topic in DIGEST_TOPICS if self.digests else RANK_TOPICS:
            sock.setsockopt(zmq.SUBSCRIBE, topic)
        # No secret yet: a relay a record names waits for it (discovery tries again); a bare endpoint, or one the
        # SLURM port convention guesses, is dialled plain: a port where nothing listens then stays "waiting"
        # (and is said as such), an encrypted relay is named as one.
        if not self._keys.secure(sock) and not (url in self._static or guessed):
            sock.close(linger=0)
            self.handshakes.no_key(url)
            return
        # One monitor per socket (a socket has one): its handshakes (a refused key is said in one line,
        # watch/engine/keys.py) and its connection dropped or made (the node lost or back at once).
        # An endpoint of our own: pyzmq's default names it after the socket's file descriptor, which a relay's new
        # socket may reuse while the old one's monitor is still being torn down ("Address already in use").
        monitor = sock.get_monitor_socket(LINK_EVENTS | HANDSHAKE_EVENTS, f"inproc://ranktop-monitor-{next(_MONITOR_IDS)}")
        try:
            sock.connect(dial)
        except zmq.ZMQError as exc:  # a record or host name that is no address: say so, keep the others
            sock.disable_monitor()
            monitor.close(linger=0)
            sock.close(linger=0)
            self._aggregator.note_error(f"cannot dial {dial}: {exc}")
            return
        self._sockets[url] = sock
        self._urls[sock] = url  # the aggregator knows an endpoint by its advertised URL
        self._waiting.add(sock)
        self._monitors[monitor] = url
        self._waiting.add(monitor)

    def _unmonitor(self, sock: zmq.Socket[bytes], url: str) -> None:
        try:
            sock.disable_monitor()
        except zmq.ZMQError:
            pass
        for monitor, of in list(self._monitors.items()):
            if of == url:
                self._waiting.remove(monitor)
                del self._monitors[monitor]
                monitor.close(linger=0)

    def _monitor_events(self, monitor: zmq.Socket[bytes]) -> None:
        """A connection made or dropped (the aggregator shows the node connected or lost from now on), or a
        handshake that failed (the key is refused: said once, watch/engine/keys.py)."""
        url = self._monitors[monitor]
        sock = self._sockets.get(url)
        for _ in range(64):
            try:
                event = recv_monitor_message(monitor, flags=zmq.NOBLOCK)
            except zmq.Again:
                return  # (all read: its descriptor is raised again by the next event)
            kind = event["event"]
            if kind & HANDSHAKE_EVENTS and sock is not None:
                self.handshakes.event(sock, url, kind, event["value"])
            if kind & (zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED):
                self._aggregator.note_link(url, up=bool(kind & zmq.EVENT_HANDSHAKE_SUCCEEDED))
        self._waiting.again(monitor)  # more than it reads in one go: the rest in the next wait

    def _take_digests(self) -> None:
        """The job is big: from now on one digest per node, not every rank's messages (the ranks' own messages
        already queued still arrive, and count; the aggregator does not count a step twice)."""
        self.digests = True
        for sock in self._sockets.values():
            for topic in RANK_TOPICS:
                if topic not in DIGEST_TOPICS:
                    sock.setsockopt(zmq.UNSUBSCRIBE, topic)
            sock.setsockopt(zmq.SUBSCRIBE, NODE.encode())

    def _drain(self, sock: zmq.Socket[bytes], batch: list[tuple[list[bytes], str]], limit: int = DRAIN_MAX) -> None:
        """Take what one relay sent, a bounded number at a time: a viewer behind on hundreds of relays serves
        them in turn rather than one for long (the others would look silent meanwhile)."""
        url = self._urls[sock]
        for count in range(limit):
            if count and not cast(int, sock.getsockopt(EVENTS)) & POLLIN:  # (cheaper than an Again raised per drain)
                return  # (all taken: its descriptor is raised again by the next message, watch/engine/socket_set.py)
            try:
                frames = sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            batch.append((frames, url))
        self._waiting.again(sock)  # more than one go's share: the rest in the next wait

    def _take(self, batch: list[tuple[list[bytes], str]]) -> None:
        """What one poll took off the wire: to the flight recorder, the aggregator (in one go: watch/aggregator.py),
        and (a hello, a digest) the relay's control address."""
        if self._recorder is not None:
            kept = []
            for frames, url in batch:
                try:
                    self._recorder.tap(frames, url)  # as it came off the wire; never blocks (watch/offline/recording.py)
                    kept.append((frames, url))
                except Exception as exc:  # the message is lost, never the thread
                    self._aggregator.note_dropped(fault=f"dropped messages the receiver could not handle: {exc.__class__.__name__}")
            batch = kept
        try:
            taken = self._aggregator.ingest_batch(batch)  # (a snapshot being built goes first: yield_to_snapshots)
        except Exception as exc:  # whatever the messages hold, never end the thread (the picture would freeze)
            self._aggregator.note_dropped(fault=f"dropped messages the receiver could not handle: {exc.__class__.__name__}")
            return
        if self._on_control is None:
            return
        controls, on_control = self._controls, self._on_control
        for msg, (_, url) in zip(taken, batch):  # (every digest says where its relay is: looked into when it changes)
            if isinstance(msg, (Hello, Node)) and msg.relay is not None and controls.get(url) != msg.relay:
                self._note_relay(msg, msg.relay, url, on_control)

    def _note_relay(self, msg: Hello | Node, relay: dict[str, str], url: str, on_control: Callable[[str], None]) -> None:
        """Where a relay takes commands, as its hello or digest says (``relay``: its addresses, other than those
        last told through ``url``; told on to ``on_control``)."""
        if isinstance(relay.get("control"), str):
            self._controls[url] = relay  # a relay says where it is in every digest: taken once, when it changes
            try:  # addresses from the network: a malformed one is dropped, never fatal
                control = relay["control"]
                if url in self._static and isinstance(relay.get("telemetry"), str):
                    control = tunnelled_control(url, relay["telemetry"], control)
                on_control(_checked(connect_url(control, msg.host)))
            except ValueError:
                self._aggregator.note_dropped(f"{url}: a hello with a malformed relay address")
