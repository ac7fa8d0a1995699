"""One simulated node's ranks: the sockets they publish and hear commands on, their digest, and their answers.

Each node's real ``Relay`` (relay/proxy.py) runs in a relay process
(demo/sim_relays.py); the node's ranks reach it as a real node's do, over its
IPC sockets, and keep a real ``NodeDigest``. Their messages go out through one
publishing socket, an XPUB that hears which kinds the relay's viewers subscribe
to (so nothing is encoded that nobody reads). Signed commands are verified once
for the node with ``wire/auth.py`` and answered rank by rank by
``probe/commands.py``'s own handlers; ``stacks`` answers with a simulated
training stack (:func:`stacks_of`): the simulator's own threads are no rank's.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec
import zmq

from ranktop.probe import commands
from ranktop.probe.capture import Capture
from ranktop.transport.identity import Identity
from ranktop.transport.ipc import ipc_endpoints
from ranktop.probe.stacks import answer as stacks_answer
from ranktop.wire import auth, schema
from ranktop.wire.names import COMMAND, NODE, STEPS
from ranktop.wire.messages import Command, CommandResult, RankMessage, Reply
from ranktop.transport.captures import capture_folder
from ranktop.relay.digest_fold import NodeDigest

from .sim_model import node_name

# -- the nodes: relays, sockets, commands ---------------------------------------------


def _queued(recv: Callable[..., Any]) -> Iterator[Any]:
    """What a socket holds now, one ``recv(flags=NOBLOCK)`` at a time: the node's loop never waits on a socket."""
    while True:
        try:
            yield recv(flags=zmq.NOBLOCK)
        except zmq.Again:
            return


class SimulatedRank:
    """What a command handler may touch of one simulated rank (probe/commands.py CommandTarget)."""

    def __init__(self, sim: Any, node: "SimulatedNode", rank: int):  # sim: the Simulator (demo/simulate.py)
        self._sim = sim
        self.rate_hz = node.rate_hz
        self.recorder = sim  # current_step, for the capture command
        self.identity = node.identity_of(rank)
        self.capture: Capture | None = None  # the simulation makes no captures: the command answers that
        self._rank = rank

    def state(self) -> dict[str, Any]:
        """Its state as plain values, as the probe's commands read it (probe/sender.py: Sender.state)."""
        return msgspec.to_builtins(self._sim.state(self._rank, self._sim._clock()))

    def capture_folder(self, capture_id: str) -> Path:
        return capture_folder(self._sim.s.job, capture_id, self._sim.directory)


class SimulatedNode:
    #: File descriptors a node's ranks hold: their two sockets' mailboxes and IPC connections to the relay.
    FDS = 4

    def __init__(self, sim: Any, index: int, ranks: range, context: zmq.Context[Any], relay: tuple[str, str]):
        """``sim``: the Simulator that runs it; ``relay``: its relay's (telemetry, control) URLs, which its ranks' hellos
        and its digest name."""
        self.index = index
        self.host = node_name(index)
        self.ranks = ranks
        self.rate_hz = sim.s.rate_hz
        self._sim = sim
        self.relay = {"telemetry": relay[0], "control": relay[1]}
        self.digest = NodeDigest(sim.s.job, self.host)
        self.digest.relay = dict(self.relay)
        self.topics: set[bytes] = set()  # what the relay's viewers subscribe to, as the XPUB hears it
        tele, ctl = ipc_endpoints(sim.s.job, self.host, sim.directory)
        self.pub = context.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.SNDHWM, 1000 * len(ranks))
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.connect(tele)
        self.sub = context.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, COMMAND.encode())
        self.sub.connect(ctl)
        self.verifier = auth.CommandVerifier(sim.secret, sim.s.job)
        self.next_flush = 0.0
        self.next_digest = 0.0
        self.next_hello = 0.0
        self.sent_upto = -1  # the last step its ranks sent
        self.last_sent = 0.0
        self.rejected: dict[str, int] = {}

    def identity_of(self, rank: int) -> Identity:
        s = self._sim.s
        return Identity(
            job=s.job, rank=rank, local_rank=rank - self.ranks[0], world=s.ranks, local_world=len(self.ranks),
            host=self.host, pid=os.getpid(), launcher="simulated", machine=socket.gethostname(),
        )  # fmt: skip

    def send(self, msg: RankMessage) -> None:
        """One rank's message: into the node's digest, and on the wire if a viewer takes the ranks' own."""
        self.digest.add(msg)
        if msg.KIND.encode() in self.topics or isinstance(msg, Reply):
            self._publish(schema.encode(msg))

    def due(self) -> float:
        """When it next sends. While a viewer takes its ranks' own messages, they go at the ranks' cadence and the
        digest sums them as a relay does (``NodeDigest.add``); while viewers read only digests, the ranks' steps
        since the last digest are summed into the next one as it goes (``Simulator.fold_nodes``): once per digest,
        paced as a real relay paces it (``NodeDigest.hz``: wire/pacing.py's ``digest_hz``)."""
        if STEPS.encode() in self.topics:
            return min(self.next_flush, self.next_digest)
        return self.next_digest

    def send_digest(self, now: float) -> None:
        """Its digest, when one is due (every 1 / ``NodeDigest.hz`` s, as a real relay sends it)."""
        self.hear_subscriptions()
        if now < self.next_digest:
            return
        self.next_digest = max(self.next_digest + 1.0 / self.digest.hz, now)
        body = self.digest.body(time.monotonic(), now)
        if body is not None and NODE.encode() in self.topics:
            self._publish(schema.encode(body))

    def hear_subscriptions(self) -> None:
        for event in _queued(self.pub.recv):
            if event[:1] == b"\x01":
                self.topics.add(event[1:])
            elif event[:1] == b"\x00":
                self.topics.discard(event[1:])

    def publish(self, frames: list[bytes]) -> None:
        """A message of the node's relay's own (its links: relay/links.py), sent as the relay sends it."""
        self._publish(frames)

    def _publish(self, frames: list[bytes]) -> None:
        try:
            self.pub.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            self._sim.dropped += 1

    def handle_commands(self) -> None:
        """Verify each command once for the node (every rank holds the same secret), answer for each rank it targets."""
        for frames in _queued(self.sub.recv_multipart):
            try:
                msg = self.verifier.verify(frames)
            except auth.AuthError as exc:
                self.rejected[exc.reason] = self.rejected.get(exc.reason, 0) + 1
                continue
            except schema.WireError:
                self.rejected["malformed"] = self.rejected.get("malformed", 0) + 1
                continue
            targets = msg.ranks
            for rank in self.ranks:
                if (targets is not None and rank not in targets) or self._sim.is_silent(rank):
                    continue
                self._answer(rank, msg)

    def _answer(self, rank: int, msg: Command) -> None:
        now = time.time()
        view = SimulatedRank(self._sim, self, rank)
        result: CommandResult
        try:
            if msg.cmd == "stacks" and isinstance(msg.args.get("fingerprint", False), bool):
                ok, result = True, stacks_answer(self._sim.stacks(rank), view.state(), msg.args.get("fingerprint", False))
            else:
                ok, result = commands.run(view, msg.cmd, msg.args)
        except Exception as exc:  # as the probe does: a broken handler answers with its error
            ok, result = False, {"error": f"{exc.__class__.__name__}: {exc}"}
        self.rate_hz = view.rate_hz  # set_rate: the node's ranks share one cadence
        self.send(Reply(job=self._sim.s.job, rank=rank, ts=now, id=msg.id, cmd=msg.cmd, ok=ok, result=msgspec.to_builtins(result)))

    def close(self) -> None:
        for sock in (self.pub, self.sub):
            sock.close(linger=0)


# -- what a simulated rank's main thread is doing ------------------------------------


JOB_FILE = "/sim/job/train.py"
_SITE = "/sim/venv/lib/python3.11/site-packages"
STACK_ROOTS = {"ranktop": [f"{_SITE}/ranktop"], "stdlib": ["/usr/lib/python3.11"], "site": [_SITE], "torch": [f"{_SITE}/torch"]}


def stack_frame(file: str, line: int, function: str, code: str) -> dict[str, Any]:
    return {"file": file, "line": line, "function": function, "code": code}


_TRAIN_STEP = stack_frame(JOB_FILE, 181, "main", "loss = train_step(model, batch, opt)")
STACK_TAIL = {
    "data": [
        stack_frame(JOB_FILE, 170, "main", "batch = next(batches)"),
        stack_frame(f"{_SITE}/torch/utils/data/dataloader.py", 733, "__next__", "data = self._next_data()"),
    ],
    "forward": [
        _TRAIN_STEP,
        stack_frame(JOB_FILE, 96, "train_step", "loss = model(batch).loss"),
        stack_frame(f"{_SITE}/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", 343, "foreach_all_gather",
                    "dist.all_gather_into_tensor(out, inp, group=group)"),
    ],
    "backward": [
        _TRAIN_STEP,
        stack_frame(JOB_FILE, 97, "train_step", "loss.backward()"),
        stack_frame(f"{_SITE}/torch/autograd/graph.py", 825, "_engine_run_backward", "return Variable._execution_engine.run_backward("),
    ],
    "optimizer": [_TRAIN_STEP, stack_frame(JOB_FILE, 98, "train_step", "opt.step()"),
                  stack_frame(f"{_SITE}/torch/optim/adamw.py", 210, "step", "adamw(")],
}  # fmt: skip
