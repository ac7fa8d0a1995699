"""The help screen: every key from ranktop.tui.bindings, and how to read the screen."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.keys import format_key
from textual.screen import ModalScreen
from textual.widgets import Static

from ranktop.tui import bindings
from ranktop.tui.render import palette

READING = (
    "The line under the header is the verdict: who holds the job back (a rank or a whole node), in which "
    "phase, and the share of each step the job loses to it; or that the job is stalled and whom it waits for.\n"
    "Jobs with more ranks than bars fit show the overview instead (v switches): the distribution of the ranks' "
    "slowdown and the rank map, a cell per rank (or per node) coloured by status; tab to it, enter drills down.\n"
    "Bars stack each rank's median phase times: GPU time (CUDA events at each phase boundary) for ranks "
    "that send it, CPU wall time around each phase otherwise; the header says which. "
    "The slowest step shown fills the width.\n"
    "score: time a rank spends beyond the median rank, summed over phases, as a share "
    "of the median step. culprit: the phase holding most of it. In synchronous "
    "training the fast ranks wait for the slow one inside a collective, so step times "
    "match; the phases tell them apart."
)


def key_names(binding: Binding) -> str:
    """All keys of a binding as the user types them: "? f1"."""
    return " ".join(format_key(key.strip()) for key in binding.key.split(","))


def keys_table(*groups: tuple[Binding, ...]) -> Table:
    """One aligned table of keys, a blank row between groups."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(style=palette.MUTED)
    for i, group in enumerate(groups):
        if i:
            table.add_row()
        for binding in group:
            table.add_row(key_names(binding), binding.description, binding.tooltip)
    return table


class HelpScreen(ModalScreen[None]):
    """A modal over the live screen; the screen beneath keeps updating."""

    BINDINGS = list(bindings.HELP_KEYS)

    def __init__(self, extra_keys: tuple[tuple[Binding, ...], ...] = ()):
        super().__init__()
        self.extra_keys = extra_keys  # the replay's keys, in ranktop replay

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body") as body:
            body.border_title = "ranktop keys"
            body.border_subtitle = "esc or ? closes"
            groups = (
                bindings.KEYS,
                bindings.MAP_KEYS,
                bindings.DRILL_KEYS,
                bindings.HISTORY_KEYS,
                bindings.NETWORK_KEYS,
                bindings.STACKS_KEYS,
                bindings.CAPTURE_KEYS,
                bindings.HELP_KEYS,
                *self.extra_keys,
            )
            yield Static(keys_table(*groups), id="help-keys")
            yield Static(Text(READING, style=palette.MUTED), id="help-reading")

    def action_close(self) -> None:
        self.dismiss()
