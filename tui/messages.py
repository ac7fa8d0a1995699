"""Every message a background thread sends the App: the only way a thread reaches the screen.

Threads never touch widgets: they post one of these (``post_message`` is safe from any thread) and
the App's handler runs on the event loop. A burst of one kind collapses into its latest
(``can_replace``): a screen that draws slower than snapshots come shows the newest, never a queue.
"""

from __future__ import annotations

from textual.message import Message

from ranktop.watch.model.snapshot import Snapshot


class SnapshotReady(Message):
    """The refresher built a snapshot (or failed to: ``error`` says why, and the screen keeps the last good one)."""

    def __init__(self, snapshot: Snapshot | None, error: BaseException | None, taken_at: float):
        super().__init__()
        self.snapshot = snapshot
        self.error = error
        self.taken_at = taken_at  # time.monotonic() when it was built

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReady)
