"""A modal screen that follows what keeps arriving after it opened: one bordered box, redrawn on a timer.

The capture, history and stacks screens each draw answers that go on coming
(a capture's progress, the history's samples, the ranks' stacks) over the main
screen, which keeps updating beneath. They differ in what they draw, not in how
they are framed, kept fresh and closed, so that is written once here: a subclass
names its box and says what it holds and how to redraw it.
"""

from __future__ import annotations

from typing import ClassVar, Iterable

from textual.app import ComposeResult
from textual.containers import Container, VerticalScroll
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widget import Widget


class LiveModal(ModalScreen[None]):
    """Draws once when mounted, then every ``refresh_s`` until a subclass pauses ``_timer`` (all came) or it closes."""

    #: The box's CSS id (tui/ranktop.tcss), its title, and the key hint on its lower border.
    BOX_ID: ClassVar[str]
    BOX_TITLE: ClassVar[str] = ""
    BOX_SUBTITLE: ClassVar[str]
    #: VerticalScroll around one long text; Vertical where the widgets inside scroll themselves.
    BOX: ClassVar[type[Container]] = VerticalScroll

    def __init__(self, refresh_s: float):
        super().__init__()
        self.refresh_s = refresh_s
        self._timer: Timer | None = None

    def contents(self) -> Iterable[Widget]:
        """The widgets in the box, made in ``__init__`` so that ``redraw`` can update them without a query."""
        raise NotImplementedError

    def redraw(self) -> None:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with self.BOX(id=self.BOX_ID) as box:
            box.border_title = self.BOX_TITLE
            box.border_subtitle = self.BOX_SUBTITLE
            yield from self.contents()

    def on_mount(self) -> None:
        self._timer = self.set_interval(self.refresh_s, self.redraw)
        self.redraw()

    def action_close(self) -> None:
        self.dismiss()
