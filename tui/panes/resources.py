"""The hardware panes under the step panes: memory and throughput (``m``), GPU gauges (``g``).

Full width below the bars and the straggler table whatever the terminal's
width, each pane as tall as its lines (up to a share of the screen, then it
scrolls), and hidden when the job reports nothing for it (a probe older than
protocol 1.2).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical

from ranktop.tui.panes import gpus, memory
from ranktop.watch.snapshot import Snapshot


class ResourcePanes(Vertical):
    def compose(self) -> ComposeResult:
        yield memory.MemoryPanel(id="memory")
        yield gpus.GpuPanel(id="gpus")

    def show(self, snapshot: Snapshot, *, show_memory: bool, show_gpus: bool, selected: int | None = None) -> None:
        mem = self.query_one(memory.MemoryPanel)
        gpu = self.query_one(gpus.GpuPanel)
        mem.display = show_memory and memory.has_data(snapshot)
        gpu.display = show_gpus and gpus.has_data(snapshot)
        if mem.display:
            mem.show(snapshot)
        if gpu.display:
            gpu.show(snapshot, selected)
        self.display = mem.display or gpu.display
