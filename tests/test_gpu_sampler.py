"""The NVML sampler's logic against a fake pynvml module (there is no GPU here): gauges, N/A, no GPU."""

import sys
import types

import msgspec
import pytest

from fake_cuda import fake_nvml
from ranktop.probe.gpu_sampler import GpuSampler, throttle_names


def sampler(nvml, where=None):
    return GpuSampler(lambda: where or {"bus": "00000000:3B:00.0", "index": 0}, nvml=nvml, clock=lambda: 123.0)


def test_every_gauge_is_read_and_the_gpu_is_found_by_its_bus_id():
    s = sampler(fake_nvml())
    assert s.open()
    out = s.sample()
    assert msgspec.to_builtins(out) == {
        "seq": 1, "t": 123.0, "name": "NVIDIA H100 80GB HBM3", "bus": "00000000:3B:00.0", "util": 97, "mem_util": 41,
        "mem_used": 70 << 30, "mem_total": 80 << 30, "power_w": 650.0, "power_limit_w": 700.0, "temp_c": 84,
        "sm_mhz": 1500, "sm_max_mhz": 1980, "throttle": ["thermal"], "pcie_tx": 1000 * 1024, "pcie_rx": 2000 * 1024,
        "sm_avg": 1500.0, "held_power": 0.0, "held_thermal": 1.0,  # (a driver without violation counters: its samples' reasons)
    }  # fmt: skip
    assert s.latest is out and s.sample()["seq"] == 2


def test_missing_functions_and_nvml_errors_give_none_never_a_crash():
    nvml = fake_nvml(
        missing=("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetEnforcedPowerLimit"),
        failing=("nvmlDeviceGetTemperature", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetName"),
    )
    s = sampler(nvml)
    assert s.open()
    out = s.sample()
    assert out["temp_c"] is None and out["util"] is None and out["mem_util"] is None and out["name"] is None
    assert out["pcie_tx"] is None and out["pcie_rx"] is None
    assert out["throttle"] == ["power"]  # the older function name, still there
    assert out["power_limit_w"] == 690.0  # fell back to the management limit
    assert out["mem_used"] == 70 << 30


def test_every_gauge_failing_still_samples():
    names = [n for n in vars(fake_nvml()) if n.startswith("nvmlDeviceGet") and "Handle" not in n and n != "nvmlDeviceGetCount"]
    s = sampler(fake_nvml(failing=names))
    assert s.open()
    out = s.sample()
    assert out["seq"] == 1 and all(out[k] is None for k in out if k not in ("seq", "t"))


def test_no_driver_no_gpu_no_binding_and_a_cpu_rank_say_why_in_one_line():
    s = sampler(fake_nvml(init_error="NVML Shared Library Not Found"))
    assert not s.open() and msgspec.to_builtins(s.latest) == {"na": "no NVIDIA driver (NVML Shared Library Not Found)"}
    s = sampler(fake_nvml(count=0))
    assert not s.open() and msgspec.to_builtins(s.latest) == {"na": "no NVIDIA GPU"}
    asked = []

    def cpu_rank():  # asked again each interval (CUDA may come up later), until the sampler stops
        asked.append(1)
        if len(asked) == 3:
            s.stop()
        return {"na": "rank uses no GPU"}

    s = GpuSampler(cpu_rank, nvml=fake_nvml(), interval_s=0.01)
    assert not s.open() and msgspec.to_builtins(s.latest) == {"na": "rank uses no GPU"} and len(asked) == 3
    s = sampler(fake_nvml(), where={"bus": "00000000:AA:00.0"})
    assert not s.open() and "not found by NVML" in s.latest["na"]


def test_without_pynvml_installed_the_thread_reports_it_and_ends():
    s = GpuSampler(lambda: {"index": 0}, interval_s=0.01)  # pynvml is not installed in the test environment
    s.start()
    s.join(5)
    assert not s.is_alive() and "no NVML binding" in s.latest["na"]


def test_the_thread_samples_until_stopped_and_shuts_nvml_down():
    nvml = fake_nvml()
    s = GpuSampler(lambda: {"index": 0}, nvml=nvml, interval_s=0.01)
    s.start()
    for _ in range(200):
        if s.latest and s.latest.get("seq", 0) >= 3:
            break
        s.join(0.01)
    s.stop()
    s.join(5)
    assert s.latest["seq"] >= 3 and nvml.calls[-1] == "nvmlShutdown"


def test_throttle_reasons_by_name_idle_is_not_one():
    assert throttle_names(0x1) == []
    assert throttle_names(0x4 | 0x80 | 0x40) == ["power", "thermal"]
    assert throttle_names(0x8 | 0x10) == ["hw", "sync_boost"]


# -- issue 22: what NVML reports, read right --------------------------------------------------------------


def test_memory_used_is_nvmls_v2_figure_as_nvidia_smi_shows_it():
    s = sampler(fake_nvml())
    assert s.open()
    assert s.sample()["mem_used"] == 70 << 30  # v1 would count the driver's 512 MiB reserve as used
    old = fake_nvml()
    del old.nvmlMemory_v2  # a binding older than v2: its figure, reserve included
    s = sampler(old)
    assert s.open() and s.sample()["mem_used"] == (70 << 30) + (512 << 20)


def test_a_mig_slice_is_sampled_through_its_own_uuid_with_its_own_memory(monkeypatch):
    """The rank runs on a MIG slice: located by its MIG UUID (its bus id is the parent GPU's), opened by UUID,
    and its memory is the slice's, not the whole GPU's."""
    from fake_cuda import MIG_UUID

    where = _locate(monkeypatch, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", {})
    assert where == {"uuid": MIG_UUID}
    s = sampler(fake_nvml(), where=where)
    assert s.open()
    out = s.sample()
    assert (out["mem_used"], out["mem_total"]) == (3 << 30, 10 << 30)


def test_the_slow_pcie_reads_are_taken_once_every_ten_samples_and_repeated_between():
    nvml = fake_nvml()
    s = sampler(nvml)
    assert s.open()
    samples = [s.sample() for _ in range(20)]
    assert nvml.calls.count("nvmlDeviceGetPcieThroughput") == 2 * 2
    assert all(x["pcie_tx"] == 1000 * 1024 and x["pcie_rx"] == 2000 * 1024 for x in samples)


def test_nvml_is_shut_down_when_the_gpu_is_not_found_after_init():
    nvml = fake_nvml()
    s = sampler(nvml, where={"bus": "00000000:99:00.0"})  # a bus NVML does not know
    assert not s.open()
    s.close()
    assert "nvmlShutdown" in nvml.calls


def _locate(monkeypatch, name, env):
    from ranktop.probe import gpu_sampler
    from fake_cuda import FakeCuda

    cuda = FakeCuda(devices=2, name=name)
    cuda.set_device(1)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    for key in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return gpu_sampler.locate_rank_gpu(0, lambda: 1)


def test_a_mig_slice_is_found_by_its_mig_uuid_not_its_parents_bus(monkeypatch):
    where = _locate(monkeypatch, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", {})
    assert where == {"uuid": "MIG-00000001-aaaa-bbbb-cccc-dddddddddddd"}


def test_the_index_fallback_is_given_only_when_cuda_numbers_gpus_as_nvml_does(monkeypatch):
    where = _locate(monkeypatch, "NVIDIA H100 80GB HBM3", {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert "index" not in where and where["uuid"].startswith("GPU-")  # CUDA's default order: fastest first
    where = _locate(monkeypatch, "NVIDIA H100 80GB HBM3", {"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert where["index"] == 3


def test_the_clock_is_averaged_over_the_window_and_the_time_held_down_comes_from_nvml_s_violation_counters():
    from ranktop.probe import gpu_sampler

    now = [1000.0]
    clocks = [1980, 1200, 1980, 1200] + [1200] * 30
    s = GpuSampler(lambda: {"index": 0}, nvml=fake_nvml(clocks=clocks, held={0: 0.6}, now=lambda: now[0]),
                   clock=lambda: now[0])  # fmt: skip
    assert s.open()
    first = s.sample()
    assert first["sm_avg"] == 1980.0 and first["held_power"] is None  # one reading of the counters: no share yet
    assert first["held_thermal"] is None  # (nor from its reasons, thermal: the counters, once kept, say it)
    for _ in range(3):
        now[0] += 1.0
        out = s.sample()
    assert out["sm_mhz"] == 1200 and out["sm_avg"] == pytest.approx(1590.0)  # the window's four samples
    assert out["held_power"] == pytest.approx(0.6) and out["held_thermal"] == pytest.approx(0.0)
    for _ in range(int(gpu_sampler.WINDOW_S) + 2):  # the early samples leave the window
        now[0] += 1.0
        out = s.sample()
    assert out["sm_avg"] == pytest.approx(1200.0)


def test_without_violation_counters_the_share_held_down_is_the_share_of_samples_whose_reasons_say_so():
    reasons = iter([0x4, 0x0, 0x4, 0x0])
    nvml = fake_nvml(missing=("nvmlDeviceGetViolationStatus",))
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: next(reasons)
    now = [0.0]
    s = GpuSampler(lambda: {"index": 0}, nvml=nvml, clock=lambda: now[0])
    assert s.open()
    for _ in range(4):
        out = s.sample()
        now[0] += 1.0
    assert out["held_power"] == pytest.approx(0.5) and out["held_thermal"] == 0.0
