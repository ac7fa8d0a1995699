"""Stack dumps from every rank, grouped: pure logic, no sockets, no terminal.

Each rank answers the ``stacks`` command with the Python stacks of all its
threads (see :mod:`ranktop.probe.stacks`). In a hang, the picture that matters
is the main threads side by side: most ranks blocked at one line (the
collective), one rank somewhere else (the reason). So ranks are grouped by
identical main-thread stacks, the biggest group first, and each group gets a
one-line label naming the innermost frame of the *user's* code and what it was
calling there: ``ranks 0-6,9: loss.backward at train.py:318 (backward, step 30)``.

The user's frame is the innermost one outside torch, ranktop's probe and the
standard library; third-party packages count as the user's only when nothing
of the user's own is on the stack. Where those libraries live comes with each
reply (the rank knows its interpreter); path patterns are the fallback.
"""

from __future__ import annotations

import keyword
import os
import re
from dataclasses import dataclass, field, replace
from collections.abc import Mapping
from typing import Any, Iterable, Sequence

from ranktop.watch import format as fmt
from ranktop.watch.format import ranks_text
from ranktop.wire.messages import LastCollective

#: How far out of the user's code a frame is: the label is taken from the lowest tier present.
USER, THIRD_PARTY, LIBRARY = 0, 1, 2
#: Fallback patterns when a reply names no library roots.
_LIBRARY_PATTERNS = ("/torch/", "/ranktop/probe/", "/ranktop/wire/", "/lib/python", "<frozen ")
_THIRD_PARTY_PATTERNS = ("/site-packages/", "/dist-packages/")
_CALL = re.compile(r"([A-Za-z_][\w.]*)\s*\(")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    code: str = ""

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file) or self.file}:{self.line}"


@dataclass(frozen=True)
class ThreadStack:
    name: str
    main: bool
    daemon: bool
    frames: tuple[Frame, ...]  # outermost first, as a traceback prints them
    omitted: int = 0  # outer frames the rank left out


@dataclass(frozen=True)
class RankStacks:
    rank: int
    threads: tuple[ThreadStack, ...]
    omitted_threads: int = 0
    roots: dict[str, list[str]] = field(default_factory=dict)
    phase: str | None = None
    step: int | None = None
    collective: dict[str, Any] | None = None  # as the rank's answer said it (a JSON map, checked where read)
    fingerprint: str | None = None  # the main thread's fingerprint, as the rank computed it (probe/stacks.py)

    @property
    def main(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.main), None)


@dataclass(frozen=True)
class StackGroup:
    ranks: tuple[int, ...]
    label: str  # e.g. "loss.backward at train.py:318"
    where: str  # e.g. "backward, step 30" (what the ranks' probes say they are in), or ""
    frames: tuple[Frame, ...]  # the main thread's stack, shared by every rank of the group

    @property
    def summary(self) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"{ranks_text(self.ranks)}: {self.label}{where}"


@dataclass(frozen=True)
class StackReport:
    expected: tuple[int, ...]
    groups: tuple[StackGroup, ...]
    ranks: dict[int, RankStacks]  # every rank that answered
    failed: dict[int, str]  # rank -> the error it answered with
    unresponsive: tuple[int, ...]  # expected ranks with no answer (yet)

    @property
    def complete(self) -> bool:
        return not self.unresponsive


# -- rank ranges -------------------------------------------------------------------


# -- whose code is a frame ------------------------------------------------------------


def _under(path: str, roots: Iterable[str]) -> bool:
    for root in roots:
        root = root.rstrip("/")
        if root and (path == root or path.startswith(root + "/")):
            return True
    return False


def tier(path: str, roots: dict[str, list[str]] | None = None) -> int:
    """USER, THIRD_PARTY or LIBRARY (torch, ranktop's probe, the standard library)."""
    if roots:
        if _under(path, roots.get("ranktop", ())) or _under(path, roots.get("torch", ())):
            return LIBRARY
        if _under(path, roots.get("site", ())):
            return THIRD_PARTY
        if _under(path, roots.get("stdlib", ())) or path.startswith("<frozen "):
            return LIBRARY
        return USER
    if any(p in path for p in ("/torch/", "/ranktop/probe/", "/ranktop/wire/")):
        return LIBRARY
    if any(p in path for p in _THIRD_PARTY_PATTERNS):
        return THIRD_PARTY
    return LIBRARY if any(p in path for p in _LIBRARY_PATTERNS) else USER


def user_frame(frames: tuple[Frame, ...] | list[Frame], roots: dict[str, list[str]] | None = None) -> int | None:
    """Index of the innermost frame of the lowest tier on the stack (None for an empty stack)."""
    if not frames:
        return None
    tiers = [tier(f.file, roots) for f in frames]
    best = min(tiers)
    return max(i for i, t in enumerate(tiers) if t == best)


def _calls(code: str) -> list[str]:
    names = []
    for name in _CALL.findall(code):
        if not keyword.iskeyword(name.split(".")[-1]):
            names.append(name)
    return names


def label(frames: tuple[Frame, ...] | list[Frame], roots: dict[str, list[str]] | None = None) -> str:
    """What the stack is doing, at the user's line: ``"dist.all_reduce at train.py:88"``.

    The name is the call on the user's line that leads inward (matched with the
    next frame's function), else the first call on that line, else the function
    the next frame is in, else the user's own function.
    """
    index = user_frame(frames, roots)
    if index is None:
        return "no Python frames"
    frame = frames[index]
    inner = frames[index + 1].function if index + 1 < len(frames) else None
    calls = _calls(frame.code)
    callee = next((c for c in calls if inner and c.split(".")[-1] == inner), None)
    callee = callee or (calls[0] if calls else None) or inner or f"in {frame.function}"
    return f"{callee} at {frame.where}"


# -- replies ----------------------------------------------------------------------------


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def parse_reply(rank: int, result: dict[str, Any]) -> RankStacks:
    """A rank's ``stacks`` result, checked field by field (it is data from the network)."""
    threads = []
    for t in result.get("threads") or ():
        if not isinstance(t, dict):
            continue
        frames = tuple(
            Frame(_str(f.get("file"), "?"), _int(f.get("line")), _str(f.get("function"), "?"), _str(f.get("code")))
            for f in (t.get("frames") or ())
            if isinstance(f, dict)
        )
        threads.append(
            ThreadStack(_str(t.get("name"), "?"), t.get("main") is True, t.get("daemon") is True, frames, _int(t.get("omitted")))
        )
    roots_in = result.get("roots")
    roots: dict[str, list[str]] = {}
    if isinstance(roots_in, dict):
        for kind, paths in roots_in.items():
            if isinstance(kind, str) and isinstance(paths, list):
                roots[kind] = [p for p in paths if isinstance(p, str)]
    phase, step, collective = _position(result)
    fingerprint = result.get("fingerprint") if isinstance(result.get("fingerprint"), str) else None
    return RankStacks(rank, tuple(threads), _int(result.get("omitted_threads")), roots, phase, step, collective, fingerprint)


def _position(result: dict[str, Any]) -> tuple[str | None, int | None, dict[str, Any] | None]:
    """Where a rank's answer says it is: (phase, step, last collective)."""
    said = result.get("state")
    state: dict[str, Any] = said if isinstance(said, dict) else {}
    step = None
    if "step" in state:
        step = _int(state.get("step"), -1) if state.get("in_step") else _int(state.get("last"), -1) + 1
    collective = state.get("collective") if isinstance(state.get("collective"), dict) else None
    phase = state.get("phase") if isinstance(state.get("phase"), str) else None
    return phase, step, collective


def is_fingerprint_only(result: Any) -> bool:
    """An answer to ``stacks`` with ``fingerprint``: the fingerprint, no stacks."""
    return isinstance(result, dict) and isinstance(result.get("fingerprint"), str) and "threads" not in result


def representatives(replies: Iterable[tuple[int, bool, Any]], limit: int = 64) -> list[int]:
    """One rank per distinct fingerprint among fingerprint-only answers (the lowest), at most ``limit``: whom to ask
    for the full stacks. The biggest groups first, so a job of many distinct stacks shows the main ones."""
    members: dict[str, list[int]] = {}
    for rank, ok, result in replies:
        if ok and is_fingerprint_only(result):
            members.setdefault(result["fingerprint"], []).append(rank)
    ordered = sorted(members.values(), key=lambda ranks: (-len(ranks), min(ranks)))
    return sorted(min(ranks) for ranks in ordered[:limit])


def collective_text(collective: LastCollective | Mapping[str, object] | None) -> str:
    """``"in all_reduce #42, 4.0 MB"`` while blocked in it, ``"last: ..."`` otherwise (or launched
    asynchronously, like DDP's buckets); "" when unknown."""
    if not collective or not isinstance(collective.get("op"), str):
        return ""
    text = f"{'in' if collective.get('inside') else 'last:'} {collective['op']}"
    if isinstance(collective.get("seq"), int):
        text += f" #{collective['seq']}"
    size = collective.get("b")
    if isinstance(size, int) and size > 0:
        text += f", {fmt.size(size, decimal=True)}"
    return text


def common_place(members: Sequence[Any]) -> tuple[set[str | None], set[int | None], str | None]:
    """Where a group of ranks stands, as the group shares it: their phases, their steps, and the last collective
    when they all name the same one (``members``: anything with ``phase``, ``step`` and ``collective``: a
    rank's stacks here, its position in watch/analysis/stalls.py)."""
    colls = {collective_text(m.collective) for m in members}
    return {m.phase for m in members}, {m.step for m in members}, colls.pop() if len(colls) == 1 else None


def _where(members: list[RankStacks]) -> str:
    phases, steps, coll = common_place(members)
    parts = []
    if len(phases) == 1:
        phase = phases.pop()
        parts.append(phase if phase else "between phases")
    else:
        parts.append("phases " + ", ".join(sorted(p or "none" for p in phases)))
    if len(steps) == 1:
        step = steps.pop()
        if step is not None and step >= 0:
            parts.append(f"step {step}")
    else:
        known = [s for s in steps if s is not None]
        if known:
            parts.append(f"steps {min(known)}-{max(known)}")
    if coll:
        parts.append(coll)
    return ", ".join(parts)


def group(stacks: Iterable[RankStacks]) -> list[StackGroup]:
    """Ranks with identical main-thread stacks together; the biggest group first, then by lowest rank."""
    by_key: dict[tuple[object, ...], list[RankStacks]] = {}
    for s in stacks:
        main = s.main
        key: tuple[object, ...]
        if main:
            key = tuple((f.file, f.line, f.function) for f in main.frames)
        elif not s.threads and s.fingerprint:  # its group's stacks never came
            key = ("<fingerprint>", s.fingerprint)
        else:
            key = ("<no main thread>",)
        by_key.setdefault(key, []).append(s)
    groups = []
    for members in by_key.values():
        members.sort(key=lambda m: m.rank)
        main = members[0].main
        frames = main.frames if main else ()
        if main:
            text = label(frames, members[0].roots)
        elif not members[0].threads and members[0].fingerprint:
            text = f"stacks not fetched (fingerprint {members[0].fingerprint})"
        else:
            text = "no main thread reported"
        groups.append(StackGroup(tuple(m.rank for m in members), text, _where(members), frames))
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks[0]))
    return groups


def build_report(
    expected: Iterable[int], replies: Iterable[tuple[int, bool, Any]], full: Iterable[tuple[int, bool, Any]] = ()
) -> StackReport:
    """From ``(rank, ok, result)`` answers to one ``stacks`` command; a rank's first answer counts.

    Answers that carry only a fingerprint take the stacks of the rank in ``full`` (the answers to a second,
    full ``stacks`` sent to :func:`representatives`) with the same fingerprint, and keep their own place
    (phase, step, collective): thousands of ranks then share a few parsed stacks.
    """
    by_fingerprint: dict[str, RankStacks] = {}
    for rank, ok, result in full:
        if ok and isinstance(result, dict) and not is_fingerprint_only(result):
            parsed = parse_reply(rank, result)
            if parsed.fingerprint is not None:
                by_fingerprint.setdefault(parsed.fingerprint, parsed)
    ranks: dict[int, RankStacks] = {}
    failed: dict[int, str] = {}
    for rank, ok, result in replies:
        if rank in ranks or rank in failed:
            continue
        if ok and is_fingerprint_only(result):
            phase, step, collective = _position(result)
            shared = by_fingerprint.get(result["fingerprint"])
            if shared is None:
                ranks[rank] = RankStacks(rank, (), 0, {}, phase, step, collective, result["fingerprint"])
            else:
                ranks[rank] = replace(shared, rank=rank, phase=phase, step=step, collective=collective)
        elif ok and isinstance(result, dict):
            ranks[rank] = parse_reply(rank, result)
        else:
            error = result.get("error") if isinstance(result, dict) else None
            failed[rank] = str(error or "failed").splitlines()[0]
    expected = tuple(sorted(set(expected) | set(ranks) | set(failed)))
    unresponsive = tuple(r for r in expected if r not in ranks and r not in failed)
    return StackReport(expected, tuple(group(ranks.values())), ranks, failed, unresponsive)


# -- text -----------------------------------------------------------------------------


def frame_lines(frames: Iterable[Frame], indent: str = "  ") -> list[str]:
    """A traceback-like listing, outermost first."""
    lines = []
    for f in frames:
        lines.append(f'{indent}File "{f.file}", line {f.line}, in {f.function}')
        if f.code:
            lines.append(f"{indent}  {f.code}")
    return lines


def thread_lines(thread: ThreadStack, indent: str = "  ") -> list[str]:
    kind = "main thread" if thread.main else ("daemon thread" if thread.daemon else "thread")
    lines = [f"{indent}{kind} {thread.name!r}:"]
    if thread.omitted:
        lines.append(f"{indent}  ... {thread.omitted} outer frame(s) not sent")
    lines += frame_lines(thread.frames, indent + "  ")
    return lines


def unresponsive_text(report: StackReport, waited_s: float) -> str:
    return f"{ranks_text(report.unresponsive)}: no answer within {waited_s:g}s (unresponsive)"


def report_lines(report: StackReport, *, waited_s: float, all_threads: bool = False) -> list[str]:
    """What ``ranktop stacks`` prints: one summary line per group, then each group's main-thread stack."""
    lines = [g.summary for g in report.groups]
    for rank, error in sorted(report.failed.items()):
        lines.append(f"rank {rank}: failed: {error}")
    if report.unresponsive:
        lines.append(unresponsive_text(report, waited_s))
    for g in report.groups:
        lines.append("")
        lines.append(f"== {g.summary}")
        if all_threads:
            for rank in g.ranks:
                stacks = report.ranks[rank]
                lines.append(f"-- rank {rank}")
                for thread in stacks.threads:
                    lines += thread_lines(thread)
                if stacks.omitted_threads:
                    lines.append(f"  ... {stacks.omitted_threads} more thread(s) not sent")
        else:
            lines += frame_lines(g.frames)
    return lines


def report_json(report: StackReport, *, waited_s: float) -> dict[str, Any]:
    """The ``ranktop stacks --json`` document (schema in docs/json-schema.md)."""

    def frames(fs: Iterable[Frame]) -> list[dict[str, Any]]:
        return [{"file": f.file, "line": f.line, "function": f.function, "code": f.code} for f in fs]

    return {
        "expected": list(report.expected),
        "waited_s": waited_s,
        "groups": [
            {"ranks": list(g.ranks), "summary": g.summary, "label": g.label, "where": g.where, "frames": frames(g.frames)}
            for g in report.groups
        ],
        "failed": {str(k): v for k, v in sorted(report.failed.items())},
        "unresponsive": list(report.unresponsive),
        "ranks": {
            str(rank): {
                "phase": s.phase,
                "step": s.step,
                "collective": s.collective,
                "omitted_threads": s.omitted_threads,
                "threads": [
                    {"name": t.name, "main": t.main, "daemon": t.daemon, "omitted": t.omitted, "frames": frames(t.frames)}
                    for t in s.threads
                ],
            }
            for rank, s in sorted(report.ranks.items())
        },
    }
