"""What a rank sends, made by the probe's own code and read back by the viewer's decoder.

Tests that feed the aggregator build their messages here: the envelope and
the hello come from :class:`ranktop.probe.sender.Sender` (no socket, no
thread: a Sender that is never started), every message goes through the
wire's encoding and back through ``schema.decode``, so a test can never
feed the viewer something the wire would not carry. Step records, states and
collective calls are the test's own figures, written as plain maps (as any
peer might send them: :func:`raw`); the calls ride as the probe sends them,
folded into summaries and a sample (:func:`collectives`).
"""

from __future__ import annotations

import functools
from typing import Any

import time

import msgspec

from ranktop.transport.identity import Identity
from ranktop.probe.recorder import Recorder
from ranktop.probe.sender import Sender
from ranktop.probe import collective_summary
from ranktop.wire import schema
from ranktop.wire.names import HEARTBEAT, REPLY, STEPS
from ranktop.wire.messages import PROTOCOL_VERSION


@functools.lru_cache(maxsize=None)
def sender(rank: int, world: int = 4, host: str = "node0", job: str = "j", local_rank: int | None = None, pid: int | None = None) -> Sender:
    """An unstarted Sender of one rank (cached: a 4,096-rank test makes each once)."""
    identity = Identity(
        job=job,
        rank=rank,
        local_rank=rank if local_rank is None else local_rank,
        world=world,
        local_world=None,
        host=host,
        pid=100 + rank if pid is None else pid,
        launcher="torchrun",
    )
    return Sender(identity, Recorder(), rate_hz=4.0, directory=None, on_fault=_raise)


def _raise(exc: BaseException) -> None:
    raise exc


def raw(kind: str, body: dict[str, Any]) -> list[bytes]:
    """The frames of a body written as a plain map, with the version and kind every body carries: what any peer,
    a damaged or a foreign one too, might send (the Structs of wire/messages.py encode as such maps)."""
    return [kind.encode(), msgspec.msgpack.encode({**body, "v": list(PROTOCOL_VERSION), "k": kind})]


def frames(kind: str, rank: int, body: dict[str, Any], **who: Any) -> list[bytes]:
    """One message of ``rank``: its envelope as the probe makes it, the test's body."""
    ident = sender(rank, **who).identity
    return raw(kind, {"job": ident.job, "rank": ident.rank, "ts": time.time(), **body})


def decoded(kind: str, rank: int, body: dict[str, Any], **who: Any) -> Any:
    """The same message as the viewer's decoder hands it on."""
    return schema.decode(frames(kind, rank, body, **who))


def hello(rank: int, world: int = 4, host: str = "node0", **who: Any) -> Any:
    s = sender(rank, world, host, **who)
    return schema.decode(s.message(s.wire_hello()))


def collectives(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The fields a steps message carries for raw ``calls``: ``cs``, one summary per step and phase, and ``cx``,
    the sample, folded by the probe's own code (probe/collective_summary.py), as plain maps and lists. A few
    calls are all sampled."""
    summaries, sample = collective_summary.summarise(calls)
    return {"cs": plain(summaries), "cx": plain(sample)}


def steps(rank: int, records: list[dict], *, state: dict | None = None, calls: list[dict] | None = None, world: int = 4, **who: Any) -> Any:
    body: dict[str, Any] = {"steps": records}
    if state is not None:
        body["state"] = state
    if calls:
        body.update(collectives(calls))
    return decoded(STEPS, rank, body, world=world, **who)


def synchronous_step(agg: Any, n: int, t: float, own: list[dict[str, float]], world: int) -> float:
    """Step ``n`` of a data-parallel job begun at ``t`` whose ranks spent ``own`` (each rank's phase -> seconds): every
    rank then waits for the slowest in one all-reduce at the end of backward, and its steps message is ingested by
    ``agg``. Returns the step's wall time."""
    totals = [sum(p.values()) for p in own]
    wall = max(totals) + 0.001
    for r, p in enumerate(own):
        wait = max(0.0, wall - 0.001 - totals[r])
        p = dict(p, backward=p["backward"] + wait)
        calls = [
            {"op": "all_reduce", "seq": n, "b": 4096, "dt": "float32", "g": world, "d": wait, "n": n, "ph": "backward", "t0": t + totals[r]}
        ]
        agg.ingest(steps(r, [{"n": n, "t": t, "w": wall, "p": p}], calls=calls, world=world))
    return wall


def lockstep(job, own: list[dict[str, float]]) -> None:
    """One step of ``job`` (its ``agg``, ``clock``, ``world``, step number ``n`` and time ``t``) with every rank's
    own seconds per phase ``own``, all waiting for the slowest (:func:`synchronous_step`); the job's step number,
    time and clock move past it."""
    wall = synchronous_step(job.agg, job.n, job.t, own, job.world)
    job.n += 1
    job.t += wall
    job.clock.now += wall


def heartbeat(rank: int, state: dict[str, Any], world: int = 4, **who: Any) -> Any:
    return decoded(HEARTBEAT, rank, {"state": state}, world=world, **who)


def reply(rank: int, command_id: str, cmd: str, ok: bool = True, result: dict | None = None, world: int = 4, **who: Any) -> Any:
    body = {"id": command_id, "cmd": cmd, "ok": ok, "result": result if result is not None else {}}
    return decoded(REPLY, rank, body, world=world, **who)


def plain(msg: Any) -> Any:
    """A decoded message (or any part of one) as plain maps and lists, as it went on the wire (fields left at
    their default are left out, as the probe leaves out what it does not know)."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(msg))


def fields(msg: Any) -> Any:
    """A decoded message (or any part of one) as plain maps and lists with every field its type lists, those left at
    their default too: what the decoder read, to hold what was sent against."""
    if isinstance(msg, msgspec.Struct):
        values = [fields(getattr(msg, name)) for name in msg.__struct_fields__]
        if msg.__struct_config__.array_like:
            return values
        out = dict(zip(msg.__struct_fields__, values))
        tag = msg.__struct_config__.tag
        if tag is not None:
            out[msg.__struct_config__.tag_field] = tag
        return out
    if isinstance(msg, dict):
        return {key: fields(value) for key, value in msg.items()}
    if isinstance(msg, (list, tuple)):
        return [fields(value) for value in msg]
    return msg


class Clock:
    """A viewer's clock the test moves by hand (``clock.now += ...``), for an Aggregator's ``clock=``."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def state(step: int, last: int, phase: str | None, step_age: float = 0.0, in_step: bool = True,
          collective: dict | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """A heartbeat's state as plain fields: where the rank is (step, phase) and how long it has been there."""
    return dict(step=step, last=last, in_step=in_step, phase=phase, step_age=step_age, dropped=0, collective=collective,
                **extra)  # fmt: skip
