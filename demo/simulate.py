"""A simulated big job: thousands of ranks on a couple of cores, through the real wire, relays and rendezvous.

``ranktop demo --simulate 4096`` (or ``python -m ranktop.demo.simulate --ranks 4096``)
shows what ranktop does with a job far bigger than the machine it runs on.
Only the training is simulated. Everything a viewer meets is the real thing:

- one relay per simulated node (``relay/proxy.py``: ZeroMQ proxies on real TCP
  ports, CURVE on both) and its rendezvous record, so ``ranktop watch JOB``,
  ``--json``, ``ranktop ping`` and ``ranktop stacks`` find and dial the job as
  any other. As on a real node, the relay is a process apart from the ranks:
  the relays run in relay processes (demo/sim_relays.py), as few as the limit on
  open files allows (one up to some 980 nodes on a machine that allows 20,000,
  three for 2,048 nodes), and the node's ranks reach theirs over its IPC sockets;
- every rank's messages are built as the probe's sender builds them (hello,
  steps with collective summaries, heartbeats, replies) and encoded by
  ``wire/schema.py``;
- signed commands are checked with ``wire/auth.py`` and answered by
  ``probe/commands.py``'s handlers, rank by rank (``stacks`` answers with a
  simulated training stack: the simulator's own threads are no rank's).

A node's ranks are batched: one process runs every node's ranks, one
publishing and one SUB socket per node carry its ranks' messages, and a step of
the whole job is computed in one pass over the ranks. No 4,096 interpreters,
and one clock for the whole job: every rank is at the same step, whichever
relay process forwards it. Each node also
sends its digest (relay/digest_fold.py, built by the same ``NodeDigest`` a real
relay runs), and its ranks' own messages only while some viewer subscribes to
them (its publishing socket is an XPUB, which hears the subscriptions): a
viewer of a big job takes digests, and encoding 16,000 messages a second that
nobody reads would take the CPU the viewer needs.

When the machine cannot keep up (a job of 16,384 ranks on 2 cores, beside its
viewer), the simulator says so when it ends, in one line that the scale
benchmark reports: how much of the schedule it skipped, how late its nodes'
sends went out on average, and what it dropped. A viewer's latency and gaps
are then partly the simulator's.

The job's timing (its layout, every rank's phase times per step) is
demo/sim_model.py's; a node's ranks, their sockets and command answers are
demo/sim_node.py's; the relays' processes demo/sim_relays.py's; this module
runs them (the :class:`Simulator`) and is the command line
(``python -m ranktop.demo.simulate``).
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import platform
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator, TypeVar, cast

import msgspec
import numpy as np
import zmq

from ranktop.probe.sender import HEARTBEAT_EVERY_S, HELLO_EVERY_S
from ranktop.wire import __version__ as PROBE_VERSION
from ranktop.wire import schema, settings
from ranktop.wire.names import COMPILE_PHASE
from ranktop.wire.names import HELLO, STEPS
from ranktop.transport import fd_limit, rendezvous
from ranktop.probe.collective_summary import SAMPLE_EVERY_S
from ranktop.wire.messages import (
    Call,
    CudaMemory,
    Evidence,
    Gpu,
    Group,
    Heartbeat,
    Hello,
    LastCollective,
    Links,
    Memory,
    RankInfo,
    State,
    Steps,
)
from ranktop.wire.names import COMM_PHASE, OTHER_PHASE
from ranktop.relay.digest_fold import NodeDigest
from ranktop.wire.pacing import OPS_EVERY_S, digest_hz, links_every_s

from .sim_model import (
    BUCKET_BYTES,
    CAUSE_FIELDS,
    DTYPE,
    LAST_STAGE_COST,
    MAX_HELD_STEPS,
    MAX_LAG_S,
    PHASES,
    RANKS_PER_NODE,
    SLOW_LINK_X,
    TICK_S,
    JobModel,
    JobStep,
    Scenario,
    node_name,
)
from .sim_node import JOB_FILE, STACK_ROOTS, STACK_TAIL, SimulatedNode, stack_frame
from .sim_relays import RelayProcesses, processes_for

#: What the simulator's process holds open besides its nodes' sockets: the interpreter's files, libzmq's
#: context, the pipes to its relay processes.
FDS_BESIDES = 256
#: Sends this late on average (seconds after their time, the loop's own tick aside) mean the machine did not keep up.
LATE_S = 0.1
#: What each simulated relay's probing costs (relay/links.py measures its own); it says what its probes measured as
#: often as a real relay of a job of its size does (wire/pacing.py: links_every_s).
LINK_COST_BPS = 68_000.0


class Simulator:
    def __init__(self, scenario: Scenario, directory: str | None = None, relay_processes: int | None = None):
        """``relay_processes``: how many processes run the nodes' relays (default: as few as the limit on open files
        allows, demo/sim_relays.py)."""
        self.s = scenario
        self.directory = directory
        self.relay_processes = relay_processes
        self.model = JobModel(scenario)
        self._groups: dict[int, list[Group]] = {}  # rank -> the groups its hello lists (a layout's)
        self._infos: dict[int, RankInfo] = {}  # rank -> its hello's fields (made again when its node's rate changes)
        self.secret = rendezvous.load_or_create_secret(scenario.job, directory)
        self.dropped = 0  # messages a full PUB queue refused
        self.skipped_s = 0.0  # schedule time skipped because the machine could not keep up
        self.sends = 0  # node sends (a flush of its ranks' messages, or a heartbeat, and its digest)
        self.late_s = 0.0  # summed over them: how long after its time each went out
        self.latest_s = 0.0  # the latest of them
        self.steps_done = 0
        self.current_step = 0  # the step in progress (what the capture command reads)
        self._done: collections.deque[JobStep] = collections.deque(maxlen=MAX_HELD_STEPS)  # finished, for the nodes to send
        self._nodes: list[SimulatedNode] = []
        self._context: zmq.Context[Any] | None = None
        self.relays: RelayProcesses | None = None
        self._started = 0.0
        self._step_start = 0.0
        self._step_end = 0.0
        self._step: JobStep | None = None
        self._halted_at: float | None = None  # the job stopped (a stalled or silent rank): when
        self._walls: list[float] = []
        self._clock = time.time  # replay() runs the job on a clock of its own
        self._next_sample: dict[int, float] = {}  # per node (by its first rank): when it next sends a sample
        ops = len(self.model.ops)  # every rank's collectives since they last went to its node's digest: steps, waits, longest
        self._op_sums = (np.zeros(scenario.ranks, np.int64), np.zeros((scenario.ranks, ops)), np.zeros((scenario.ranks, ops)))
        self._ops_due: dict[int, float] = {}  # per node (by its first rank): when its ranks' collectives next go to its digest

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> "Simulator":
        """Start the relays' processes, then connect each node's ranks to its relay. A machine whose limit on open
        files cannot hold the nodes' ranks' sockets in one process is an error that says so (RuntimeError)."""
        per = self.s.per_node
        nodes = [r for r in (range(i * per, min((i + 1) * per, self.s.ranks)) for i in range(self.s.nodes)) if len(r)]
        needed = FDS_BESIDES + SimulatedNode.FDS * len(nodes)
        if fd_limit.room_for(needed) < needed:
            raise RuntimeError(
                f"{len(nodes)} simulated nodes need {needed} open files in the simulator's process, and this machine allows "
                f"{fd_limit.hard_limit()} (ulimit -Hn): simulate fewer nodes (--nodes), or raise the hard limit"
            )
        processes = self.relay_processes or processes_for(len(nodes), fd_limit.hard_limit())
        ctx = self._context = zmq.Context()
        ctx.set(zmq.MAX_SOCKETS, 2 * len(nodes) + 64)
        try:
            self.relays = RelayProcesses(self.s.job, self.directory, len(nodes), min(processes, len(nodes)))
            for i, (ranks, relay) in enumerate(zip(nodes, self.relays.start())):
                self._nodes.append(SimulatedNode(self, i, ranks, ctx, relay))
        except BaseException:
            self.close()
            raise
        now = time.time()
        self._started = now
        every = 1.0 / min(self.s.rate_hz, digest_hz(len(self._nodes)))  # what a node's sends come to once hellos are in
        for i, node in enumerate(self._nodes):  # spread the nodes' sends over a period
            node.next_flush = node.next_digest = now + (i / len(self._nodes)) * every
            node.next_hello = now + (i / len(self._nodes)) * 0.5
        self._begin_step(0, now)
        return self

    def close(self) -> None:
        for node in self._nodes:
            node.close()
        self._nodes.clear()
        if self._context is not None:
            self._context.term()
        self._context = None
        if self.relays is not None:
            self.relays.close()  # their records go with them
        self.relays = None

    def behind(self) -> str | None:
        """What the machine could not keep up with, in a line (None: it kept up): schedule skipped, late sends,
        messages dropped. A viewer's latency and gaps include these; the scale benchmark says them beside its figures."""
        said = []
        if self.skipped_s:
            said.append(f"{self.skipped_s:.1f} s of it skipped")
        late = self.late_s / self.sends if self.sends else 0.0
        if late > LATE_S:
            said.append(f"its nodes' sends went out {late:.2f} s late on average (at worst {self.latest_s:.1f} s)")
        if self.dropped:
            said.append(f"{self.dropped} messages dropped at the source (a relay's queue was full)")
        return "the machine could not keep up with the simulated job: " + "; ".join(said) if said else None

    def run(self, stop: threading.Event, duration_s: float | None = None) -> None:
        poller = zmq.Poller()
        for node in self._nodes:
            poller.register(node.sub, zmq.POLLIN)
        subs = {node.sub: node for node in self._nodes}
        end = None if duration_s is None else self._started + duration_s
        next_links = time.time()
        while not stop.is_set() and (end is None or time.time() < end):
            now = time.time()
            self._advance(now)
            if now >= next_links:  # each relay's links, as relay/links.py publishes them
                next_links = now + links_every_s(self.s.nodes)
                for node, msg in zip(self._nodes, self.links(now)):
                    node.publish(schema.encode(msg))
            due = []
            for node in self._nodes:
                if now >= node.next_hello:
                    self._hellos(node, now)
                    node.next_hello = now + HELLO_EVERY_S
                if now >= node.due():
                    due.append(node)
            if due:
                times = [node.due() for node in due]
                self._flush(due, now)  # (each node's digest goes if due, and its next is set)
                sent = time.time()
                for node, at in zip(due, times):
                    late = sent - at
                    self.sends += 1
                    self.late_s += late
                    self.latest_s = max(self.latest_s, late)
                    if now >= node.next_flush:
                        node.next_flush = max(node.next_flush + 1.0 / node.rate_hz, now)
            wake = min(min(n.due() for n in self._nodes), self._step_end if self._halted_at is None else now + 0.25)
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
            step = self._step
            if step is None:
                break
            self._done.append(step)
            self._walls = (self._walls + [step.duration])[-32:]
            self.steps_done += 1
            start = self._step_end
            if now - start > MAX_LAG_S:  # the machine is too busy for this job: skip ahead rather than flood
                self.skipped_s += now - start
                start = now
            self._begin_step(self.current_step + 1, start)

    # -- what each rank says -----------------------------------------------------

    def state(self, rank: int, now: float) -> State:
        """The state the probe's sender reports (probe/sender.py), for one simulated rank."""
        n = self.current_step
        halted = self._halted_at is not None
        stuck = halted and rank in (self.s.stall_rank, self.s.silent_rank)
        ops = self.model.ops  # (phase index, op, calls), in phase order
        k = self.s.calls_per_step
        collective = None
        if ops and halted and not stuck:  # waiting inside the first collective of the step for the stuck rank
            collective = LastCollective(op=ops[0][1], seq=n * k + 1, b=BUCKET_BYTES[0], dt=DTYPE, g=self.s.ranks, inside=True,
                                        age=now - self._halted_at if self._halted_at is not None else 0.0)  # fmt: skip
        elif ops:  # the last one it left: the previous step's last
            collective = LastCollective(op=ops[-1][1], seq=n * k, b=BUCKET_BYTES[0], dt=DTYPE, g=self.s.ranks, inside=False, age=0.0)
        pause = self._step.pauses.get(rank) if self._step is not None else None
        if stuck:
            phase = "data"  # waiting for a batch that never comes
        elif halted:
            phase = PHASES[ops[0][0]] if ops else "forward"
        elif pause is not None and pause[0] == COMPILE_PHASE and now < self._step_start + pause[1]:
            phase = pause[0]  # recompiling, at the start of its step's forward (JobStep.pauses)
        elif pause is not None and pause[0] != COMPILE_PHASE and now >= self._step_end - pause[1]:
            phase = pause[0]  # saving a checkpoint or evaluating, at the end of its step (JobStep.pauses)
        else:
            into = (now - self._step_start) / max(self._step_end - self._step_start, 1e-9)
            phase = PHASES[min(3, int(into * 4))]
        walls = self._walls
        median = sorted(walls)[len(walls) // 2] if walls else None
        ev = (
            self.model.evidence(rank, now - self._started, median or self.model.step_s, rank // self.s.per_node)
            if self.s.evidence
            else None
        )
        return State(
            step=n, last=n - 1, in_step=True, phase=phase, step_age=max(0.0, now - self._step_start), dropped=0, rejected={},
            rate_hz=self.s.rate_hz, median_step_s=median, collective=collective,
            ev=Evidence(**cast(dict[str, Any], ev)) if ev is not None else None,  # (the model's figures, as a probe's)
            **(self._device_samples(now) if self.s.gpu else {}),
        )  # fmt: skip

    def _pausing(self) -> dict[Any, Any]:
        """The ranks saving a checkpoint, evaluating or compiling in the step under way (JobStep.pauses): their state is their own."""
        return self._step.pauses if self._step is not None else {}

    def _device_samples(self, now: float) -> dict[str, Any]:
        """A GPU node's memory and NVML gauges (``--gpu``), the same for every rank: what the viewer keeps and
        shows of them costs it the same whatever the figures (watch/engine/resource_samples.py)."""
        seconds = now - self._started
        alloc = 40e9 + 1e6 * (seconds % 60)  # the allocator's figures move a little, as a training step's do
        return {
            "mem": Memory(rss=3.0e9, cuda=CudaMemory(dev=0, alloc=alloc, resv=60e9, peak=52e9, cap=80e9, retries=0, ooms=0)),
            "gpu": Gpu(seq=int(seconds), t=now, name="NVIDIA H100 80GB HBM3 (simulated)", bus="00000000:00:00.0",
                       util=97, mem_util=61, mem_used=62e9, mem_total=80e9, power_w=655.0, power_limit_w=700.0,
                       temp_c=66, sm_mhz=1980, sm_max_mhz=1980),
        }  # fmt: skip

    def _hellos(self, node: SimulatedNode, now: float) -> None:
        """Every rank of the node says hello: into its digest, and on the wire where a viewer takes the ranks' own
        (a rank's fields are made once, while its node's rate stands: 8,192 hellos a second at 16,384 ranks)."""
        published = HELLO.encode() in node.topics
        for rank in node.ranks:
            if self.is_silent(rank):
                continue
            info = self._infos.get(rank)
            if info is None or info.rate_hz != node.rate_hz:
                info = self._infos[rank] = self._info(node, rank)
            if published:
                node.send(Hello(job=self.s.job, rank=rank, ts=now, state=self.state(rank, now), **msgspec.structs.asdict(info)))
            else:
                node.digest.add_hello(rank, info, self.state(rank, now))

    def _info(self, node: SimulatedNode, rank: int) -> RankInfo:
        """A simulated rank's hello fields."""
        groups = self._groups.get(rank)
        if groups is None and self.s.layout is not None:
            groups = self._groups[rank] = self.s.groups(rank)
        return RankInfo(
            host=node.host, pid=os.getpid(), world=self.s.ranks, local_rank=rank - node.ranks[0], local_world=len(node.ranks),
            launcher="simulated", device="cpu (simulated)", probe=PROBE_VERSION, python=platform.python_version(),
            argv=["simulate"], cwd=os.getcwd(), rate_hz=node.rate_hz, relay=node.relay if rank == node.ranks[0] else None,
            groups=groups or None,
        )  # fmt: skip

    def _flush(self, nodes: list[SimulatedNode], now: float) -> None:
        """Every rank of ``nodes`` (those due now) sends the steps it finished since its last send, or a heartbeat;
        then each node its digest. Nodes that sent up to the same step share their new steps, and those whose
        ranks' own messages no viewer takes have them summed in one go (:meth:`fold_nodes`)."""
        by_sent: dict[int, list[SimulatedNode]] = {}
        for node in nodes:
            by_sent.setdefault(node.sent_upto, []).append(node)
        for sent_upto, group in by_sent.items():
            steps = [st for st in self._done if st.n > sent_upto]
            folded = []
            for node in group:
                if not steps and now - node.last_sent < HEARTBEAT_EVERY_S:
                    continue
                node.last_sent = now
                # only digests are read: no records to build (unless records the digest still holds came first, as
                # when a viewer of the ranks' own messages just went over to digests: a rank's steps of one digest come
                # one way, NodeDigest.holds_records)
                if steps and STEPS.encode() not in node.topics and not node.digest.holds_records:
                    folded.append((node.ranks, node.digest))
                else:
                    for msg in self.messages(node.ranks, steps, now):
                        node.send(msg)
                if steps:
                    node.sent_upto = steps[-1].n
            if folded:
                self.fold_nodes(folded, steps, now)
        for node in nodes:
            node.send_digest(now)

    def messages(self, ranks: range, steps: list[JobStep], now: float) -> Iterator[Steps | Heartbeat]:
        """What ``ranks`` send now: their records of ``steps``, or heartbeats without any."""
        causes = self.model.cause_ranks()
        special = {self.s.stall_rank, self.s.silent_rank, *self._pausing(), *causes}
        # the same for every rank of a node but a stuck, pausing or slowed one (not a slowed one's evidence, nor a
        # pausing one's phase: a node whose first rank recompiles is not a node of ranks compiling)
        state = self.state(next((r for r in ranks if r not in special), ranks[0]), now)
        sample = self._sample(ranks, steps, now)
        records = self.model.records
        job = self.s.job
        for rank in ranks:
            if self.is_silent(rank):
                continue
            rank_state = self.state(rank, now) if rank in special else state
            if not steps:
                yield Heartbeat(job=job, rank=rank, ts=now, state=rank_state)
                continue
            made, summaries = [], []
            for st in steps:
                record, cs = records(st, rank)
                made.append(record)
                summaries += cs
            yield Steps(job=job, rank=rank, ts=now, state=rank_state, steps=made, cs=summaries or None,
                        cx=sample if summaries and sample else None)  # fmt: skip

    def fold(self, ranks: range, steps: list[JobStep], now: float, digest: NodeDigest) -> None:
        """What ``ranks`` would send with their records of ``steps`` (:meth:`messages`), summed straight into
        their node's digest (:meth:`fold_nodes`, for one node)."""
        self.fold_nodes([(ranks, digest)], steps, now)

    def fold_nodes(self, nodes: list[tuple[range, NodeDigest]], steps: list[JobStep], now: float) -> None:
        """What the ranks of ``nodes`` (each node's ranks and digest) would send with their records of ``steps``,
        summed straight into each node's digest as the columns its body packs (NodeDigest.add_columns) and, every
        :data:`~ranktop.wire.pacing.OPS_EVERY_S`, each rank's collectives since: the sums for every rank of
        every node in a few numpy operations (JobModel.node_sums). One rank at a time, the simulator of 16,384
        ranks needed more than a core for this alone, and fell behind its own job."""
        model = self.model
        every = np.concatenate([np.arange(ranks.start, ranks.stop) for ranks, _ in nodes])
        sums = model.node_sums(steps, every)
        k = sums["count"]
        wall = sums["wall"] / k
        phases = sums["phases"] / k
        own = {name: phases[:, i] for i, name in enumerate(PHASES)}  # wire/own_times.py, for every rank at once
        own[OTHER_PHASE] = np.maximum(0.0, wall - phases.sum(axis=1))
        paused: dict[str, np.ndarray] = {}  # checkpoints, evaluations, compilations in these steps (JobStep.pauses): a column each
        for st in steps:
            for r, (name, seconds) in st.pauses.items():
                for at in np.flatnonzero(every == r).tolist():
                    paused.setdefault(name, np.zeros(len(every)))[at] += seconds / k
        for name, column in paused.items():
            own[name] = column
            spent_in = "forward" if name == COMPILE_PHASE else OTHER_PHASE  # a recompilation is in its forward
            own[spent_in] = np.maximum(0.0, own[spent_in] - column)
        by_phase: dict[str, np.ndarray] = {}
        for j, (i, _, _) in enumerate(model.ops):
            by_phase[PHASES[i]] = by_phase.get(PHASES[i], 0.0) + sums["waits"][:, j] / k
        if by_phase:
            for phase, waited in by_phase.items():
                own[phase] = np.maximum(0.0, own[phase] - waited)
            own[COMM_PHASE] = np.minimum(sum(by_phase.values()), wall)
        columns = {name: column.tolist() for name, column in own.items()}
        if model.ops:  # every rank's collectives, summed until its node's digest is due to have them (_note_ops)
            count, waits, longest = self._op_sums
            count[every] += k
            waits[every] += sums["waits"]
            longest[every] = np.maximum(longest[every], sums["longest"])
        starts, walls = (sums["end"] - wall).tolist(), wall.tolist()
        causes = self.model.cause_ranks()
        special = {self.s.stall_rank, self.s.silent_rank, *self._pausing(), *causes}
        first = nodes[0][0]  # the same for every rank but a stuck, pausing or slowed one (not a slowed one's evidence)
        state = self.state(next((r for r in first if r not in special), first[0]), now)
        at = 0
        for ranks, digest in nodes:
            rows: range | list[int] = range(at, at + len(ranks))
            at += len(ranks)
            numbers = list(ranks)
            if not special.isdisjoint(numbers):
                numbers = [r for r in numbers if not self.is_silent(r)]
                rows = [row for row, r in zip(rows, ranks) if not self.is_silent(r)]
            if not numbers:
                continue
            if isinstance(rows, range):  # (a slice of each column: no Python loop over its ranks)
                part = slice(rows.start, rows.stop)
                start, walls_of, own_of = starts[part], walls[part], {name: column[part] for name, column in columns.items()}
            else:
                start, walls_of = [starts[i] for i in rows], [walls[i] for i in rows]
                own_of = {name: [column[i] for i in rows] for name, column in columns.items()}
            digest.add_columns(
                numbers, [self.state(r, now) if r in special else state for r in numbers], last=[steps[-1].n] * len(numbers),
                count=[k] * len(numbers), start=start, wall=walls_of, own=own_of, sample=self._sample(ranks, steps, now),
            )  # fmt: skip
            if model.ops:
                self._note_ops(digest, numbers, now)

    def _note_ops(self, digest: NodeDigest, numbers: list[int], now: float) -> None:
        """Hand a node's ranks' collectives summed since they were last handed (:attr:`_op_sums`) to its digest as
        op summaries, when due (it sends them every OPS_EVERY_S: built at every send, thousands of ranks four times
        a second, they would cost what the columns save)."""
        if now < self._ops_due.get(numbers[0], float("-inf")):
            return
        self._ops_due[numbers[0]] = now + OPS_EVERY_S
        count, waits, longest = self._op_sums
        counts, waits_of, longest_of = count[numbers].tolist(), waits[numbers].tolist(), longest[numbers].tolist()
        for i, number in enumerate(numbers):
            if counts[i]:
                digest.add_ops(number, self.model.op_summaries(counts[i], waits_of[i], longest_of[i]))
        count[numbers], waits[numbers], longest[numbers] = 0, 0.0, 0.0

    def _sample(self, ranks: range, steps: list[JobStep], now: float) -> list[Call] | None:
        """A node's raw calls to send with its steps, as the probe samples them: once a second at most."""
        if not steps or now < self._next_sample.get(ranks[0], 0.0) or not self.model.ops:
            return None
        last = steps[-1]
        self._next_sample[ranks[0]] = now + SAMPLE_EVERY_S
        return self.model.sample(last, ranks[0], (last.n + 1) * self.s.calls_per_step, now - self._started)

    def replay(
        self, seconds: float, start: float = 1.0e9, digests: bool = False, turns: int = 1
    ) -> Iterator[tuple[float, list[list[bytes]]]]:
        """Run the job on a clock of its own, without sockets: yields (time, frames every rank sends then)
        at each of the ranks' sends, for ``seconds`` of the job (tests and benchmarks feed an aggregator
        with them). The scenario's stalls and silences happen as they would live. Call on a Simulator
        that was not started. ``digests``: yield each node's digest (relay/digest_fold.py) instead, hellos
        included, as a viewer of a big job receives them, at the pace the job's relays would send them
        (``digest_hz``: 1 Hz at 2,048 nodes). ``turns``: the nodes send in that many turns, node j at every
        ``turns``-th send from the j-th (live, each relay sends at its own moment: its digests end at its own
        steps, not every node's at the same)."""
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
                assert isinstance(msg, Hello)
                folds[msg.rank // per].add(msg)
        sent_upto, last_sent = [-1] * turns, start
        next_links = start + links_every_s(self.s.nodes)
        # The nodes' digests as their relays pace them (wire/pacing.py: digest_hz), each turn's on its own.
        digest_every = 1.0 / digest_hz(len(nodes))
        next_digest = [start + digest_every] * turns
        for i in range(1, int(seconds * self.s.rate_hz) + 1):
            now = clock[0] = start + i / self.s.rate_hz
            self._advance(now)
            turn = i % turns
            if digests and now < next_digest[turn] - 1e-9:
                continue
            next_digest[turn] = max(next_digest[turn] + digest_every, now)
            steps = [st for st in self._done if st.n > sent_upto[turn]]
            if not steps and now - last_sent < HEARTBEAT_EVERY_S:
                continue
            last_sent = now
            frames = []
            due = list(zip(nodes, folds))[turn::turns]
            if digests and steps:  # every due node's ranks summed in one go, as live (fold_nodes)
                self.fold_nodes(due, steps, now)
            for ranks, fold in due:
                if digests and steps:
                    digest = fold.body(now, now)
                    if digest is not None:
                        frames.append(schema.encode(digest))
                    continue
                for msg in self.messages(ranks, steps, now):
                    if digests:
                        fold.add(msg)
                    else:
                        frames.append(schema.encode(msg))
                if digests:
                    digest = fold.body(now, now)
                    if digest is not None:
                        frames.append(schema.encode(digest))
            if steps:
                sent_upto[turn] = steps[-1].n
            if now >= next_links:
                next_links += links_every_s(self.s.nodes)
                frames += [schema.encode(msg) for msg in self.links(now)]
            yield now, frames

    def links(self, now: float) -> list[Links]:
        """What every node's relay says of its links now (relay/links.py's ``links`` message; the model's rates)."""
        t = now - self._started
        return [Links(job=self.s.job, host=node_name(i), ts=now, links=self.model.link_rates(i, t), cost=LINK_COST_BPS)
                for i in range(self.s.nodes)]  # fmt: skip

    def hellos(self, now: float) -> list[list[bytes]]:
        """Every rank's hello, encoded (what replay's consumers need first)."""
        out = []
        for rank in range(self.s.ranks):
            hello = Hello(
                host=self.s.host_of(rank), pid=os.getpid(), world=self.s.ranks, local_rank=rank % self.s.per_node,
                local_world=self.s.per_node, job=self.s.job, rank=rank, ts=now,
                groups=self.s.groups(rank) if self.s.layout is not None else None,
            )  # fmt: skip
            out.append(schema.encode(hello))
        return out

    def stacks(self, rank: int) -> dict[str, Any]:
        """A training stack where this rank is now, shaped as probe/stacks.py's answer."""
        stuck = self._halted_at is not None and rank in (self.s.stall_rank, self.s.silent_rank)
        phase = "data" if stuck else self.state(rank, self._clock()).phase or "forward"
        if self._halted_at is not None and not stuck:
            phase = "forward"  # inside the collective the stuck rank never joins
        frames = [stack_frame(JOB_FILE, 210, "<module>", "main()")] + STACK_TAIL[phase]
        thread = {"name": "MainThread", "ident": rank + 1, "main": True, "daemon": False, "frames": frames, "omitted": 0}
        return {"threads": [thread], "omitted_threads": 0, "roots": STACK_ROOTS}


# -- the command line ------------------------------------------------------------------


def add_options(p: argparse.ArgumentParser) -> None:
    """The simulator's options (``ranktop demo --simulate N`` reads them from its extra arguments)."""
    p.add_argument("--nodes", type=_count, default=None, metavar="M", help=f"simulated nodes (default: {RANKS_PER_NODE} ranks per node)")
    p.add_argument("--relay-processes", type=_count, default=None, metavar="P",
                   help="processes that run the nodes' relays, apart from the simulated ranks as on a real node "
                   "(default: as few as the limit on open files allows, at 20 files a relay: 3 for 2,048 nodes "
                   "where `ulimit -Hn` is 20,000)")  # fmt: skip
    p.add_argument("--calls-per-step", type=_count0, default=8, metavar="K", help="collective calls per step and rank (default 8)")
    p.add_argument("--steps-per-s", type=_positive, default=16.0, metavar="S", help="training steps per second (default 16)")
    p.add_argument("--rate", type=_rate, default=settings.DEFAULT_RATE_HZ, metavar="HZ",
                   help=f"messages per second per rank (default {settings.DEFAULT_RATE_HZ:g}, as the probe)")  # fmt: skip
    p.add_argument("--slow-rank", type=_count0, default=None, metavar="R", help="one rank slow in one phase, every step")
    p.add_argument(
        "--slow-node", default=None, metavar="HOST", help=f"every rank of one node slow (nodes are {node_name(0)}, {node_name(1)}, ...)"
    )
    p.add_argument(
        "--slow-link",
        default=None,
        metavar="HOST",
        help="one node's network slow: every collective crossing it, and the links its relay measures",
    )
    p.add_argument(
        "--slow-link-x",
        type=_number(float, lambda v: v >= 1, "1 or more"),
        default=SLOW_LINK_X,
        metavar="X",
        help=f"how many times slower its network is (default {SLOW_LINK_X:g})",
    )
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
                   help=f"each stage's forward and backward cost, relative (default: the last stage {LAST_STAGE_COST:g}, "
                        "the others 1)")  # fmt: skip
    p.add_argument("--gpu", action="store_true", help="every rank sends memory and GPU samples, as on a GPU node")
    p.add_argument(
        "--cause",
        choices=tuple(CAUSE_FIELDS),
        default=None,
        help="every rank sends cause evidence (as the probe's), the slow ranks' saying this cause",
    )


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
        seed=args.seed, pp=args.pp, tp=args.tp, ep=args.ep, stage_costs=args.stage_costs, gpu=args.gpu,
        slow_link=args.slow_link, slow_link_x=args.slow_link_x, evidence=args.cause is not None,
        slow_cause=args.cause or "unknown",
    )  # fmt: skip
    if ranks % (s.pp * s.tp * s.ep):
        parser.error(f"--pp {s.pp} x --tp {s.tp} x --ep {s.ep} does not divide the {ranks} ranks")
    if s.stage_costs is not None and len(s.stage_costs) != s.pp:
        parser.error(f"--stage-costs gives {len(s.stage_costs)} stages, --pp {s.pp}")
    for option, host in (("--slow-node", s.slow_node), ("--slow-link", s.slow_link)):
        if host is not None and host not in {s.host_of(r) for r in range(ranks)}:
            parser.error(f"{option} {host!r} is not a node of this job ({node_name(0)} to {s.host_of(ranks - 1)})")
    return s


_N = TypeVar("_N", int, float)


def _number(kind: Callable[[str], _N], test: Callable[[_N], bool], what: str) -> Callable[[str], _N]:
    def parse(text: str) -> _N:
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
        "watch it with `ranktop watch JOB` (or run `ranktop demo --simulate N` for both at once). "
        "One process runs every simulated rank; the nodes' relays run in processes of their own, as on a real node, "
        "as many as the limit on open files needs (16,384 ranks on 2,048 nodes fit where `ulimit -Hn` is 20,000). "
        "When the machine cannot keep up, the simulator says so as it ends: schedule skipped, late sends, drops.",
    )
    p.add_argument("--ranks", type=_count, required=True, metavar="N", help="simulated ranks")
    p.add_argument("--job", default=None, help="job name (default: sim-<pid>)")
    p.add_argument("--dir", default=None, metavar="DIR", help="rendezvous directory (default: $RANKTOP_DIR or ~/.ranktop)")
    p.add_argument("--duration", type=_positive, default=None, metavar="S", help="stop after S seconds (default: until interrupted)")
    add_options(p)
    return p


def run(scenario: Scenario, directory: str | None = None, duration_s: float | None = None, quiet: bool = False,
        relay_processes: int | None = None) -> int:  # fmt: skip
    """Run a simulation in this process until interrupted (or ``duration_s``); SIGTERM ends it cleanly."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if threading.current_thread() is threading.main_thread() else None
    sim = Simulator(scenario, directory, relay_processes)
    try:
        sim.start()
        if not quiet:
            s, relays = scenario, len(sim.relays.pids) if sim.relays is not None else 0
            print(
                f"ranktop: simulating job {s.job}: {s.ranks} ranks on {len(sim._nodes)} nodes (their relays in {relays} "
                f"process{'es' if relays > 1 else ''}), {s.steps_per_s:g} steps/s, {s.calls_per_step} collective calls per step; "
                f"watch it with: ranktop watch {s.job}",
                file=sys.stderr,
            )  # fmt: skip
        sim.run(stop, duration_s)
    except KeyboardInterrupt:
        pass
    finally:
        behind = sim.behind()  # said before the relays close: a slow close must not lose it
        if behind and not quiet:
            print(f"ranktop: {behind}", file=sys.stderr, flush=True)
        sim.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    scenario = scenario_of(args, args.ranks, args.job or f"sim-{os.getpid()}", parser)
    try:
        return run(scenario, args.dir, args.duration, relay_processes=args.relay_processes)
    except RuntimeError as exc:  # the machine cannot run it: one line, no traceback
        print(f"ranktop: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
