"""The rank map widget: a cell per rank (or per node), a cursor, and enter to drill down.

Drawn with Textual's line API, so a refresh costs the lines on screen, not the
ranks: the layout (tui/render/rankmap_layout.py) is a list of cells per line, and a
line becomes a strip only when it is scrolled into view. The cursor follows
the worst cell until the user moves it (``w`` makes it follow again), so the
map opens on the straggler the verdict names.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ranktop.watch.model.rank_row import RankRow

from ranktop.tui import bindings
from ranktop.tui.render import palette
from ranktop.tui.render.rankmap_layout import RANKS, Cell, Layout, layout, ranks_of, severity


class RankMap(ScrollView, can_focus=True):
    """Cells grouped by node; arrows move the cursor, enter opens the cell."""

    BINDINGS = list(bindings.MAP_KEYS)

    class Opened(Message):
        """Enter on a cell: the App opens the node's ranks or the rank's detail."""

        def __init__(self, cell: Cell) -> None:
            super().__init__()
            self.cell = cell

    class Moved(Message):
        """The cursor moved (the overview's info line follows it)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._groups: list[tuple[str, list[RankRow]]] = []
        self._room: int | None = None
        self._layout: Layout | None = None
        self._index: dict[tuple, int] = {}
        self._where: dict[int, tuple[int, int]] = {}  # cell index -> (line, x)
        self._cursor: tuple | None = None  # the key of the cell under the cursor
        self._follow = True  # the cursor sits on the worst cell until the user moves it
        self._strips: dict[tuple[int, int], Strip] = {}

    # -- data -------------------------------------------------------------------

    def show(self, nodes: list[tuple[str, list[RankRow]]], room: int | None = None) -> None:
        """Lay the cells out: a cell per rank if they fit in ``room`` lines (default: the widget's height)."""
        self._groups = nodes
        self._room = room
        self._relayout()

    @property
    def line_count(self) -> int:
        return len(self._layout.lines) if self._layout else 0

    def _relayout(self) -> None:
        width = self.scrollable_content_region.width or self.size.width or 80
        height = self._room or self.size.height or None
        self._layout = lay = layout(self._groups, width, height)
        self._index = {cell.key: i for i, cell in enumerate(lay.cells)}
        self._where = {i: (y, x) for y, line in enumerate(lay.lines) for x, i in line}
        if self._follow or self._cursor is None:
            self._cursor = self._worst_key()
        elif self._cursor not in self._index:
            self._cursor = self._translate(self._cursor)
        self._strips.clear()
        if self.virtual_size.height != len(lay.lines) or self.virtual_size.width != width:
            self.virtual_size = Size(width, len(lay.lines))
        self._keep_cursor_in_view()
        self.refresh()

    def on_resize(self) -> None:
        if self._groups:
            self._relayout()

    @property
    def mode(self) -> str | None:
        return self._layout.mode if self._layout else None

    @property
    def cell(self) -> Cell | None:
        """The cell under the cursor."""
        if self._layout is None or self._cursor not in self._index:
            return None
        return self._layout.cells[self._index[self._cursor]]

    def _worst_key(self) -> tuple | None:
        if self._layout is None or not self._layout.cells:
            return None
        return min(self._layout.cells, key=lambda c: severity(c.worst)).key

    def _translate(self, key: tuple) -> tuple | None:
        """A cursor key of the other mode: a rank's node, or a node's worst rank."""
        kind, what = key
        for cell in self._layout.cells if self._layout else []:
            if kind == "rank" and what in ranks_of(cell.rows):
                return cell.key
            if kind == "node" and cell.host == what:
                return ("rank", cell.worst.rank) if self._layout.mode == RANKS and cell.worst.host == what else cell.key
        return self._worst_key()

    def select_rank(self, rank: int) -> None:
        """Put the cursor on a rank's cell (its node's, in node cells)."""
        self._follow = False
        self._cursor = self._translate(("rank", rank))
        self._after_move()

    # -- keys -------------------------------------------------------------------

    def action_move(self, dx: int, dy: int) -> None:
        lay = self._layout
        if lay is None or not lay.cells or self._cursor not in self._index:
            return
        self._follow = False
        index = self._index[self._cursor]
        if dx:
            index = max(0, min(len(lay.cells) - 1, index + dx))
        else:
            y, x = self._where[index]
            y2 = max(0, min(len(lay.lines) - 1, y + dy))
            if y2 != y:
                line = lay.lines[y2]
                index = min(line, key=lambda item: abs(item[0] - x))[1]
        self._cursor = lay.cells[index].key
        self._after_move()

    def action_worst(self) -> None:
        self._follow = True
        self._cursor = self._worst_key()
        self._after_move()

    def action_open(self) -> None:
        cell = self.cell
        if cell is not None:
            self.post_message(self.Opened(cell))

    def _after_move(self) -> None:
        self._strips.clear()
        self._keep_cursor_in_view()
        self.refresh()
        self.post_message(self.Moved())

    def _keep_cursor_in_view(self) -> None:
        if self._cursor not in self._index:
            return
        y, _ = self._where[self._index[self._cursor]]
        height = self.scrollable_content_region.height
        if height <= 0:
            return
        top = self.scroll_offset.y
        if y < top:
            self.scroll_to(y=y, animate=False, immediate=True)
        elif y >= top + height:
            self.scroll_to(y=y - height + 1, animate=False, immediate=True)

    # -- drawing ----------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        lay = self._layout
        if lay is None or index >= len(lay.lines) or width <= 0:
            return Strip.blank(width, base)
        strip = self._strips.get((index, width))
        if strip is None:
            strip = self._strips[index, width] = self._line(lay, index, width, base)
        return strip

    def _line(self, lay: Layout, index: int, width: int, base: Style) -> Strip:
        segments = [Segment(f"{lay.labels[index]:>{lay.label_width - 1}} ", base + Style.parse(palette.MUTED))]
        at = 0
        cursor = self._index.get(self._cursor) if self._cursor is not None else None
        focused = self.has_focus
        for x, i in lay.lines[index]:
            if x > at:
                segments.append(Segment(" " * (x - at), base))
            cell = lay.cells[i]
            style = base + Style.parse(cell.style)
            if i == cursor:
                style += Style(reverse=True, bold=True) if focused else Style(underline=True, bold=True)
            segments.append(Segment(cell.glyph, style))
            at = x + 1
        return Strip(segments).crop_extend(0, width, base)

    def on_focus(self) -> None:
        self._strips.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._strips.clear()
        self.refresh()
