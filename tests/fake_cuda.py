"""Thin fakes of CUDA and of an NCCL process group that keep the rules the real ones keep.

This machine has no GPU; ranktop's GPU code is fixed against these. Each rule
below is one that the real API keeps and that a CPU-only test would otherwise
not see:

- the device runs behind the host: work is queued on a stream and ends when the
  (fake) device clock gets there, which the test moves with :meth:`FakeCuda.run`;
- an event completes when its stream has done everything queued before it: in
  order per stream, not across streams; ``query()`` is True for an event never
  recorded; ``elapsed_time`` raises unless both events were recorded and have
  completed; the CUDA event behind a ``torch.cuda.Event`` is created at its first
  ``record()`` (lazily), which :attr:`FakeCuda.created` counts;
- during a graph capture in global mode, ``query()`` from any thread is an error
  that also invalidates the capture; recording a timing event on a capturing
  stream is an error too;
- ``torch.cuda`` is not initialised until the script uses it; ``current_device()``
  is per thread (a new thread starts on device 0);
- devices are separate: each has its own default stream, and each thread its
  current stream per device (``current_stream(device)``; ``stream(s)`` also
  makes ``s``'s device current, as ``torch.cuda.StreamContext`` does); an
  event belongs to the device of the stream it was first recorded on, and
  recording it on another device's stream raises (``CUDAEvent::record``:
  "Event device ... does not match recording stream's device");
- a CUDA call opens the (primary) context of the device it runs on, and
  :attr:`FakeCuda.contexts` keeps which: ``record`` and ``elapsed_time`` run
  on the event's device (they hold a device guard), ``query`` on the calling
  thread's current device (``cudaEventQuery`` has none: a new thread asking
  opens a context on device 0), ``is_current_stream_capturing`` on the current
  device, ``set_device`` and ``device(i)`` on ``i``;
- NVML (:func:`fake_nvml`): one H100 at bus 0000:3B:00.0, any function removable or raising NVMLError;
- NCCL: a collective queues its kernel on the group's own stream after the
  caller's current stream, returns at once, and its Work and future are complete
  at once (ProcessGroupNCCL marks them so at enqueue); ``Work.wait()`` makes the
  caller's current stream wait for the kernel; a future's callbacks run with the
  current stream set to one of the device's pool streams, made to wait for the
  kernel (as CUDAFuture does); the pool stream is shared, round-robin, with
  anyone else's work (:meth:`FakeCuda.pool_stream`);
- a collective issued with a side stream current (FSDP2's all-gather and
  reduce-scatter, ``async_op=False`` inside ``with stream(side)``) runs after
  that stream's work and makes only that stream wait; the compute stream waits
  for it when the script says so (``wait_stream``/``wait_event``);
- as torch/cuda/streams.py: ``Stream.wait_event(e)`` is ``e.wait(stream)``,
  ``Stream.record_event()`` is ``Event().record(stream)``, and
  ``wait_stream(other)`` is ``wait_event(other.record_event())``; each fake has
  an ``Event`` class of its own (the probe wraps ``record`` and ``wait``), so
  FSDP2's unshard event (recorded on its all-gather stream, waited for on the
  compute stream) goes through the same calls as on a GPU.

Nothing here sleeps: the device clock is a number the test moves.
"""

from __future__ import annotations

import contextlib
import threading
import types


class CaptureError(RuntimeError):
    pass


class FakeStream:
    def __init__(self, cuda: "FakeCuda | None" = None, name: str = "stream", device: int | None = None):
        cuda = cuda or FakeCuda.active  # torch.cuda.Stream(device=...) as the probe calls it
        self.cuda = cuda
        self.name = name
        self.device = cuda.current_device() if device is None else int(device)  # torch.cuda.Stream(): the current device
        self.tail = 0.0  # device time at which everything queued so far is done

    def launch(self, seconds: float) -> None:
        """Queue a kernel of ``seconds`` (it starts when the stream is free, never before the host queues it)."""
        self.tail = max(self.tail, self.cuda.host_now) + seconds

    def wait_until(self, t: float) -> None:
        self.tail = max(self.tail, t)

    def wait_event(self, event: "FakeEvent") -> None:
        event.wait(self)  # as torch.cuda.Stream.wait_event: through the event's wait()

    def wait_stream(self, other: "FakeStream") -> None:
        self.wait_event(other.record_event())  # as torch.cuda.Stream.wait_stream: an event on the other stream

    def query(self) -> bool:
        self.cuda.check_query()
        return self.cuda.now >= self.tail

    def record_event(self, event: "FakeEvent | None" = None) -> "FakeEvent":
        event = event or self.cuda.Event()
        event.record(self)
        return event

    def __eq__(self, other) -> bool:  # torch.cuda.Stream: a new object each current_stream(), equal by stream
        return self is other

    def __hash__(self) -> int:
        return id(self)


class FakeEvent:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.t: float | None = None  # device time at which it completes, once recorded
        self.cuda: FakeCuda | None = None
        self.created = False
        self.device: int | None = None  # the device of the stream it was first recorded on

    def record(self, stream: FakeStream | None = None) -> None:
        cuda = FakeCuda.active
        stream = stream or cuda.current_stream()
        if self.device is not None and stream.device != self.device:
            raise RuntimeError(f"Event device index {self.device} does not match recording stream's device index {stream.device}.")
        cuda.touch(stream.device)
        if cuda.capturing and self.enable_timing:
            raise CaptureError("operation not permitted when stream is capturing (timing event)")
        if not self.created:
            self.created = True
            self.device = stream.device
            cuda.created += 1
        self.cuda = cuda
        self.t = max(stream.tail, cuda.host_now)
        cuda.records += 1

    def query(self) -> bool:
        if self.cuda is None:
            return True  # never recorded: nothing to wait for
        self.cuda.touch(self.cuda.current_device(note=False))  # cudaEventQuery: no device guard
        self.cuda.check_query()
        return self.cuda.now >= self.t

    def elapsed_time(self, end: "FakeEvent") -> float:
        for e in (self, end):
            if e.cuda is None:
                raise RuntimeError("Both events must be recorded before calculating elapsed time.")
            if not e.enable_timing:
                raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
            e.cuda.touch(e.device)  # elapsed_time holds a device guard
            e.cuda.check_query()
            if e.cuda.now < e.t:
                raise RuntimeError("CUDA error: device not ready")
        return (end.t - self.t) * 1000.0

    def synchronize(self) -> None:  # the probe must never wait for the device
        raise AssertionError("the probe synchronised an event")

    def wait(self, stream: FakeStream | None = None) -> None:
        """The stream's later work waits for this event (an event never recorded: nothing to wait for)."""
        stream = stream or FakeCuda.active.current_stream()
        if self.t is not None:
            stream.wait_until(self.t)


class FakeProperties:
    def __init__(self, index: int, name: str):
        self.name = name
        self.pci_bus_id = 0x10 + index
        self.pci_domain_id = 0
        self.pci_device_id = 0
        self.uuid = f"0000000{index}-aaaa-bbbb-cccc-dddddddddddd"
        self.total_memory = 80 << 30
        self.is_integrated = False


class FakeGraph:
    """``torch.cuda.CUDAGraph``: capture_begin/capture_end switch the capture rules on and off."""

    cuda: "FakeCuda" = None  # type: ignore[assignment]

    def capture_begin(self, *args, **kwargs) -> None:
        self.cuda.capturing = True

    def capture_end(self) -> None:
        self.cuda.capturing = False


class FakeCuda:
    """The parts of ``torch.cuda`` the probe uses. ``install(torch_module)`` puts it in as ``.cuda``."""

    active: "FakeCuda" = None  # type: ignore[assignment]
    Event = FakeEvent
    Stream = FakeStream

    def __init__(self, devices: int = 1, name: str = "NVIDIA H100 80GB HBM3"):
        FakeCuda.active = self
        self.devices = devices
        self.device_name = name
        self.now = 0.0  # the device's clock
        self.host_now = 0.0  # where the host has got to, on the device's clock (work cannot start before)
        self.created = 0  # CUDA events actually created (at their first record)
        self.records = 0
        self.capturing = False
        self.capture_invalidated = False
        self.calls_by_thread: dict[str, list[str]] = {}  # which thread called what (a CUDA side effect)
        self.contexts: set[int] = set()  # devices with a CUDA context opened in this process
        self._initialized = False
        self._local = threading.local()
        self._defaults = [FakeStream(self, f"default:{d}", device=d) for d in range(max(1, devices))]
        self._default = self._defaults[0]
        self._pools = [[FakeStream(self, f"pool:{d}:{i}", device=d) for i in range(4)] for d in range(max(1, devices))]
        self._pool_next = [0] * max(1, devices)
        self.syncs = 0
        self.reserved: dict[int, int] = {}  # device -> bytes the caching allocator holds there
        self.CUDAGraph = type("CUDAGraph", (FakeGraph,), {"cuda": self})  # a class per fake: patches stay in it
        self.Event = type("Event", (FakeEvent,), {})  # (the probe wraps Event.record and Event.wait)

    # -- what the tests drive --------------------------------------------------------

    def run(self, seconds: float) -> None:
        """The device works ``seconds`` on."""
        self.now += seconds

    def run_all(self) -> None:
        self.now = max(self.now, self._default.tail, *(s.tail for s in self._streams()))

    def host(self, seconds: float) -> None:
        """The host moves ``seconds`` on (work it queues next cannot start before)."""
        self.host_now += seconds

    def _streams(self):
        return [*self._defaults, *getattr(self._local, "streams", {}).values(), *(s for pool in self._pools for s in pool)]

    def touch(self, device: int | None) -> None:
        """A CUDA call ran on ``device``: its context is open from now on."""
        if device is not None:
            self.contexts.add(int(device))

    def pool_stream(self, device: int | None = None) -> FakeStream:
        """The next of the device's pool streams (round-robin, shared by everyone: CUDAFuture's callbacks too)."""
        d = self.current_device(note=False) if device is None else int(device)
        stream = self._pools[d][self._pool_next[d] % len(self._pools[d])]
        self._pool_next[d] += 1
        return stream

    def check_query(self) -> None:
        if self.capturing:
            self.capture_invalidated = True
            raise CaptureError("operation not permitted when stream is capturing")

    def _note(self, name: str) -> None:
        self.calls_by_thread.setdefault(threading.current_thread().name, []).append(name)

    # -- torch.cuda's API ------------------------------------------------------------

    def is_available(self) -> bool:
        self._note("is_available")
        return self.devices > 0

    def is_initialized(self) -> bool:
        return self._initialized

    def init(self) -> None:
        self._note("init")
        self._initialized = True
        self.touch(self.current_device(note=False))

    def device_count(self) -> int:
        self._note("device_count")
        return self.devices

    def set_device(self, index) -> None:
        self._note("set_device")
        index = getattr(index, "index", index)
        if not 0 <= int(index) < self.devices:
            raise RuntimeError("CUDA error: invalid device ordinal")
        self._initialized = True
        self._local.device = int(index)
        self.touch(int(index))

    def current_device(self, note: bool = True) -> int:
        if note:
            self._note("current_device")
            self._initialized = True
        return getattr(self._local, "device", 0)

    def get_device_name(self, device=None) -> str:
        self._note("get_device_name")
        self._initialized = True
        return self.device_name

    def get_device_properties(self, device=None) -> FakeProperties:
        self._note("get_device_properties")
        index = getattr(device, "index", device)
        return FakeProperties(self.current_device() if index is None else int(index), self.device_name)

    def memory_reserved(self, device=None) -> int:
        """What the caching allocator holds on a device (the test sets :attr:`reserved`); opens no context."""
        return self.reserved.get(int(getattr(device, "index", device) or 0), 0)

    def current_stream(self, device=None) -> FakeStream:
        d = self.current_device(note=False) if device is None else int(getattr(device, "index", device))
        return getattr(self._local, "streams", {}).get(d) or self._defaults[d]

    def default_stream(self, device=None) -> FakeStream:
        return self._defaults[self.current_device(note=False) if device is None else int(getattr(device, "index", device))]

    def set_stream(self, stream: FakeStream) -> None:
        if not hasattr(self._local, "streams"):
            self._local.streams = {}
        self._local.streams[stream.device] = stream

    @contextlib.contextmanager
    def stream(self, stream: FakeStream):
        """``torch.cuda.stream(s)``: ``s`` current on its device, and its device current, for the block."""
        before = self.current_stream(stream.device)
        device_before = getattr(self._local, "device", None)
        self.set_stream(stream)
        self._local.device = stream.device
        try:
            yield stream
        finally:
            self.set_stream(before)
            if device_before is None:
                del self._local.device
            else:
                self._local.device = device_before

    def synchronize(self, device=None) -> None:
        self.syncs += 1
        raise AssertionError("the probe synchronised the device")

    def is_current_stream_capturing(self) -> bool:
        self.touch(self.current_device(note=False))  # asks the current device's current stream
        return self.capturing

    @contextlib.contextmanager
    def graph_capture(self):
        """``torch.cuda.graph(g)``: capture_begin, the block, capture_end (global capture mode)."""
        graph = self.CUDAGraph()
        graph.capture_begin()
        try:
            yield graph
        finally:
            graph.capture_end()

    @contextlib.contextmanager
    def device(self, index):
        index = getattr(index, "index", index)
        before = getattr(self._local, "device", None)
        self.set_device(index)
        try:
            yield
        finally:
            if before is None:
                del self._local.device
            else:
                self._local.device = before


class FakeFuture:
    def __init__(self, cuda: FakeCuda, end: float):
        self._cuda = cuda
        self._end = end

    def done(self) -> bool:
        return True  # complete at enqueue, as ProcessGroupNCCL's futures are

    def wait(self):
        self._cuda.current_stream().wait_until(self._end)
        return None

    def value(self):
        return None

    def add_done_callback(self, callback) -> None:
        """Run now (the future is complete), with the current stream one of the device's pool streams, made to
        wait for the kernel (shared: whatever else was queued on it comes first)."""
        cuda = self._cuda
        joined = cuda.pool_stream()
        joined.wait_until(self._end)
        with cuda.stream(joined):
            callback(self)

    def then(self, callback):
        self.add_done_callback(callback)
        return self


class FakeWork:
    def __init__(self, cuda: FakeCuda, end: float):
        self._cuda = cuda
        self.end = end  # device time at which the NCCL kernel ends

    def is_completed(self) -> bool:
        return True  # ProcessGroupNCCL's works report complete at enqueue too (host side)

    def wait(self, timeout=None) -> bool:
        self._cuda.current_stream().wait_until(self.end)  # the current stream joins; the host does not block
        return True

    def get_future(self) -> FakeFuture:
        return FakeFuture(self._cuda, self.end)


class FakeNcclGroup:
    """One rank's view of an NCCL group: each collective ends ``peer_late`` seconds after this rank's stream
    reaches it (the slowest peer's lateness) plus ``kernel_s`` on the wire."""

    def __init__(self, cuda: FakeCuda, size: int = 4, kernel_s: float = 0.001):
        self.cuda = cuda
        self._size = size
        self.kernel_s = kernel_s
        self.peer_late = 0.0
        self.stream = FakeStream(cuda, "nccl", device=cuda.current_device(note=False))

    def size(self) -> int:
        return self._size

    def collective(self, *_args, async_op: bool = False, **_kwargs):
        caller = self.cuda.current_stream()
        self.stream.wait_until(caller.tail)  # NCCL's stream waits for the caller's work so far (in C++: no Python event)
        self.stream.wait_until(self.stream.tail + self.peer_late)
        self.stream.launch(self.kernel_s)
        work = FakeWork(self.cuda, self.stream.tail)
        if not async_op:
            work.wait()  # a "blocking" collective: the current stream waits, the host returns at once
            return None
        return work


# -- NVML (pynvml) ----------------------------------------------------------------------------------


class NVMLError(Exception):
    pass


#: The fake GPU's UUID and its MIG slice's, as NVML and ``torch.cuda.get_device_properties(i).uuid`` name them.
GPU_UUID = "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"
MIG_UUID = "MIG-00000001-aaaa-bbbb-cccc-dddddddddddd"


def fake_nvml(*, count=1, missing=(), failing=(), init_error=None, clocks=None, held=None, now=None):
    """A stand-in for pynvml: one H100 at bus 0000:3B:00.0, functions removable or raising NVMLError.

    ``clocks``: the SM clocks its clock reads return in turn (else 1500 MHz always). ``held``: policy number ->
    the share of the time its clocks are held down by it (``nvmlDeviceGetViolationStatus``, as the real call:
    a struct of running totals, ``referenceTime`` a CPU timestamp in µs and ``violationTime`` the nanoseconds
    of violation so far, by the clock ``now`` gives in seconds); without ``held`` the driver does not keep
    them (NVML_ERROR_NOT_SUPPORTED).

    As the real library: ``nvmlDeviceGetMemoryInfo(h, nvmlMemory_v2)`` reports memory in use without the
    driver's reserve (512 MiB here), as nvidia-smi does, the v1 call counts that reserve as used; a handle is
    found by PCI bus id, by index, or by UUID: ``GPU-...`` for the GPU, ``MIG-...`` for its one MIG slice
    (10 GB, 3 GB of it in use), whose bus id is its parent's."""
    calls = []

    def f(name, result):
        def call(*args):
            calls.append(name)
            if name in failing:
                raise NVMLError(f"{name}: Not Supported")
            return result(*args) if callable(result) else result

        return call

    def init():
        if init_error:
            raise NVMLError(init_error)

    handle = types.SimpleNamespace(kind="gpu", used=70 << 30, total=80 << 30)
    mig = types.SimpleNamespace(kind="mig", used=3 << 30, total=10 << 30)
    uuids = {GPU_UUID: handle, MIG_UUID: mig}
    reserve = 512 << 20
    v2 = object()

    def memory_info(h, version=None):
        used = h.used + (0 if version is v2 else reserve)
        return types.SimpleNamespace(used=used, total=h.total, free=h.total - used)

    def by_uuid(uuid):
        if isinstance(uuid, bytes):
            uuid = uuid.decode()
        if uuid not in uuids:
            raise NVMLError("Not Found")
        return uuids[uuid]

    clock_reads = iter(clocks) if clocks is not None else None
    started = now() if now is not None else 0.0

    def sm_clock(h, kind):
        return next(clock_reads) if clock_reads is not None else 1500

    def violation(h, policy):
        if held is None or now is None:
            raise NVMLError("Not Supported")
        elapsed = now() - started
        return types.SimpleNamespace(referenceTime=int(now() * 1e6), violationTime=int(elapsed * held.get(policy, 0.0) * 1e9))

    funcs = {
        "nvmlInit": f("nvmlInit", lambda: init()),
        "nvmlShutdown": f("nvmlShutdown", None),
        "nvmlDeviceGetCount": f("nvmlDeviceGetCount", count),
        "nvmlDeviceGetHandleByPciBusId": f(
            "nvmlDeviceGetHandleByPciBusId",
            lambda bus: handle if bus == "00000000:3B:00.0" else (_ for _ in ()).throw(NVMLError("Not Found")),
        ),
        "nvmlDeviceGetHandleByIndex": f("nvmlDeviceGetHandleByIndex", lambda i: handle),
        "nvmlDeviceGetHandleByUUID": f("nvmlDeviceGetHandleByUUID", by_uuid),
        "nvmlDeviceGetName": f("nvmlDeviceGetName", b"NVIDIA H100 80GB HBM3"),
        "nvmlDeviceGetPciInfo": f("nvmlDeviceGetPciInfo", types.SimpleNamespace(busId=b"00000000:3B:00.0")),
        "nvmlDeviceGetUtilizationRates": f("nvmlDeviceGetUtilizationRates", types.SimpleNamespace(gpu=97, memory=41)),
        "nvmlDeviceGetMemoryInfo": f("nvmlDeviceGetMemoryInfo", memory_info),
        "nvmlDeviceGetPowerUsage": f("nvmlDeviceGetPowerUsage", 650_000),
        "nvmlDeviceGetEnforcedPowerLimit": f("nvmlDeviceGetEnforcedPowerLimit", 700_000),
        "nvmlDeviceGetPowerManagementLimit": f("nvmlDeviceGetPowerManagementLimit", 690_000),
        "nvmlDeviceGetTemperature": f("nvmlDeviceGetTemperature", 84),
        "nvmlDeviceGetClockInfo": f("nvmlDeviceGetClockInfo", sm_clock),
        "nvmlDeviceGetViolationStatus": f("nvmlDeviceGetViolationStatus", violation),
        "nvmlDeviceGetMaxClockInfo": f("nvmlDeviceGetMaxClockInfo", 1980),
        "nvmlDeviceGetCurrentClocksEventReasons": f("nvmlDeviceGetCurrentClocksEventReasons", 0x20 | 0x1),
        "nvmlDeviceGetCurrentClocksThrottleReasons": f("nvmlDeviceGetCurrentClocksThrottleReasons", 0x4),
        "nvmlDeviceGetPcieThroughput": f("nvmlDeviceGetPcieThroughput", lambda h, counter: 1000 if counter == 0 else 2000),
    }
    for name in missing:
        funcs.pop(name)
    module = types.SimpleNamespace(
        NVMLError=NVMLError, NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, nvmlMemory_v2=v2,
        NVML_PCIE_UTIL_TX_BYTES=0, NVML_PCIE_UTIL_RX_BYTES=1, NVML_PERF_POLICY_POWER=0, NVML_PERF_POLICY_THERMAL=1, **funcs,
    )  # fmt: skip
    module.calls = calls
    return module


# -- the caching allocator's snapshot (torch.cuda.memory._snapshot()) --------------------------------------------


def allocator_snapshot(events: int = 10_000, depth: int = 24, segments: int = 200, shared_frames: bool = True) -> dict:
    """A snapshot of the shape and size ``torch.cuda.memory._snapshot()`` returns after a history of ``events``
    allocator events recorded with Python stacks (``stacks="python"``) of ``depth`` frames: ``segments`` with their
    blocks, and one device's trace. ``shared_frames``: a frame is one dict shared by every entry whose stack holds
    it (as where torch's symbolising dedups them), so ``pickle`` memoises them; else each entry has its own dicts
    (the bigger, slower case)."""
    files = [f"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module_{i}.py" for i in range(40)]
    frames = [{"filename": files[i % 40], "line": (i * 37) % 900 + 1, "name": f"forward_{i % 60}"} for i in range(400)]

    def stack(k: int) -> list:
        picked = [frames[(k * 13 + j) % len(frames)] for j in range(depth)]
        return picked if shared_frames else [dict(frame) for frame in picked]

    trace = [
        {"action": ("alloc", "free_requested", "free_completed")[k % 3], "addr": 0x7F0000000000 + k * 512,
         "frames": stack(k), "size": 4096 * (k % 100 + 1), "stream": 0, "time_us": 1_700_000_000_000 + k,
         "compile_context": "N/A", "user_metadata": ""}
        for k in range(events)
    ]  # fmt: skip
    segs = [
        {"device": 0, "address": 0x7E0000000000 + i * (2 << 20), "total_size": 2 << 20, "allocated_size": 1 << 20,
         "active_size": 1 << 20, "requested_size": 1 << 20, "stream": 0, "segment_type": "large",
         "segment_pool_id": (0, 0), "is_expandable": False, "frames": stack(i),
         "blocks": [{"address": 0x7E0000000000 + i * (2 << 20) + b * 4096, "size": 4096, "requested_size": 4000,
                     "state": "active_allocated", "frames": stack(i + b)} for b in range(8)]}
        for i in range(segments)
    ]  # fmt: skip
    return {"segments": segs, "device_traces": [trace], "allocator_settings": {}, "external_annotations": []}
