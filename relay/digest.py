"""The relay's digest thread: folds its node's rank messages into one ``node`` message per interval.

It listens to the relay's own outgoing telemetry (an inproc SUB on the relay's
XPUB, so the ranks' messages reach it as they reach any viewer) and publishes
each digest back into the relay's XSUB (an inproc PUB, as if it were one more
rank of the node): viewers of big jobs subscribe to ``node`` and take one
message per node instead of one per rank (relay/digest_fold.py says what is in
it and why). It paces its digests by the job's size, which its ranks' hellos
tell it (world size over the node's ranks: ``digest_hz``), so that the relays
of a job of thousands of nodes do not together send a viewer more digests than
it can take. Decoding a node's few dozen messages a second costs this thread
well under 1% of a core, off every training thread.
"""

from __future__ import annotations

from typing import Any

import threading
import time

import zmq

from ranktop.wire import schema
from ranktop.wire.names import HEARTBEAT, HELLO, STEPS
from ranktop.relay.digest_fold import NodeDigest

#: The rank messages a digest is made of.
DIGESTED = (HELLO, STEPS, HEARTBEAT)


class DigestThread(threading.Thread):
    def __init__(self, context: zmq.Context[Any], digest: NodeDigest, listen: str, publish: str):
        super().__init__(name="ranktop-relay-digest", daemon=True)
        self._digest = digest
        self._stop_event = threading.Event()
        self._sub = context.socket(zmq.SUB)
        self._sub.setsockopt(zmq.RCVHWM, 10_000)
        self._sub.setsockopt(zmq.LINGER, 0)
        for kind in DIGESTED:
            self._sub.setsockopt(zmq.SUBSCRIBE, kind.encode())
        self._sub.connect(listen)
        self._pub = context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, 100)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.connect(publish)
        self.sent = 0
        self.malformed = 0

    def stop(self, timeout: float = 1.0) -> bool:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)
        return not self.is_alive()

    def run(self) -> None:
        sub, pub = self._sub, self._pub
        try:
            next_flush = time.monotonic() + 1.0 / self._digest.hz
            while not self._stop_event.is_set():
                wait_ms = max(0, int((next_flush - time.monotonic()) * 1000))
                if sub.poll(min(wait_ms, 250)):
                    self._drain()
                now = time.monotonic()
                if now >= next_flush:
                    # its pace as the job's size says it (wire/pacing.py: digest_hz), learnt from the hellos
                    next_flush = max(next_flush + 1.0 / self._digest.hz, now)
                    body = self._digest.body(now, time.time())
                    if body is not None:
                        try:
                            pub.send_multipart(schema.encode(body), flags=zmq.NOBLOCK)
                            self.sent += 1
                        except zmq.Again:
                            pass
        except zmq.ContextTerminated:
            pass
        finally:
            sub.close(linger=0)
            pub.close(linger=0)

    def _drain(self, limit: int = 1000) -> None:
        for _ in range(limit):
            try:
                frames = self._sub.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                msg = schema.decode(frames)
            except schema.WireError:
                self.malformed += 1
                continue
            try:
                self._digest.add(msg)
            except (KeyError, TypeError, ValueError):  # a shape the digest does not expect: leave it out
                self.malformed += 1
