"""A pane of text lines drawn only where visible, so 512 ranks cost what the screen shows.

The panes that list every rank (memory, GPUs) hand :meth:`LazyLines.show` a
line count and a function from a line number and the width to a Rich
``Text``; lines are rendered when scrolled into view, and cached until the
next ``show`` (Textual's line API, as the breakdown bars do).
"""

from __future__ import annotations

from typing import Callable

from rich.segment import Segment
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip


class LazyLines(ScrollView, can_focus=True):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._count = 0
        self._line: Callable[[int, int], Text] = lambda index, width: Text()
        self._strips: dict[tuple[int, int], Strip] = {}

    def show_lines(self, count: int, line: Callable[[int, int], Text]) -> None:
        self._count = count
        self._line = line
        self._strips.clear()
        if self.virtual_size.height != count:
            self.virtual_size = Size(self.scrollable_content_region.width, count)
            self.refresh(layout=True)  # its height follows its lines, up to the CSS max-height
        else:
            self.refresh()

    def get_content_height(self, container, viewport, width: int) -> int:
        return self._count

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.scrollable_content_region.width
        style = self.rich_style
        if index >= self._count or width <= 0:
            return Strip.blank(width, style)
        strip = self._strips.get((index, width))
        if strip is None:
            text = self._line(index, width)
            text.no_wrap = True
            text.overflow = "ellipsis"
            text.truncate(width, overflow="ellipsis")
            segments = list(Segment.apply_style(text.render(self.app.console, end=""), style))
            strip = self._strips[index, width] = Strip(segments).crop_extend(0, width, style)
        return strip
