"""The viewer's engine: messages in, snapshots out, one lock between them.

The receiver thread hands each message's frames to :meth:`Aggregator.ingest_frames`,
which decodes them in one call (wire/schema.py) and routes them: telemetry to
the rank store (watch/engine/rank_store.py, every rank's row), answers to our
commands to the request book (watch/engine/requests.py), relays' news to the
endpoints (watch/engine/endpoints.py). The UI (or ``--json``) takes a
:class:`~ranktop.watch.model.snapshot.Snapshot` at its own pace, one way through:
take (the messages, under the lock) -> gather (``store.gather()``: everything the
snapshot reads, the collective sums included, copied in one hold of the lock) ->
judge (watch/analysis/judge.py: one :class:`~ranktop.watch.analysis.judge.Judge`, which owns the memory its
verdicts keep, judges the copies with the lock released) -> the Snapshot. The aggregator keeps the store, the
relays, their links and the replies; the judging and all it remembers are the judge's. The receiver never waits
for a frame.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Sequence, Union

from ranktop.watch.analysis import stalls
from ranktop.watch.analysis.judge import Extras, Judge
from ranktop.watch.engine.endpoints import Endpoints
from ranktop.watch.engine.rank_store import JobView, RankStore
from ranktop.watch.engine.link_book import LinkBook
from ranktop.watch.engine.requests import RequestBook
from ranktop.watch.model.answers import Answer
from ranktop.watch.model.snapshot import Snapshot
from ranktop.wire import schema
from ranktop.wire.messages import Command, Hello, Links, Node, RankMessage, Reply
from ranktop.wire.names import KINDS
from ranktop.wire.pacing import digest_hz

#: What the viewer takes: what ranks send, and their nodes' digests.
Telemetry = Union[RankMessage, Node, Links]

DEFAULT_WINDOW = 64
DEFAULT_SILENT_AFTER_S = 3.0
#: Latest replies kept for the snapshot, whoever sent the command (ours are all kept: watch/engine/requests.py).
MAX_REPLIES = 256
MAX_ERRORS = 8
#: Kinds of malformed message named in the status line, at most (the decoder's fault texts are a small fixed set).
MAX_FAULTS = 64
#: Seconds the receiver waits at most for a snapshot being built before it takes its messages (a snapshot of
#: 4,096 ranks takes 10 to 40 ms of CPU).
SNAPSHOT_FIRST_S = 0.25


class Aggregator:
    def __init__(
        self,
        job: str | None = None,
        *,
        window: int = DEFAULT_WINDOW,
        silent_after_s: float = DEFAULT_SILENT_AFTER_S,
        stall_factor: float = stalls.DEFAULT_STALL_FACTOR,
        stall_floor_s: float = stalls.DEFAULT_STALL_FLOOR_S,
        clock: Callable[[], float] = time.monotonic,
        requests: RequestBook | None = None,
        wall_clock: Callable[[], float] = time.time,
    ):
        self._job = job
        self._window = window
        self._silent_after = silent_after_s
        self._clock = clock
        self._wall_clock = wall_clock  # a replay's virtual time (watch/offline/replay.py); the ranks' own timestamps are wall time
        self.requests = requests if requests is not None else RequestBook(clock)  # our commands and every answer
        self._started = clock()
        self._lock = threading.Lock()
        self.store = RankStore(window, silent_after_s, self.requests.poke)  # every rank's row (watch/engine/rank_store.py)
        self.judge = Judge(stalls.StallPolicy(stall_factor, stall_floor_s))  # the judging and its memory (watch/analysis/judge.py)
        self._endpoints = Endpoints()  # the relays it hears the job through (watch/engine/endpoints.py)
        self._links = LinkBook()  # the links between nodes the relays measured (watch/engine/link_book.py)
        self._replies: collections.deque[Answer] = collections.deque(maxlen=MAX_REPLIES)
        self._errors: list[str] = []
        self._dropped = 0
        self._faults: set[str] = set()  # kinds of malformed message already named (note_dropped)
        self._building = threading.Condition()  # snapshots being built, and their end (yield_to_snapshots)
        self._snapshots = 0
        self._digests = False  # node digests came: the job changes once per digest interval (changes_every_s)

    @property
    def world_size(self) -> int | None:
        """The job's size as its hellos said it (cheap: no snapshot)."""
        return self.store.world

    @property
    def ranks_heard(self) -> int:
        """How many ranks have been heard from (cheap: no snapshot)."""
        return len(self.store)

    def ended(self) -> bool:
        """Every rank of the job said it ended cleanly (watch/engine/lifecycle.py; cheap: no snapshot)."""
        with self._lock:
            return self.store.ended()

    @property
    def job(self) -> str | None:
        """The job watched: as named, or as the first message named it."""
        return self._job

    def changes_every_s(self) -> float:
        """Seconds between two changes of what a snapshot shows, at the shortest: a job heard in node digests
        changes once per digest interval, which its relays pace by its size (wire/pacing.py ``digest_hz``:
        once a second at 2,048 nodes), here the relays this viewer hears it through; 0 for a job heard from its
        ranks' own messages, which change with each. A view takes snapshots no more often (watch/refresher.py)."""
        if not self._digests:
            return 0.0
        with self._lock:
            nodes = len(self._endpoints)
        return 1.0 / digest_hz(nodes)

    def now(self) -> float:
        """The aggregator's clock (virtual in a replay): the time its snapshots are taken at."""
        return self._clock()

    # -- input (receiver thread) ----------------------------------------------

    def add_endpoint(self, url: str, host: str | None = None) -> None:
        with self._lock:
            self._endpoints.add(url, host, self._clock())

    def endpoint_urls(self) -> list[str]:
        """The relays added so far (cheap: no snapshot)."""
        with self._lock:
            return self._endpoints.urls()

    def replace_endpoint(self, old: str, new: str, host: str | None = None) -> None:
        """A node's relay came back elsewhere (a new port): its old endpoint goes, its ranks follow the new one."""
        with self._lock:
            self._endpoints.replace(old, new, host, self._clock())
            self.store.move_endpoint(old, new)  # cut off until they are heard through it: silent, not stalled

    def note_link(self, url: str, up: bool) -> None:
        """The receiver's word on a relay's connection: dropped (its ranks go silent at once: they
        are cut off, not stalled) or made again."""
        with self._lock:
            self._endpoints.note_link(url, up, self._clock())

    def ingest_frames(self, frames: list[bytes], endpoint: str | None = None) -> Telemetry | None:
        """Decode and ingest one message; malformed or foreign frames are dropped and counted."""
        return self.ingest_batch([(frames, endpoint)])[0]

    def ingest_batch(self, batch: Sequence[tuple[list[bytes], str | None]]) -> list[Telemetry | None]:
        """Decode and ingest the messages the receiver took in one go (frames, the relay they came through):
        node digests' steps are written together at the end (watch/engine/rank_store.py: settle). Each message
        decoded, or None where it was dropped (malformed, foreign, another version: counted)."""
        decoded: list[Telemetry | None] = []
        now, wall = self._clock(), self._wall_clock()  # (a go's messages were all taken off the wire in one poll)
        lock = self._lock
        for frames, endpoint in batch:  # each taken as it is decoded: a go's decoded messages are not all alive at once
            if self._snapshots:  # one began meanwhile: it goes first (yield_to_snapshots)
                self.yield_to_snapshots()
                now, wall = self._clock(), self._wall_clock()
            msg = self._decode(frames, endpoint)
            if msg is not None:
                try:
                    with lock:
                        self._ingest_locked(msg, endpoint, now, wall)
                except Exception as exc:  # a check decode lacks: the message is lost, never the viewer (benchmarks/fuzz.py hunts these)
                    self.note_dropped(fault=f"dropped {msg.KIND} messages the viewer could not read: {exc.__class__.__name__}")
                    msg = None
            decoded.append(msg)
        with self._lock:
            try:
                self.store.settle(self._clock())
            except Exception as exc:
                self._drop_locked(fault=f"dropped node messages the viewer could not read: {exc.__class__.__name__}")
        return decoded

    def _decode(self, frames: list[bytes], endpoint: str | None) -> Telemetry | None:
        """One message decoded (wire/schema.py), if it is this viewer's to take; else None, counted as dropped."""
        try:
            msg = schema.decode(frames)
        except schema.VersionMismatch as exc:
            self.note_dropped(f"{endpoint or 'a peer'}: {exc}")
            return None
        except schema.WireError as exc:
            self.note_dropped(fault=malformed(frames, exc))
            return None
        if isinstance(msg, Command):
            self.note_dropped()
            return None
        if _bad_groups(msg):
            self.note_error(BAD_GROUPS)  # the hello stands, less its groups that did not fit (wire/schema.py)
        return msg

    def ingest(self, msg: Telemetry, endpoint: str | None = None) -> None:
        """One decoded message, a node digest's steps written at once (:meth:`ingest_batch` writes a go's
        together)."""
        now = self._clock()
        with self._lock:
            self._ingest_locked(msg, endpoint, now, self._wall_clock())
            self.store.settle(now)

    def _ingest_locked(self, msg: Telemetry, endpoint: str | None, now: float, wall: float) -> None:
        if self._job is None:
            self._job = msg.job
            self.requests.poke()  # a command waiting for the job's name can go
        elif msg.job != self._job:
            self._dropped += 1  # another job's traffic on a shared endpoint
            return
        if endpoint is not None:
            self._endpoints.heard(endpoint, now, wall - msg.ts)
        if isinstance(msg, Links):  # a relay's, not a rank's: the link book's
            self._links.take(msg, now)
            return
        if isinstance(msg, Node):
            self._digests = True
        self.store.take(msg, endpoint, now, wall)
        if isinstance(msg, Reply):  # an answer to a command: the request book's (watch/engine/requests.py)
            result = msg.result or {}  # a plain map or None, checked at decode
            self._replies.append(self.requests.note_reply(msg.id, msg.cmd, msg.rank, msg.ok, result))

    def replies_to(self, command_id: str) -> list[Answer]:
        """Every rank's answer to one of our last commands, by rank (``snapshot.replies`` keeps only the latest)."""
        return self.requests.replies_to(command_id)

    def note_sent(self, command_id: str, cmd: str = "") -> None:
        """A command this viewer sent (watch/engine/requests.py does it for the commands it sends)."""
        self.requests.note_sent(command_id, cmd)

    def note_dropped(self, error: str | None = None, *, fault: str | None = None) -> None:
        """One message dropped; ``error`` goes to the status line, ``fault`` (a kind of fault, a fixed text)
        only the first time it is seen: a peer sending a malformed message four times a second is named once."""
        with self._lock:
            self._drop_locked(error, fault=fault)

    def _drop_locked(self, error: str | None = None, *, fault: str | None = None) -> None:
        self._dropped += 1
        if error:
            self._note_error_locked(error)
        if fault and fault not in self._faults and len(self._faults) < MAX_FAULTS:
            self._faults.add(fault)
            self._note_error_locked(fault)

    def note_error(self, error: str) -> None:
        with self._lock:
            self._note_error_locked(error)

    def _note_error_locked(self, error: str) -> None:
        if error not in self._errors:
            self._errors.append(error)
            del self._errors[:-MAX_ERRORS]

    # -- output (UI thread) ---------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The job now: everything it reads gathered under the lock in one hold (watch/engine/rank_store.py
        ``gather``), judged outside by the one judge: ``self.judge(*self.gather())``. While one is built the
        receiver holds back (yield_to_snapshots)."""
        with self._building:
            self._snapshots += 1
        try:
            return self._snapshot()
        finally:
            with self._building:
                self._snapshots -= 1
                if not self._snapshots:
                    self._building.notify_all()

    def yield_to_snapshots(self, timeout: float = SNAPSHOT_FIRST_S) -> None:
        """Wait (at most ``timeout``) for the snapshots being built to be done. :meth:`ingest_batch` calls this
        before each message of the receiver's go: the interpreter runs one thread at a time, and a snapshot that shares it with a
        busy receiver takes twice its CPU time to reach the screen, while the messages wait in ZeroMQ's
        queues at no cost and are taken right after."""
        with self._building:
            if self._snapshots:
                self._building.wait_for(lambda: not self._snapshots, timeout)

    def _snapshot(self) -> Snapshot:
        view, extras = self.gather()
        return self.judge(view, extras)  # (the lock released)

    def gather(self) -> tuple[JobView, Extras]:
        """What a snapshot judges, taken in the one hold of the lock: the ranks' view as the judge asks it
        (watch/engine/rank_store.py ``gather``, watch/analysis/judge.py ``Judge.asks``) and this aggregator's own
        facts (the relays, replies, errors, links)."""
        now, wall = self._clock(), self._wall_clock()
        with self._lock:  # the one hold: take -> gather -> (lock released) judge -> Snapshot
            relays = self._endpoints.view(now)
            sure_after = now - self._started > self._silent_after + relays.behind_s
            asks = self.judge.asks(now, len(self.store), self.store.world)
            view = self.store.gather(now, wall, relays, self._endpoints, sure_after, asks.recent, collectives=asks.collectives,
                                     every_rank_up_to=asks.every_rank_up_to, watch=asks.watch)  # fmt: skip
            facts = self._endpoints.facts(now, view.by_endpoint)
            replies, dropped, errors = list(self._replies), self._dropped, list(self._errors)
            links = self._links.columns(now)
        return view, Extras(
            job=self._job,
            elapsed_s=now - self._started,
            behind_s=relays.behind_s,
            relays=facts,
            lost_after_s=self._silent_after + relays.behind_s,
            replies=replies,
            requests=self.requests.statuses(),
            dropped=dropped,
            errors=errors,
            links=links,
        )


#: The status line's word on hellos whose groups the decoder thinned (said once: hellos repeat).
BAD_GROUPS = "dropped malformed process groups from hellos (the rest of each hello kept)"


def _bad_groups(msg: Telemetry) -> bool:
    """Whether the decoder dropped some group of a hello (its own, or one a node digest carries)."""
    if isinstance(msg, Hello):
        return bool(msg.bad_groups)
    if isinstance(msg, Node):  # (most digests carry no entry: no generator made for them)
        return bool(msg.ranks) and any(e.hello is not None and e.hello.bad_groups for e in msg.ranks)
    return False


def malformed(frames: list[bytes], exc: Exception) -> str:
    """The status line's name of a kind of fault: ``"dropped malformed steps messages: collective record lacks phase"``."""
    topic = frames[0] if frames else b""
    kind = next((k for k in KINDS if topic == k.encode()), None)
    detail = str(exc)
    if kind is not None and detail.startswith(f"{kind}: "):
        detail = detail[len(kind) + 2 :]
    return f"dropped malformed {kind + ' ' if kind else ''}messages: {detail}"
