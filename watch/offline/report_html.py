"""The report as one self-contained HTML page with plots (plotly, the optional ``ranktop[report]`` extra).

Four figures: step time over the run per rank (the median rank dashed; in
synchronous training every rank's step is the same, so next to it) each rank's
time beyond the median rank, the straggler and stall timeline, and each rank's
phase breakdown; above them
the text report. plotly.js is inlined once, so the page opens offline and can
be mailed or attached to a ticket.
"""

from __future__ import annotations

import html
from typing import Any

from ranktop.watch.analysis.history import STALL
from ranktop.watch.optional import require
from ranktop.watch.offline.report import text_lines

#: Colours of the standard phases, as the TUI draws them (tui/render/palette.py), in CSS names.
PHASE_COLOURS = {
    "data": "#1c86ee",
    "forward": "#00cd00",
    "backward": "#cd00cd",
    "optimizer": "#ffd700",
    "comm": "#00cdcd",
    "other": "#7f7f7f",
}
#: Ranks drawn one line each up to this many; beyond, the slowest few and the median only.
MAX_RANK_LINES = 32


def _plotly() -> Any:
    return require("plotly.graph_objects", "the HTML report", "report")


def figures(rep: dict[str, Any]) -> list[Any]:
    go = _plotly()
    samples = rep["samples"]
    xs = [s["t_s"] for s in samples]
    ranks = sorted({int(r) for s in samples for r in s["rank_step_s"]})
    slow_share = {r["rank"]: r["slow_share"] for r in rep["per_rank"]}
    if len(ranks) > MAX_RANK_LINES:
        ranks = sorted(ranks, key=lambda r: -slow_share.get(r, 0))[:8]

    step = go.Figure()
    for rank in ranks:
        ys = [s["rank_step_s"].get(str(rank)) for s in samples]
        step.add_trace(
            go.Scatter(x=xs, y=[y * 1000 if y is not None else None for y in ys], mode="lines", name=f"rank {rank}", line={"width": 1.5})
        )
    step.add_trace(
        go.Scatter(
            x=xs,
            y=[s["step_s"] * 1000 if s["step_s"] is not None else None for s in samples],
            mode="lines",
            name="median rank",
            line={"width": 3, "dash": "dash", "color": "black"},
        )
    )
    for e in rep["stragglers"] + rep["stalls"]:
        step.add_vrect(
            x0=e["from_s"],
            x1=max(e["to_s"], e["from_s"] + 1),
            fillcolor="red" if e["kind"] == STALL else "orange",
            opacity=0.08,
            line_width=0,
        )
    step.update_layout(
        title="Step time over the run, per rank (median over each rank's window; shaded: episodes)",
        xaxis_title="seconds since the recording started",
        yaxis_title="step time (ms)",
        height=420,
        legend={"orientation": "h", "y": -0.3},
        margin={"t": 60, "b": 40},
    )

    excess = go.Figure()
    for rank in ranks:
        ys = [s["rank_excess_s"].get(str(rank)) for s in samples]
        excess.add_trace(
            go.Scatter(x=xs, y=[y * 1000 if y is not None else None for y in ys], mode="lines", name=f"rank {rank}", line={"width": 1.5})
        )
    excess.update_layout(
        title="Straggler signal: each rank's time per step beyond the median rank, summed over its phases",
        xaxis_title="seconds since the recording started",
        yaxis_title="ms per step beyond the median",
        height=380,
        legend={"orientation": "h", "y": -0.3},
        margin={"t": 60, "b": 40},
    )

    # a row per rank or node, the costliest at the top (plotly draws the first category at the bottom)
    rank_of = {c["who"]: i for i, c in enumerate(rep.get("culprits", []))}
    episodes = sorted(rep["stragglers"] + rep["stalls"], key=lambda e: (-rank_of.get(e["who"], len(rank_of)), e["from_s"]))
    timeline = go.Figure()
    if episodes:
        labels = [e["who"] for e in episodes]
        timeline.add_trace(
            go.Bar(
                y=labels,
                x=[max(e["to_s"] - e["from_s"], 1.0) for e in episodes],
                base=[e["from_s"] for e in episodes],
                orientation="h",
                marker_color=["crimson" if e["kind"] == STALL else "darkorange" for e in episodes],
                text=[
                    (f"stalled in {e['phase']}" if e["kind"] == STALL else f"slow in {e['phase']}, cost {e['cost_s']:.1f} s")
                    if e["phase"]
                    else e["kind"]
                    for e in episodes
                ],
                textposition="inside",
                insidetextanchor="start",
                showlegend=False,
            )
        )
    timeline.update_layout(
        title="Straggler and stall episodes (orange: slow, red: stalled)",
        xaxis={"title": "seconds since the recording started", "range": [0, max(rep["duration_s"], 1)]},
        height=max(180, 60 + 40 * len({e["who"] for e in episodes})),
        margin={"t": 60, "b": 40},
    )
    if not episodes:
        timeline.add_annotation(
            text="no rank was slow or stalled for more than a moment", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
        )

    per_rank = rep["per_rank"]
    if len(per_rank) > MAX_RANK_LINES * 2:
        per_rank = sorted(per_rank, key=lambda r: -r["slow_share"])[:MAX_RANK_LINES]
    names = [p["phase"] for p in rep["median_rank_phases"]] or sorted({n for r in per_rank for n in r["phases"]})
    phases = go.Figure()
    for name in names:
        phases.add_trace(
            go.Bar(
                x=[f"rank {r['rank']}" for r in per_rank],
                y=[r["phases"].get(name, 0.0) * 1000 for r in per_rank],
                name=name,
                marker_color=PHASE_COLOURS.get(name),
            )
        )
    phases.update_layout(
        barmode="stack",
        title="Phase breakdown per rank (median own time per step over the run)",
        yaxis_title="ms per step",
        height=400,
        margin={"t": 60, "b": 40},
    )
    return [step, excess, timeline, phases]


def page(rep: dict[str, Any]) -> str:
    figs = figures(rep)
    body = [f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)]
    summary = html.escape("\n".join(text_lines(rep)))
    title = html.escape(f"ranktop report: job {rep['job']}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;color:#222}}
pre{{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:13px;line-height:1.35}}</style></head>
<body><h1>{title}</h1>
<pre id="summary">{summary}</pre>
{"".join(f'<div class="figure">{b}</div>' for b in body)}
</body></html>
"""
