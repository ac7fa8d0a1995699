"""What a rank says about its collectives: a summary per step and phase, not a record per call.

An FSDP job makes tens to hundreds of collective calls per step; at thousands
of ranks one record per call is hundreds of thousands of records a second into
one viewer. So the probe's sender thread folds the calls it drains into one
entry per (step, phase) (the ``cs`` field of a steps message)::

    CallSummary(n=step, ph=phase or None, w=seconds waited in this phase of this step,
                ops={op: OpSummary(calls, bytes, waited, total, longest, group, dtype, kernel, kbytes)})

``w`` is the union of every call's wait in that phase, whatever the op (DDP's
buckets and FSDP's prefetches overlap: summing them would count the same
second twice); per op, ``waited`` is the union of that op's waits, ``total``
the plain sum (its mean wait per call is ``total / calls``) and ``longest`` the
longest single wait. A small sample of raw call records (``cx``, at most
:data:`SAMPLE_MAX`, chosen to span distinct sizes, at most once every
:data:`SAMPLE_EVERY_S`) rides along for what needs single calls: the
alpha-beta fit and the latency percentiles. The viewer keeps a window of them
per rank, so a fit sees many sizes over a few seconds.
"""

from __future__ import annotations

from typing import Any

from ranktop.wire.intervals import union
from ranktop.wire.messages import Call, CallSummary, OpSummary
from ranktop.wire.pacing import SAMPLE_MAX

#: Raw call records kept per op in one message's sample (in all: wire/pacing.py's SAMPLE_MAX).
SAMPLE_PER_OP = 3
#: A rank sends a sample this often at most (each costs the viewer a decode per call, times thousands of ranks).
SAMPLE_EVERY_S = 1.0


def summarise(calls: list[dict[str, Any]]) -> tuple[list[CallSummary], list[Call]]:
    """Fold raw call records (the probe's, as wire/messages.py's ``Call`` names their fields) into (summaries,
    sample), as the Structs a steps message carries."""
    groups: dict[tuple[int, str | None], dict[str, list[dict[str, Any]]]] = {}
    for call in calls:
        by_op = groups.setdefault((call["n"], call["ph"]), {})
        by_op.setdefault(call["op"], []).append(call)
    summaries: list[CallSummary] = []
    for (step, phase), by_op in groups.items():
        ops: dict[str, OpSummary] = {}
        everything = []
        for op, members in by_op.items():
            intervals = [(c["t0"], c["t0"] + c["d"]) for c in members]
            everything.extend(intervals)
            last = members[-1]
            timed = [c for c in members if c.get("kd") is not None]  # kernel time known (docs/gpu.md)
            ops[op] = OpSummary(
                calls=len(members), bytes=sum(c["b"] for c in members), waited=union(intervals),
                total=sum(c["d"] for c in members), longest=max(c["d"] for c in members), group=last["g"], dtype=last["dt"],
                kernel=sum(c["kd"] for c in timed) if timed else None, kbytes=sum(c["b"] for c in timed) if timed else None,
            )  # fmt: skip
        summaries.append(CallSummary(n=step, ph=phase, w=union(everything), ops=ops))
    return summaries, [as_call(call) for call in sample(calls)]


def as_call(call: dict[str, Any]) -> Call:
    """A raw call record as the wire's ``Call`` (what else the record holds stays on the rank)."""
    return Call(
        op=call["op"], seq=call["seq"], b=call["b"], dt=call["dt"], g=call["g"], d=call["d"], n=call["n"], ph=call["ph"],
        t0=call["t0"], gi=call.get("gi"), k=call.get("k"), kd=call.get("kd"),
    )  # fmt: skip


def sample(calls: list[dict[str, Any]], per_op: int = SAMPLE_PER_OP, limit: int = SAMPLE_MAX) -> list[dict[str, Any]]:
    """The latest call of each of up to ``per_op`` distinct sizes per op (a fit needs several sizes), then the
    latest calls to fill up; at most ``limit`` in all, in the order they were made."""
    chosen: dict[int, dict[str, Any]] = {}
    by_op: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        by_op.setdefault(call["op"], []).append(call)
    for members in by_op.values():
        picked: list[dict[str, Any]] = []
        sizes: set[int] = set()
        for call in reversed(members):
            if call["b"] not in sizes:
                sizes.add(call["b"])
                picked.append(call)
                if len(picked) == per_op:
                    break
        for call in reversed(members):
            if len(picked) >= per_op:
                break
            if all(call is not p for p in picked):
                picked.append(call)
        for call in picked:
            chosen[id(call)] = call
    ordered = [c for c in calls if id(c) in chosen]
    return ordered[-limit:]
