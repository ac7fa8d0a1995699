"""Widgets that render a Snapshot, one module per screen area.

Each widget has a ``show(snapshot, ...)`` method that the App calls at its
refresh rate; the text they draw comes from plain functions of the snapshot
(``header_text``, ``rank_text``, ``status_text`` ...) so it can be tested
without a terminal.
"""

from .breakdown import SORTS, Breakdown
from .collectives import CollectiveTable
from .header import JobHeader
from .help import HelpScreen
from .status import SentCommand, StatusLine
from .stragglers import StragglerTable
from .waiting import Waiting

__all__ = ["SORTS", "Breakdown", "CollectiveTable", "HelpScreen", "JobHeader", "SentCommand", "StatusLine", "StragglerTable", "Waiting"]
