"""The verdict line under the header: who holds the job back, in which phase, and what it costs.

The answer is computed by the engine (watch/model/verdict.py) so ``--json`` says the
same; this pane only colours it. One line, never wrapped: it is the one line
that must survive the smallest terminal.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ranktop.watch.model.snapshot import SILENT, SLOW, STALLED, Snapshot
from ranktop.watch.model.verdict import HEALTHY, IMBALANCED, SILENT_RANKS, SLOW_NODE, SLOW_RANK, STALLED_JOB, Verdict, verdict

from ranktop.tui.render import palette

STYLES = {
    STALLED_JOB: palette.STATUS_STYLES[STALLED],
    SILENT_RANKS: palette.STATUS_STYLES[SILENT],
    SLOW_NODE: palette.STATUS_STYLES[SLOW],
    SLOW_RANK: palette.STATUS_STYLES[SLOW],
    HEALTHY: "bold green3",
    IMBALANCED: "bold yellow",  # a finding about the pipeline's split, no rank's fault
}
MARKS = {STALLED_JOB: "■", SILENT_RANKS: "■", SLOW_NODE: "▲", SLOW_RANK: "▲", IMBALANCED: "◆", HEALTHY: "✔"}


def verdict_text(answer: Verdict) -> Text:
    style = STYLES.get(answer.kind, palette.MUTED)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{MARKS.get(answer.kind, '…')} ", style=style)
    text.append(answer.text, style=style)
    return text


class VerdictLine(Static):
    """One line: the engine's verdict on the snapshot on screen."""

    def show(self, snapshot: Snapshot) -> None:
        self.verdict = verdict(snapshot)
        self.update(verdict_text(self.verdict), layout=False)
