"""The two header lines: which job, how many ranks are heard, how fast it steps."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from ranktop.tui.render import palette
from ranktop.watch import format as fmt
from ranktop.watch import STALLED
from ranktop.watch.model.life import ENDED
from ranktop.watch.model.snapshot import Snapshot


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def life_line(state: str, ended_at: float | None, restarts: int, restarted_at: float | None, not_back: Sequence[int]) -> str | None:
    """The viewer's one line on the job's life: "ended at 12:09:55", "restarted at 12:04:31 (2nd restart);
    rank 3 not back"; None while it simply runs."""
    parts = []
    if state == ENDED and ended_at is not None:
        parts.append(f"ended at {_clock(ended_at)}")
    if restarts and restarted_at is not None:
        parts.append(f"restarted at {_clock(restarted_at)} ({ordinal(restarts)} restart)")
    if not_back:
        parts.append(f"{fmt.ranks_text(not_back)} not back")
    return "; ".join(parts) or None


def _clock(unix: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(unix))


def header_text(snapshot: Snapshot, *, title: str, paused: bool) -> Text:
    sep = (" │ ", palette.MUTED)
    world = snapshot.world_size
    reported = len(snapshot.ranks)
    line1: list = [(title, "bold"), sep, ("job ", palette.MUTED), (snapshot.job or "?", "bold")]
    life = life_line(snapshot.state, snapshot.ended_at, snapshot.restarts, snapshot.restarted_at, snapshot.not_back)
    if life:  # first on the line: a job that ended or came back is the news
        line1 += [sep, (life, "bold reverse" if snapshot.state == ENDED else palette.WARNING)]
    line1 += [sep, ("world ", palette.MUTED), (str(world) if world is not None else "?", "bold")]
    if snapshot.ranks:
        stalled = snapshot.ranks.count(STALLED)
        if stalled:  # the news before the counts that are always there (a narrow screen cuts the line's end)
            line1 += [sep, (f"{stalled} stalled", palette.STATUS_STYLES[STALLED])]
        line1 += [sep, (f"{snapshot.connected} connected", palette.STATUS_STYLES["ok"])]
        silent_style = palette.STATUS_STYLES["silent"] if snapshot.silent else palette.MUTED
        line1 += [sep, (f"{snapshot.silent} silent", silent_style)]
        if world is not None and reported < world:
            line1 += [sep, (f"{world - reported} never reported", palette.WARNING)]
    step = str(snapshot.global_step) if snapshot.global_step >= 0 else "–"
    rate = f"{snapshot.steps_per_s:.2f}" if snapshot.steps_per_s is not None else "–"
    line2: list = [("step ", palette.MUTED), (step, "bold"), sep, (rate, "bold"), (" steps/s", palette.MUTED)]
    line2 += [sep, ("elapsed ", palette.MUTED), (fmt.clock(snapshot.elapsed_s), "bold")]
    # The clock the bars, scores and verdict are on: GPU time for ranks that send device times (their step records' "g").
    line2 += [sep, ("bars: ", palette.MUTED), (snapshot.clock_text(), "")]
    if paused:
        line2 += [sep, (" PAUSED ", "bold reverse yellow"), (" space resumes", palette.MUTED)]
    return Text.assemble(*line1, "\n", *line2, no_wrap=True, overflow="ellipsis")


class JobHeader(Static):
    """Job, world size, connected and silent ranks, global step, steps/s, elapsed."""

    def show(self, snapshot: Snapshot, *, title: str, paused: bool) -> None:
        # Fixed height (ranktop.tcss): repaint without a layout pass over the whole screen.
        self.update(header_text(snapshot, title=title, paused=paused), layout=False)
