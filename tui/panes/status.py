"""The status line: what ranktop hears, what went wrong, and how the last command went."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.text import Text
from textual.widgets import Static

from ranktop.tui.render import palette
from ranktop.watch import format as fmt
from ranktop.watch.format import ranks_text
from ranktop.watch import CONNECTED, LOST, SILENT, STALLED, WAITING
from ranktop.watch.model.endpoint import Endpoint, EndpointRows
from ranktop.watch.model.snapshot import Snapshot
from ranktop.wire import settings

MAX_ERRORS_SHOWN = 3
#: After this long, ranks that have not answered a command are named.
ANSWER_GRACE_S = 5.0
MAX_RANKS_NAMED = 6


@dataclass(frozen=True)
class SentCommand:
    """A command this TUI sent: replies are matched to it by id."""

    id: str
    cmd: str
    ranks: tuple[int, ...]  # the ranks expected to answer (those known when it was sent)
    sent_at_s: float  # snapshot.elapsed_s when it was sent


def endpoints_text(endpoints: EndpointRows) -> Text:
    """Endpoints grouped by state: waiting in yellow, lost in red, connected quietly (counted: no row of them is made)."""
    text = Text()
    groups = endpoints.by_state()
    lost, waiting, connected = groups[LOST], groups[WAITING], groups[CONNECTED]
    if lost:
        quiet = fmt.ago(max(e.quiet_s for e in lost))
        what = _lost_text(lost[0]) if len(lost) == 1 else f"{len(lost)} nodes: {', '.join(_lost_text(e) for e in lost)}"
        text.append(f"lost {what}, quiet {quiet}  ", style=palette.ERROR)
    if waiting:
        wait = fmt.ago(max(e.quiet_s for e in waiting))
        if len(waiting) == 1:
            text.append(f"waiting for {waiting[0].url} ({wait})  ", style=palette.WARNING)
        else:
            urls = ", ".join(e.url for e in waiting)
            text.append(f"waiting for {len(waiting)} endpoints ({wait}): {urls}  ", style=palette.WARNING)
    if connected:
        what = connected[0].url if len(connected) == 1 else f"{len(connected)} endpoints"
        text.append(f"connected to {what}  ", style=palette.MUTED)
    text.rstrip()
    return text


def _lost_text(e: Endpoint) -> str:
    """e.g. "node-b (ranks 2-3) tcp://node-b:24001": the node and the ranks it took with it."""
    ranks = f" ({ranks_text(e.ranks)})" if e.ranks else ""
    return f"{e.host}{ranks} {e.url}" if e.host else f"{e.url}{ranks}"


def command_text(sent: SentCommand, snapshot: Snapshot) -> Text:
    """e.g. "ping: 4/4 ranks answered, max rtt 3.1 ms": every answer counted, at any number of ranks."""
    tally = snapshot.request(sent.id)
    expected = len(sent.ranks) or (tally.answered if tally else 0)
    waited = snapshot.elapsed_s - sent.sent_at_s
    text = Text(f"{sent.cmd}: ", style="bold")
    if tally is None:
        if waited < ANSWER_GRACE_S:
            text.append(f"sent to {expected} ranks, waiting for answers…", style=palette.MUTED)
        else:
            text.append(f"no answer from any of {expected} ranks after {fmt.ago(waited)}", style=palette.ERROR)
        return text
    complete = tally.answered >= expected
    text.append(f"{tally.answered}/{expected} ranks answered", style="" if complete else palette.WARNING)
    if tally.max_rtt_s is not None:
        text.append(f", max rtt {fmt.ms_unit(tally.max_rtt_s)}")
    if tally.failed:
        rank, reason = tally.first_failure or (-1, "failed")
        text.append(f", {tally.failed} failed (rank {rank}: {reason})", style=palette.ERROR)
    if waited >= ANSWER_GRACE_S and not complete:
        missing = [n for n in sent.ranks if n not in tally.answered_ranks]
        if missing:
            named = ", ".join(str(n) for n in missing[:MAX_RANKS_NAMED])
            more = f" +{len(missing) - MAX_RANKS_NAMED}" if len(missing) > MAX_RANKS_NAMED else ""
            text.append(f", no answer from rank{'s' if len(missing) > 1 else ''} {named}{more}", style=palette.WARNING)
    return text


def refused_text(snapshot: Snapshot) -> str:
    """Commands the ranks refused (forged, replayed, expired, ...): someone without the job's key tried."""
    reasons: dict[str, int] = {}
    ranks = []
    for rank, refused in sorted(snapshot.ranks.table.rejected.items()):
        ranks.append(rank)
        for reason, count in refused.items():
            reasons[reason] = reasons.get(reason, 0) + count
    if not ranks:
        return ""
    counts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return f"commands refused: {counts} ({ranks_text(ranks)})"


def status_text(snapshot: Snapshot, *, notice: Text | None = None, last_command: SentCommand | None = None) -> Text:
    """Errors (newest last), then endpoints and dropped messages, then the notice or last command."""
    lines: list[Text] = []
    errors = snapshot.errors[-MAX_ERRORS_SHOWN:]
    for i, error in enumerate(errors):
        line = Text(error.splitlines()[0] if error else "", style=palette.ERROR)
        hidden = len(snapshot.errors) - len(errors)
        if i == 0 and hidden:
            line.append(f"  (+{hidden} earlier)", style=palette.MUTED)
        lines.append(line)
    table = snapshot.ranks.table  # the columns: the status line builds no rank's row (watch/model/rank_table.py)
    for host in snapshot.slow_hosts:
        count = table.host.count(host)
        lines.append(Text(f"node {host} is slow: all {count} of its ranks are stragglers", style=palette.ERROR))
    if snapshot.diagnosis:  # a hang: who is stuck where, and whom they wait for
        lines.append(Text(snapshot.diagnosis, style=palette.STATUS_STYLES[STALLED]))
    if snapshot.behind_s is not None:
        lines.append(Text(
            f"this viewer is {snapshot.behind_s:.1f} s behind the job's messages (more than this machine can decode); "
            "ranks are not called silent for it",
            style=palette.WARNING,
        ))  # fmt: skip
    heard = endpoints_text(snapshot.endpoints)
    if snapshot.dropped_messages:
        heard.append("  " if heard else "")
        heard.append(f"dropped {snapshot.dropped_messages} malformed or foreign messages", style=palette.WARNING)
    # Records a probe could not send (its buffer was full, or nobody listened): the bars miss those steps.
    lossy = int(np.count_nonzero(table.dropped))
    if lossy:
        heard.append("  " if heard else "")
        records = int(table.dropped.sum())
        heard.append(f"{records} step records lost by {lossy} probe{'s' if lossy > 1 else ''}", style=palette.WARNING)
    refused = refused_text(snapshot)
    if refused:
        heard.append("  " if heard else "")
        heard.append(refused, style=palette.ERROR)
    said = ~np.isnan(table.rate_hz) & ~table.statuses(SILENT)
    rates = sorted(set(table.rate_hz[said].tolist()))
    if rates and rates != [settings.DEFAULT_RATE_HZ]:  # someone asked the ranks to send at another rate (--rate)
        heard.append("  " if heard else "")
        what = f"{rates[0]:g}" if len(rates) == 1 else f"{rates[0]:g}-{rates[-1]:g}"
        heard.append(f"ranks send {what} msg/s", style=palette.MUTED)
    if heard:
        lines.append(heard)
    if notice is not None:
        lines.append(notice)
    elif last_command is not None:
        lines.append(command_text(last_command, snapshot))
    text = Text("\n").join(lines)
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


class StatusLine(Static):
    """Endpoints, errors, dropped messages and the last command's replies, one line each."""

    _lines = 0

    @property
    def line_count(self) -> int:
        """Its lines at the last refresh (the app leaves it that many rows)."""
        return self._lines

    def show(self, snapshot: Snapshot, *, notice: Text | None, last_command: SentCommand | None) -> None:
        text = status_text(snapshot, notice=notice, last_command=last_command)
        # Its height follows its lines; only a change in their number needs a layout pass.
        lines = len(text.plain.splitlines())
        self.update(text, layout=lines != self._lines)
        self._lines = lines
