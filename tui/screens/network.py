"""The network screen (``n``): which node's network is slow, then every link's measured rate, node x node.

The relays measure their links to each other (relay/links.py) and the
engine judges them (watch/analysis/slow_links.py); this screen only draws
``snapshot.slow_links`` and ``snapshot.links``. :func:`network_text` is a
plain function of the snapshot and the room, tested without a terminal.
The answer comes first (the slow node and what it costs, or that no link is
slow), so it is read at 80x24 before anything else; then a node x node table
of rates (row: from, column: to) where the nodes fit across, else a line
per node (its links out and in, the slow ones first).
"""

from __future__ import annotations

import statistics

from rich.text import Text
from textual.widgets import Static

from ranktop.tui import bindings
from ranktop.tui.render import palette
from ranktop.tui.screens.live_modal import LiveModal
from ranktop.watch import format as units
from ranktop.watch import SLOW_FACTOR
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.model.verdict import BAD, SLOW_LINK, Verdict, brief

SLOW = palette.STATUS_STYLES["slow"]
#: A table cell: a rate such as "3.0M" or "1.6G" (bytes a second), and a space.
CELL = 6


def _short(rate: float | None) -> str:
    """A rate in five characters at most: 3.0M, 1.6G, 940k (bytes a second)."""
    if rate is None:
        return "·"
    return units.si(rate).replace(" ", "")


def network_text(snapshot: Snapshot, width: int, height: int = 1000) -> Text:
    """The answer, then the links: ``width`` columns, ``height`` lines at most."""
    text = Text()
    links, slow = snapshot.links, snapshot.slow_links
    if slow:
        for item in slow[:3]:  # (as the verdict line says it where it does not fit: watch/model/verdict.py brief)
            text.append(brief(Verdict(SLOW_LINK, BAD, item.text, []), width) + "\n", style=SLOW)
    elif links:
        hosts = {h for link in links for h in (link.src, link.dst)}
        median = statistics.median(link.rate_bps for link in links)
        text.append(f"no slow link: {len(hosts)} nodes, their links measured at {units.bandwidth(median)} (median)\n",
                    style=palette.STATUS_STYLES["ok"])  # fmt: skip
    else:
        text.append("no link measured: the job runs on one node, its relays' probes are off (RANKTOP_LINK_PROBES=0), "
                    "or they have not measured yet\n", style=palette.MUTED)  # fmt: skip
        return text
    rates = {(link.src, link.dst): link.rate_bps for link in links}
    hosts = sorted({h for pair in rates for h in pair})
    named = {h for item in slow for h in item.hosts}
    expected = max((item.expected_bps for item in slow), default=statistics.median(rates.values()))
    label = min(max(len(h) for h in hosts), 12)
    room = height - len(text.plain.splitlines()) - 2
    if label + len(str(len(hosts))) + 2 + CELL * len(hosts) <= width and len(hosts) + 1 <= room:
        _table(text, hosts, rates, named, expected, label)
    else:
        _per_node(text, hosts, rates, named, expected, label, room)
    text.append(f"bytes/s as the relays' probes crossed them; slow: {SLOW_FACTOR:g}x under the rest", style=palette.MUTED)
    return text


def _style(rate: float | None, expected: float) -> str:
    return SLOW if rate is not None and rate * SLOW_FACTOR <= expected else ""


def _table(text: Text, hosts: list[str], rates: dict, named: set[str], expected: float, label: int) -> None:
    """Row: from; column: to, headed by the row's number (a host's name rarely fits a cell)."""
    digits = len(str(len(hosts)))
    corner = "from \\ to"
    text.append(f"{corner:<{label + digits + 1}} ", style=palette.MUTED)
    for n, h in enumerate(hosts, 1):
        text.append(f"{n:>{CELL - 1}} ", style=SLOW if h in named else "bold")
    text.append("\n")
    for n, a in enumerate(hosts, 1):
        text.append(f"{n:>{digits}} ", style=palette.MUTED)
        text.append(f"{units.host(a, label):<{label}} ", style=SLOW if a in named else "bold")
        for b in hosts:
            rate = rates.get((a, b))
            text.append(f"{'' if a == b else _short(rate):>{CELL - 1}} ", style=_style(rate, expected))
        text.append("\n")


def _per_node(text: Text, hosts: list[str], rates: dict, named: set[str], expected: float, label: int, room: int) -> None:
    """A line per node, the slow ones first: the median of its links out and in, and how many were measured."""
    out: dict[str, list[float]] = {h: [] for h in hosts}
    into: dict[str, list[float]] = {h: [] for h in hosts}
    for (a, b), rate in rates.items():
        out[a].append(rate)
        into[b].append(rate)
    order = sorted(hosts, key=lambda h: (h not in named, h))
    text.append(f"{'node':<{label}} {'out':>6} {'in':>6}  links measured (rates: their median)\n", style=palette.MUTED)
    for h in order[: max(1, room - 1)]:
        o = statistics.median(out[h]) if out[h] else None
        i = statistics.median(into[h]) if into[h] else None
        text.append(f"{units.host(h, label):<{label}} ", style=SLOW if h in named else "bold")
        text.append(f"{_short(o):>6} ", style=_style(o, expected))
        text.append(f"{_short(i):>6} ", style=_style(i, expected))
        text.append(f" {len(out[h])} out, {len(into[h])} in\n", style=palette.MUTED)
    if len(order) > room - 1:
        text.append(f"… {len(order) - (room - 1)} more nodes\n", style=palette.MUTED)


class NetworkScreen(LiveModal):
    """Redrawn at the app's refresh rate from its latest snapshot; the main screen keeps updating beneath."""

    BINDINGS = list(bindings.NETWORK_KEYS)
    BOX_ID = "network"
    BOX_TITLE = "network"
    BOX_SUBTITLE = "esc closes"

    def __init__(self, snapshot_of, refresh_hz: float = 2.0):
        super().__init__(1.0 / refresh_hz)
        self._snapshot_of = snapshot_of  # the app's latest snapshot
        self._body = Static(id="network-text")

    def contents(self) -> tuple[Static]:
        return (self._body,)

    def redraw(self) -> None:
        box = self.query_one(f"#{self.BOX_ID}").content_size  # (the text's own height is what it last held)
        width = box.width or (self.app.size.width - 6)
        height = box.height or (self.app.size.height - 4)
        self._body.update(network_text(self._snapshot_of(), width, height))
