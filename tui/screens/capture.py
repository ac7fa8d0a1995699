"""The capture screen: each rank's progress through one capture, then the files and each rank's summary.

Pushed when the user presses ``P`` (trace) or ``M`` (memory snapshot) and the
request went out. It redraws at a fixed rate from the snapshot on screen (the refresher's latest)
and the ranks' replies (a refusal is a reply); the text is built by
:func:`capture_text`, a plain function of the request and the progress rows
(watch/capture.py), so it is tested without a terminal. Closing the screen does
not stop the capture.
"""

from __future__ import annotations

from typing import Callable

from rich.text import Text
from textual.widgets import Static

from ranktop.tui import bindings
from ranktop.tui.render import palette
from ranktop.tui.screens.live_modal import LiveModal
from ranktop.watch.capture import (
    ASKED,
    REFUSED,
    CapturePlan,
    RankProgress,
    finished,
    progress,
    summary_lines,
    table_lines,
)
from ranktop.watch.format import ranks_text
from ranktop.watch.model.answers import Answer
from ranktop.watch.model.snapshot import Snapshot
from ranktop.wire import capture as wire_capture

REFRESH_S = 0.25

_STYLES = {
    wire_capture.WAITING: palette.MUTED,
    wire_capture.RECORDING: "bold",
    wire_capture.WRITING: "bold",
    wire_capture.DONE: "green3",
    wire_capture.FAILED: palette.ERROR,
    REFUSED: palette.ERROR,
    ASKED: palette.MUTED,
}


def capture_text(request: CapturePlan, rows: list[RankProgress]) -> Text:
    what = "torch.profiler trace" if request.kind == wire_capture.TRACE else "CUDA memory snapshot"
    text = Text(f"{what} {request.id}", style="bold")
    text.append(f"  {request.steps} step(s) from step {request.start}, {ranks_text(request.ranks)}\n\n", style=palette.MUTED)
    for row in rows:
        text.append(f"rank {row.rank}: ", style="bold")
        text.append(row.text + "\n", style=_STYLES.get(row.state, ""))
    done = [row for row in rows if row.state == wire_capture.DONE and row.status is not None]
    if finished(rows):
        outcome = [f"{len(done)} of {len(rows)} rank(s) done"]
        for state in (wire_capture.FAILED, REFUSED):
            count = sum(1 for row in rows if row.state == state)
            if count:
                outcome.append(f"{count} {state}")
        text.append("\n" + ", ".join(outcome) + "\n", style="bold")
    if done:
        text.append(f"files: {done[0].status.folder}\n", style="bold")
        hint = (
            "open in ui.perfetto.dev, TensorBoard, or HTA: TraceAnalysis(trace_dir=...)"
            if request.kind == wire_capture.TRACE
            else "open at pytorch.org/memory_viz"
        )
        text.append(hint + "\n\n", style=palette.MUTED)
        table = table_lines(rows)
        if table:
            text.append(table[0] + "\n", style="bold")
            text.append("\n".join(table[1:]) + "\n\n")
        for row in done:
            lines = summary_lines(row.status)
            if not lines:
                continue
            text.append(f"rank {row.rank}: ", style="bold")
            text.append(lines[0] + "\n")
            for line in lines[1:]:
                text.append("  " + line + "\n", style=palette.MUTED)
    return text


class CaptureScreen(LiveModal):
    """One capture's progress and outcome, redrawn until every asked rank is done or failed."""

    BINDINGS = list(bindings.CAPTURE_KEYS)
    BOX_ID = "capture"
    BOX_TITLE = "capture"
    BOX_SUBTITLE = "esc closes (the capture goes on)"

    def __init__(
        self,
        request: CapturePlan,
        command_id: str,
        snapshot: Callable[[], Snapshot],
        replies_to: Callable[[str], list[Answer]],
    ):
        super().__init__(REFRESH_S)
        self.request = request
        self.command_id = command_id
        self._snapshot = snapshot
        self._replies_to = replies_to
        self.rows: list[RankProgress] = []
        self._body = Static(id="capture-text")

    def contents(self) -> tuple[Static]:
        return (self._body,)

    def redraw(self) -> None:
        try:
            self.rows = progress(self._snapshot(), self.request, self._replies_to(self.command_id))
        except Exception:  # a broken source must not take the screen down; the next tick tries again
            return
        self._body.update(capture_text(self.request, self.rows))
        if finished(self.rows) and all(row.state != wire_capture.DONE or row.status.summary for row in self.rows):
            self._timer.pause()
