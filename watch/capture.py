"""The requester's side of a capture: plan the request, then read every rank's progress and summary.

Shared by ``ranktop capture`` / ``ranktop memsnap`` (cli/capture.py) and the
capture screen of the TUI (tui/screens/capture.py); pure functions of a
:class:`~ranktop.watch.model.snapshot.Snapshot` and the ranks' replies, so they are
tested without sockets or a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from pathlib import PurePath as Path

from ranktop.watch import format as fmt
from ranktop.watch.errors import RanktopError
from ranktop.watch.format import ranks_text
from ranktop.watch.model.answers import Answer
from ranktop.watch.model.rank_row import CaptureStatus
from ranktop.watch.model.snapshot import Snapshot
from ranktop.wire import capture as wire_capture

# A rank's progress before it reports a capture state of its own.
ASKED = "asked"  # the command went out, no answer yet
REFUSED = "refused"  # the rank answered no (another capture runs, no CUDA for a memory snapshot, ...)


class CaptureRefused(RanktopError):
    """Why a capture cannot be requested now, in one line."""


@dataclass(frozen=True)
class CapturePlan:
    id: str
    kind: str
    start: int
    steps: int
    ranks: tuple[int, ...]  # the ranks asked
    all_ranks: bool  # every rank of the job (the command then names none)

    def args(self, **options: bool) -> dict[str, Any]:
        return dict({"id": self.id, "kind": self.kind, "start": self.start, "steps": self.steps}, **options)


def plan(snapshot: Snapshot, kind: str, steps: int, ranks: list[int] | None = None, age_s: float = 0.0) -> CapturePlan:
    """The request to send, or :class:`CaptureRefused`: bad steps, unknown ranks, a capture already running.
    ``age_s``: how long ago the snapshot was taken (the screen's): the start step allows for the steps since."""
    problem = wire_capture.check_steps(steps)
    if problem:
        raise CaptureRefused(problem)
    if snapshot.world_size is None or not snapshot.ranks:
        raise CaptureRefused("no rank has reported yet")
    world = snapshot.world_size
    unknown = sorted(set(ranks or ()) - set(range(world)))
    if unknown:
        raise CaptureRefused(f"no such {ranks_text(unknown)} in a job of {world} (ranks 0-{world - 1})")
    running = snapshot.captures_running()
    if running:
        capture_id, on = next(iter(running.items()))
        raise CaptureRefused(f"a capture is already running (id {capture_id}, {ranks_text(on)}); one at a time per job")
    asked = tuple(sorted(set(ranks))) if ranks else tuple(range(world))
    start = wire_capture.start_step([r.step for r in snapshot.ranks], snapshot.steps_per_s, age_s)
    return CapturePlan(wire_capture.new_capture_id(kind), kind, start, steps, asked, not ranks)


@dataclass(frozen=True)
class RankProgress:
    rank: int
    state: str  # a wire state (waiting ... failed), or ASKED (no news yet) or REFUSED
    text: str  # what to show after "rank N: "
    status: CaptureStatus | None = None

    @property
    def final(self) -> bool:
        return self.state in (wire_capture.DONE, wire_capture.FAILED, REFUSED)


def progress(snapshot: Snapshot, request: CapturePlan, replies: list[Answer]) -> list[RankProgress]:
    """Where each asked rank stands: its refusal, else its state's capture entry for this id."""
    refused = {r.rank: r.result.get("error", "refused") for r in replies if not r.ok}
    by_rank = {row.rank: row.capture for row in snapshot.ranks}
    out = []
    for rank in request.ranks:
        if rank in refused:
            out.append(RankProgress(rank, REFUSED, f"refused: {refused[rank]}"))
            continue
        cap = by_rank.get(rank)
        if cap is None or cap.id != request.id:
            out.append(RankProgress(rank, ASKED, "asked, no answer yet"))
        else:
            out.append(RankProgress(rank, cap.state, state_text(cap), cap))
    return out


def state_text(cap: CaptureStatus) -> str:
    if cap.state == wire_capture.WAITING:
        return f"waiting for step {cap.start}"
    if cap.state == wire_capture.RECORDING:
        at = cap.at if cap.at is not None else cap.start
        return f"recording step {at} ({at - cap.start + 1}/{cap.steps})"
    if cap.state == wire_capture.WRITING:
        return "writing"
    if cap.state == wire_capture.DONE:
        return f"done: {Path(cap.path).name if cap.path else '?'}"
    return f"failed: {cap.error or 'no reason given'}"


def finished(rows: list[RankProgress]) -> bool:
    return bool(rows) and all(row.final for row in rows)


def table_lines(rows: list[RankProgress]) -> list[str]:
    """One line per finished trace: the shares side by side, so the odd rank out shows at a glance."""
    traced = [
        (row.rank, summary)
        for row in rows
        if row.status is not None and row.status.kind == wire_capture.TRACE
        and (summary := row.status.summary) is not None and summary.get("compute") is not None
    ]  # fmt: skip
    if not traced:
        return []
    lines = ["rank  compute   comm   idle    wall ms  top operator (self)"]
    for rank, s in traced:
        ops = s.get("ops") or []
        top = f"{ops[0][0]} {fmt.ms_unit(ops[0][1] / 1e6)}" if ops else ""
        lines.append(
            f"{rank:>4}  {s['compute']:>7.0%} {s['comm']:>6.0%} {s['idle']:>6.0%} {fmt.ms_fixed(s.get('wall_us', 0) / 1e6):>10}  {top}"
        )
    return lines


def summary_lines(status: CaptureStatus, top: int = 5) -> list[str]:
    """A rank's summary: one line of shares, then its top ops (and kernels), indented."""
    s = status.summary or {}
    if status.kind == wire_capture.MEMORY:
        if not s:
            return []
        lines = [
            f"{fmt.size(s.get('allocated') or 0)} allocated of {fmt.size(s.get('reserved') or 0)} reserved in {s.get('segments', 0)} "
            f"segment(s), {s.get('events', 0)} allocator events recorded"
        ]
        if s.get("cost_s") is not None:
            snapshot = f" (torch's snapshot call {fmt.ms_fixed(s['snapshot_s'], 0)} ms)" if s.get("snapshot_s") is not None else ""
            lines.append(f"cost to the training thread: stalled {fmt.ms_fixed(s['cost_s'], 0)} ms at most while written{snapshot}")
        return lines
    if s.get("note"):
        return [s["note"]]
    if not s:
        return []
    lines = []
    if s.get("compute") is not None:
        steps = s.get("steps") or [status.start, status.start + status.steps - 1]
        basis = "device timeline" if s.get("basis") == "device" else "training thread + collectives"
        lines.append(
            f"compute {s['compute']:.0%} · comm {s['comm']:.0%} · idle {s['idle']:.0%} of {fmt.ms_unit(s.get('wall_us', 0) / 1e6)} "
            f"(steps {steps[0]}-{steps[1]}, {basis})"
        )
    cost = s.get("train_ms")
    if cost:
        start, stop, *export = (fmt.ms_fixed(ms / 1000, 0) for ms in cost)  # (train_ms: milliseconds)
        held = f", export {export[0]} ms (holds the GIL)" if export else ""
        stalled = f", stalled {fmt.ms_fixed(s['cost_s'], 0)} ms at most while written" if s.get("cost_s") is not None else ""
        lines.append(f"cost to the training thread: profiler start {start} ms, stop {stop} ms{held}{stalled}")
    for title, key in (("operators", "ops"), ("kernels", "kernels")):
        entries = (s.get(key) or [])[:top]
        if entries:
            lines.append(f"top {title} by self time:")
            lines.extend(f"  {fmt.ms_fixed(us / 1e6, 2):>8} ms  ×{calls:<5} {name}" for name, us, calls in entries)
    return lines
