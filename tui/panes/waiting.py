"""The empty state: shown instead of empty tables until the first rank reports."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ranktop.tui.render import palette
from ranktop.watch.model.snapshot import Snapshot


def waiting_text(snapshot: Snapshot) -> Text:
    job = f"ranks of job {snapshot.job}" if snapshot.job else "ranks"
    text = Text()
    if snapshot.waiting:  # the job has not started: say so, with the jobs there are (a typo shows)
        text.append(f"{snapshot.waiting}\n\n", style="bold")
        text.append("Started first, as in a batch script: the job is shown as soon as it starts.", style=palette.MUTED)
        return text
    text.append(f"waiting for {job}…\n\n", style="bold")
    # Where ranktop listens is on the status line, with how long it has waited.
    text.append("Ranks appear here as soon as their probe sends its first message.", style=palette.MUTED)
    if snapshot.errors:  # why none may come (no key, a refused one): in full here, the status line cuts it
        text.append(f"\n\n{snapshot.errors[-1]}", style=palette.ERROR)
    return text


class Waiting(Static):
    """ "waiting for ranks of job X…", centred."""

    def show(self, snapshot: Snapshot) -> None:
        self.update(waiting_text(snapshot), layout=False)
