"""The ranktop terminal UI: renders Snapshots at a fixed rate and sends commands on request.

The App never sees telemetry. ``source.snapshot()`` is called on a timer at
``refresh_hz`` and the result is pushed into the widgets, so a burst of
messages from the job costs the UI nothing: it always draws at the same rate,
whatever arrives in between.
"""

from __future__ import annotations

from typing import Protocol

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Container
from textual.reactive import reactive
from textual.widgets import Footer

from ranktop.tui import bindings
from ranktop.tui.panes import (
    SORTS,
    Breakdown,
    CollectiveTable,
    JobHeader,
    SentCommand,
    StatusLine,
    StragglerTable,
    Waiting,
)
from ranktop.tui.panes.resources import ResourcePanes
from ranktop.tui.render import palette
from ranktop.tui.screens.capture import CaptureScreen
from ranktop.tui.screens.help import HelpScreen
from ranktop.tui.screens.stacks import StacksScreen
from ranktop.watch.capture import CaptureRefused, plan
from ranktop.watch.snapshot import EMPTY, Snapshot
from ranktop.wire import capture as wire_capture

READ_ONLY = "read-only: no job secret, commands disabled"


class SnapshotSource(Protocol):
    def snapshot(self) -> Snapshot: ...


class Controller(Protocol):
    available: bool

    def send(self, cmd: str, args: dict | None = None, ranks: list[int] | None = None) -> str: ...


class RanktopApp(App[None]):
    """``top`` for the ranks of a training job."""

    CSS_PATH = "ranktop.tcss"
    BINDINGS = list(bindings.KEYS)
    # Every action has a key in the one table, listed by the help screen; a palette would be a second list.
    ENABLE_COMMAND_PALETTE = False
    # Very wide terminals put the straggler table beside the bars instead of under them;
    # below that the bars are better off with the full width.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (200, "-wide")]

    sort: reactive[str] = reactive(SORTS[0])
    """How the bars are ordered: one of ``widgets.SORTS`` (rank, score, step)."""

    show_collectives: reactive[bool] = reactive(True)
    """Whether the collectives panel is shown (when the job reports collectives)."""

    paused: reactive[bool] = reactive(False)
    """While True the screen keeps showing the last snapshot; the job is not affected."""

    show_memory: reactive[bool] = reactive(True)
    """Whether the memory and throughput pane is shown (when the ranks report memory)."""

    show_gpus: reactive[bool] = reactive(True)
    """Whether the GPU gauges pane is shown (when the ranks report GPU gauges, or that they have none)."""

    read_only_note: str = READ_ONLY
    """What a command key answers when commands cannot be sent (a replay says why in its own words)."""

    extra_keys: tuple = ()
    """Key groups of a subclass, listed on the help screen too (the replay's)."""

    def __init__(
        self,
        source: SnapshotSource,
        controller: Controller | None = None,
        *,
        refresh_hz: float = 2.0,
        title: str = "ranktop",
    ):
        super().__init__()
        if not refresh_hz > 0:
            raise ValueError(f"refresh_hz must be positive, not {refresh_hz!r}")
        self.source = source
        self.controller = controller
        self.refresh_hz = refresh_hz
        self.title = title
        self.snapshot: Snapshot = EMPTY
        """The snapshot on screen."""
        self._notice: Text | None = None  # the answer to the user's last key, e.g. read-only
        self._source_error: str | None = None  # cleared by the next snapshot that works
        self._last_command: SentCommand | None = None
        self._capture: tuple | None = None  # (CapturePlan, command id) of the last capture this TUI asked for
        self._header = JobHeader(id="header")
        self._waiting = Waiting(id="waiting")
        self._panes = Container(id="panes")
        self._breakdown = Breakdown(id="breakdown")
        self._stragglers = StragglerTable(id="stragglers")
        self._collectives = CollectiveTable(id="collectives")
        self._status = StatusLine(id="status")
        self._resources = ResourcePanes(id="resources")

    def compose(self) -> ComposeResult:
        yield self._header
        yield self._waiting
        with self._panes:
            yield self._breakdown
            yield self._stragglers
        yield self._collectives  # full width under the panes, also when they sit side by side
        yield self._resources
        yield self._status
        yield Footer()

    def on_mount(self) -> None:
        self._stragglers.border_title = "Stragglers · flagged first"
        self._collectives.border_title = "Collectives · wait per call, launch to completion"
        self.poll()
        self.set_interval(1.0 / self.refresh_hz, self.poll)

    def poll(self) -> None:
        """Take one snapshot from the source and draw it (the refresh timer calls this)."""
        if self.paused:
            return
        try:
            self.snapshot = self.source.snapshot()
        except Exception as exc:  # the UI stays up, shows the last good snapshot and says what broke
            self._source_error = f"cannot read telemetry: {_one_line(exc)}"
        else:
            self._source_error = None
        self._draw()

    def _draw(self) -> None:
        if not self._header.is_attached:
            return  # the timer may fire once more while the app shuts down
        snapshot = self.snapshot
        self._header.show(snapshot, title=self.title, paused=self.paused)
        empty = not snapshot.ranks
        self._waiting.display = empty
        self._panes.display = not empty
        self._collectives.display = not empty and self.show_collectives and bool(snapshot.collectives)
        if empty:
            self._waiting.show(snapshot)
        else:
            self._breakdown.show(snapshot, self.sort)
            self._stragglers.show(snapshot)
            if self._collectives.display:
                self._collectives.show(snapshot)
        selected = self._stragglers.selected_rank() if self._stragglers.has_focus else None
        self._resources.show(snapshot, show_memory=self.show_memory and not empty, show_gpus=self.show_gpus and not empty,
                             selected=selected)
        self._draw_status()

    def _draw_status(self) -> None:
        notice = Text(self._source_error, style=palette.ERROR) if self._source_error else self._notice
        self._status.show(self.snapshot, notice=notice, last_command=self._last_command)

    def watch_sort(self) -> None:
        if self._breakdown.is_attached and self.snapshot.ranks:
            self._breakdown.show(self.snapshot, self.sort)

    def watch_paused(self, paused: bool) -> None:
        if not self._header.is_attached:
            return
        if paused:
            self._header.show(self.snapshot, title=self.title, paused=True)
        else:
            self.poll()

    # -- actions (keys are in ranktop.tui.bindings) ----------------------------

    def action_cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]

    def action_toggle_collectives(self) -> None:
        self.show_collectives = not self.show_collectives
        self._draw()

    def action_toggle_memory(self) -> None:
        self.show_memory = not self.show_memory
        self._draw()

    def action_toggle_gpus(self) -> None:
        self.show_gpus = not self.show_gpus
        self._draw()

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.extra_keys))

    def action_history(self) -> None:
        """The step-time history the engine keeps (watch/history.py), with the selected rank's phases."""
        from ranktop.tui.screens.history import HistoryScreen

        if isinstance(self.screen, HistoryScreen):
            return
        if getattr(self.source, "history", None) is None:
            self._notice = Text("no history from this source", style=palette.WARNING)
            self._draw_status()
            return
        rank = self._stragglers.selected_rank() if self._stragglers.has_focus else None
        if rank is None and self.snapshot.stragglers:
            rank = self.snapshot.stragglers[0]
        self.push_screen(HistoryScreen(lambda: self.source.history, rank, self.refresh_hz))

    def action_stacks(self) -> None:
        """Ask every rank for its stacks and show them grouped as the answers arrive."""
        if isinstance(self.screen, StacksScreen):
            return
        before = self._last_command
        self.send_command("stacks")
        sent = self._last_command
        if sent is not None and sent is not before:
            expected = tuple(range(self.snapshot.world_size)) if self.snapshot.world_size else sent.ranks
            self.push_screen(StacksScreen(sent.id, expected, self.replies_to))

    def replies_to(self, command_id: str) -> list:
        """Every rank's answer to one command: from the source when it keeps them all, else the snapshot's."""
        get = getattr(self.source, "replies_to", None)
        if get is not None:
            return get(command_id)
        return [r for r in self.source.snapshot().replies if r.id == command_id]

    def action_capture(self, kind: str) -> None:
        """Ask every rank for a step-aligned capture (trace or memory) and follow it on the capture screen."""
        if isinstance(self.screen, CaptureScreen):
            return
        what = "trace" if kind == wire_capture.TRACE else "memory snapshot"
        controller = self.controller
        if controller is None or not getattr(controller, "available", False):
            self._notice = Text(self.read_only_note, style=palette.WARNING)
            self._draw_status()
            return
        ours = self._capture
        if ours is not None and ours[0].id in self.source.snapshot().captures_running():
            self.push_screen(CaptureScreen(ours[0], ours[1], self.source.snapshot, self.replies_to))  # ours still runs: show it again
            return
        try:
            request = plan(self.source.snapshot(), kind, wire_capture.DEFAULT_STEPS)
            command_id = controller.send("capture", request.args())
        except CaptureRefused as exc:
            self._notice = Text(f"{what} refused: {exc}", style=palette.WARNING)
        except Exception as exc:  # a transport error must not take the UI down
            self._notice = Text(f"{what} failed: {_one_line(exc)}", style=palette.ERROR)
        else:
            self._notice = None
            self._capture = (request, command_id)
            self.push_screen(CaptureScreen(request, command_id, self.source.snapshot, self.replies_to))
        self._draw_status()

    def action_ping(self) -> None:
        self.send_command("ping")

    def send_command(self, cmd: str, args: dict | None = None) -> None:
        """Send a command to every rank; its replies show in the status line as they arrive."""
        controller = self.controller
        if controller is None or not getattr(controller, "available", False):
            self._notice = Text(self.read_only_note, style=palette.WARNING)
        else:
            ranks = tuple(r.rank for r in self.snapshot.ranks)
            try:
                command_id = controller.send(cmd, args)
            except Exception as exc:  # a transport error must not take the UI down
                self._notice = Text(f"{cmd} failed: {_one_line(exc)}", style=palette.ERROR)
            else:
                self._notice = None
                self._last_command = SentCommand(command_id, cmd, ranks, self.snapshot.elapsed_s)
        self._draw_status()


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
