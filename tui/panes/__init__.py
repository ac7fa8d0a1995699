"""The main screen's panes: widgets that render a Snapshot, one module per screen area.

Each widget has a ``show(snapshot, ...)`` method that the App calls at its
refresh rate; the text they draw comes from plain functions of the snapshot
(``header_text``, ``rank_text``, ``status_text`` ...) so it can be tested
without a terminal.
"""

from ranktop.tui.panes.breakdown import SORTS, Breakdown
from ranktop.tui.panes.collectives import CollectiveTable
from ranktop.tui.panes.header import JobHeader
from ranktop.tui.panes.status import SentCommand, StatusLine
from ranktop.tui.panes.stragglers import StragglerTable
from ranktop.tui.panes.waiting import Waiting

__all__ = ["SORTS", "Breakdown", "CollectiveTable", "JobHeader", "SentCommand", "StatusLine", "StragglerTable", "Waiting"]
