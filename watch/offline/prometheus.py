"""Prometheus metrics of a job, read from the latest Snapshot at scrape time.

A custom collector (the prometheus_client way for a value that lives elsewhere):
every scrape takes one snapshot and turns it into metric families, so there is
no second copy of the job's state to keep in step and a rank that leaves simply
stops being listed. Names follow Prometheus conventions: base units in the
suffix (``_seconds``, ``_bytes``, ``_ratio``, ``_watts``, ``_celsius``), one
metric per quantity with the varying part in a label (``phase``, ``status``,
``reason``).

prometheus_client is an optional dependency (``ranktop[export]``): it is
imported when a collector is built, never by the rest of the engine.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterator

from ranktop.watch.model import verdict
from ranktop.watch.model.life import ENDED, RUNNING
from ranktop.watch.optional import require
from ranktop.watch.model.snapshot import Snapshot, SnapshotSource
from ranktop.watch.statuses import STATUSES

RANK_LABELS = ("job", "rank", "local_rank", "host")
#: A layout role usable as a label name (they all are: pp, tp, dp_shard, ...; anything else is left out).
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
PREFIX = "ranktop"


def _client() -> Any:
    return require("prometheus_client.core", "the Prometheus exporter", "export")


class SnapshotCollector:
    """Registered with a CollectorRegistry; ``collect`` runs on every scrape.

    Once the job has ended, its ranks' series keep the values of the last
    snapshot taken while it ran (with ``ranktop_job_up 0``): a dashboard shows
    how the job ended, not ranks fading to silent.
    """

    def __init__(self, source: SnapshotSource):
        self._core = _client()
        self.source = source
        self._last_running: Snapshot | None = None

    def describe(self) -> list[Any]:
        return []  # no scrape at registration time: the job may not have spoken yet

    def collect(self) -> Iterator[Any]:
        snap = self.source.snapshot()
        if snap.state == RUNNING and snap.connected:
            self._last_running = snap
        elif snap.state == ENDED and self._last_running is not None:
            last = self._last_running
            snap = dataclasses.replace(snap, ranks=last.ranks, steps_per_s=last.steps_per_s, throughput=last.throughput)
        return iter(families(snap, self._core))


def families(snap: Snapshot, core: Any) -> list[Any]:
    G = core.GaugeMetricFamily
    job = snap.job or ""

    def rank_gauge(name: str, doc: str, unit_labels: tuple[str, ...] = ()) -> Any:
        return G(f"{PREFIX}_rank_{name}", doc, labels=[*RANK_LABELS, *unit_labels])

    step = rank_gauge("step_seconds", "Median wall time of a step over the rank's window.")
    phase = rank_gauge("phase_seconds", "Median own time per step in each phase (collective waits taken out).", ("phase",))
    score = rank_gauge("straggler_score_ratio", "Time beyond the median rank, as a share of the median step.")
    excess = rank_gauge("straggler_excess_seconds", "Time per step beyond the median rank, summed over phases.")
    status = rank_gauge("status", "1 for the rank's status (ok, slow, stalled, silent), 0 for the others.", ("status",))
    culprit = rank_gauge("slow_phase", "1 for the phase a slow rank is slow in.", ("phase",))
    cause = rank_gauge(
        "cause",
        "1 for each cause its evidence names for a slow rank (gc_pause, cpu_contention, expert_load, "
        "input_imbalance, data_loader, gpu_throttle, memory_pressure; docs/detection.md).",
        ("kind",),
    )
    comm = rank_gauge("collective_wait_seconds", "Median time per step the rank waited in collectives.")
    last_step = rank_gauge("last_step", "The last step the rank completed.")
    last_seen = rank_gauge("last_seen_seconds", "Seconds since the rank's last message.")
    stalled = rank_gauge("stalled_seconds", "While stalled: seconds since the rank last finished a step.")
    rss = rank_gauge("memory_rss_bytes", "Resident set size of the rank's process.")
    alloc = rank_gauge("cuda_allocated_bytes", "CUDA caching allocator: bytes in tensors.")
    resv = rank_gauge("cuda_reserved_bytes", "CUDA caching allocator: bytes held from the device.")
    peak = rank_gauge("cuda_peak_allocated_bytes", "CUDA caching allocator: peak bytes in tensors since the process started.")
    creep = rank_gauge("memory_creep_bytes_per_second", "Slope of the rank's memory over the creep window (when flagged or measured).")
    gutil = rank_gauge("gpu_utilization_ratio", "NVML: share of time a kernel ran on the rank's GPU (0..1; not the share of SMs busy).")
    gmem = rank_gauge("gpu_memory_used_bytes", "NVML: memory used on the rank's GPU.")
    gpow = rank_gauge("gpu_power_watts", "NVML: power draw of the rank's GPU.")
    gtemp = rank_gauge("gpu_temperature_celsius", "NVML: temperature of the rank's GPU.")
    gthr = rank_gauge("gpu_throttle", "NVML: 1 for each active clock slowdown reason of the rank's GPU.", ("reason",))
    samples = rank_gauge("samples_per_second", "Samples per second (the probe's work per step x steps/s).")
    tokens = rank_gauge("tokens_per_second", "Tokens per second.")
    flops = rank_gauge("model_flops_per_second", "Achieved model FLOP/s.")
    mfu = rank_gauge("mfu_ratio", "Model FLOPs utilisation: achieved over the device's peak.")

    # Where each rank sits in the parallel layout, as labels of one info-style series (value 1): a query joins
    # it on the rank to group any series by stage or tensor-parallel group (on(job, rank) group_left(pp) ...).
    roles = [role for role in snap.layout_roles if _LABEL.match(role)]
    coords = G(
        f"{PREFIX}_rank_coordinates",
        "1 per rank, labelled with its place in the parallel layout (pp, tp, dp, ...).",
        labels=[*RANK_LABELS, *roles],
    )
    value: float | None  # each gauge's, in the loops below
    for r in snap.ranks:
        lv = [job, str(r.rank), str(r.local_rank), r.host]
        if roles and r.coords:
            coords.add_metric([*lv, *(str(r.coords.get(role, "")) for role in roles)], 1.0)
        if r.step_s is not None:
            step.add_metric(lv, r.step_s)
            score.add_metric(lv, r.score)
            excess.add_metric(lv, r.excess_s)
        for name, seconds in r.phases.items():
            phase.add_metric([*lv, name], seconds)
        for s in STATUSES:
            status.add_metric([*lv, s], 1.0 if r.status == s else 0.0)
        if r.culprit_phase:
            culprit.add_metric([*lv, r.culprit_phase], 1.0)
        for why in r.causes:
            cause.add_metric([*lv, why.kind], 1.0)
        if r.collective_s is not None:
            comm.add_metric(lv, r.collective_s)
        last_step.add_metric(lv, r.step)
        last_seen.add_metric(lv, r.last_seen_s)
        if r.stalled_s is not None:
            stalled.add_metric(lv, r.stalled_s)
        m = r.memory
        if m is not None:
            for family, value in ((rss, m.rss_bytes), (alloc, m.allocated), (resv, m.reserved), (peak, m.peak)):
                if value is not None:
                    family.add_metric(lv, value)
            if m.creep_mb_per_min is not None:
                creep.add_metric(lv, m.creep_mb_per_min * 2**20 / 60)
        g = r.gpu
        if g is not None and g.na is None:
            for family, value, k in ((gutil, g.util, 0.01), (gmem, g.mem_used, 1), (gpow, g.power_w, 1), (gtemp, g.temp_c, 1)):
                if value is not None:
                    family.add_metric(lv, value * k)
            for reason in g.throttle or ():
                gthr.add_metric([*lv, reason], 1.0)
        t = r.throughput
        if t is not None:
            for family, value, k in ((samples, t.samples_per_s, 1), (tokens, t.tokens_per_s, 1), (flops, t.tflops, 1e12), (mfu, t.mfu, 1)):
                if value is not None:
                    family.add_metric(lv, value * k)

    jl = [job]

    def job_gauge(name: str, doc: str, value: float | None) -> Any:
        family = G(f"{PREFIX}_job_{name}", doc, labels=["job"])
        if value is not None:
            family.add_metric(jl, value)
        return family

    statuses = [r.status for r in snap.ranks]
    tp = snap.throughput
    answer = verdict.verdict(snap)
    kind = G(
        f"{PREFIX}_job_verdict",
        "1 for the verdict's kind (stalled, silent, slow_link, slow_node, slow_rank, warming_up, healthy, waiting).",
        labels=["job", "kind"],
    )
    for verdict_kind in verdict.KINDS:
        kind.add_metric([job, verdict_kind], 1.0 if answer.kind == verdict_kind else 0.0)
    top = G(
        f"{PREFIX}_job_top_straggler_excess_seconds",
        "The verdict's culprit: its time per step beyond the median rank.",
        labels=["job", "rank", "host", "phase"],
    )
    if answer.ranks and answer.excess_s is not None:
        row = snap.row(answer.ranks[0])
        top.add_metric([job, str(answer.ranks[0]), row.host if row else "", answer.phase or ""], answer.excess_s)
    restarts = core.CounterMetricFamily(f"{PREFIX}_job_restarts", "Times the job's ranks came back as new processes.", labels=["job"])
    restarts.add_metric(jl, snap.restarts)
    job_families = [
        job_gauge("up", "1 while the job runs, 0 before it started and once every rank ended.", 1.0 if snap.state == RUNNING else 0.0),
        job_gauge("ended_timestamp_seconds", "When every rank of the job had ended cleanly (unix time).", snap.ended_at),
        job_gauge("restarted_timestamp_seconds", "When the job's ranks last came back as new processes (unix time).", snap.restarted_at),
        job_gauge("ranks_not_back", "Ranks not back as new processes since the latest restart.", len(snap.not_back)),
        restarts,
        kind,
        top,
        job_gauge("steps_per_second", "Median over ranks of steps per second.", snap.steps_per_s),
        job_gauge("step", "The furthest step any rank completed.", snap.global_step),
        job_gauge("world_size", "Ranks in the job, as the ranks report it.", snap.world_size),
        job_gauge("ranks_connected", "Ranks heard from recently.", snap.connected),
        job_gauge("slow_ranks", "Ranks persistently slower than the median rank.", statuses.count("slow")),
        job_gauge("stalled_ranks", "Ranks that finished no step for much longer than usual.", statuses.count("stalled")),
        job_gauge("silent_ranks", "Ranks not heard from for a while.", statuses.count("silent")),
        job_gauge("samples_per_second", "Samples per second, all ranks.", tp.samples_per_s if tp else None),
        job_gauge("tokens_per_second", "Tokens per second, all ranks.", tp.tokens_per_s if tp else None),
        job_gauge(
            "model_flops_per_second", "Achieved model FLOP/s, all ranks.", tp.tflops * 1e12 if tp and tp.tflops is not None else None
        ),
        job_gauge("mfu_ratio", "The job's model FLOPs utilisation.", tp.mfu if tp else None),
        job_gauge("dropped_messages", "Malformed or foreign frames the viewer threw away.", snap.dropped_messages),
        job_gauge(
            "device_time_ranks",
            "Ranks whose step and phase times are GPU time (CUDA events); the others' are CPU wall time.",
            len(snap.device_time_ranks),
        ),
    ]
    rank_families = [
        coords,
        step,
        phase,
        score,
        excess,
        status,
        culprit,
        cause,
        comm,
        last_step,
        last_seen,
        stalled,
        rss,
        alloc,
        resv,
        peak,
        creep,
        gutil,
        gmem,
        gpow,
        gtemp,
        gthr,
        samples,
        tokens,
        flops,
        mfu,
    ]
    return job_families + rank_families


def serve(source: SnapshotSource, host: str, port: int) -> Any:
    """Serve /metrics for ``source`` on host:port (a thread of prometheus_client's); returns the server."""
    core = _client()
    from prometheus_client import start_http_server

    registry = core.CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source))
    result = start_http_server(port, addr=host, registry=registry)
    return result[0] if isinstance(result, tuple) else result
