"""The verdict line under the header: who holds the job back, in which phase, and what it costs.

The answer is computed by the engine (watch/model/verdict.py) so ``--json`` says the
same; this pane only colours it. One line, never wrapped: it is the one line
that must survive the smallest terminal. When it is too long for the screen,
the cause's figures give way to the cause's name (", because: gc pause"), the
last arrivals are left out, and then a few words are shortened
(watch/model/verdict.py ``brief``), so that who, where, how much and why
still show at 80 columns; the rank's detail screen has the rest.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ranktop.watch import SILENT, SLOW, STALLED
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.model.verdict import (
    CHECKPOINT,
    COMPILE,
    EVAL,
    HEALTHY,
    IMBALANCED,
    JOB_SLOWER,
    SILENT_RANKS,
    SLOW_LINK,
    SLOW_NODE,
    SLOW_RANK,
    STALLED_JOB,
    Verdict,
    brief,
    verdict,
)

from ranktop.tui.render import palette

STYLES = {
    STALLED_JOB: palette.STATUS_STYLES[STALLED],
    SILENT_RANKS: palette.STATUS_STYLES[SILENT],
    SLOW_LINK: palette.STATUS_STYLES[SLOW],  # the network, not a rank's work: the same colour, its own mark
    SLOW_NODE: palette.STATUS_STYLES[SLOW],
    SLOW_RANK: palette.STATUS_STYLES[SLOW],
    HEALTHY: "bold green3",
    IMBALANCED: "bold yellow",  # a finding about the pipeline's split, no rank's fault
    CHECKPOINT: "bold yellow",  # what the job chose to spend its time on, no fault: checkpoints, evaluation
    EVAL: "bold yellow",
    COMPILE: "bold yellow",  # a recompilation the others wait for: no fault, what the job's shapes cost
    JOB_SLOWER: palette.STATUS_STYLES[SLOW],  # every rank slower alike: no culprit among them, but the job pays
}
MARKS = {
    STALLED_JOB: "■",
    SILENT_RANKS: "■",
    SLOW_LINK: "⇄",
    SLOW_NODE: "▲",
    SLOW_RANK: "▲",
    IMBALANCED: "◆",
    CHECKPOINT: "◆",
    EVAL: "◆",
    COMPILE: "◆",
    JOB_SLOWER: "▲",
    HEALTHY: "✔",
}


def verdict_text(answer: Verdict, width: int = 0) -> Text:
    """The line, in ``width`` columns when given (0: as long as it is)."""
    style = STYLES.get(answer.kind, palette.MUTED)
    text = Text(no_wrap=True, overflow="ellipsis")
    mark = f"{MARKS.get(answer.kind, '…')} "
    text.append(mark, style=style)
    text.append(fitted(answer, width - len(mark)) if width else answer.text, style=style)
    return text


def fitted(answer: Verdict, room: int) -> str:
    """The verdict's text, or its brief form (watch/model/verdict.py) where the whole does not fit in ``room``."""
    return answer.text if len(answer.text) <= room else brief(answer, room)


class VerdictLine(Static):
    """One line: the engine's verdict on the snapshot on screen."""

    def show(self, snapshot: Snapshot) -> None:
        self.verdict = verdict(snapshot)
        self.update(verdict_text(self.verdict, self.size.width), layout=False)

    def on_resize(self, event) -> None:
        answer = getattr(self, "verdict", None)
        if answer is not None:  # the room inside the padding (the event's size is the whole widget's)
            self.update(verdict_text(answer, self.size.width), layout=False)
