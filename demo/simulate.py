"""A simulated big job: thousands of ranks on a couple of cores, through the real wire, relays and rendezvous.

``ranktop demo --simulate 4096`` (or ``python -m ranktop.demo.simulate --ranks 4096``)
shows what ranktop does with a job far bigger than the machine it runs on.
Only the training is simulated. Everything a viewer meets is the real thing:

- one relay per simulated node (``relay/proxy.py``: ZeroMQ proxies on real TCP
  ports) and its rendezvous record, so ``ranktop watch JOB``, ``--json``,
  ``ranktop ping`` and ``ranktop stacks`` find and dial the job as any other;
- every rank's messages are built as the probe's sender builds them (hello,
  steps with collective summaries, heartbeats, replies) and encoded by
  ``wire/schema.py``;
- signed commands are checked with ``wire/auth.py`` and answered by
  ``probe/commands.py``'s handlers, rank by rank (``stacks`` answers with a
  simulated training stack: the simulator's own threads are no rank's).

A node's ranks are batched: one process runs every node, one publishing and
one SUB socket per node carry its ranks' messages, and a step of the whole job
is computed in one pass over the ranks. No 4,096 interpreters. Each node also
sends its digest (wire/node_digest.py, built by the same ``NodeDigest`` a real
relay runs), and its ranks' own messages only while some viewer subscribes to
them (its publishing socket is an XPUB, which hears the subscriptions): a
viewer of a big job takes digests, and encoding 16,000 messages a second that
nobody reads would take the CPU the viewer needs.

The model is synchronous data parallel training with FSDP-like collectives:
each phase's own compute time has noise (a few percent, a per-rank bias, and
an occasional spike), forward ends in all-gathers and backward in
reduce-scatters, and at each of those every rank waits for the last to arrive.
So a rank slow in ``data`` makes the others wait in ``forward``'s collectives,
exactly the pattern the straggler scoring must see through. A stalled or
silent rank stops the whole job: the others wait inside a collective.

A layout (``--pp``, ``--tp``, ``--ep``; data parallel takes the rest) lays the
ranks out as ``init_device_mesh`` would, outermost first: pp, dp, ep, tp (a
tensor-parallel group within a node). Every rank's hello then lists its groups
as a DeviceMesh job's probe does (wire/parallel_groups.py), and pipeline stages
cost what ``--stage-costs`` says (forward and backward scaled; by default the
last stage, which carries the loss head, 1.6 times the others'): the lighter
stages wait for it, their wait going to the pipeline's receives ("recv@pp"),
as a bubble does. Stages are compared with their own peers by the viewer;
the imbalance is the pipeline's finding, never a rank's.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import platform
import random
import resource
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import zmq

from ranktop.probe import commands
from ranktop.probe.collectives import state_layout
from ranktop.transport.identity import Identity
from ranktop.relay.proxy import Relay
from ranktop.transport.ipc import ipc_endpoints
from ranktop.probe.sender import HEARTBEAT_EVERY_S, HELLO_EVERY_S
from ranktop.probe.stacks import answer as stacks_answer
from ranktop.wire import __version__ as PROBE_VERSION
from ranktop.wire import auth, parallel_groups, schema, settings
from ranktop.transport import rendezvous
from ranktop.wire.collective_summary import SAMPLE_EVERY_S
from ranktop.transport.captures import capture_folder
from ranktop.wire.node_digest import NodeDigest

RANKS_PER_NODE = 8
#: Each phase's share of a step; "other" gets the rest.
PHASE_SHARE = {"data": 0.10, "forward": 0.30, "backward": 0.40, "optimizer": 0.12}
PHASES = tuple(PHASE_SHARE)
#: Noise on a phase's compute time: gaussian, a per-rank bias, and now and then a spike.
NOISE_SD, BIAS_SD, SPIKE_P, SPIKE = 0.03, 0.005, 0.01, 0.25
#: The collectives: what forward and backward end in, how big, how fast the network is.
FORWARD_OP, BACKWARD_OP, SINGLE_OP = "all_gather_into_tensor", "reduce_scatter_tensor", "ddp_allreduce"
BUCKET_BYTES = (2 << 20, 5 << 20, 8 << 20, 12 << 20)
ALPHA_S, BETA_BPS = 40e-6, 25e9
DTYPE = "bfloat16"
#: Finished steps kept for nodes that have not sent them yet (a node sends every 1/rate s).
MAX_HELD_STEPS = 256
#: The loop's shortest sleep: nodes due within it send together (fewer wake-ups, same rates).
TICK_S = 0.025
#: A job this far behind its schedule skips ahead (the machine is too busy) and says so.
MAX_LAG_S = 2.0
#: The last pipeline stage's cost (its forward and backward) against the others', by default.
LAST_STAGE_COST = 1.6
#: The simulated mesh's dimensions, outermost first (tensor parallel innermost: within a node).
MESH_ORDER = ("pp", "dp", "ep", "tp")


def node_name(index: int) -> str:
    return f"sim{index:04d}"


@dataclass(frozen=True)
class Scenario:
    """What to simulate; the command line's options, checked."""

    job: str
    ranks: int
    nodes: int
    calls_per_step: int = 8
    steps_per_s: float = 16.0
    rate_hz: float = settings.DEFAULT_RATE_HZ
    slow_rank: int | None = None
    slow_node: str | None = None
    slow_ms: float = 20.0
    slow_phase: str = "data"
    stall_rank: int | None = None
    stall_at_s: float = 10.0
    silent_rank: int | None = None
    silent_at_s: float = 10.0
    seed: int = 0
    pp: int = 1
    tp: int = 1
    ep: int = 1
    stage_costs: tuple[float, ...] | None = None  # per pipeline stage (default: the last LAST_STAGE_COST, the others 1)

    @property
    def per_node(self) -> int:
        return math.ceil(self.ranks / self.nodes)

    @property
    def dp(self) -> int:
        return self.ranks // (self.pp * self.tp * self.ep)

    @property
    def layout(self) -> str | None:
        """The mesh as RANKTOP_LAYOUT states one ("pp=8,dp=64,tp=8"), or None for plain data parallel."""
        if self.pp == self.tp == self.ep == 1:
            return None
        sizes = {"pp": self.pp, "dp": self.dp, "ep": self.ep, "tp": self.tp}
        return ",".join(f"{role}={sizes[role]}" for role in MESH_ORDER if sizes[role] > 1 or role == "dp")

    def stage_of(self, rank: int) -> int:
        return rank // (self.ranks // self.pp)

    def costs(self) -> tuple[float, ...]:
        if self.stage_costs is not None:
            return self.stage_costs
        return (1.0,) * (self.pp - 1) + (LAST_STAGE_COST,) if self.pp > 1 else (1.0,)

    def groups(self, rank: int) -> list[dict[str, Any]]:
        """The groups this rank's hello lists, as a DeviceMesh job's probe describes them."""
        if self.layout is None:
            return []
        out = []
        for entry in state_layout(self.layout, rank, self.ranks):
            role = entry["role"]
            start = parallel_groups.members(entry)[0]
            out.append(dict(entry, id=f"{role}{start}", desc=f"mesh_{role}", p2p=role == "pp"))
        return out

    def host_of(self, rank: int) -> str:
        return node_name(rank // self.per_node)


# -- the job: step times of every rank -------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step of the whole job: every rank's draw, and when the last rank reached each collective."""

    n: int
    start: float
    rows: list  # per rank: JobModel row (own times, arrivals, transfers, tail)
    latest: tuple  # per phase that ends in collectives: the last rank's arrival (seconds into its segment)
    duration: float


class JobModel:
    """Every rank's phase times, a whole step at a time; pure computation, no sockets.

    A rank's draw is a *row*: its own compute time per phase and for "other"
    (noisy), its arrival at each phase that ends in collectives (counted from
    the previous one), the network's time for those collectives, and what
    follows the last of them. Rows come from a table drawn once, so a step
    of 4,096 ranks costs one random pick per rank; a step's records are only
    built, per rank, when its node sends them (:meth:`records`).
    """

    def __init__(self, s: Scenario):
        self.s = s
        rng = random.Random(s.seed)
        self._rng = rng
        self.step_s = 1.0 / s.steps_per_s
        self.base = [PHASE_SHARE[p] * self.step_s for p in PHASES] + [self.step_s * (1 - sum(PHASE_SHARE.values()))]
        # Collectives: forward ends in all-gathers, backward in reduce-scatters (one DDP all-reduce when K is 1).
        k = s.calls_per_step
        if k == 1:
            ops = [(PHASES.index("backward"), SINGLE_OP, 1)]
        elif k > 1:
            ops = [(PHASES.index("forward"), FORWARD_OP, k // 2), (PHASES.index("backward"), BACKWARD_OP, k - k // 2)]
        else:
            ops = []
        if s.layout is not None:  # on a mesh: forward waits in the pipeline's receives (or dp's gathers), backward in dp's
            forward_op = "recv@pp" if s.pp > 1 else f"{FORWARD_OP}@dp"
            names = {FORWARD_OP: forward_op, BACKWARD_OP: f"{BACKWARD_OP}@dp", SINGLE_OP: f"{SINGLE_OP}@dp"}
            ops = [(i, names[op], count) for i, op, count in ops]
        self.group_sizes = [2 if op == "recv@pp" else (s.dp if s.layout is not None else s.ranks) for _, op, _ in ops]
        self.ops = ops  # (phase index, op, calls), in phase order
        self.sizes = [[BUCKET_BYTES[j % len(BUCKET_BYTES)] for j in range(count)] for _, _, count in ops]
        self.transfer = [sum(ALPHA_S + b / BETA_BPS for b in sizes) for sizes in self.sizes]
        self.longest = [ALPHA_S + max(sizes) / BETA_BPS for sizes in self.sizes]
        self._op_sums = [(j, PHASES[i], op, count, sum(self.sizes[j]), self.longest[j]) for j, (i, op, count) in enumerate(ops)]
        self._table = [self._row([b * self._multiplier() for b in self.base], self._multiplier()) for _ in range(8192)]
        # Pipeline stages of unequal cost: a table per cost, forward and backward scaled.
        self._tables: list[list] | None = None
        if s.pp > 1:
            scaled = {PHASES.index("forward"), PHASES.index("backward")}
            by_cost = {}
            for cost in set(s.costs()):
                if cost == 1.0:
                    by_cost[cost] = self._table
                    continue
                base = [b * cost if i in scaled else b for i, b in enumerate(self.base)]
                by_cost[cost] = [self._row([b * self._multiplier() for b in base], self._multiplier()) for _ in range(8192)]
            self._tables = [by_cost[s.costs()[s.stage_of(r)]] for r in range(s.ranks)]
        self.extra: dict[int, list[float]] = {}
        slow = [s.slow_rank] if s.slow_rank is not None else []
        if s.slow_node is not None:
            slow += [r for r in range(s.ranks) if s.host_of(r) == s.slow_node]
        for r in slow:
            self.extra.setdefault(r, [0.0] * (len(PHASES) + 1))[PHASES.index(s.slow_phase)] += s.slow_ms / 1000

    def _multiplier(self) -> float:
        value = max(0.5, 1.0 + self._rng.gauss(0.0, NOISE_SD))
        return value * (1.0 + SPIKE) if self._rng.random() < SPIKE_P else value

    def _row(self, own: list[float], network: float) -> tuple:
        arrivals, first = [], 0
        for i, _, _ in self.ops:
            arrivals.append(sum(own[first : i + 1]))
            first = i + 1
        moved = [t * network for t in self.transfer]
        tail = sum(moved) + sum(own[first:])  # after the last collective: the rest of the step, "other" included
        # What the row adds to a sum of steps (see sums): its own phase times, its tail, and per collective
        # what it adds to the wait beyond when the last rank arrived (the network's time less its arrival).
        summed = (*own[: len(PHASES)], tail, *(m - a for m, a in zip(moved, arrivals)))
        return (own, tuple(arrivals), tuple(moved), tail, summed)

    def step(self, n: int, start: float) -> Step:
        if self._tables is None:
            rows = self._rng.choices(self._table, k=self.s.ranks)
        else:
            picks = self._rng.choices(range(len(self._table)), k=self.s.ranks)
            rows = [table[i] for table, i in zip(self._tables, picks)]
        for r, more in self.extra.items():
            own, _, moved, _, _ = rows[r]
            rows[r] = self._row([a + b for a, b in zip(own, more)], moved[0] / self.transfer[0] if moved else 1.0)
        latest = tuple(max(row[1][j] for row in rows) for j in range(len(self.ops)))
        return Step(n, start, rows, latest, sum(latest) + max(row[3] for row in rows))

    def records(self, step: Step, rank: int) -> tuple[dict, list[dict]]:
        """Rank ``rank``'s step record and collective summaries (wire 1.4) of ``step``, as its probe sends them."""
        own, arrivals, moved, tail, _ = step.rows[rank]
        phases = {"data": own[0], "forward": own[1], "backward": own[2], "optimizer": own[3]}
        summaries = []
        for j, (i, op, count) in enumerate(self.ops):
            wait = step.latest[j] - arrivals[j]  # for the last rank to arrive
            waited = wait + moved[j]
            phases[PHASES[i]] += waited
            summaries.append(
                {"n": step.n, "ph": PHASES[i], "w": waited,
                 "ops": {op: [count, sum(self.sizes[j]), waited, waited, wait + self.longest[j], self.group_sizes[j], DTYPE]}}
            )  # fmt: skip
        return {"n": step.n, "t": step.start, "w": sum(step.latest) + tail, "p": phases}, summaries

    @staticmethod
    def job_sums(steps: list[Step]) -> tuple[float, tuple[float, ...], float]:
        """What ``steps`` add to every rank's sums: the time until the last rank reached the collectives
        (in all, and per phase that ends in them), and that time in the last of them."""
        per = tuple(map(sum, zip(*(st.latest for st in steps))))
        return sum(per), per, sum(steps[-1].latest)

    def sums(self, steps: list[Step], rank: int, job: tuple[float, tuple[float, ...], float]) -> dict[str, Any]:
        """The sums :meth:`records` of ``steps`` add up to for ``rank``, as NodeDigest.add_sums takes them,
        without building the records: one pass over the rank's rows, and ``job`` (:meth:`job_sums`) once
        for every rank. A digest of 4,096 ranks at 16 steps/s costs about a third of its records this way."""
        rows = [st.rows[rank] for st in steps]
        k = len(rows)
        summed = rows[0][4] if k == 1 else [sum(column) for column in zip(*[row[4] for row in rows])]
        n = len(PHASES)
        phases = dict(zip(PHASES, summed))
        waits: dict[str, float] = {}
        ops = {}
        job_total, job_per, job_last = job
        for j, phase, op, calls, size, longest in self._op_sums:
            waited = job_per[j] + summed[n + 1 + j]
            phases[phase] += waited
            waits[phase] = waits.get(phase, 0.0) + waited
            if k == 1:
                longest += steps[0].latest[j] - rows[0][1][j]
            else:
                longest += max([st.latest[j] - row[1][j] for st, row in zip(steps, rows)])
            ops[op] = [calls * k, size * k, waited, waited, longest, self.group_sizes[j], DTYPE]
        end = steps[-1].start + job_last + rows[-1][3]
        return {"count": k, "last": steps[-1].n, "end": end, "wall": job_total + summed[n], "phases": phases, "waits": waits, "ops": ops}

    def sample(self, step: Step, rank: int, seq: int, t0: float) -> list[dict]:
        """A few raw calls of ``step`` (two sizes per op, in turn), as ``rank``'s probe samples them for the alpha-beta
        fit: launch to completion, so a call also takes its share of the rank's wait for the last to arrive."""
        calls = []
        n = step.n
        arrivals = step.rows[rank][1]
        for j, (i, op, count) in enumerate(self.ops):
            sizes = self.sizes[j]
            wait = (step.latest[j] - arrivals[j]) / count
            for b in {sizes[(n + k) % len(sizes)] for k in range(2)}:  # sizes in turn: the fit sees them all
                d = wait + (ALPHA_S + b / BETA_BPS) * self._multiplier()
                calls.append({"op": op, "seq": seq, "b": b, "dt": DTYPE, "g": self.group_sizes[j], "d": d, "n": n, "ph": PHASES[i], "t0": t0})
        return calls


# -- the nodes: relays, sockets, commands ---------------------------------------------


class _Rank:
    """What a command handler may touch of one simulated rank (probe/commands.py CommandTarget)."""

    def __init__(self, sim: "Simulator", node: "_Node", rank: int):
        self._sim = sim
        self.rate_hz = node.rate_hz
        self.recorder = sim  # current_step, for the capture command
        self.identity = node.identity_of(rank)
        self.capture = None
        self._rank = rank

    def state(self) -> dict[str, Any]:
        return self._sim.state(self._rank, self._sim._clock())

    def capture_folder(self, capture_id: str):
        return capture_folder(self._sim.s.job, capture_id, self._sim.directory)


class _Node:
    def __init__(self, sim: "Simulator", index: int, ranks: range, context: zmq.Context):
        self.index = index
        self.host = node_name(index)
        self.ranks = ranks
        self.rate_hz = sim.s.rate_hz
        self._sim = sim
        self.relay = Relay(self.identity_of(ranks[0]), context, sim.directory, digest=False)
        self.relay.start()
        self.digest = NodeDigest(sim.s.job, self.host)
        self.digest.relay = {"telemetry": self.relay.telemetry_url, "control": self.relay.control_url}
        self.topics: set[bytes] = set()  # what the relay's viewers subscribe to, as the XPUB hears it
        tele, ctl = ipc_endpoints(sim.s.job, self.host, sim.directory)
        self.pub = context.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.SNDHWM, 1000 * len(ranks))
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.connect(tele)
        self.sub = context.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, schema.COMMAND.encode())
        self.sub.connect(ctl)
        self.verifier = auth.CommandVerifier(sim.secret, sim.s.job)
        self.next_flush = 0.0
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

    def send(self, kind: str, rank: int, body: dict[str, Any], now: float) -> None:
        """One rank's message: into the node's digest, and on the wire if a viewer takes the ranks' own."""
        body["job"], body["rank"], body["ts"] = self._sim.s.job, rank, now
        self.digest.add(kind, body)
        if kind.encode() in self.topics or kind == schema.REPLY:
            self._publish(schema.encode(kind, body))

    def send_digest(self, now: float) -> None:
        self.hear_subscriptions()
        body = self.digest.body(time.monotonic(), now)
        if body is not None and schema.NODE.encode() in self.topics:
            self._publish(schema.encode(schema.NODE, body))

    def hear_subscriptions(self) -> None:
        while True:
            try:
                event = self.pub.recv(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if event[:1] == b"\x01":
                self.topics.add(event[1:])
            elif event[:1] == b"\x00":
                self.topics.discard(event[1:])

    def _publish(self, frames: list[bytes]) -> None:
        try:
            self.pub.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            self._sim.dropped += 1

    def handle_commands(self) -> None:
        """Verify each command once for the node (every rank holds the same secret), answer for each rank it targets."""
        while True:
            try:
                frames = self.sub.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                msg = self.verifier.verify(frames)
            except auth.AuthError as exc:
                self.rejected[exc.reason] = self.rejected.get(exc.reason, 0) + 1
                continue
            except schema.WireError:
                self.rejected["malformed"] = self.rejected.get("malformed", 0) + 1
                continue
            targets = msg.get("ranks")
            for rank in self.ranks:
                if (targets is not None and rank not in targets) or self._sim.is_silent(rank):
                    continue
                self._answer(rank, msg)

    def _answer(self, rank: int, msg: dict[str, Any]) -> None:
        now = time.time()
        view = _Rank(self._sim, self, rank)
        try:
            if msg["cmd"] == "stacks" and isinstance(msg["args"].get("fingerprint", False), bool):
                ok, result = True, stacks_answer(self._sim.stacks(rank), view.state(), msg["args"].get("fingerprint", False))
            else:
                ok, result = commands.run(view, msg["cmd"], msg["args"])
        except Exception as exc:  # as the probe does: a broken handler answers with its error
            ok, result = False, {"error": f"{exc.__class__.__name__}: {exc}"}
        self.rate_hz = view.rate_hz  # set_rate: the node's ranks share one cadence
        self.send(schema.REPLY, rank, {"id": msg["id"], "cmd": msg["cmd"], "ok": ok, "result": result}, now)

    def close(self) -> bool:
        for sock in (self.pub, self.sub):
            sock.close(linger=0)
        return self.relay.stop()


class Simulator:
    def __init__(self, scenario: Scenario, directory: str | None = None):
        self.s = scenario
        self.directory = directory
        self.model = JobModel(scenario)
        self._groups: dict[int, list[dict[str, Any]]] = {}  # rank -> the groups its hello lists (a layout's)
        self.secret = rendezvous.load_or_create_secret(scenario.job, directory)
        self.dropped = 0  # messages a full PUB queue refused
        self.skipped_s = 0.0  # schedule time skipped because the machine could not keep up
        self.steps_done = 0
        self.current_step = 0  # the step in progress (what the capture command reads)
        self._done: collections.deque[Step] = collections.deque(maxlen=MAX_HELD_STEPS)  # finished, for the nodes to send
        self._nodes: list[_Node] = []
        self._context: zmq.Context | None = None
        self._started = 0.0
        self._step_start = 0.0
        self._step_end = 0.0
        self._step: Step | None = None
        self._halted_at: float | None = None  # the job stopped (a stalled or silent rank): when
        self._walls: list[float] = []
        self._clock = time.time  # replay() runs the job on a clock of its own
        self._next_sample: dict[int, float] = {}  # per node (by its first rank): when it next sends a sample

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> "Simulator":
        _raise_fd_limit()
        os.environ[settings.BIND.name] = "127.0.0.1"  # every simulated node is this machine
        os.environ[settings.PORT.name] = "0"  # random ports: a pinned one fits one relay, not hundreds
        ctx = self._context = zmq.Context()
        ctx.set(zmq.MAX_SOCKETS, 16 * self.s.nodes + 64)
        per = self.s.per_node
        try:
            for i in range(self.s.nodes):
                ranks = range(i * per, min((i + 1) * per, self.s.ranks))
                if len(ranks):
                    self._nodes.append(_Node(self, i, ranks, ctx))
        except BaseException:
            self.close()
            raise
        now = time.time()
        self._started = now
        for i, node in enumerate(self._nodes):  # spread the nodes' sends over a period
            node.next_flush = now + (i / len(self._nodes)) / node.rate_hz
            node.next_hello = now + (i / len(self._nodes)) * 0.5
        self._begin_step(0, now)
        return self

    def close(self) -> None:
        closed = all([node.close() for node in self._nodes])
        self._nodes.clear()
        if self._context is not None and closed:
            self._context.term()
        self._context = None

    def run(self, stop: threading.Event, duration_s: float | None = None) -> None:
        poller = zmq.Poller()
        for node in self._nodes:
            poller.register(node.sub, zmq.POLLIN)
        subs = {node.sub: node for node in self._nodes}
        end = None if duration_s is None else self._started + duration_s
        while not stop.is_set() and (end is None or time.time() < end):
            now = time.time()
            self._advance(now)
            for node in self._nodes:
                if now >= node.next_hello:
                    self._hellos(node, now)
                    node.next_hello = now + HELLO_EVERY_S
                if now >= node.next_flush:
                    self._flush(node, now)
                    node.next_flush = max(node.next_flush + 1.0 / node.rate_hz, now)
            wake = min(min(n.next_flush for n in self._nodes), self._step_end if self._halted_at is None else now + 0.25)
            wake = max(wake, now + TICK_S)
            for sock, _ in poller.poll(max(0, min(250, int((wake - time.time()) * 1000)))):
                subs[sock].handle_commands()

    # -- the job's progress ------------------------------------------------------

    def _halt_time(self) -> float | None:
        s, times = self.s, []
        if s.stall_rank is not None:
            times.append(self._started + s.stall_at_s)
        if s.silent_rank is not None:
            times.append(self._started + s.silent_at_s)
        return min(times) if times else None

    def is_silent(self, rank: int) -> bool:
        return rank == self.s.silent_rank and self._clock() >= self._started + self.s.silent_at_s

    def _begin_step(self, n: int, start: float) -> None:
        self.current_step = n
        self._step_start = start
        self._step = self.model.step(n, start)
        self._step_end = start + self._step.duration

    def _advance(self, now: float) -> None:
        halt = self._halt_time()
        while self._halted_at is None and self._step_end <= now:
            if halt is not None and self._step_end >= halt:
                self._halted_at = self._step_end  # the job hangs in the step that would have ended after it
                return
            self._done.append(self._step)
            self._walls = (self._walls + [self._step.duration])[-32:]
            self.steps_done += 1
            start = self._step_end
            if now - start > MAX_LAG_S:  # the machine is too busy for this job: skip ahead rather than flood
                self.skipped_s += now - start
                start = now
            self._begin_step(self.current_step + 1, start)

    # -- what each rank says -----------------------------------------------------

    def state(self, rank: int, now: float) -> dict[str, Any]:
        """The state the probe's sender reports (probe/sender.py), for one simulated rank."""
        n = self.current_step
        halted = self._halted_at is not None
        stuck = halted and rank in (self.s.stall_rank, self.s.silent_rank)
        ops = self.model.ops  # (phase index, op, calls), in phase order
        k = self.s.calls_per_step
        collective = None
        if ops and halted and not stuck:  # waiting inside the first collective of the step for the stuck rank
            collective = {"op": ops[0][1], "seq": n * k + 1, "b": BUCKET_BYTES[0], "dt": DTYPE, "g": self.s.ranks,
                          "inside": True, "age": now - self._halted_at}  # fmt: skip
        elif ops:  # the last one it left: the previous step's last
            collective = {"op": ops[-1][1], "seq": n * k, "b": BUCKET_BYTES[0], "dt": DTYPE, "g": self.s.ranks, "inside": False, "age": 0.0}
        if stuck:
            phase = "data"  # waiting for a batch that never comes
        elif halted:
            phase = PHASES[ops[0][0]] if ops else "forward"
        else:
            into = (now - self._step_start) / max(self._step_end - self._step_start, 1e-9)
            phase = PHASES[min(3, int(into * 4))]
        walls = self._walls
        return {
            "step": n, "last": n - 1, "in_step": True, "phase": phase, "step_age": max(0.0, now - self._step_start),
            "dropped": 0, "rejected": {}, "rate_hz": self.s.rate_hz,
            "median_step_s": sorted(walls)[len(walls) // 2] if walls else None, "cap": None, "collective": collective,
        }  # fmt: skip

    def _hellos(self, node: _Node, now: float) -> None:
        relay = {"telemetry": node.relay.telemetry_url, "control": node.relay.control_url}
        for rank in node.ranks:
            if self.is_silent(rank):
                continue
            hello = {
                "host": node.host, "pid": os.getpid(), "world": self.s.ranks, "local_rank": rank - node.ranks[0],
                "local_world": len(node.ranks), "launcher": "simulated", "device": "cpu (simulated)", "torch": None,
                "probe": PROBE_VERSION, "python": platform.python_version(), "argv": ["simulate"], "cwd": os.getcwd(),
                "rate_hz": node.rate_hz, "state": self.state(rank, now),
            }  # fmt: skip
            if rank == node.ranks[0]:
                hello["relay"] = relay
            groups = self._groups.get(rank)
            if groups is None and self.s.layout is not None:
                groups = self._groups[rank] = self.s.groups(rank)
            if groups:
                hello["groups"] = groups
            node.send(schema.HELLO, rank, hello, now)

    def _flush(self, node: _Node, now: float) -> None:
        """Every rank of the node sends the steps it finished since its last send, or a heartbeat."""
        steps = [st for st in self._done if st.n > node.sent_upto]
        if steps or now - node.last_sent >= HEARTBEAT_EVERY_S:
            node.last_sent = now
            if steps and schema.STEPS.encode() not in node.topics:  # only digests are read: no records to build
                self.fold(node.ranks, steps, now, node.digest)
            else:
                for kind, rank, body in self.messages(node.ranks, steps, now):
                    node.send(kind, rank, body, now)
            if steps:
                node.sent_upto = steps[-1].n
        node.send_digest(now)

    def messages(self, ranks: range, steps: list[Step], now: float):
        """(kind, rank, body) of what ``ranks`` send now: their records of ``steps``, or heartbeats without any."""
        state = self.state(ranks[0], now)  # the same for every rank of a node but a stuck one
        special = {self.s.stall_rank, self.s.silent_rank}
        sample = self._sample(ranks, steps, now)
        records = self.model.records
        for rank in ranks:
            if self.is_silent(rank):
                continue
            rank_state = self.state(rank, now) if rank in special else state
            if not steps:
                yield schema.HEARTBEAT, rank, {"state": rank_state}
                continue
            body: dict[str, Any] = {"steps": [], "state": rank_state}
            summaries = []
            for st in steps:
                record, cs = records(st, rank)
                body["steps"].append(record)
                summaries += cs
            if summaries:
                body["cs"] = summaries
                if sample:
                    body["cx"] = sample
            yield schema.STEPS, rank, body

    def fold(self, ranks: range, steps: list[Step], now: float, digest: NodeDigest) -> None:
        """What ``ranks`` would send with their records of ``steps`` (:meth:`messages`), summed straight into
        their node's digest: how a node whose ranks' own messages no viewer takes spends a third of the CPU."""
        state = self.state(ranks[0], now)
        special = {self.s.stall_rank, self.s.silent_rank}
        sample = self._sample(ranks, steps, now)
        job = self.model.job_sums(steps)
        for rank in ranks:
            if self.is_silent(rank):
                continue
            rank_state = self.state(rank, now) if rank in special else state
            digest.add_sums(rank, now, rank_state, sample=sample, **self.model.sums(steps, rank, job))

    def _sample(self, ranks: range, steps: list[Step], now: float) -> list[dict] | None:
        """A node's raw calls to send with its steps, as the probe samples them: once a second at most."""
        if not steps or now < self._next_sample.get(ranks[0], 0.0) or not self.model.ops:
            return None
        last = steps[-1]
        self._next_sample[ranks[0]] = now + SAMPLE_EVERY_S
        return self.model.sample(last, ranks[0], (last.n + 1) * self.s.calls_per_step, now - self._started)

    def replay(self, seconds: float, start: float = 1.0e9, digests: bool = False):
        """Run the job on a clock of its own, without sockets: yields (time, frames every rank sends then)
        at each of the ranks' sends, for ``seconds`` of the job (tests and benchmarks feed an aggregator
        with them). The scenario's stalls and silences happen as they would live. Call on a Simulator
        that was not started. ``digests``: yield each node's digest (wire/node_digest.py) instead, hellos
        included, as a viewer of a big job receives them."""
        clock = [start]
        self._clock = lambda: clock[0]
        self._started = start
        self._begin_step(0, start)
        per = self.s.per_node
        nodes = [range(i, min(i + per, self.s.ranks)) for i in range(0, self.s.ranks, per)]
        folds = [NodeDigest(self.s.job, self.s.host_of(ranks[0])) for ranks in nodes]
        if digests:
            for message in self.hellos(start):
                msg = schema.decode(message)
                folds[msg["rank"] // per].add(schema.HELLO, msg)
        sent_upto, last_sent = -1, start
        for i in range(1, int(seconds * self.s.rate_hz) + 1):
            now = clock[0] = start + i / self.s.rate_hz
            self._advance(now)
            steps = [st for st in self._done if st.n > sent_upto]
            if not steps and now - last_sent < HEARTBEAT_EVERY_S:
                continue
            last_sent = now
            frames = []
            for ranks, fold in zip(nodes, folds):
                if digests and steps:
                    self.fold(ranks, steps, now, fold)
                    digest = fold.body(now, now)
                    if digest is not None:
                        frames.append(schema.encode(schema.NODE, digest))
                    continue
                for kind, rank, body in self.messages(ranks, steps, now):
                    body["job"], body["rank"], body["ts"] = self.s.job, rank, now
                    if digests:
                        fold.add(kind, body)
                    else:
                        frames.append(schema.encode(kind, body))
                if digests:
                    digest = fold.body(now, now)
                    if digest is not None:
                        frames.append(schema.encode(schema.NODE, digest))
            if steps:
                sent_upto = steps[-1].n
            yield now, frames

    def hellos(self, now: float) -> list[list[bytes]]:
        """Every rank's hello, encoded (what replay's consumers need first)."""
        out = []
        for rank in range(self.s.ranks):
            body = {"host": self.s.host_of(rank), "pid": os.getpid(), "world": self.s.ranks, "local_rank": rank % self.s.per_node,
                    "local_world": self.s.per_node, "job": self.s.job, "rank": rank, "ts": now}  # fmt: skip
            if self.s.layout is not None:
                body["groups"] = self.s.groups(rank)
            out.append(schema.encode(schema.HELLO, body))
        return out

    def stacks(self, rank: int) -> dict[str, Any]:
        """A training stack where this rank is now, shaped as probe/stacks.py's answer."""
        stuck = self._halted_at is not None and rank in (self.s.stall_rank, self.s.silent_rank)
        phase = "data" if stuck else self.state(rank, self._clock())["phase"]
        if self._halted_at is not None and not stuck:
            phase = "forward"  # inside the collective the stuck rank never joins
        frames = [_frame(JOB_FILE, 210, "<module>", "main()")] + _STACK_TAIL[phase]
        thread = {"name": "MainThread", "ident": rank + 1, "main": True, "daemon": False, "frames": frames, "omitted": 0}
        return {"threads": [thread], "omitted_threads": 0, "roots": _ROOTS}


JOB_FILE = "/sim/job/train.py"
_SITE = "/sim/venv/lib/python3.11/site-packages"
_ROOTS = {"ranktop": [f"{_SITE}/ranktop"], "stdlib": ["/usr/lib/python3.11"], "site": [_SITE], "torch": [f"{_SITE}/torch"]}


def _frame(file: str, line: int, function: str, code: str) -> dict[str, Any]:
    return {"file": file, "line": line, "function": function, "code": code}


_TRAIN_STEP = _frame(JOB_FILE, 181, "main", "loss = train_step(model, batch, opt)")
_STACK_TAIL = {
    "data": [
        _frame(JOB_FILE, 170, "main", "batch = next(batches)"),
        _frame(f"{_SITE}/torch/utils/data/dataloader.py", 733, "__next__", "data = self._next_data()"),
    ],
    "forward": [
        _TRAIN_STEP,
        _frame(JOB_FILE, 96, "train_step", "loss = model(batch).loss"),
        _frame(f"{_SITE}/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", 343, "foreach_all_gather", "dist.all_gather_into_tensor(out, inp, group=group)"),
    ],
    "backward": [
        _TRAIN_STEP,
        _frame(JOB_FILE, 97, "train_step", "loss.backward()"),
        _frame(f"{_SITE}/torch/autograd/graph.py", 825, "_engine_run_backward", "return Variable._execution_engine.run_backward("),
    ],
    "optimizer": [_TRAIN_STEP, _frame(JOB_FILE, 98, "train_step", "opt.step()"), _frame(f"{_SITE}/torch/optim/adamw.py", 210, "step", "adamw(")],
}  # fmt: skip


def _raise_fd_limit() -> None:
    """Hundreds of relays hold thousands of sockets: take every file descriptor the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
        except (ValueError, OSError):
            pass


# -- the command line ------------------------------------------------------------------


def add_options(p: argparse.ArgumentParser) -> None:
    """The simulator's options (``ranktop demo --simulate N`` reads them from its extra arguments)."""
    p.add_argument("--nodes", type=_count, default=None, metavar="M", help=f"simulated nodes (default: {RANKS_PER_NODE} ranks per node)")
    p.add_argument("--calls-per-step", type=_count0, default=8, metavar="K", help="collective calls per step and rank (default 8)")
    p.add_argument("--steps-per-s", type=_positive, default=16.0, metavar="S", help="training steps per second (default 16)")
    p.add_argument("--rate", type=_rate, default=settings.DEFAULT_RATE_HZ, metavar="HZ",
                   help=f"messages per second per rank (default {settings.DEFAULT_RATE_HZ:g}, as the probe)")  # fmt: skip
    p.add_argument("--slow-rank", type=_count0, default=None, metavar="R", help="one rank slow in one phase, every step")
    p.add_argument("--slow-node", default=None, metavar="HOST", help=f"every rank of one node slow (nodes are {node_name(0)}, {node_name(1)}, ...)")
    p.add_argument("--slow-ms", type=_non_negative, default=20.0, metavar="MS", help="how much slower (default 20 ms)")
    p.add_argument("--slow-phase", choices=PHASES, default="data", help="in which phase (default data)")
    p.add_argument("--stall-rank", type=_count0, default=None, metavar="R", help="a rank that stops making progress: the job hangs")
    p.add_argument("--stall-at-s", type=_non_negative, default=10.0, metavar="T", help="when it stalls (default 10 s in)")
    p.add_argument("--silent-rank", type=_count0, default=None, metavar="R", help="a rank that dies (says nothing more): the job hangs")
    p.add_argument("--silent-at-s", type=_non_negative, default=10.0, metavar="T", help="when it goes silent (default 10 s in)")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise (default 0)")
    p.add_argument("--pp", type=_count, default=1, metavar="P", help="pipeline stages (default 1); data parallel takes the ranks left")
    p.add_argument("--tp", type=_count, default=1, metavar="T", help="tensor-parallel group size (default 1; innermost: within a node)")
    p.add_argument("--ep", type=_count, default=1, metavar="E", help="expert-parallel group size (default 1)")
    p.add_argument("--stage-costs", type=_costs, default=None, metavar="C,C,...",
                   help=f"each stage's forward and backward cost, relative (default: the last stage {LAST_STAGE_COST:g}, the others 1)")  # fmt: skip


def scenario_of(args: argparse.Namespace, ranks: int, job: str, parser: argparse.ArgumentParser) -> Scenario:
    nodes = args.nodes or math.ceil(ranks / RANKS_PER_NODE)
    if nodes > ranks:
        parser.error(f"--nodes {nodes} is more than the {ranks} ranks")
    for name in ("slow_rank", "stall_rank", "silent_rank"):
        rank = getattr(args, name)
        if rank is not None and rank >= ranks:
            parser.error(f"--{name.replace('_', '-')} {rank} is not a rank of a job of {ranks} (0-{ranks - 1})")
    s = Scenario(
        job=job, ranks=ranks, nodes=nodes, calls_per_step=args.calls_per_step, steps_per_s=args.steps_per_s, rate_hz=args.rate,
        slow_rank=args.slow_rank, slow_node=args.slow_node, slow_ms=args.slow_ms, slow_phase=args.slow_phase,
        stall_rank=args.stall_rank, stall_at_s=args.stall_at_s, silent_rank=args.silent_rank, silent_at_s=args.silent_at_s,
        seed=args.seed, pp=args.pp, tp=args.tp, ep=args.ep, stage_costs=args.stage_costs,
    )  # fmt: skip
    if ranks % (s.pp * s.tp * s.ep):
        parser.error(f"--pp {s.pp} x --tp {s.tp} x --ep {s.ep} does not divide the {ranks} ranks")
    if s.stage_costs is not None and len(s.stage_costs) != s.pp:
        parser.error(f"--stage-costs gives {len(s.stage_costs)} stages, --pp {s.pp}")
    if s.slow_node is not None and s.slow_node not in {s.host_of(r) for r in range(ranks)}:
        parser.error(f"--slow-node {s.slow_node!r} is not a node of this job ({node_name(0)} to {s.host_of(ranks - 1)})")
    return s


def _number(kind, test, what):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not test(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return parse


_count = _number(int, lambda v: v > 0, "a whole number above 0")
_count0 = _number(int, lambda v: v >= 0, "a whole number, 0 or more")
_positive = _number(float, lambda v: v > 0, "positive")
_non_negative = _number(float, lambda v: v >= 0, "0 or more")
_rate = _number(float, lambda v: settings.rate_problem(v) is None, f"between {settings.MIN_RATE_HZ:g} and {settings.MAX_RATE_HZ:g}")


def _costs(text: str) -> tuple[float, ...]:
    try:
        costs = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not all(c > 0 for c in costs):
        raise argparse.ArgumentTypeError(f"costs must be positive, got {text!r}")
    return costs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ranktop.demo.simulate",
        description="Simulate a big training job through ranktop's real wire, relays and rendezvous; "
        "watch it with `ranktop watch JOB` (or run `ranktop demo --simulate N` for both at once).",
    )
    p.add_argument("--ranks", type=_count, required=True, metavar="N", help="simulated ranks")
    p.add_argument("--job", default=None, help="job name (default: sim-<pid>)")
    p.add_argument("--dir", default=None, metavar="DIR", help="rendezvous directory (default: $RANKTOP_DIR or ~/.ranktop)")
    p.add_argument("--duration", type=_positive, default=None, metavar="S", help="stop after S seconds (default: until interrupted)")
    add_options(p)
    return p


def run(scenario: Scenario, directory: str | None = None, duration_s: float | None = None, quiet: bool = False) -> int:
    """Run a simulation in this process until interrupted (or ``duration_s``); SIGTERM ends it cleanly."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if threading.current_thread() is threading.main_thread() else None
    sim = Simulator(scenario, directory).start()
    if not quiet:
        s = scenario
        print(
            f"ranktop: simulating job {s.job}: {s.ranks} ranks on {len(sim._nodes)} nodes, {s.steps_per_s:g} steps/s, "
            f"{s.calls_per_step} collective calls per step; watch it with: ranktop watch {s.job}",
            file=sys.stderr,
        )
    try:
        sim.run(stop, duration_s)
    except KeyboardInterrupt:
        pass
    finally:
        sim.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if sim.skipped_s and not quiet:
        print(f"ranktop: the machine could not keep up with the simulated job: {sim.skipped_s:.1f} s of it skipped", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return run(scenario_of(args, args.ranks, args.job or f"sim-{os.getpid()}", parser), args.dir, args.duration)


if __name__ == "__main__":
    sys.exit(main())
