"""The Prometheus metrics of one Snapshot: names, units and labels, as prometheus_client writes and parses them.

The snapshot is built by hand with the GPU gauges, CUDA memory and throughput
a GPU job reports (this machine has no GPU); the live scrape of a real job is
in test_flight_recorder_live.py.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ranktop.watch.offline.prometheus import SnapshotCollector
from ranktop.watch.model.rank_row import GpuStat, MemoryStat, RankRow, Throughput
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.statuses import OK, SLOW

UNITS = ("_seconds", "_bytes", "_ratio", "_watts", "_celsius", "_per_second", "_bytes_per_second")
COUNTS = (
    "ranktop_rank_coordinates",
    "ranktop_rank_status",
    "ranktop_rank_slow_phase",
    "ranktop_rank_cause",
    "ranktop_rank_gpu_throttle",
    "ranktop_rank_last_step",
    "ranktop_job_step",
    "ranktop_job_world_size",
    "ranktop_job_ranks_connected",
    "ranktop_job_slow_ranks",
    "ranktop_job_stalled_ranks",
    "ranktop_job_silent_ranks",
    "ranktop_job_dropped_messages",
    "ranktop_job_up",
    "ranktop_job_restarts",
    "ranktop_job_ranks_not_back",
    "ranktop_job_verdict",
    "ranktop_job_device_time_ranks",
)


def gpu_rank(rank: int, slow: bool = False) -> RankRow:
    return RankRow(
        rank=rank,
        host=f"gpu-{rank // 2}",
        local_rank=rank % 2,
        pid=100 + rank,
        step=41,
        steps_seen=42,
        step_s=0.5,
        phases={"forward": 0.3 if slow else 0.2, "backward": 0.25, "comm": 0.05},
        score=0.2 if slow else 0.0,
        excess_s=0.1 if slow else 0.0,
        culprit_phase="forward" if slow else None,
        status=SLOW if slow else OK,
        last_seen_s=0.2,
        dropped=0,
        collective_s=0.05,
        memory=MemoryStat(
            rss_bytes=3 << 30,
            cuda_device=rank % 2,
            allocated=40 << 30,
            reserved=50 << 30,
            peak=45 << 30,
            capacity=80 << 30,
            creep_mb_per_min=12.0,
        ),
        throughput=Throughput(samples_per_s=16.0, tokens_per_s=65536.0, tflops=400.0, mfu=0.4, peak_tflops=989.0),
        gpu=GpuStat(name="H100", util=97.0, mem_used=60 << 30, power_w=690.0, temp_c=81.0, throttle=["power"] if slow else []),
    )


def scrape(snap: Snapshot) -> dict:
    class Source:
        def snapshot(self):
            return snap

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(Source()))
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


def test_every_per_rank_series_has_the_four_labels_and_its_unit():
    snap = Snapshot(
        job="llm",
        world_size=2,
        elapsed_s=60,
        global_step=41,
        steps_per_s=2.0,
        phase_names=["forward", "backward", "comm"],
        ranks=[gpu_rank(0), gpu_rank(1, slow=True)],
        stragglers=[1, 0],
        throughput=Throughput(tflops=800.0, mfu=0.4),
    )
    families = scrape(snap)
    for name, family in families.items():
        assert name.endswith(UNITS) or name in COUNTS, name
        for sample in family.samples:
            if name.startswith("ranktop_rank_"):
                assert {"job", "rank", "local_rank", "host"} <= set(sample.labels), name
    value = {name: {tuple(sorted(s.labels.items())): s.value for s in f.samples} for name, f in families.items()}
    r1 = (("host", "gpu-0"), ("job", "llm"), ("local_rank", "1"), ("rank", "1"))
    assert value["ranktop_rank_step_seconds"][r1] == 0.5
    assert value["ranktop_rank_phase_seconds"][tuple(sorted(r1 + (("phase", "forward"),)))] == 0.3
    assert value["ranktop_rank_status"][tuple(sorted(r1 + (("status", "slow"),)))] == 1
    assert value["ranktop_rank_gpu_throttle"] == {tuple(sorted(r1 + (("reason", "power"),))): 1.0}
    assert value["ranktop_rank_gpu_utilization_ratio"][r1] == 0.97
    assert value["ranktop_rank_cuda_allocated_bytes"][r1] == 40 << 30
    assert value["ranktop_rank_model_flops_per_second"][r1] == 400e12
    assert value["ranktop_rank_mfu_ratio"][r1] == 0.4
    assert value["ranktop_job_slow_ranks"] == {(("job", "llm"),): 1.0}
    assert value["ranktop_job_model_flops_per_second"] == {(("job", "llm"),): 800e12}


def test_each_rank_s_place_in_the_parallel_layout_is_one_series_labelled_with_its_coordinates():
    import dataclasses

    ranks = [dataclasses.replace(gpu_rank(r), coords={"pp": r // 2, "tp": r % 2}) for r in range(4)]
    snap = Snapshot(
        job="llm",
        world_size=4,
        elapsed_s=60,
        global_step=41,
        steps_per_s=2.0,
        phase_names=["forward"],
        ranks=ranks,
        stragglers=[],
        layout_roles=["pp", "tp"],
    )
    samples = scrape(snap)["ranktop_rank_coordinates"].samples
    assert sorted((s.labels["rank"], s.labels["pp"], s.labels["tp"], s.value) for s in samples) == [
        ("0", "0", "0", 1.0),
        ("1", "0", "1", 1.0),
        ("2", "1", "0", 1.0),
        ("3", "1", "1", 1.0),
    ]
    assert scrape(dataclasses.replace(snap, layout_roles=[]))["ranktop_rank_coordinates"].samples == []  # no layout: no series


def test_a_slow_rank_s_causes_are_one_series_each_labelled_with_its_kind():
    import dataclasses

    from ranktop.watch.model.rank_row import Cause

    hot = Cause(kind="expert_load", text="it receives 3.1x the all-to-all rows of its peers, ... (expert load)",
                value=31_000.0, peers=10_000.0, ratio=3.1, extra_s=0.09)  # fmt: skip
    gc = Cause(kind="gc_pause", text="...", value=0.1, peers=0.01, ratio=10.0, extra_s=0.02)
    ranks = [gpu_rank(0), dataclasses.replace(gpu_rank(1, slow=True), causes=[hot, gc])]
    snap = Snapshot(job="moe", world_size=2, elapsed_s=60, global_step=41, steps_per_s=2.0, phase_names=["forward"],
                    ranks=ranks, stragglers=[1, 0])  # fmt: skip
    samples = scrape(snap)["ranktop_rank_cause"].samples
    assert sorted((s.labels["rank"], s.labels["kind"], s.value) for s in samples) == [("1", "expert_load", 1.0), ("1", "gc_pause", 1.0)]


def test_a_job_not_heard_yet_scrapes_empty_not_broken():
    from ranktop.watch.model.snapshot import EMPTY

    families = scrape(EMPTY)
    assert families["ranktop_job_ranks_connected"].samples[0].value == 0
    assert families["ranktop_rank_step_seconds"].samples == []


class Source:
    def __init__(self, snap):
        self.snap = snap

    def snapshot(self):
        return self.snap


def test_an_ended_job_serves_up_0_and_the_last_values_of_its_run():
    import dataclasses

    running = Snapshot(
        job="llm",
        world_size=2,
        elapsed_s=60,
        global_step=41,
        steps_per_s=2.0,
        phase_names=["forward"],
        ranks=[gpu_rank(0), gpu_rank(1, slow=True)],
        stragglers=[1, 0],
        state="running",
        restarts=1,
        restarted_at=1.7e9,
    )
    source = Source(running)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source))

    def read():
        text = generate_latest(registry).decode()
        return {
            s.name: s
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if not s.labels.get("rank") or s.labels["rank"] == "1"
        }

    up = read()
    assert up["ranktop_job_up"].value == 1 and up["ranktop_job_restarts_total"].value == 1
    silent = [dataclasses.replace(r, status="silent", score=0.0, step_s=None) for r in running.ranks]
    source.snap = dataclasses.replace(running, ranks=silent, state="ended", ended_at=1.7e9 + 60, steps_per_s=None)
    ended = read()
    assert ended["ranktop_job_up"].value == 0 and ended["ranktop_job_ended_timestamp_seconds"].value == 1.7e9 + 60
    assert ended["ranktop_rank_step_seconds"].value == 0.5 and ended["ranktop_rank_straggler_score_ratio"].value == 0.2
    assert ended["ranktop_job_steps_per_second"].value == 2.0
