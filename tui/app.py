"""The ranktop terminal UI: renders Snapshots at a fixed rate and sends commands on request.

The App never sees telemetry. ``source.snapshot()`` is called at
``refresh_hz`` (or as often as a live job's data changes, where that is
slower) on a thread of its own (watch/refresher.py), and each result
is posted here as a SnapshotReady message (tui/messages.py) and pushed into the widgets: a burst of messages from the job,
or a snapshot of thousands of ranks, costs the keys and the drawing nothing.
Keys and screens (a capture's plan, its progress, a command's answers) read
the snapshot on screen, never build one; only the first draw at mount and a
replay's seek take one here.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Container
from textual.css.scalar import Scalar
from textual.reactive import reactive
from textual.widgets import DataTable, Footer

from ranktop.tui import bindings
from ranktop.tui.messages import SnapshotReady
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
from ranktop.tui.panes import gpus
from ranktop.tui.panes.collectives import COLUMNS as COLLECTIVE_COLUMNS
from ranktop.tui.panes.collectives import shown_stats
from ranktop.tui.panes.gpus import has_data as gpus_have_data
from ranktop.tui.panes.memory import has_data as memory_has_data
from ranktop.tui.panes.overview import Overview
from ranktop.tui.panes.rankmap import RankMap
from ranktop.tui.panes.resources import ResourcePanes, ResourceTabs
from ranktop.tui.panes.stragglers import COLUMNS as STRAGGLER_COLUMNS
from ranktop.tui.panes.stragglers import table_rows
from ranktop.tui.panes.verdict import VerdictLine
from ranktop.tui.render import palette, room
from ranktop.tui.screens.drill import DrillScreen, NodeScreen, RankScreen
from ranktop.tui.screens.capture import CaptureScreen
from ranktop.tui.screens.help import HelpScreen
from ranktop.tui.screens.stacks import StacksScreen
from ranktop.watch.capture import CaptureRefused, plan
from ranktop.watch.refresher import Refresher, checked_rate
from ranktop.watch.model.snapshot import EMPTY, PacedSource, Snapshot, SnapshotSource
from ranktop.wire import capture as wire_capture

READ_ONLY = "read-only: no job secret, commands disabled"
#: The refresher waits at most this long for a snapshot to be drawn before it builds the next (a busy loop).
DRAW_WAIT_S = 5.0
#: The straggler table's width beside the bars on a wide terminal (tui/ranktop.tcss, .-wide #stragglers).
WIDE_TABLE = 98
#: Views of the ranks, in the order the view key cycles through them.
VIEWS = ("auto", "bars", "overview")


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
    # Short terminals (a plain SSH session is 24 lines) show one of the collectives, memory and GPU
    # panes at a time, as tabs, so the verdict and the stragglers keep their room.
    VERTICAL_BREAKPOINTS = [(0, "-short"), (40, "-tall")]

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

    view: reactive[str] = reactive(VIEWS[0])
    """Bars or the job overview (distribution and rank map); "auto": bars while every rank fits."""

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
        self.source = source
        self.controller = controller
        self.refresh_hz = checked_rate(refresh_hz)
        self.title = title
        self.snapshot: Snapshot = EMPTY
        """The snapshot on screen."""
        self._snapshot_at = time.monotonic()  # when the snapshot on screen was built
        self._notice: Text | None = None  # the answer to the user's last key, e.g. read-only
        self._source_error: str | None = None  # cleared by the next snapshot that works
        self._last_command: SentCommand | None = None
        self._capture: tuple | None = None  # (CapturePlan, command id) of the last capture this TUI asked for
        self._header = JobHeader(id="header")
        self._verdict = VerdictLine(id="verdict")
        self._waiting = Waiting(id="waiting")
        self._panes = Container(id="panes")
        self._breakdown = Breakdown(id="breakdown")
        self._stragglers = StragglerTable(id="stragglers")
        self._overview = Overview(id="overview")
        self._tabs = ResourceTabs(id="tabs")
        self._collectives = CollectiveTable(id="collectives")
        self._status = StatusLine(id="status")
        self._resources = ResourcePanes(id="resources")

    def compose(self) -> ComposeResult:
        yield self._header
        yield self._verdict
        yield self._waiting
        with self._panes:
            yield self._breakdown
            yield self._overview
            yield self._stragglers
        yield self._tabs  # short terminals: which of collectives, memory, GPUs is shown
        yield self._collectives  # full width under the panes, also when they sit side by side
        yield self._resources
        yield self._status
        yield Footer()

    def on_mount(self) -> None:
        self._stragglers.border_title = "Stragglers · flagged first"
        self._collectives.border_title = "Collectives · wait per call, launch to completion"
        self._overview.display = False
        self.poll()
        self._drawn = threading.Event()
        source = self.source  # a live job: no more snapshots than its data changes (watch/refresher.py: period_s)
        pace = source.changes_every_s if isinstance(source, PacedSource) else None
        self._refresher = Refresher(lambda: self.source.snapshot(), self.refresh_hz, self._from_refresher, pace)
        self._refresher.start()

    def on_unmount(self) -> None:
        self._refresher.stop()

    def _from_refresher(self, snapshot: Snapshot | None, error: BaseException | None) -> None:
        """On the refresher's thread: post the snapshot (or why there is none), and wait until it is drawn, so
        the next is built only then (a slow screen slows the refresh instead of wasting snapshots)."""
        self._drawn.clear()
        if not self.post_message(SnapshotReady(snapshot, error, time.monotonic())):
            raise RuntimeError("the app is closing")  # ends the refresher
        deadline = time.monotonic() + DRAW_WAIT_S
        while not self._drawn.wait(0.1):
            if self._refresher.stopping or time.monotonic() > deadline:
                return

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        try:
            self._show(message.snapshot, message.error)
            if message.snapshot is not None:
                self._snapshot_at = message.taken_at
        finally:
            self._drawn.set()

    def on_resize(self, event) -> None:
        # The screen sets its breakpoint classes (-short, -tall) on the same resize: draw again once
        # they are set, so the first frame (and every resize) lays the panes out for the real size.
        self.call_after_refresh(self._draw)

    def poll(self) -> None:
        """Take one snapshot from the source, here, and draw it (at start, on resume; the refresher does the rest)."""
        if self.paused:
            return
        try:
            snapshot, error = self.source.snapshot(), None
        except Exception as exc:
            snapshot, error = None, exc
        self._show(snapshot, error)
        if snapshot is not None:
            self._snapshot_at = time.monotonic()

    def _show(self, snapshot: Snapshot | None, error: BaseException | None) -> None:
        if self.paused:
            return
        if error is not None:  # the UI stays up, shows the last good snapshot and says what broke
            self._source_error = f"cannot read telemetry: {_one_line(error)}"
        else:
            self.snapshot = snapshot
            self._source_error = None
        self._draw()

    def _draw(self) -> None:
        if not self._header.is_attached:
            return  # the timer may fire once more while the app shuts down
        snapshot = self.snapshot
        self._header.show(snapshot, title=self.title, paused=self.paused)
        empty = not snapshot.ranks
        self._verdict.display = not empty  # before any rank, the waiting pane says it all
        self._verdict.show(snapshot)
        self._waiting.display = empty
        self._panes.display = not empty
        selected = self._stragglers.selected_rank() if self._stragglers.has_focus else None
        wanted = {"collectives": not empty and self.show_collectives and bool(snapshot.collectives),
                  "memory": not empty and self.show_memory and memory_has_data(snapshot),
                  "gpus": not empty and self.show_gpus and gpus_have_data(snapshot)}  # fmt: skip
        overview = not empty and self._overview_shown(len(snapshot.ranks))
        gpu_lines = gpus.PanelLines(snapshot, selected) if wanted["gpus"] else None
        wants = self._wants(snapshot, overview, wanted, gpu_lines)
        # A short terminal shows one of the lower panes at a time, as tabs, unless all of them fit as they are.
        fits = room.total(wants) <= self._room(tabs=False)
        shown = self._tabs.choose(wanted, tabbed=self.screen.has_class("-short") and not fits)
        self._collectives.display = shown["collectives"]
        if empty:
            self._waiting.show(snapshot)
        else:
            self._set_view(overview)
            self._stragglers.show(snapshot)
            if overview:  # the map takes what the table's rows leave (a big job's table lists only the ranks that matter)
                self._overview.show(snapshot, table_lines=self._stragglers.lines_wanted())
            else:
                self._breakdown.show(snapshot, self.sort)
            if self._collectives.display:
                self._collectives.show(snapshot)
        self._resources.show(snapshot, show_memory=shown["memory"], show_gpus=shown["gpus"], selected=selected, gpu_lines=gpu_lines)
        if not empty:
            self._fit([w for w in wants if w.name == "main" or shown.get(w.name)])
        screen = self.screen
        if isinstance(screen, DrillScreen):
            screen.show(snapshot)
        self._draw_status()

    def _room(self, *, tabs: bool) -> int:
        """The rows between the verdict and the status line (the panes' room), with or without the tabs' line."""
        fixed = 2 + 1 + 1 + min(5, max(1, self._status.line_count))  # header, verdict, footer, status (max-height 5)
        return self.screen.size.height - fixed - (1 if tabs else 0)

    def _wants(self, snapshot: Snapshot, overview: bool, wanted: dict[str, bool], gpu_lines) -> list[room.Want]:
        """What each pane's content asks of the room, most important first (tui/render/room.py)."""
        width = self.screen.size.width
        wide = self.screen.has_class("-wide")
        short = self.screen.has_class("-short")
        if overview:
            main = room.ANY  # the map takes what it is given; the table scrolls
        else:
            bars = len(snapshot.ranks) + 2  # border, legend, a bar per rank
            table = 2 + table_rows(len(snapshot.ranks)) + (0 if short else _scrollbar(STRAGGLER_COLUMNS, WIDE_TABLE if wide else width))
            main = max(bars, table) if wide else bars + table
        wants = [room.Want("main", main, floor=9, share=0.6)]
        if wanted["collectives"]:
            rows = len(shown_stats(snapshot)) + 2 + (0 if short else _scrollbar(COLLECTIVE_COLUMNS, width))
            wants.append(room.Want("collectives", rows, floor=4, share=0.35))
        if wanted["memory"]:
            wants.append(room.Want("memory", 1 + len(snapshot.ranks) + 2, floor=4, share=0.3))
        if wanted["gpus"]:
            wants.append(room.Want("gpus", 1 + len(gpu_lines), floor=3, share=0.25))
        return wants

    def _fit(self, wants: list[room.Want]) -> None:
        """Give each pane the rows its content needs, up to a share, and the rest to those that need more."""
        heights = room.share(self._room(tabs=self._tabs.display), wants)
        for name, widget in (("main", self._panes), ("collectives", self._collectives),
                             ("memory", self._resources.query_one("#memory")), ("gpus", self._resources.query_one("#gpus"))):  # fmt: skip
            if name in heights and widget.styles.height != Scalar.from_number(heights[name]):
                widget.styles.height = heights[name]

    def _overview_shown(self, ranks: int) -> bool:
        """Whether the overview replaces the bars: by choice, or ("auto") when the ranks do not fit as bars."""
        if self.view != "auto":
            return self.view == "overview"
        height = self.screen.size.height
        room = height - 8 if self.screen.has_class("-wide") else int((height - 6) * 0.6) - 2
        return ranks > max(8, room)

    def _set_view(self, overview: bool) -> None:
        if self._overview.display == overview and self._breakdown.display != overview:
            return
        self._overview.display = overview
        self._breakdown.display = not overview
        # The overview puts the top stragglers above the map (answer first); the bars keep the table under them.
        self._panes.set_class(overview, "-overview")
        if overview:
            self._panes.move_child(self._stragglers, before=self._overview)
        else:
            self._panes.move_child(self._stragglers, after=self._overview)

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

    def action_cycle_view(self) -> None:
        current = "overview" if self._overview.display else "bars"
        # From auto, go to the view not shown now, so the first press always changes the screen.
        self.view = {"auto": "bars" if current == "overview" else "overview", "bars": "overview", "overview": "auto"}[self.view]
        what = {"bars": "a bar per rank", "overview": "distribution and rank map",
                "auto": "automatic (bars while every rank fits, else the overview)"}[self.view]  # fmt: skip
        self._notice = Text(f"view: {what}", style=palette.MUTED)
        self._draw()

    def action_toggle_map_grouping(self) -> None:
        overview = self._overview
        overview.group_by = "stage" if overview.group_by == "node" else "node"
        known = "pp" in self.snapshot.layout_roles if self.snapshot is not None else False
        what = "pipeline stage" if overview.group_by == "stage" else "node"
        note = "" if known or overview.group_by == "node" else " (no pipeline known yet: by node until one is)"
        self._notice = Text(f"rank map: grouped by {what}{note}", style=palette.MUTED)
        self._draw()

    def on_rank_map_opened(self, event: RankMap.Opened) -> None:
        cell = event.cell
        if cell.key[0] == "node":
            self.push_screen(NodeScreen(cell.host, self.snapshot, by_stage=cell.host.startswith("stage ")))
        else:
            self.push_screen(RankScreen(cell.key[1], self.snapshot))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table is self._stragglers and event.row_key.value is not None:
            self.push_screen(RankScreen(int(event.row_key.value), self.snapshot))

    def action_cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]

    def action_toggle_collectives(self) -> None:
        self._toggle("collectives")

    def action_toggle_memory(self) -> None:
        self._toggle("memory")

    def action_toggle_gpus(self) -> None:
        self._toggle("gpus")

    def _toggle(self, pane: str) -> None:
        """Show or hide a pane; as tabs (a short terminal), a pane not on top comes to the top instead."""
        flag = f"show_{pane}"
        if self.screen.has_class("-short") and getattr(self, flag) and self._tabs.active != pane and self._tabs.has(pane):
            self._tabs.active = pane
        else:
            setattr(self, flag, not getattr(self, flag))
            if getattr(self, flag):
                self._tabs.active = pane
        self._draw()

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.extra_keys))

    def action_history(self) -> None:
        """The step-time history the engine keeps (watch/analysis/history.py), with the selected rank's phases."""
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

    def action_network(self) -> None:
        """Which node's network is slow, and the links the relays measured (tui/screens/network.py)."""
        from ranktop.tui.screens.network import NetworkScreen

        if not isinstance(self.screen, NetworkScreen):
            self.push_screen(NetworkScreen(lambda: self.snapshot, self.refresh_hz))

    def action_stacks(self) -> None:
        """Ask every rank for its stacks and show them grouped as the answers arrive."""
        if isinstance(self.screen, StacksScreen):
            return
        before = self._last_command
        self.send_command("stacks", {"fingerprint": True})  # fingerprints first: a few bytes from each of 4,096 ranks
        sent = self._last_command
        if sent is not None and sent is not before:
            expected = tuple(range(self.snapshot.world_size)) if self.snapshot.world_size else sent.ranks
            ask_full = lambda ranks: self.controller.send("stacks", None, ranks)  # noqa: E731
            self.push_screen(StacksScreen(sent.id, expected, self.replies_to, ask_full=ask_full))

    def replies_to(self, command_id: str) -> list:
        """Every rank's answer to one command: from the source when it keeps them all, else the snapshot's."""
        get = getattr(self.source, "replies_to", None)
        if get is not None:
            return get(command_id)
        return [r for r in self.snapshot.replies if r.id == command_id]  # the refresher's latest: never built here

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
        if ours is not None and ours[0].id in self.snapshot.captures_running():
            self.push_screen(CaptureScreen(ours[0], ours[1], self._latest, self.replies_to))  # ours still runs: show it again
            return
        try:
            request = plan(self.snapshot, kind, wire_capture.DEFAULT_STEPS, age_s=time.monotonic() - self._snapshot_at)
            command_id = controller.send("capture", request.args())
        except CaptureRefused as exc:
            self._notice = Text(f"{what} refused: {exc}", style=palette.WARNING)
        except Exception as exc:  # a transport error must not take the UI down
            self._notice = Text(f"{what} failed: {_one_line(exc)}", style=palette.ERROR)
        else:
            self._notice = None
            self._capture = (request, command_id)
            self.push_screen(CaptureScreen(request, command_id, self._latest, self.replies_to))
        self._draw_status()

    def _latest(self) -> Snapshot:
        """The snapshot on screen: what screens that follow the job read (the refresher builds them off this loop)."""
        return self.snapshot

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


def _scrollbar(columns: tuple, width: int) -> int:
    """1 when a table's columns (and a cell's padding each side) are wider than ``width``: its scrollbar takes a row."""
    return int(sum(w + 2 for _, _, w in columns) + 1 > width)


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
