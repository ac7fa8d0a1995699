"""The stack dump screens: ranks grouped by main-thread stack, and one rank's stacks in full.

:class:`StacksScreen` is pushed when the user asks for stacks (key ``t``); it
reads every rank's answer to that one command (``replies_to(id)``, not the
snapshot's bounded reply list) at a fixed rate until every rank has answered
or the wait is over, then names the ranks that did not answer as
unresponsive. Enter on a group opens :class:`RankStackScreen` on its first
rank; left and right move through the ranks of the group.
"""

from __future__ import annotations

import time
from typing import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ranktop.tui import bindings
from ranktop.tui.render import palette
from ranktop.tui.screens.live_modal import LiveModal
from ranktop.watch.format import ranks_text
from ranktop.watch import STALLED, RankStacks, StackReport, build_report, representatives, thread_lines
from ranktop.watch.model.answers import Answer

#: How long the screen waits for every rank before naming the missing ones unresponsive.
ANSWER_TIMEOUT_S = 10.0
REFRESH_S = 0.25


def summary_text(report: StackReport, *, waited_s: float, timeout_s: float) -> Text:
    """The line over the groups: how many answered, who is still missing."""
    answered = len(report.ranks) + len(report.failed)
    text = Text(f"{answered}/{len(report.expected)} ranks answered", style="bold")
    if report.unresponsive:
        if waited_s < timeout_s:
            text.append(f"  waiting for {ranks_text(report.unresponsive)}… ({waited_s:.0f}s)", style=palette.MUTED)
        else:
            text.append(
                f"  {ranks_text(report.unresponsive)}: no answer within {timeout_s:g}s (unresponsive)",
                style=palette.STATUS_STYLES["silent"],
            )
    return text


def group_options(report: StackReport) -> list[Option]:
    options = []
    for i, group in enumerate(report.groups):
        text = Text(ranks_text(group.ranks), style="bold")
        text.append(f": {group.label}")
        if group.where:
            text.append(f" ({group.where})", style=palette.MUTED)
        options.append(Option(text, id=f"group-{i}"))
    for rank, error in sorted(report.failed.items()):
        options.append(Option(Text(f"rank {rank}: failed: {error}", style=palette.ERROR), id=f"failed-{rank}", disabled=True))
    return options


def rank_text(stacks: RankStacks) -> Text:
    """All threads of one rank, main thread first, traceback style."""
    where = []
    if stacks.phase:
        where.append(f"in {stacks.phase}")
    if stacks.step is not None and stacks.step >= 0:
        where.append(f"step {stacks.step}")
    text = Text(f"rank {stacks.rank}", style="bold")
    if where:
        text.append("  " + ", ".join(where), style=palette.MUTED)
    text.append("\n")
    for thread in stacks.threads:
        lines = thread_lines(thread, indent="")
        text.append(lines[0] + "\n", style=palette.STATUS_STYLES[STALLED] if thread.main else "bold")
        for line in lines[1:]:
            text.append(line + "\n", style="" if line.startswith("  File") else palette.MUTED)
        text.append("\n")
    if stacks.omitted_threads:
        text.append(f"... {stacks.omitted_threads} more thread(s) not sent\n", style=palette.MUTED)
    return text


class RankStackScreen(ModalScreen[None]):
    """One rank's stacks, every thread; left/right walk the ranks of its group."""

    BINDINGS = list(bindings.STACKS_KEYS)

    def __init__(self, report: StackReport, ranks: tuple[int, ...], index: int = 0):
        super().__init__()
        self.report = report
        self.ranks = ranks
        self.index = index
        self._body = Static(id="rank-stack-text")

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="rank-stack") as box:
            box.border_subtitle = "← → other ranks of the group · esc back"
            yield self._body

    def on_mount(self) -> None:
        self._show()

    def _show(self) -> None:
        rank = self.ranks[self.index]
        box = self.query_one("#rank-stack", VerticalScroll)
        box.border_title = f"stacks of rank {rank} ({self.index + 1} of {len(self.ranks)} in {ranks_text(self.ranks)})"
        self._body.update(rank_text(self.report.ranks[rank]))
        box.scroll_home(animate=False)

    def action_other_rank(self, delta: int) -> None:
        self.index = (self.index + delta) % len(self.ranks)
        self._show()

    def action_close(self) -> None:
        self.dismiss()


class StacksScreen(LiveModal):
    """Ranks grouped by identical main-thread stack, updated as the answers arrive."""

    BINDINGS = list(bindings.STACKS_KEYS)
    BOX_ID = "stacks"
    BOX_TITLE = "stacks · ranks grouped by main-thread stack"
    BOX_SUBTITLE = "enter: a rank's full stacks · esc closes"
    BOX = Vertical

    def __init__(
        self,
        command_id: str,
        expected: tuple[int, ...],
        replies_to: Callable[[str], list[Answer]],
        *,
        timeout_s: float = ANSWER_TIMEOUT_S,
        ask_full: Callable[[list[int]], str] | None = None,
    ):
        """``command_id``: a ``stacks`` command sent to every rank. When it asked for fingerprints only (as
        the App does: 4,096 ranks then send a few bytes each), ``ask_full`` sends a second ``stacks`` to the
        given ranks, one per distinct fingerprint, and returns its id: their stacks stand for their groups."""
        super().__init__(REFRESH_S)
        self.command_id = command_id
        self.expected = expected
        self._replies_to = replies_to
        self._ask_full = ask_full
        self._asked: set[int] = set()  # ranks already asked for their full stacks
        self._full_ids: list[str] = []
        self.settled = False  # every rank answered, and the stacks of every group came
        self.timeout_s = timeout_s
        self._started = time.monotonic()
        self.report: StackReport = build_report(expected, [])
        self._shown: tuple | None = None
        self._summary = Static(id="stacks-summary")
        self._groups = OptionList(id="stacks-groups")

    def contents(self) -> tuple[Static, OptionList]:
        return self._summary, self._groups

    def redraw(self) -> None:
        """Rebuild the groups from every answer so far (each rank's first answer counts)."""
        waited = time.monotonic() - self._started
        replies = [(r.rank, r.ok, r.result) for r in self._replies_to(self.command_id)]
        if self._ask_full is not None:
            wanted = [rank for rank in representatives(replies) if rank not in self._asked]
            if wanted:
                self._asked.update(wanted)
                try:
                    self._full_ids.append(self._ask_full(wanted))
                except Exception:  # a transport error: the groups show their fingerprints instead of stacks
                    pass
        full = [(r.rank, r.ok, r.result) for command in self._full_ids for r in self._replies_to(command)]
        self.report = build_report(self.expected, replies, full)
        self._summary.update(summary_text(self.report, waited_s=waited, timeout_s=self.timeout_s))
        shown = (tuple(g.summary for g in self.report.groups), tuple(self.report.failed))
        if shown != self._shown:
            self._shown = shown
            highlighted = self._groups.highlighted
            self._groups.clear_options()
            self._groups.add_options(group_options(self.report))
            if self.report.groups:
                self._groups.highlighted = min(highlighted or 0, len(self.report.groups) - 1)
        self.settled = self.report.complete and self._asked <= {rank for rank, _, _ in full}
        if self.settled:
            self._timer.pause()  # a rank missing after the timeout may still answer: keep looking

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        option_id = event.option.id or ""
        if option_id.startswith("group-"):
            group = self.report.groups[int(option_id.split("-", 1)[1])]
            self.app.push_screen(RankStackScreen(self.report, group.ranks))

    def action_other_rank(self, delta: int) -> None:
        pass  # only the rank screen walks ranks
