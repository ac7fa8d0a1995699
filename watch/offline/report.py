"""The end-of-run report of a recording: what a person wants to know in a minute.

The recording is played through the live engine (watch/offline/replay.py's Player) and
sampled into a :class:`~ranktop.watch.analysis.history.History`, the same one the TUI's
history screen draws, so the report's episodes are the ones a person watching
would have seen. On top of the history this module keeps what only a whole run
shows: memory creep, GPU throttling, MFU, the captures taken.

:func:`build` returns plain dicts and lists (the ``--json`` document);
:func:`text_lines` and :func:`compare_lines` print them; the HTML page is in
watch/offline/report_html.py (plotly, optional).
"""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any, Callable

from ranktop.watch.analysis.collectives import percentile
from ranktop.watch import format as fmt
from ranktop.watch.format import ranks_text
from ranktop.watch.analysis.history import NODE, STALL, STRAGGLER, Episode, History
from ranktop.watch.offline.recording import Recording
from ranktop.watch.offline.replay import Player, clock_text
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.statuses import SLOW

#: The report samples the run this often (seconds), more sparsely for long runs (at most MAX_SAMPLES: a
#: snapshot of 64 ranks costs about 80 ms here, so 900 samples are about a minute and a quarter).
MIN_SAMPLE_S = 1.0
MAX_SAMPLES = 900
#: Rows of the step-time-over-time table.
PERIODS = 10


class _Observer:
    """Takes each sampled snapshot: feeds the history and keeps what the report needs beyond it."""

    def __init__(self, history: History):
        self.history = history
        self.creep: dict[int, dict[str, Any]] = {}
        self.memory_first: dict[int, tuple[str, float]] = {}
        self.memory_last: dict[int, tuple[str, float]] = {}
        self.throttle: dict[int, dict[str, Any]] = {}
        self.causes: dict[tuple[int, str], dict[str, Any]] = {}
        self.captures: dict[str, dict[str, Any]] = {}
        self.hosts: dict[int, str] = {}
        self.last: Snapshot | None = None
        self._last_t: float | None = None

    def note(self, snap: Snapshot, t: float) -> None:
        self.history.note(snap, t)
        dt_s = 0.0 if self._last_t is None else t - self._last_t
        self._last_t = t
        self.last = snap
        for r in snap.ranks:
            self.hosts[r.rank] = r.host
            m = r.memory
            if m is not None:
                value = m.allocated if m.tracked == "cuda" else m.rss_bytes
                if value is not None:
                    self.memory_first.setdefault(r.rank, (m.tracked, float(value)))
                    self.memory_last[r.rank] = (m.tracked, float(value))
                if m.creep:
                    c = self.creep.setdefault(r.rank, {"rank": r.rank, "host": r.host, "first_t": t, "seconds": 0.0, "max_mb_per_min": 0.0})
                    c["seconds"] += dt_s
                    c["last_t"] = t
                    c["max_mb_per_min"] = max(c["max_mb_per_min"], m.creep_mb_per_min or 0.0)
            for cause in r.causes:  # why a slow rank was slow, as its evidence said (watch/analysis/causes.py)
                if cause.kind == "unknown":  # what was ruled out: no "because" of its own
                    continue
                c = self.causes.setdefault((r.rank, cause.kind), {"rank": r.rank, "host": r.host, "kind": cause.kind,
                                                                  "seconds": 0.0, "first_t": t})  # fmt: skip
                c["seconds"] += dt_s
                c["text"] = cause.text  # the latest
            if r.gpu is not None and r.gpu.throttle:
                th = self.throttle.setdefault(r.rank, {"rank": r.rank, "host": r.host, "reasons": set(), "seconds": 0.0, "first_t": t})
                th["reasons"].update(r.gpu.throttle)
                th["seconds"] += dt_s
            if r.capture is not None:
                cap = self.captures.setdefault(
                    r.capture.id,
                    {
                        "id": r.capture.id,
                        "kind": r.capture.kind,
                        "start_step": r.capture.start,
                        "steps": r.capture.steps,
                        "folder": r.capture.folder,
                        "first_t": t,
                        "ranks": {},
                    },
                )
                cap["ranks"][r.rank] = r.capture.state


def build(recording: Recording, **options: Any) -> dict[str, Any]:
    """The report of one recording, as plain data."""
    every = max(MIN_SAMPLE_S, recording.duration_s / MAX_SAMPLES)
    history = History(samples=None, every_s=every)
    observer = _Observer(history)
    player = Player(recording, options)
    player.advance(recording.end, observer, sample_from=recording.start)
    final = player.aggregator.snapshot()
    observer.note(final, recording.end)
    history.close()
    return _assemble(recording, history, observer, final)


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def _assemble(recording: Recording, history: History, obs: _Observer, final: Snapshot) -> dict[str, Any]:
    start = recording.start
    samples = [s for s in history.samples if s.step_s is not None]
    duration = recording.duration_s
    first_step = next((s.global_step for s in history.samples if s.global_step >= 0), -1)
    out: dict[str, Any] = {
        "file": str(recording.path),
        "job": final.job,
        "world_size": final.world_size,
        "ranks": len(final.ranks),
        "hosts": sorted({r.host for r in final.ranks}),
        "start": _iso(start),
        "end": _iso(recording.end),
        "duration_s": duration,
        "first_step": first_step,
        "last_step": final.global_step,
        "steps_per_s": (final.global_step - first_step) / duration if duration > 0 and first_step >= 0 else None,
        "damaged_chunks": list(recording.torn),
        # the job's life (watch/engine/lifecycle.py): restarts of its ranks as new processes, and its end
        "restarts": final.restarts,
        "restarted_at": _iso(final.restarted_at) if final.restarted_at is not None else None,
        "not_back": list(final.not_back),
        "ended_at": _iso(final.ended_at) if final.ended_at is not None else None,
        "clock": final.clock,  # what the times below measure: gpu, host or mixed (Snapshot.clock)
        "clock_text": final.clock_text(),
    }
    # -- step time over time
    periods = []
    if samples:
        n = min(PERIODS, max(1, int(duration // 10)))
        width = duration / n if duration > 0 else 1.0
        for i in range(n):
            lo, hi = start + i * width, start + (i + 1) * width
            inside = [s for s in samples if lo <= s.t < hi or (i == n - 1 and s.t == hi)]
            if not inside:
                continue
            med = [s.step_s for s in inside if s.step_s is not None]  # (every sample's: samples have one)
            top = [s.max_step_s for s in inside if s.max_step_s is not None]
            rates = [s.steps_per_s for s in inside if s.steps_per_s]
            slow = sorted({r for s in inside for r in s.slow})
            stalled = sorted({r for s in inside for r in s.stalled})
            progress = max(s.global_step for s in inside) - min(s.global_step for s in inside)
            periods.append(
                {
                    "steps": progress,
                    "stalled_ranks": stalled,
                    "from_s": lo - start,
                    "to_s": hi - start,
                    "median_step_s": statistics.median(med),
                    "p90_step_s": percentile(med, 90),
                    "slowest_rank_step_s": max(top) if top else None,
                    "steps_per_s": statistics.median(rates) if rates else None,
                    "slow_ranks": slow,
                }
            )
    out["step_time"] = periods
    all_steps = [s.step_s for s in samples if s.step_s is not None]  # (the same)
    out["step_s"] = {
        "median": statistics.median(all_steps) if all_steps else None,
        "p90": percentile(all_steps, 90) if all_steps else None,
        "max": max(all_steps) if all_steps else None,
    }
    # -- phases of the median rank (the rank whose step time is the median, at each sample)
    phases: dict[str, list[float]] = {}
    for s in samples:
        ranked = sorted(s.rank_step_s.items(), key=lambda kv: kv[1])
        if not ranked:
            continue
        mid = ranked[(len(ranked) - 1) // 2][0]
        for name, seconds in s.rank_phases.get(mid, {}).items():
            phases.setdefault(name, []).append(seconds)
    order = final.phase_names or list(phases)
    med_phases = {name: statistics.median(phases[name]) for name in order if name in phases}
    total = sum(med_phases.values())
    out["median_rank_phases"] = [
        {"phase": name, "seconds": sec, "share": sec / total if total else None} for name, sec in med_phases.items()
    ]
    # -- per rank: how much of the run each was slow, its typical step
    per_rank: list[dict[str, Any]] = []
    count = len(samples)
    for rank in sorted({r for s in samples for r in s.rank_step_s}):
        mine = [s.rank_step_s[rank] for s in samples if rank in s.rank_step_s]
        slow_samples = sum(1 for s in samples if rank in s.slow)
        phase_names = {name for s in samples for name in s.rank_phases.get(rank, {})}
        per_rank.append(
            {
                "rank": rank,
                "host": obs.hosts.get(rank, "?"),
                "median_step_s": statistics.median(mine),
                "slow_share": slow_samples / count if count else 0.0,
                "phases": {
                    name: statistics.median(s.rank_phases[rank].get(name, 0.0) for s in samples if rank in s.rank_phases)
                    for name in order
                    if name in phase_names
                },
            }
        )
    coords = {r.rank: r.coords for r in final.ranks if r.coords}
    for entry in per_rank:
        entry["coords"] = coords.get(entry["rank"])  # its place in the parallel layout (docs/parallelism.md)
    out["per_rank"] = per_rank
    out["layout_roles"] = list(final.layout_roles)
    out["imbalance"] = final.imbalance

    # -- episodes
    def episode(e: Episode) -> dict[str, Any]:
        d = e.to_json()
        d.update(from_s=e.start - start, to_s=e.end - start, share_of_run=(e.end - e.start) / duration if duration else 0.0)
        return d

    lasting = history.episodes_since(start)
    out["stragglers"] = [episode(e) for e in lasting if e.kind in (STRAGGLER, NODE)]
    out["stalls"] = [episode(e) for e in lasting if e.kind == STALL]
    out["hangs"] = hangs(out["stalls"])
    # each rank or node with an episode, with what its episodes cost the job, the costliest first (the history
    # screen's timeline: a strip each)
    out["culprits"] = [
        {"who": c.who, "kind": c.kind, "episodes": len(c.episodes), "cost_s": c.cost_s,
         "seconds": sum(e.duration_s for e in c.episodes), "from_s": c.episodes[0].start - start,
         "to_s": max(e.end for e in c.episodes) - start}
        for c in history.culprits_since(start)
    ]  # fmt: skip
    out["causes"] = [{**c, "first_s": c["first_t"] - start} for c in sorted(obs.causes.values(), key=lambda c: -c["seconds"])]
    # -- memory, GPUs, throughput, captures
    creep = []
    for rank, c in sorted(obs.creep.items()):
        tracked, first = obs.memory_first.get(rank, ("rss", 0.0))
        _, last = obs.memory_last.get(rank, (tracked, first))
        creep.append({**c, "first_s": c["first_t"] - start, "tracked": tracked, "from_bytes": first, "to_bytes": last})
    out["memory_creep"] = creep
    out["gpu_throttling"] = [
        {**th, "reasons": sorted(th["reasons"]), "first_s": th["first_t"] - start} for _, th in sorted(obs.throttle.items())
    ]
    mfus = [s.mfu for s in history.samples if s.mfu is not None]
    tflops = [s.tflops for s in history.samples if s.tflops is not None]
    out["mfu"] = statistics.median(mfus) if mfus else None
    out["tflops"] = statistics.median(tflops) if tflops else None
    out["captures"] = [
        {
            **{k: v for k, v in c.items() if k != "ranks"},
            "at_s": c["first_t"] - start,
            "ranks": len(c["ranks"]),
            "done": sum(1 for st in c["ranks"].values() if st == "done"),
            "failed": sum(1 for st in c["ranks"].values() if st == "failed"),
        }
        for c in obs.captures.values()
    ]
    out["slow_at_end"] = [r.rank for r in final.ranks if r.status == SLOW]
    out["samples"] = [
        {
            "t_s": s.t - start,
            "step_s": s.step_s,
            "max_step_s": s.max_step_s,
            "steps_per_s": s.steps_per_s,
            "rank_step_s": {str(k): v for k, v in s.rank_step_s.items()},
            "rank_excess_s": {str(k): v for k, v in s.rank_excess_s.items()},
            "slow": list(s.slow),
            "stalled": list(s.stalled),
        }
        for s in history.samples
    ]
    return out


def hangs(stalls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stall episodes that are one event (a hang stalls every rank at once): grouped by start and diagnosis."""
    groups: list[dict[str, Any]] = []
    for e in sorted(stalls, key=lambda e: e["from_s"]):
        for g in groups:
            if abs(g["from_s"] - e["from_s"]) <= 5.0 and g["diagnosis"] == e["diagnosis"]:
                g["ranks"].append(e["rank"])
                g["to_s"] = max(g["to_s"], e["to_s"])
                g["waiting_for"] = sorted(set(g["waiting_for"]) | set(e["waiting_for"]))
                break
        else:
            groups.append(
                {
                    "from_s": e["from_s"],
                    "to_s": e["to_s"],
                    "ranks": [e["rank"]],
                    "phase": e["phase"],
                    "step": e["step"],
                    "waiting_for": list(e["waiting_for"]),
                    "diagnosis": e["diagnosis"],
                }
            )
    for g in groups:
        g["duration_s"] = g["to_s"] - g["from_s"]
    return groups


# -- text ------------------------------------------------------------------------------------


def _when(rep: dict[str, Any], offset: float) -> str:
    start = dt.datetime.fromisoformat(rep["start"])
    return f"{clock_text(offset)} ({(start + dt.timedelta(seconds=offset)).strftime('%H:%M:%S')})"


def text_lines(rep: dict[str, Any]) -> list[str]:
    lines = []
    rate = f", {rep['steps_per_s']:.2f} steps/s" if rep["steps_per_s"] else ""
    lines.append(
        f"job {rep['job']}: {rep['ranks']} rank(s) on {len(rep['hosts'])} host(s), "
        f"{clock_text(rep['duration_s'])} recorded from {rep['start']}"
    )
    lines.append(
        f"steps {rep['first_step']} .. {rep['last_step']}{rate}; step time median {fmt.ms_unit(rep['step_s']['median'])}, "
        f"p90 {fmt.ms_unit(rep['step_s']['p90'])}, worst {fmt.ms_unit(rep['step_s']['max'])}"
    )
    if rep["mfu"] is not None or rep["tflops"] is not None:
        mfu = f"MFU {rep['mfu'] * 100:.1f}%" if rep["mfu"] is not None else "MFU unknown (no peak for the device)"
        tf = f", {rep['tflops']:.2f} TFLOP/s" if rep["tflops"] is not None else ""
        lines.append(f"{mfu}{tf}")
    if rep.get("restarts"):
        back = f"; {ranks_text(rep['not_back'])} never came back" if rep.get("not_back") else ""
        lines.append(f"restarted {rep['restarts']} time(s) (ranks back as new processes), last at {rep['restarted_at']}{back}")
    if rep.get("ended_at"):
        lines.append(f"ended at {rep['ended_at']}: every rank exited cleanly")
    if rep.get("clock_text"):
        lines.append(f"times: {rep['clock_text']}")
    for d in rep["damaged_chunks"]:
        lines.append(f"note: {d}")

    # the verdict first: who held the job back
    lines.append("")
    stragglers = rep["stragglers"]
    culprits = [c for c in rep.get("culprits", []) if c["kind"] != STALL]
    if len(stragglers) > 1 and culprits:  # several episodes: who cost the most in all, before each episode
        lines.append(
            "cost to the job, per rank or node: "
            + "; ".join(f"{c['who']} {c['cost_s']:.1f} s ({c['episodes']} episode{'s' if c['episodes'] > 1 else ''})" for c in culprits[:5])
            + (f"; {len(culprits) - 5} more" if len(culprits) > 5 else "")
        )
    if stragglers:
        lines.append("stragglers (who held the job back):")
        for e in stragglers:
            phase = f" in {e['phase']}" if e["phase"] else ""
            lines.append(
                f"  {e['who']} slow{phase} from {_when(rep, e['from_s'])} to {_when(rep, e['to_s'])} "
                f"({e['share_of_run'] * 100:.0f}% of the run): +{fmt.ms_unit(e['peak_excess_s'])}/step at worst, "
                f"cost the job {e['cost_s']:.1f} s over {e['steps']} steps"
            )
    else:
        lines.append("stragglers: none (no rank slower than the others for more than a moment)")
    for c in rep.get("causes", [])[:8]:  # why, as their evidence said against their peers'
        lines.append(f"  because rank {c['rank']} ({c['kind']}, from {_when(rep, c['first_s'])}, {clock_text(c['seconds'])}): {c['text']}")
    if rep.get("imbalance"):
        lines.append(f"pipeline: {rep['imbalance']} (the model's split, no rank's fault)")
    if rep["hangs"]:
        lines.append("stalls and hangs:")
        for g in rep["hangs"]:
            ranks = ", ".join(map(str, sorted(g["ranks"])))
            step = f" at step {g['step']}" if g["step"] is not None else ""
            waited = f", waiting for rank(s) {', '.join(map(str, g['waiting_for']))}" if g["waiting_for"] else ""
            lines.append(f"  rank(s) {ranks} stalled{step} from {_when(rep, g['from_s'])}, {clock_text(g['duration_s'])} long{waited}")
            if g["diagnosis"]:
                lines.append(f"    {g['diagnosis']}")
    else:
        lines.append("stalls and hangs: none")

    lines.append("")
    lines.append("step time over the run (median rank / slowest rank, steps/s, slow ranks):")
    for p in rep["step_time"]:
        slow = f"  slow: {', '.join(map(str, p['slow_ranks']))}" if p["slow_ranks"] else ""
        if p["stalled_ranks"]:
            slow += f"  stalled: {', '.join(map(str, p['stalled_ranks']))}"
        if p["steps"] == 0:
            lines.append(f"  {clock_text(p['from_s']):>8} – {clock_text(p['to_s']):<8} no step finished{slow}")
            continue
        rate = f"{p['steps_per_s']:.2f}/s" if p["steps_per_s"] else "–"
        lines.append(
            f"  {clock_text(p['from_s']):>8} – {clock_text(p['to_s']):<8} {fmt.ms_unit(p['median_step_s']):>10} / "
            f"{fmt.ms_unit(p['slowest_rank_step_s']):>10}  {rate:>8}{slow}"
        )
    if rep["median_rank_phases"]:
        lines.append("")
        lines.append("phases of the median rank (own time per step):")
        lines.append(
            "  "
            + "  ".join(f"{p['phase']} {fmt.ms_unit(p['seconds'])} ({(p['share'] or 0) * 100:.0f}%)" for p in rep["median_rank_phases"])
        )
    if rep["per_rank"]:
        lines.append("")
        lines.append("per rank: median step, share of the run slow")
        worst = sorted(rep["per_rank"], key=lambda r: -r["slow_share"])
        for r in worst[:8]:
            lines.append(f"  rank {r['rank']:>4} {r['host']:<16} {fmt.ms_unit(r['median_step_s']):>10}  slow {r['slow_share'] * 100:3.0f}%")
        if len(worst) > 8:
            lines.append(f"  ... {len(worst) - 8} more (--json for all)")
    lines.append("")
    _section(
        lines,
        "memory creep",
        "none",
        rep["memory_creep"],
        lambda c: (
            f"rank {c['rank']} ({c['tracked']}) climbing from {_when(rep, c['first_s'])}, up to "
            f"{c['max_mb_per_min']:.1f} MB/min; {c['from_bytes'] / 2**20:.0f} MB -> {c['to_bytes'] / 2**20:.0f} MB"
        ),
    )
    _section(
        lines,
        "GPU throttling",
        "none seen",
        rep["gpu_throttling"],
        lambda th: f"rank {th['rank']} on {th['host']}: {', '.join(th['reasons'])} for {th['seconds']:.0f} s",
    )
    _section(
        lines,
        "captures",
        "none",
        rep["captures"],
        lambda c: (
            f"{c['kind']} {c['id']} at {_when(rep, c['at_s'])}: steps {c['start_step']}..{c['start_step'] + c['steps'] - 1}, "
            f"{c['done']}/{c['ranks']} rank(s) done{', %d failed' % c['failed'] if c['failed'] else ''}; {c['folder'] or ''}"
        ),
    )
    return lines


def _section(lines: list[str], title: str, empty: str, items: list[Any], line: Callable[[Any], str]) -> None:
    """``title:`` and a line per item, or ``title: empty`` when there is none."""
    if not items:
        lines.append(f"{title}: {empty}")
        return
    lines.append(f"{title}:")
    lines.extend(f"  {line(item)}" for item in items)


def compare_lines(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Two runs side by side: step time, phases, stragglers."""
    w = 22

    def row(label: str, x: str, y: str, delta: str = "") -> str:
        return f"{label:<24}{x:>{w}}{y:>{w}}  {delta}"

    def pct(x: float | None, y: float | None) -> str:
        return f"{(y / x - 1) * 100:+.0f}%" if x and y is not None else ""

    lines = [row("", a["file"][-w + 1 :], b["file"][-w + 1 :], "B vs A")]
    lines.append(row("job", str(a["job"]), str(b["job"])))
    lines.append(row("ranks", str(a["ranks"]), str(b["ranks"])))
    lines.append(row("duration", clock_text(a["duration_s"]), clock_text(b["duration_s"])))
    for key in ("median", "p90", "max"):
        lines.append(
            row(f"step time {key}", fmt.ms_unit(a["step_s"][key]), fmt.ms_unit(b["step_s"][key]), pct(a["step_s"][key], b["step_s"][key]))
        )
    ra, rb = a["steps_per_s"], b["steps_per_s"]
    lines.append(row("steps/s", f"{ra:.2f}" if ra else "–", f"{rb:.2f}" if rb else "–", pct(ra, rb)))
    pa = {p["phase"]: p["seconds"] for p in a["median_rank_phases"]}
    pb = {p["phase"]: p["seconds"] for p in b["median_rank_phases"]}
    for name in list(pa) + [n for n in pb if n not in pa]:
        lines.append(row(f"phase {name}", fmt.ms_unit(pa.get(name)), fmt.ms_unit(pb.get(name)), pct(pa.get(name), pb.get(name))))

    def who(rep: dict[str, Any]) -> str:
        names = sorted({e["who"] for e in rep["stragglers"]})
        return ", ".join(names) if names else "none"

    def cost(rep: dict[str, Any]) -> float:
        return sum(e["cost_s"] for e in rep["stragglers"])

    lines.append(row("stragglers", who(a)[: w - 1], who(b)[: w - 1]))
    lines.append(row("straggler cost", f"{cost(a):.1f} s", f"{cost(b):.1f} s"))
    lines.append(row("stalls and hangs", str(len(a["hangs"])), str(len(b["hangs"]))))
    mfa, mfb = a["mfu"], b["mfu"]
    lines.append(row("MFU", f"{mfa * 100:.1f}%" if mfa is not None else "–", f"{mfb * 100:.1f}%" if mfb is not None else "–"))
    lines.append(row("memory creep ranks", str(len(a["memory_creep"])), str(len(b["memory_creep"]))))
    return lines
