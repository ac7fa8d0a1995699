"""NVML gauges of this rank's GPU, sampled about once a second on a thread of their own.

Who samples: each rank samples its *own* device, not the node's relay host all
of the node's GPUs. Reasons:

- the mapping is exact by construction: the rank knows its CUDA device, and
  finds the same GPU in NVML by PCI bus id (or UUID), whatever
  ``CUDA_VISIBLE_DEVICES`` or the container shows each process. The relay host
  would need every rank's bus id first, and may not even see the other ranks'
  GPUs when each process is given only its own;
- the gauges travel in the rank's own telemetry (``state["gpu"]``), so no new
  message, no cross-process state, and a TUI attaching late has them at once;
- the cost is an NVML round of ~15 calls per second per rank (about a
  millisecond), on a daemon thread, which is nothing next to a training step.

The price: a GPU that no rank uses is not shown. NVML calls are slow and
jittery (milliseconds, sometimes far more under a busy driver), so they never
run on the training thread nor on the sender thread: this thread stores its
latest sample and the sender picks it up.

Every NVML call is guarded: a function missing from the installed binding or
driver, or an ``NVMLError``, gives None (shown as "N/A"), never a fault. No
binding (``pip install 'ranktop[gpu]'``), no driver, no GPU, or a rank that uses
no GPU: the sample is ``Gpu(na=why)`` and the thread ends.

Sample keys (all optional but ``seq`` and ``t``): ``name``, ``bus``, ``util``
(NVML's "GPU utilization": the % of time a kernel was running, *not* the share
of SMs busy), ``mem_util`` (memory controller %), ``mem_used`` / ``mem_total``
(bytes; NVML's v2 memory info where the binding has it, which, like nvidia-smi,
leaves out the memory the driver reserves), ``power_w`` / ``power_limit_w``, ``temp_c``, ``sm_mhz`` /
``sm_max_mhz``, ``throttle`` (active reasons: ``power``, ``thermal``, ``hw``,
``sync_boost``, ``app_clocks``; [] when none, None when unknown), ``pcie_tx`` /
``pcie_rx`` (bytes/s; each read takes NVML about 20 ms, so they are taken every
:data:`PCIE_EVERY` samples and the last values repeated between).

For the cause of a slow rank (watch/analysis/causes.py ``gpu_throttle``) one clock sample says little: a GPU's
clock moves with its load from one second to the next. So the sampler also sends, over its last
:data:`WINDOW_S` seconds: ``sm_avg`` (the mean of its SM clock samples), and ``held_power`` / ``held_thermal``
(the share of that time the GPU's clocks were held down by its power cap or brake, by a thermal slowdown or the
board's): from NVML's violation counters (``nvmlDeviceGetViolationStatus``: nanoseconds of each policy's
violation, running totals) where the driver keeps them, else the share of the window's samples whose throttle
reasons said so.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from typing import Any, Callable

from ranktop.transport import background
from ranktop.wire.messages import Gpu

INTERVAL_S = 1.0
#: The PCIe throughput reads (about 20 ms each: NVML samples the counter over a window) every this many samples.
PCIE_EVERY = 10

#: NVML's clock event (throttle) reason bits, by the short name shown. "Idle" is not a slowdown.
THROTTLE_BITS = (
    (0x4, "power"),  # SW power cap
    (0x80, "power"),  # HW power brake
    (0x20, "thermal"),  # SW thermal slowdown
    (0x40, "thermal"),  # HW thermal slowdown
    (0x8, "hw"),  # HW slowdown (thermal or power, from the board)
    (0x10, "sync_boost"),
    (0x2, "app_clocks"),
)


#: The window the clock's mean and the throttled shares are over (as the rank's evidence: probe/evidence.py).
WINDOW_S = 10.0
#: NVML's performance policies whose violation time is read (``nvmlPerfPolicyType_t``), by the share's key.
VIOLATIONS = (("held_power", "NVML_PERF_POLICY_POWER", 0), ("held_thermal", "NVML_PERF_POLICY_THERMAL", 1))
#: The throttle reasons that count for each share where the counters are not read.
HELD_BY = {"held_power": ("power",), "held_thermal": ("thermal", "hw")}


def throttle_names(mask: int) -> list[str]:
    names: list[str] = []
    for bit, name in THROTTLE_BITS:
        if mask & bit and name not in names:
            names.append(name)
    return names


def _text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class GpuSampler(threading.Thread):
    """Samples one GPU at ``interval_s``; ``latest`` is what the sender sends.

    ``locate`` returns how to find the rank's GPU in NVML: ``{"bus": "0000:3b:00.0"}``,
    ``{"uuid": "GPU-..."}`` or ``{"index": n}``, or ``{"na": why}`` / None when the rank uses
    no GPU (yet: it is asked again until it names one). ``nvml`` is the pynvml module
    (imported on this thread when not given; tests hand in a fake).
    """

    def __init__(
        self,
        locate: Callable[[], dict[str, Any] | None],
        *,
        nvml: Any = None,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ):
        super().__init__(name="ranktop-gpu", daemon=True)
        self.latest: Gpu | None = None
        self._locate = locate
        self._nvml = nvml
        self._interval = interval_s
        self._clock = clock
        self._stop_event = threading.Event()
        self._handle: Any = None
        self._seq = 0
        self._initialised = False  # nvmlInit succeeded: nvmlShutdown is owed, whatever happens next
        self._pcie: tuple[Any, Any] = (None, None)  # the last PCIe reads, tx and rx (bytes/s)
        self._recent: collections.deque[tuple[float, Any, list[str] | None]] = collections.deque()  # (t, sm MHz, reasons)
        self._violations: dict[str, collections.deque[tuple[float, float]]] = {}  # key -> (reference µs, violation ns)

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        try:
            background.name_thread(self.name)
            if not self.open():
                return
            while not self._stop_event.is_set():
                self.sample()
                self._stop_event.wait(self._interval)
        except Exception as exc:  # never a fault of the probe: the panel says what happened
            self.latest = Gpu(na=f"GPU sampling stopped: {exc.__class__.__name__}: {exc}")
        finally:
            self.close()

    # -- one step at a time (the tests drive these directly) -------------------

    def open(self) -> bool:
        """Load NVML and find the rank's GPU; False (with ``latest`` saying why) if there is none."""
        if self._nvml is None:
            try:
                import pynvml  # type: ignore[import-not-found, import-untyped, unused-ignore]  # nvidia-ml-py, the 'gpu' extra
            except Exception:
                self.latest = Gpu(na="no NVML binding (pip install 'ranktop[gpu]')")
                return False
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            self.latest = Gpu(na=f"no NVIDIA driver ({_reason(exc)})")
            return False
        self._initialised = True
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception:
            count = None
        if count == 0:
            self.latest = Gpu(na="no NVIDIA GPU")
            return False
        while not self._stop_event.is_set():
            where = self._locate() or {"na": "rank uses no GPU"}
            if "na" not in where:
                break
            self.latest = Gpu(na=where["na"])
            self._stop_event.wait(self._interval)  # CUDA may not be initialised yet
        else:
            return False
        self._handle = self._find(where)
        if self._handle is None:
            self.latest = Gpu(na=f"GPU {where} not found by NVML")
            return False
        return True

    def _find(self, where: dict[str, Any]) -> Any:
        nvml = self._nvml
        if "bus" in where:
            handle = self._call("nvmlDeviceGetHandleByPciBusId", where["bus"])
            if handle is not None:
                return handle
        if "uuid" in where:
            handle = self._call("nvmlDeviceGetHandleByUUID", where["uuid"])
            if handle is not None:
                return handle
        if "index" in where:
            return self._call("nvmlDeviceGetHandleByIndex", where["index"])
        return None if nvml is None else None

    def close(self) -> None:
        if self._initialised:
            self._call("nvmlShutdown")
            self._initialised = False
        self._handle = None

    def sample(self) -> Gpu:
        """One round of NVML reads; a missing function or an NVMLError leaves that gauge None."""
        h = self._handle
        call = self._call
        self._seq += 1
        pci = call("nvmlDeviceGetPciInfo", h)
        util = call("nvmlDeviceGetUtilizationRates", h)
        v2 = getattr(self._nvml, "nvmlMemory_v2", None)
        mem = call("nvmlDeviceGetMemoryInfo", h, v2) if v2 is not None else None
        if mem is None:
            mem = call("nvmlDeviceGetMemoryInfo", h)  # v1: counts the driver's reserve as used
        power = call("nvmlDeviceGetPowerUsage", h)  # milliwatts
        limit = call("nvmlDeviceGetEnforcedPowerLimit", h)
        if limit is None:
            limit = call("nvmlDeviceGetPowerManagementLimit", h)
        sm = getattr(self._nvml, "NVML_CLOCK_SM", 1)
        reasons = call("nvmlDeviceGetCurrentClocksEventReasons", h)  # the newer name
        if reasons is None:
            reasons = call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        if self._seq % PCIE_EVERY == 1 or PCIE_EVERY <= 1:
            tx, rx = (
                call("nvmlDeviceGetPcieThroughput", h, getattr(self._nvml, counter, default))
                for counter, default in (("NVML_PCIE_UTIL_TX_BYTES", 0), ("NVML_PCIE_UTIL_RX_BYTES", 1))
            )
            self._pcie = (tx * 1024 if tx is not None else None, rx * 1024 if rx is not None else None)
        t = self._clock()
        sm_mhz = call("nvmlDeviceGetClockInfo", h, sm)
        throttle = throttle_names(int(reasons)) if reasons is not None else None
        out = Gpu(
            seq=self._seq,
            t=t,
            name=_text(call("nvmlDeviceGetName", h)),
            bus=_text(getattr(pci, "busId", None)) if pci is not None else None,
            util=getattr(util, "gpu", None),
            mem_util=getattr(util, "memory", None),
            mem_used=getattr(mem, "used", None),
            mem_total=getattr(mem, "total", None),
            power_w=power / 1000.0 if power is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
            temp_c=call("nvmlDeviceGetTemperature", h, getattr(self._nvml, "NVML_TEMPERATURE_GPU", 0)),
            sm_mhz=sm_mhz,
            sm_max_mhz=call("nvmlDeviceGetMaxClockInfo", h, sm),
            throttle=throttle,
            pcie_tx=self._pcie[0],
            pcie_rx=self._pcie[1],
            **self._windowed(t, sm_mhz, throttle),
        )
        self.latest = out
        return out

    def _windowed(self, now: float, sm_mhz: Any, reasons: list[str] | None) -> dict[str, Any]:
        """``sm_avg``, ``held_power`` and ``held_thermal`` over the last :data:`WINDOW_S` (None: not known)."""
        recent = self._recent
        recent.append((now, sm_mhz, reasons))
        while recent and now - recent[0][0] > WINDOW_S:
            recent.popleft()
        clocks = [c for _, c, _ in recent if isinstance(c, (int, float))]
        out: dict[str, Any] = {"sm_avg": sum(clocks) / len(clocks) if clocks else None}
        said = [r for _, _, r in recent if r is not None]
        for key, policy, number in VIOLATIONS:
            kept, counted = self._violation(key, getattr(self._nvml, policy, number))
            if kept:  # (the driver's counters, once it keeps them: none until two readings)
                out[key] = counted
            elif said:
                out[key] = sum(any(name in r for name in HELD_BY[key]) for r in said) / len(said)
            else:
                out[key] = None
        return out

    def _violation(self, key: str, policy: int) -> tuple[bool, float | None]:
        """(whether the driver keeps the counters, the share of the window policy ``policy`` held the clocks
        down), from NVML's running totals (its reference time in µs, its violation time in ns); the share is None
        while the window holds one reading."""
        status = self._call("nvmlDeviceGetViolationStatus", self._handle, policy)
        reference, violation = getattr(status, "referenceTime", None), getattr(status, "violationTime", None)
        if not isinstance(reference, int) or not isinstance(violation, int):
            return False, None
        readings = self._violations.setdefault(key, collections.deque())
        if readings and reference < readings[-1][0]:  # (the counters restarted: a driver reload)
            readings.clear()
        readings.append((reference, violation))
        while len(readings) > 2 and reference - readings[1][0] >= WINDOW_S * 1e6:
            readings.popleft()
        span_us = reference - readings[0][0]
        if span_us <= 0:
            return True, None
        return True, min(1.0, max(0.0, (violation - readings[0][1]) / (span_us * 1000.0)))

    def _call(self, name: str, *args: Any) -> Any:
        """One guarded NVML call: None if the binding lacks the function or NVML says no."""
        func = getattr(self._nvml, name, None)
        if func is None:
            return None
        try:
            return func(*args)
        except Exception:  # pynvml.NVMLError and its many subclasses, or a ctypes surprise
            return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text and text[0] else exc.__class__.__name__


def locate_rank_gpu(local_rank: int, memory_device: Callable[[], int | None]) -> dict[str, Any] | None:
    """How NVML finds this rank's GPU: PCI bus id (or UUID) of the CUDA device the training uses.

    ``memory_device`` gives the device index the memory sampler settled on. None
    until the script has initialised CUDA; ``{"na": ...}`` for a rank that runs on CPU.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None  # asking is_available() here would touch the driver from this thread: wait instead
        device = memory_device()
        if device is None:
            return None
        props = torch.cuda.get_device_properties(device)
        where: dict[str, Any] = {}
        mig = "MIG" in str(getattr(props, "name", ""))  # a MIG slice: its bus id is its parent GPU's
        if hasattr(props, "pci_bus_id") and not mig:
            where["bus"] = f"{getattr(props, 'pci_domain_id', 0):08X}:{props.pci_bus_id:02X}:{getattr(props, 'pci_device_id', 0):02X}.0"
        uuid = getattr(props, "uuid", None)
        if uuid is not None:
            text = str(uuid)
            where["uuid"] = text if text.startswith(("GPU-", "MIG-")) else f"{'MIG' if mig else 'GPU'}-{text}"
        if mig:
            return where
        # NVML numbers GPUs in PCI bus order; CUDA does so only with CUDA_DEVICE_ORDER=PCI_BUS_ID (its default
        # is fastest first), so the index is a fallback only then, or with a single GPU.
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = [v.strip() for v in visible.split(",")] if visible else []
        if os.environ.get("CUDA_DEVICE_ORDER", "") == "PCI_BUS_ID" or torch.cuda.device_count() == 1:
            if not ids:
                where["index"] = device
            elif device < len(ids) and ids[device].isdigit():
                where["index"] = int(ids[device])
        return where
    except Exception as exc:
        return {"na": f"cannot identify the rank's GPU ({exc.__class__.__name__})"}
