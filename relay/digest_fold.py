"""A node's digest: what every rank of one node said in the last fraction of a second, in one message.

At 4,096 ranks a viewer cannot decode one message per rank every quarter of a
second, let alone one record per step (about 65,000 rank-steps a second at 16
steps/s; msgpack alone takes ~7 µs a rank-step in Python). So the node's relay
folds its ranks' messages of each interval into one ``node`` message that
says what the viewer needs and no more:

- ``steps``: the interval's steps of every rank that made one, as packed
  columns (wire/step_block.py): the ranks, the last step, how many, the
  start, the mean wall time, the mean own time per phase (0.0 for a rank that
  spent nothing in it), whether its steps carry device times. Own times as
  wire/own_times.py works them out (waits in collectives taken out and shown
  as ``comm``); the start is chosen so that start + mean wall is when its last
  step ended. Packed columns rather than a record per rank: the viewer decodes
  a few byte strings instead of a map and a tuple per rank, and writes a
  node's steps into its job-wide step columns as one block (watch/engine/step_columns.py);
- ``ranks``: an entry for each rank with more to say, and only then:
  ``ops``, its collectives since they were last sent (at most every
  :data:`OPS_EVERY_S`) per op, in the order of probe/collective_summary.py
  (calls, bytes, waited, total, longest, group, dtype, kernel, kbytes); ``cx``, its latest
  sample of raw calls (one rank's every :data:`SAMPLE_EVERY_S`, in turn,
  less often beyond 512 nodes: :data:`SAMPLE_BUDGET`);
  ``state``, its latest state, every :data:`SLOW_EVERY_S`, or at once when it
  made no step (a stall is seen as soon as from its own messages) or its
  capture moved; ``hello``, its hello (less the envelope) when it changed, or
  every :data:`HELLO_EVERY_S` for viewers that attached late (a running rank's
  state, collectives and hello less often beyond 8,192 ranks:
  :data:`ENTRY_BUDGET`); ``exit``, its
  last heartbeat said its process is ending, and how ("clean" or "error"). A
  rank that spoke but made no step and has nothing of these to say gets an
  entry of its rank alone: the viewer hears that it is alive.

Most intervals most ranks have nothing but steps to say, so most digests carry
the columns and no entry at all. A rank that said nothing in the interval is
left out of both (the viewer finds it silent by the time it last heard of it).
Viewers of small jobs keep taking the ranks' own messages, step by step; the
digest is for the biggest (watch/engine/receiver.py chooses). The relay builds
digests in relay/digest.py; the simulator (demo/simulate.py) builds them with
the same :class:`NodeDigest`. How often each part goes, by the job's size, is the contract's
(wire/pacing.py): the viewer paces what it expects by the same rules.
"""

from __future__ import annotations

import collections
from typing import Any, TypeVar

from ranktop.wire import step_block
from ranktop.wire.messages import Call, Exit, Heartbeat, Hello, Message, Node, NodeRank, NodeSteps, OpSummary, RankInfo, State, Steps
from ranktop.wire.own_times import own_times
from ranktop.wire.pacing import (
    DIGEST_HZ,
    HELLO_EVERY_S,
    OPS_EVERY_S,
    SAMPLE_MAX,
    SLOW_EVERY_S,
    digest_hz,
    job_nodes,
    sample_every_s,
    slow_factor,
)


class _Rank:
    __slots__ = (
        "count", "last", "end", "wall", "phases", "waits", "ops", "sample", "state", "dev", "hello", "hello_sent", "fresh",
        "state_sent", "sent_cap", "ops_sent", "exit", "columned",
    )  # fmt: skip

    def __init__(self) -> None:
        self.hello: RankInfo | None = None
        self.hello_sent = self.state_sent = self.ops_sent = float("-inf")
        self.state: State | None = None
        self.sent_cap: Any = None
        self.ops: dict[str, OpSummary] = {}
        self.sample: list[Call] | None = None
        self.waits: dict[str | None, float] = {}
        self.exit: Exit | None = None  # its last word, passed on once
        self.phases: dict[str, float] = {}
        self.reset()

    def reset(self) -> None:
        """After a digest: the interval's steps start again (ops, sample and waits of steps to come stay)."""
        self.count = 0
        self.last = -1
        self.end = 0.0
        self.wall = 0.0
        if self.phases:  # (an empty one is kept: the ranks of a simulated node fill none, NodeDigest.add_columns)
            self.phases = {}
        self.dev = False
        self.fresh = False  # it said something since the last digest
        self.columned = False  # its steps of the interval came as columns (NodeDigest.add_columns)


class NodeDigest:
    """Folds the messages of a node's ranks (as wire/schema.py decodes them) into one ``Node`` message per
    interval. Pure: the caller owns sockets and timing. Memory is O(ranks of the node x phases x ops)."""

    def __init__(self, job: str, host: str):
        self.job = job
        self.host = host
        self._ranks: collections.OrderedDict[int, _Rank] = collections.OrderedDict()
        self.relay: dict[str, str] | None = None  # the node relay's own addresses, told to every viewer
        self._sampled_at = float("-inf")  # when a digest last carried a rank's raw calls
        self._columns: list[tuple[Any, ...]] = []  # steps of the interval added as columns (add_columns), for the next body
        self._records = 0  # step records added since the last body (add): a source of columns waits for them to go
        self._world = 0  # the job's size and the node's, as the latest hello said them (job_nodes)
        self._local_world: int | None = None

    def add(self, msg: Message) -> None:
        """One rank's hello, steps or heartbeat (other kinds pass the digest by)."""
        if not isinstance(msg, (Hello, Steps, Heartbeat)) or msg.job != self.job:
            return
        if isinstance(msg, Hello):
            self.add_hello(msg.rank, msg.info(), msg.state)
            return
        rank = self._heard(msg.rank, msg.state)
        if isinstance(msg, Steps):
            self._add_steps(rank, msg)
        elif msg.exit is not None:  # a heartbeat's last word: a viewer of digests learns the job ended from it too
            rank.exit = msg.exit

    def add_hello(self, number: int, info: RankInfo, state: State | None) -> None:
        """A rank's hello, as its fields (a source that keeps them need not build the message: the simulator)."""
        rank = self._heard(number, state)
        if info.relay is not None and self.relay is None:
            self.relay = info.relay
        self._world, self._local_world = info.world, info.local_world
        if info is not rank.hello and info != rank.hello:
            rank.hello = info
            rank.hello_sent = float("-inf")

    @property
    def holds_records(self) -> bool:
        """Whether steps added as records wait for the next body: a rank's steps of one interval come as records or as
        columns (:meth:`add_columns`), never both (a digest names a rank once in its columns)."""
        return self._records > 0

    @property
    def hz(self) -> float:
        """How often this node's digest goes out (:func:`digest_hz` of the job's nodes as its ranks' hellos say them;
        :data:`DIGEST_HZ` until a hello came)."""
        return digest_hz(job_nodes(self._world, self._local_world, len(self._ranks))) if self._world else DIGEST_HZ

    def add_columns(
        self, ranks: list[int], states: list[State | None], *, last: list[int], count: list[int], start: list[float],
        wall: list[float], own: dict[str, list[float]], sample: list[Call] | None = None,
    ) -> None:  # fmt: skip
        """Ranks' steps of the interval already as columns, as :meth:`body` packs a rank's summed records: the
        last step, how many, start and mean wall, mean own time per phase (a column per phase, each as long as
        ``ranks``; wire/own_times.py), with each rank's state and the node's latest raw calls. For a source that
        has the columns without the records: the simulator of big jobs (demo/simulate.py) works them out for
        thousands of ranks at once, where building 65,000 records a second only to sum them took more than a core."""
        for number, state in zip(ranks, states):
            rank = self._heard(number, state)
            rank.columned = True
            if sample:
                rank.sample = sample[-SAMPLE_MAX:]
        self._columns.append((ranks, last, count, start, wall, own))

    def add_ops(self, number: int, ops: dict[str, OpSummary]) -> None:
        """A rank's collectives per op since they were last added (for a source that has no records: add_columns)."""
        rank = self._ranks.get(number)
        if rank is None:
            rank = self._ranks[number] = _Rank()
        for op, fields in ops.items():
            _merge_op(rank.ops, op, fields)

    def _heard(self, number: int, state: State | None) -> _Rank:
        """Rank ``number`` said something (with its ``state``, when it sent one): its entry, fresh."""
        rank = self._ranks.get(number)
        if rank is None:
            rank = self._ranks[number] = _Rank()
        rank.fresh = True
        if state is not None:
            rank.state = state
        return rank

    def _add_steps(self, rank: _Rank, msg: Steps) -> None:
        self._records += len(msg.steps)
        phases = rank.phases
        for rec in msg.steps:
            rank.count += 1
            g = rec.g  # device times where the rank has them: its waits are on the device too
            rank.wall += g.w if g else rec.w
            end = rec.t + rec.w
            if rec.n >= rank.last:
                rank.last, rank.end = rec.n, end
            for name, sec in (g.p if g else rec.p).items():
                phases[name] = phases.get(name, 0.0) + sec
            if g:
                rank.dev = True
        for entry in msg.cs or ():
            rank.waits[entry.ph] = rank.waits.get(entry.ph, 0.0) + entry.w
            for op, fields in entry.ops.items():
                _merge_op(rank.ops, op, fields)
        if msg.cx:
            rank.sample = msg.cx[-SAMPLE_MAX:]

    def body(self, now: float, wall: float) -> Node | None:
        """The digest of everything added since the last call (None when no rank said anything), ready for
        wire/schema.py's encode. ``now``: a monotonic clock, for the cadences; ``wall``: unix time, the
        message's timestamp."""
        entries = []
        steps = _StepColumns()
        nodes = job_nodes(self._world, self._local_world, len(self._ranks)) if self._world else 1
        sampled = now - self._sampled_at < sample_every_s(nodes)
        slow = slow_factor(self._world)
        slow_every, hello_every, ops_every = SLOW_EVERY_S * slow, HELLO_EVERY_S * slow, OPS_EVERY_S * slow
        for number, rank in list(self._ranks.items()):
            if not rank.fresh:
                continue
            entry: dict[str, Any] = {}
            state = rank.state
            stepped = rank.count or rank.columned
            if state is not None and (not stepped or now - rank.state_sent >= slow_every or state.cap != rank.sent_cap):
                entry["state"] = state
                rank.state_sent, rank.sent_cap = now, state.cap
            if rank.hello is not None and now - rank.hello_sent >= hello_every:
                entry["hello"] = rank.hello
                rank.hello_sent = now
            if rank.count:
                steps.add(number, rank)
                rank.waits = {}
            if rank.ops and now - rank.ops_sent >= ops_every:
                entry["ops"] = rank.ops
                rank.ops, rank.ops_sent = {}, now
            if rank.sample and not sampled:  # one rank's raw calls, in turn: enough for the fit
                entry["cx"] = rank.sample
                rank.sample, sampled, self._sampled_at = None, True, now
                self._ranks.move_to_end(number)
            if rank.exit is not None:
                entry["exit"], rank.exit = rank.exit, None
            if entry or not stepped:  # more to say than its steps, or alive without any
                entries.append(NodeRank(r=number, **entry))
            rank.reset()
        for block in self._columns:
            steps.extend(*block)
        self._columns = []
        self._records = 0
        if not entries and not steps.ranks:
            return None
        return Node(job=self.job, host=self.host, ts=wall, ranks=entries, steps=steps.columns() if steps.ranks else None, relay=self.relay)


class _StepColumns:
    """The interval's steps of a node's ranks, a column per figure (wire/messages.py's ``NodeSteps``)."""

    def __init__(self) -> None:
        self.ranks: list[int] = []
        self.last: list[int] = []
        self.count: list[int] = []
        self.start: list[float] = []
        self.wall: list[float] = []
        self.own: dict[str, list[float]] = {}
        self.device: list[bool] = []

    def add(self, number: int, rank: _Rank) -> None:
        """A rank's steps of the interval, as their means; a phase one rank lacks is 0.0 in its column."""
        k = rank.count
        wall = rank.wall / k
        phases = {name: sec / k for name, sec in rank.phases.items()}
        waits = {phase: sec / k for phase, sec in rank.waits.items()}
        at = len(self.ranks)
        self.ranks.append(number)
        self.last.append(rank.last)
        self.count.append(k)
        self.start.append(rank.end - wall)
        self.wall.append(wall)
        self.device.append(rank.dev)
        own = self.own
        for name, sec in own_times(wall, phases, waits).items():
            column = own.get(name)
            if column is None:
                column = own[name] = [0.0] * at
            column.append(sec)
        for column in own.values():
            if len(column) == at:
                column.append(0.0)

    def extend(self, ranks: list[int], last: list[int], count: list[int], start: list[float], wall: list[float],
               own: dict[str, list[float]]) -> None:  # fmt: skip
        """Ranks' steps already as columns (NodeDigest.add_columns); a phase one side lacks is 0.0 in its column."""
        at, size = len(self.ranks), len(ranks)
        self.ranks += ranks
        self.last += last
        self.count += count
        self.start += start
        self.wall += wall
        self.device += [False] * size
        for name, values in own.items():
            column = self.own.get(name)
            if column is None:
                column = self.own[name] = [0.0] * at
            column += values
        for column in self.own.values():
            if len(column) < at + size:
                column += [0.0] * (at + size - len(column))

    def columns(self) -> NodeSteps:
        """The columns packed (wire/step_block.py)."""
        return step_block.pack(self.ranks, self.last, self.count, self.start, self.wall, self.own, self.device)


_Figure = TypeVar("_Figure", int, float)


def _merge_op(ops: dict[str, OpSummary], op: str, more: OpSummary) -> None:
    """Adds one op's summary (probe/collective_summary.py) to a rank's since its last digest."""
    acc = ops.get(op)
    ops[op] = more if acc is None else OpSummary(
        calls=acc.calls + more.calls, bytes=acc.bytes + more.bytes, waited=acc.waited + more.waited,
        total=acc.total + more.total, longest=max(acc.longest, more.longest), group=more.group, dtype=more.dtype,
        kernel=_plus(acc.kernel, more.kernel), kbytes=_plus(acc.kbytes, more.kbytes),
    )  # fmt: skip


def _plus(a: _Figure | None, b: _Figure | None) -> _Figure | None:
    """The sum of two figures either of which may be unknown (None)."""
    return b if a is None else a if b is None else a + b
