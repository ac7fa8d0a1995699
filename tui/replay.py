"""``ranktop replay``'s App: the live App on a recording, with the playback keys.

Everything on screen is the live App's (the same panes, screens and keys);
what changes is the source (watch/offline/replay.py: the same Aggregator on the
recording's clock), the header's title (position, length, speed, paused), the
space key (pauses the playback itself, not just the screen), and commands:
there is no job to send them to, and a command key says so.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from ranktop.tui import bindings
from ranktop.tui.app import RanktopApp
from ranktop.watch.offline.replay import Replay, clock_text, parse_offset

NO_COMMANDS = "replay: commands go to a live job, not to a recording (ranktop watch JOB to send them)"


class GotoScreen(ModalScreen[float | None]):
    """Asks for a time in the recording; dismisses with the offset in seconds, or None."""

    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, duration_s: float):
        super().__init__()
        self.duration_s = duration_s
        self._error = Static("", id="goto-error")

    def compose(self) -> ComposeResult:
        with Vertical(id="goto") as box:
            box.border_title = f"go to (0:00 .. {clock_text(self.duration_s)})"
            yield Input(placeholder="seconds, M:SS or H:MM:SS from the start; -S from the end", id="goto-input")
            yield self._error

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            offset = parse_offset(event.value, self.duration_s)
        except ValueError as exc:
            self._error.update(str(exc))
            return
        self.dismiss(offset)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ReplayApp(RanktopApp):
    BINDINGS = list(bindings.KEYS) + list(bindings.REPLAY_KEYS)
    read_only_note = NO_COMMANDS
    extra_keys = (bindings.REPLAY_KEYS,)

    def __init__(self, replay: Replay, *, refresh_hz: float = 2.0, name: str = "recording"):
        super().__init__(replay, None, refresh_hz=refresh_hz, title="replay")
        self.replay = replay
        self._name = name

    def poll(self) -> None:
        r = self.replay
        state = "paused" if r.paused else ("end" if r.at_end else f"x{r.speed:g}")
        self.title = f"replay {self._name} {clock_text(r.offset_s)}/{clock_text(r.recording.duration_s)} {state}"
        super().poll()

    def action_toggle_pause(self) -> None:
        self.replay.toggle_pause()
        self.poll()

    def action_seek(self, seconds: float) -> None:
        self.replay.seek(seconds)
        self.poll()

    def action_speed(self, step: int) -> None:
        self.replay.faster(step)
        self.poll()

    def action_goto(self) -> None:
        if isinstance(self.screen, GotoScreen):
            return

        def go(offset: float | None) -> None:
            if offset is not None:
                self.replay.seek_to_offset(offset)
                self.poll()

        self.push_screen(GotoScreen(self.replay.recording.duration_s), go)
