"""The memory/throughput and GPU panes render hand-built snapshots; `m` and `g` toggle them."""

import dataclasses

from test_app_render import drive, eight_ranks, job_snapshot, rank_row, text_of

from ranktop.tui import bindings
from ranktop.watch.model.rank_row import GpuStat, MemoryStat, Throughput
from ranktop.tui.panes import StragglerTable
from ranktop.tui.panes.gpus import GpuPanel
from ranktop.tui.panes.memory import MemoryPanel, sparkline

GB = 2**30


def cuda_memory(rank, *, creep=False):
    return MemoryStat(
        rss_bytes=3 * GB, cuda_device=rank % 8, allocated=(40 + rank) * GB, reserved=(48 + rank) * GB, peak=60 * GB,
        capacity=80 * GB, fragmentation=0.15, alloc_retries=0, ooms=0, tracked="cuda",
        history_mb=[40000 + i * (50 if creep else 0) for i in range(40)], creep=creep,
        creep_mb_per_min=300.0 if creep else 0.4,
    )  # fmt: skip


def h100(rank, **changes):
    gauges = dict(
        name="NVIDIA H100 80GB HBM3", bus=f"00000000:{rank + 16:02X}:00.0", util=96, mem_util=40, mem_used=70 * GB,
        mem_total=80 * GB, power_w=640, power_limit_w=700, temp_c=70, sm_mhz=1980, sm_max_mhz=1980, throttle=[],
        pcie_tx=1e9, pcie_rx=2e8, util_history=[95, 96, 97],
    )  # fmt: skip
    gauges.update(changes)
    return GpuStat(**gauges)


def gpu_job():
    """Eight H100 ranks: rank 3 leaks, rank 5 is thermally throttled, rank 6's NVML reads nothing."""
    base = eight_ranks()
    rows = []
    for r in base.ranks:
        gpu = h100(r.rank)
        if r.rank == 5:
            gpu = h100(5, temp_c=89, sm_mhz=1410, throttle=["thermal"])
        if r.rank == 6:
            gpu = GpuStat(name="NVIDIA H100 80GB HBM3")
        rate = Throughput(samples_per_s=76.0, tokens_per_s=155648.0, tflops=380.0, mfu=0.384, peak_tflops=989.4)
        rows.append(dataclasses.replace(r, memory=cuda_memory(r.rank, creep=r.rank == 3), throughput=rate, gpu=gpu))
    job = Throughput(samples_per_s=608.0, tokens_per_s=1245184.0, tflops=3040.0, mfu=0.384, peak_tflops=7915.2)
    return dataclasses.replace(base, ranks=rows, throughput=job)


def cpu_job():
    """Three CPU ranks on host vm: RSS only, no GPU, no peak FLOP/s."""
    rows = []
    for n in range(3):
        mem = MemoryStat(rss_bytes=(350 + 100 * (n == 1)) * 2**20, history_mb=[350.0] * 30, creep_mb_per_min=0.1)
        rate = Throughput(samples_per_s=370.0, tokens_per_s=23680.0, tflops=0.0186, mfu=None)
        gpu = GpuStat(na="no NVML binding (pip install 'ranktop[gpu]')")
        rows.append(dataclasses.replace(rank_row(n, host="vm"), memory=mem, throughput=rate, gpu=gpu))
    job = Throughput(samples_per_s=1110.0, tokens_per_s=71040.0, tflops=0.0558, mfu=None)
    return job_snapshot(rows, throughput=job)


def line_of(text, rank, prefix=""):
    return next(line for line in text.splitlines() if line.split()[:1] == [f"{prefix}{rank}"])


def test_the_memory_pane_shows_each_ranks_memory_against_capacity_and_flags_creep():
    async def scenario(app, pilot):
        pane = text_of(app.query_one(MemoryPanel))
        assert "CUDA allocated vs device memory" in app.query_one(MemoryPanel).border_title
        assert "memory creep on rank 3 (+300 MB/min)" in pane
        assert "608 samples/s" in pane and "1.25M tokens/s" in pane and "3,040 TFLOP/s" in pane and "MFU 38.4%" in pane
        leaking = line_of(pane, 3)
        assert "43.0 GB" in leaking and "creep +300MB/m" in leaking and "38.4%" in leaking
        assert "█" in line_of(pane, 0) and "creep" not in line_of(pane, 0)
        assert sparkline(cuda_memory(3, creep=True).history_mb, 24) in leaking  # the climb, drawn

    drive(gpu_job(), scenario, size=(160, 60))


def test_a_cpu_job_shows_rss_throughput_mfu_unknown_and_one_line_saying_there_is_no_gpu():
    async def scenario(app, pilot):
        pane = text_of(app.query_one(MemoryPanel))
        assert "process RSS" in app.query_one(MemoryPanel).border_title
        assert "MFU unknown" in pane and "0.0558 TFLOP/s" in pane and "1.11k samples/s" in pane
        assert all(f"{n} vm" in " ".join(line_of(pane, n).split()[:2]) for n in range(3))
        assert "450 MB" in line_of(pane, 1) and "unknown" in line_of(pane, 0)
        gpus = text_of(app.query_one(GpuPanel)).splitlines()
        assert [line.strip(" │") for line in gpus if "GPU" in line and "─" not in line] == [
            "no NVIDIA GPU on host vm (no NVML binding (pip install 'ranktop[gpu]'))"
        ]

    drive(cpu_job(), scenario, size=(120, 40))


def test_gpu_gauges_grouped_by_host_with_throttling_flagged_and_na_for_unread_gauges():
    async def scenario(app, pilot):
        pane = text_of(app.query_one(GpuPanel))
        assert "node-00  1 throttled" in pane
        hot = line_of(pane, 5, "r")
        assert "⚠ thermal" in hot and "89°C" in hot and "1410/1980 MHz" in hot
        ok = line_of(pane, 0, "r")
        assert "96%" in ok and "70/80 GB" in ok and "640/700 W" in ok and "⚠" not in ok
        blind = line_of(pane, 6, "r")
        assert blind.count("N/A") >= 5 and "throttle N/A" in blind

    drive(gpu_job(), scenario, size=(160, 60))


def test_selecting_a_rank_in_the_straggler_table_highlights_its_gpu():
    async def scenario(app, pilot):
        table = app.query_one(StragglerTable)
        table.focus()
        await pilot.pause()
        table.move_cursor(row=table.get_row_index("4"))
        app.poll()
        await pilot.pause()
        panel = app.query_one(GpuPanel)
        reversed_ = {}  # the rank's segment of each GPU line: is it drawn reversed?
        for strip in panel.render_lines(panel.region.reset_offset):
            seg = next((seg for seg in strip if seg.text.strip().startswith("r")), None)
            if seg is not None:
                reversed_[seg.text.split()[0]] = bool(seg.style.reverse)
        assert len(reversed_) == 8 and [r for r, rev in reversed_.items() if rev] == ["r4"]

    drive(gpu_job(), scenario, size=(160, 60))


def test_m_and_g_toggle_the_panes_and_are_in_the_bindings_table():
    assert {"memory", "gpus"} <= {b.id for b in bindings.KEYS}
    assert {b.key for b in bindings.KEYS if b.id in ("memory", "gpus")} == {"m", "g"}

    async def scenario(app, pilot):
        memory, gpus = app.query_one(MemoryPanel), app.query_one(GpuPanel)
        assert memory.display and gpus.display
        await pilot.press("m")
        assert not memory.display and gpus.display
        await pilot.press("g")
        assert not gpus.display and not app.query_one("#resources").display
        await pilot.press("m", "g")
        assert memory.display and gpus.display

    drive(gpu_job(), scenario, size=(120, 40))


def test_a_job_without_memory_reports_shows_neither_pane_and_small_terminals_keep_the_main_panes():
    async def scenario(app, pilot):
        assert not app.query_one("#resources").display

    drive(eight_ranks(), scenario)

    async def small(app, pilot):
        for selector in ("#header", "#breakdown", "#stragglers", "#status", "Footer", "#memory"):
            assert app.query_one(selector).region.height > 0, selector

    drive(gpu_job(), small, size=(80, 24))
