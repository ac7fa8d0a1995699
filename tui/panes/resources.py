"""The hardware panes under the step panes: memory and throughput (``m``), GPU gauges (``g``).

Full width below the bars and the straggler table whatever the terminal's
width, each pane as tall as its lines (up to a share of the screen, then it
scrolls: the app deals the rows, tui/render/room.py), and hidden when the job reports nothing for it.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from ranktop.tui.panes import gpus, memory
from ranktop.tui.render import palette
from ranktop.watch.model.snapshot import Snapshot

#: The panes under the main ones, in tab order, with the key that brings each to the top.
TABS = (("collectives", "c", "Collectives"), ("memory", "m", "Memory"), ("gpus", "g", "GPUs"))


def tabs_text(names: list[str], active: str | None) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    for name, key, label in TABS:
        if name not in names:
            continue
        text.append(f" {key} ", style="bold reverse" if name == active else "bold")
        text.append(f"{label} ", style="bold reverse" if name == active else palette.MUTED)
        text.append(" ")
    text.append("one at a time in a short terminal; its key again hides it", style=palette.MUTED)
    return text


class ResourceTabs(Static):
    """In a short terminal, one of the collectives, memory and GPU panes at a time, chosen by its key."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.active: str | None = None
        self._names: list[str] = []

    def has(self, pane: str) -> bool:
        """Whether the pane had something to show at the last refresh."""
        return pane in self._names

    def choose(self, wanted: dict[str, bool], *, tabbed: bool) -> dict[str, bool]:
        """Which panes to display: every one wanted, or as tabs only the active one of them."""
        self._names = [name for name, _, _ in TABS if wanted.get(name)]
        if not tabbed or not self._names:
            self.display = False
            return dict(wanted)
        if self.active not in self._names:
            self.active = self._names[0]
        self.display = True
        self.update(tabs_text(self._names, self.active), layout=False)
        return {name: name == self.active for name in wanted}


class ResourcePanes(Vertical):
    def compose(self) -> ComposeResult:
        yield memory.MemoryPanel(id="memory")
        yield gpus.GpuPanel(id="gpus")

    def show(self, snapshot: Snapshot, *, show_memory: bool, show_gpus: bool, selected: int | None = None, gpu_lines=None) -> None:
        mem = self.query_one(memory.MemoryPanel)
        gpu = self.query_one(gpus.GpuPanel)
        mem.display = show_memory and memory.has_data(snapshot)
        gpu.display = show_gpus and gpus.has_data(snapshot)
        if mem.display:
            mem.show(snapshot)
        if gpu.display:
            gpu.show(snapshot, selected, gpu_lines)
        self.display = mem.display or gpu.display
