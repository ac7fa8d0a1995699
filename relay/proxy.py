"""One endpoint per node: ZeroMQ proxies in the node's relay process (relay/process.py) that join the node's ranks to any TUI.

Two of ZeroMQ's own proxy devices, each in a thread of its own (``zmq.proxy``
runs in C and releases the GIL, so it costs the training thread nothing):

- telemetry: ranks PUB over IPC -> XSUB ... XPUB on TCP -> any number of TUIs (SUB).
  Subscriptions flow back through the proxy, so while no TUI is attached the
  ranks' PUB sockets have no subscriber and drop messages at the source.
- control: TUIs PUSH signed commands over TCP -> PULL ... PUB over IPC -> ranks (SUB).
  The relay never checks signatures; every rank verifies each command itself.

Both TCP sockets are CURVE servers admitting only the job's client key
(relay/zap.py, transport/curve.py): a viewer without the job's secret reads nothing.

The IPC socket files live in a per-user folder of mode 0700, so other users of
the node cannot connect to them.

The TCP ports follow :mod:`ranktop.transport.ports`: ``RANKTOP_PORT``, else under
SLURM the job id's ports (so a TUI that knows only the job's nodes can dial
them), else random. A taken port falls back to a random one, said on stderr:
the probe never fails the job over a port.
"""

from __future__ import annotations

from typing import Any

import sys
import threading
import time
from pathlib import Path

import zmq

from ranktop.wire import settings
from ranktop.transport import ports, rendezvous
from ranktop.transport.ipc import ipc_endpoints, socket_file
from ranktop.relay.digest_fold import NodeDigest

from .digest import DigestThread
from .links import LinkProber
from ranktop.transport.identity import Identity
from .zap import Gate

#: Command frames are small; anything bigger arriving on the TCP control port is refused.
MAX_CONTROL_BYTES = 64 * 1024


def bind_address() -> str:
    """The interface the relay listens on: ``RANKTOP_BIND``, default every interface."""
    return settings.BIND.get() or "0.0.0.0"


def _bind(sock: zmq.Socket[bytes], addr: str, port: int | None) -> int:
    """Bind the wanted port, or a random one (and say why) when it is taken."""
    if port is not None:
        try:
            sock.bind(f"tcp://{addr}:{port}")
            return port
        except zmq.ZMQError as exc:
            print(
                f"ranktop: relay port {addr}:{port} is not free ({exc}); using a random port, which only the "
                "rendezvous folder finds (set RANKTOP_PORT or RANKTOP_PORT_BASE to choose)",
                file=sys.stderr,
            )
    return sock.bind_to_random_port(f"tcp://{addr}")


class Relay:
    def __init__(self, identity: Identity, context: zmq.Context[Any], directory: str | None = None, digest: bool = True):
        """``digest``: also publish the node's digest for the viewers of big jobs (relay/digest.py); the
        simulator, which makes its digests where it makes its ranks' messages, turns it off."""
        self._identity = identity
        self._context = context
        self._directory = directory
        self._digest: DigestThread | None = None
        self._links: LinkProber | None = None
        self._wants_digest = digest
        self._threads: list[threading.Thread] = []
        self._controls: list[zmq.Socket[bytes]] = []
        self._gate: Gate | None = None
        self._ipc_files: list[Path] = []  # the node-local sockets it bound (removed when it stops)
        self.record_path: Path | None = None
        self.telemetry_url = ""
        self.control_url = ""

    def start(self) -> None:
        ctx = self._context
        tele_ipc, ctl_ipc = ipc_endpoints(self._identity.job, self._identity.host, self._directory)
        self._ipc_files = [socket_file(url) for url in (tele_ipc, ctl_ipc)]
        addr = bind_address()
        try:
            wanted = ports.relay_ports()
        except ports.PortConfigError as exc:
            print(f"ranktop: {exc}; the relay takes random ports", file=sys.stderr)
            wanted = None
        advertised = self._identity.host if addr in ("0.0.0.0", "*") else addr
        gate = self._gate = Gate(ctx, self._identity.job, self._directory)  # CURVE on both TCP sockets (relay/zap.py)

        tele_in = ctx.socket(zmq.XSUB)
        tele_in.bind(tele_ipc)
        tele_out = ctx.socket(zmq.XPUB)
        tele_out.setsockopt(zmq.SNDHWM, 10_000)
        tele_out.setsockopt(zmq.MAXMSGSIZE, MAX_CONTROL_BYTES)  # subscribers only send subscriptions
        gate.secure(tele_out)
        tele_port = _bind(tele_out, addr, wanted[0] if wanted else None)

        ctl_in = ctx.socket(zmq.PULL)
        ctl_in.setsockopt(zmq.MAXMSGSIZE, MAX_CONTROL_BYTES)
        ctl_in.setsockopt(zmq.RCVHWM, 1000)
        gate.secure(ctl_in)
        ctl_port = _bind(ctl_in, addr, wanted[1] if wanted else None)
        ctl_out = ctx.socket(zmq.PUB)
        ctl_out.bind(ctl_ipc)

        self.telemetry_url = f"tcp://{advertised}:{tele_port}"
        self.control_url = f"tcp://{advertised}:{ctl_port}"
        if self._wants_digest:
            listen, publish = f"inproc://ranktop-digest-in-{id(self)}", f"inproc://ranktop-digest-out-{id(self)}"
            tele_out.bind(listen)
            tele_in.bind(publish)
            digest = NodeDigest(self._identity.job, self._identity.host)
            digest.relay = {"telemetry": self.telemetry_url, "control": self.control_url}
            self._digest = DigestThread(ctx, digest, listen, publish)
            self._digest.start()
        links_url = ""
        if self._wants_digest and settings.LINK_PROBES.on():  # (the simulator makes its own links messages)
            publish = f"inproc://ranktop-links-out-{id(self)}"
            tele_in.bind(publish)
            self._links = LinkProber(ctx, self._identity.job, self._identity.host, gate.secret, gate.keys, addr,
                                     advertised, publish, self._directory, secure=gate.secure)  # fmt: skip
            self._links.start()
            links_url = self._links.url
        self._spawn("telemetry", tele_in, tele_out)
        self._spawn("control", ctl_in, ctl_out)
        self.record_path = rendezvous.write_node(
            rendezvous.NodeRecord(
                job=self._identity.job,
                host=self._identity.host,
                telemetry=self.telemetry_url,
                control=self.control_url,
                pid=self._identity.pid,
                started=time.time(),
                machine=self._identity.machine,
                slurm_job=self._identity.slurm_job,
                encrypted=gate.encrypted,
                links=links_url,
            ),
            self._directory,
        )

    def _spawn(self, name: str, frontend: zmq.Socket[bytes], backend: zmq.Socket[bytes]) -> None:
        # proxy_steerable lets stop() end the proxy cleanly with a TERMINATE message.
        inproc = f"inproc://ranktop-relay-{name}-{id(self)}"
        steer_server = self._context.socket(zmq.PAIR)
        steer_server.bind(inproc)
        steer_client = self._context.socket(zmq.PAIR)
        steer_client.connect(inproc)
        self._controls.append(steer_client)

        def run() -> None:
            try:
                zmq.proxy_steerable(frontend, backend, None, steer_server)
            except zmq.ContextTerminated:
                pass
            except zmq.ZMQError:
                pass
            finally:
                for sock in (frontend, backend, steer_server):
                    sock.close(linger=0)

        thread = threading.Thread(target=run, name=f"ranktop-relay-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout: float = 1.0) -> bool:
        """End both proxies; True when their threads have closed every socket."""
        if self.record_path is not None:
            rendezvous.remove_node(self.record_path)
            self.record_path = None
        for ctl in self._controls:
            try:
                ctl.send(b"TERMINATE", flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        digest_closed = self._digest.stop(timeout) if self._digest is not None else True
        self._digest = None
        if self._links is not None:
            digest_closed = self._links.stop(timeout) and digest_closed
            self._links = None
        for thread in self._threads:
            thread.join(timeout)
        closed = digest_closed and not any(thread.is_alive() for thread in self._threads)
        if self._gate is not None:
            self._gate.close()
        for ctl in self._controls:
            ctl.close(linger=0)
        self._controls.clear()
        self._threads.clear()
        # ZeroMQ leaves a bound IPC socket's file behind when the socket closes (libzmq 4.3 removes only the ones
        # it named itself): without this every job left two files a node in the per-user folder, for good. The
        # relay holds the node's claim until after this, so no newer relay has bound them meanwhile.
        for path in self._ipc_files:
            path.unlink(missing_ok=True)
        self._ipc_files = []
        return closed
