"""GPU timing against fakes that keep CUDA's and NCCL's rules (tests/fake_cuda.py): each test is one defect
that host-only timing has on a GPU (it fails there) and that device timing fixes.

The fake device's clock is moved by the test: NCCL's works and futures are complete at enqueue, the host
returns at once, and only CUDA events on the streams say when the device got there.
"""

import functools
import sys
import threading
import types

import pytest

from fake_cuda import FakeCuda, FakeNcclGroup, FakeWork
from ranktop.probe import collective_tracker, collectives, ddp_waits, device_waits, dist_wrappers, gpu_timing, stream_waits
from ranktop.probe.collective_tracker import CollectiveTracker
from ranktop.probe.recorder import Recorder


class FakeDist:
    """The parts of torch.distributed the wrappers read, over one fake NCCL group."""

    def __init__(self, group):
        self.group = group

    def get_world_size(self, group=None):
        return self.group.size()


class Tensor:
    dtype = "torch.bfloat16"
    requires_grad = True

    def __init__(self, numel=1024, is_cuda=True):
        self._n = numel
        self.is_cuda = is_cuda

    def numel(self):
        return self._n

    def element_size(self):
        return 2


def probe_on(cuda, pool_size=64):
    """What device timing needs of a probe: its recorder, its tracker, its sender's hello device."""
    rec = Recorder()
    probe = types.SimpleNamespace(recorder=rec, collectives=CollectiveTracker(rec), sender=types.SimpleNamespace(device="cpu"))
    return probe


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeCuda(devices=4)
    monkeypatch.setattr(gpu_timing, "POOL_SIZE", 64)
    monkeypatch.setattr(device_waits, "POOL_SIZE", 64)
    monkeypatch.setattr(device_waits, "CAPTURES", device_waits.CaptureGuard())
    yield fake
    device_waits.unwatch()
    stream_waits.unwatch()


def wrapped(name, group, arg="tensor"):
    def all_reduce(tensor, group=None, async_op=False):
        return group_.collective(tensor, async_op=async_op)

    group_ = group
    return dist_wrappers._wrap(name, arg, all_reduce, FakeDist(group))


@pytest.fixture
def attached(cuda, monkeypatch):
    probe = probe_on(cuda)
    cuda.set_device(2)
    assert gpu_timing.attach_cuda(probe, cuda, work_class=FakeWork)
    monkeypatch.setattr(dist_wrappers, "_tracker", probe.collectives)
    return probe


# -- 1. NCCL collective times are launch times ----------------------------------------------------------


def test_a_blocking_nccl_all_reduce_is_timed_by_the_stall_of_the_stream_not_the_launch(cuda, attached):
    group = FakeNcclGroup(cuda, kernel_s=0.002)
    group.peer_late = 0.050  # the slowest peer arrives 50 ms after this rank
    all_reduce = wrapped("all_reduce", group)
    attached.recorder.begin_step()
    all_reduce(Tensor())  # returns at once, as with NCCL
    tracker = attached.collectives
    assert tracker.drain() == []  # the device has not got there: nothing is known yet, nothing waited for
    cuda.run(1.0)
    (call,) = tracker.drain()
    assert call["op"].startswith("all_reduce") and call["b"] == 2048
    assert call["d"] == pytest.approx(0.052)  # 50 ms waiting for the peer + 2 ms on the wire


def test_an_async_collective_is_timed_where_the_current_stream_joins_it(cuda, attached):
    group = FakeNcclGroup(cuda, kernel_s=0.004)
    all_reduce = wrapped("all_reduce", group)
    work = all_reduce(Tensor(), async_op=True)
    cuda.current_stream().launch(0.003)  # 3 ms of compute overlap the collective
    work.wait()  # the stream now waits 1 ms more for the kernel
    cuda.run(1.0)
    (call,) = attached.collectives.drain()
    assert call["d"] == pytest.approx(0.001)


def test_a_functional_collectives_wait_is_timed_from_its_wait_tensor(cuda, attached):
    """The API a wrapper of functional collectives uses: begin at the call, at_wait before wait_tensor, end after."""
    group = FakeNcclGroup(cuda, kernel_s=0.004)
    tracker = attached.collectives
    token = tracker.begin("all_reduce", 2048, "bfloat16", 4, True)
    work = group.collective(Tensor(), async_op=True)
    cuda.current_stream().launch(0.003)  # compute overlaps the collective
    tracker.at_wait(token)
    cuda.current_stream().wait_until(work.end)  # wait_tensor: the current stream joins
    tracker.end(token)
    cuda.run(1.0)
    (call,) = tracker.drain()
    assert call["d"] == pytest.approx(0.001)


def test_an_async_work_dropped_without_wait_is_timed_launch_to_completion(cuda, attached):
    group = FakeNcclGroup(cuda, kernel_s=0.004)
    all_reduce = wrapped("all_reduce", group)
    all_reduce(Tensor(), async_op=True)  # the work is dropped at once
    cuda.run(1.0)
    (call,) = attached.collectives.drain()
    assert call["d"] == pytest.approx(0.004)


def test_an_async_work_without_a_future_dropped_unwaited_keeps_its_host_time_and_blocks_nothing(cuda, attached):
    class BareWork:  # a backend whose works have no future
        def get_future(self):
            raise RuntimeError("get_future is not supported")

        def wait(self, timeout=None):
            return True

    before = attached.collectives.device.available
    dist_wrappers._wrap("all_reduce", "tensor", lambda tensor, async_op=False: BareWork(), FakeDist(FakeNcclGroup(cuda)))(
        Tensor(), async_op=True
    )  # the work is dropped at once
    cuda.run(1.0)
    (call,) = attached.collectives.drain()
    assert call["op"].startswith("all_reduce") and attached.collectives.state()["inside"] is False
    assert attached.collectives.device.available == before  # its start event back in the pool


class FakeDDP:
    """What :func:`ddp_waits.watch_ddp_backward` reads of a DDP module: its parameters and its group."""

    def __init__(self, group, params=2):
        self.module = types.SimpleNamespace(parameters=lambda: [Tensor(4096) for _ in range(params)])
        self.process_group = group


class OutputNode:
    """The autograd node of DDP's output: the engine runs its pre-hooks first, before any gradient."""

    def register_prehook(self, fn):
        self.prehook = fn


def run_final_callbacks(queue):
    """The engine's final callbacks, in the order queued; one queued while they run runs too (after the rest)."""
    i = 0
    while i < len(queue):
        queue[i]()
        i += 1


def test_ddp_waits_where_finalize_stalls_the_compute_stream_not_for_its_buckets_in_flight(cuda, attached):
    """A bucket's all-reduce is launched 10 ms into backward and takes 25 ms on the wire, overlapped with 20 ms
    more of backward: the compute stream stalls 5 ms, in the reducer's finalize. The old comm-hook timing read
    the bucket's 25 ms in flight (ready to done) as the wait, and took it out of backward."""
    group = FakeNcclGroup(cuda, kernel_s=0.025)
    rec, tracker = attached.recorder, attached.collectives
    queue = []
    output = types.SimpleNamespace(grad_fn=OutputNode())
    assert ddp_waits.watch_ddp_backward(FakeDDP(group), output, queue=queue.append)
    rec.begin_step()
    rec.begin_phase("backward")
    output.grad_fn.prehook(None)  # backward starts at the output's node
    compute = cuda.current_stream()
    compute.launch(0.010)
    work = group.collective(Tensor(4096), async_op=True)  # the reducer launches the ready bucket
    compute.launch(0.020)
    queue.append(lambda: work.wait())  # the last bucket ready: the reducer queues finalize (waits for every bucket)
    run_final_callbacks(queue)
    rec.end_phase()
    rec.end_step()
    cuda.run(1.0)
    (call,) = tracker.drain()
    assert call["op"] == collective_tracker.DDP_OP and call["b"] == 2 * 4096 * 2 and call["ph"] == "backward"
    assert call["d"] == pytest.approx(0.005)
    (step,) = rec.timeline.resolve(rec.drain())
    assert step["g"]["p"]["backward"] == pytest.approx(0.035)


class SyncingDDP(FakeDDP):
    require_backward_grad_sync = True  # False inside no_sync()


class FakeOptimizedModule:
    """``torch.compile(DDP(model))``'s wrapper: its call runs the compiled region (DDP's forward traced inside)."""

    def __init__(self, inner, output):
        self._modules = {"_orig_mod": inner}
        self.output = output

    def __call__(self, *args):
        return self.output


def test_a_compiled_ddp_waits_by_eager_ddp_s_device_rules_watched_from_its_compiled_call(cuda, attached, monkeypatch):
    """``torch.compile(DDP(model))`` (issue 51): DDP's forward is inside the compiled region, so its backward is
    watched from the compiled wrapper's eager call; what is timed is eager DDP's: the compute stream's 5 ms stall
    at the reducer's finalize, not the bucket's 25 ms in flight; a no_sync() micro-batch waits for nothing."""
    pytest.importorskip("torch")
    monkeypatch.setattr(dist_wrappers, "_installed", {"ddp.class": FakeDDP})
    queue = []
    monkeypatch.setattr(ddp_waits, "_queue_callback", queue.append)
    ddp_waits._wrap_compiled_call(FakeOptimizedModule)
    group = FakeNcclGroup(cuda, kernel_s=0.025)
    rec, tracker = attached.recorder, attached.collectives
    ddp = SyncingDDP(group)
    rec.begin_step()
    ddp.require_backward_grad_sync = False  # no_sync(): a micro-batch that accumulates
    accumulated = FakeOptimizedModule(ddp, types.SimpleNamespace(grad_fn=OutputNode()))()
    assert not hasattr(accumulated.grad_fn, "prehook")
    ddp.require_backward_grad_sync = True
    output = FakeOptimizedModule(ddp, types.SimpleNamespace(grad_fn=OutputNode()))()
    rec.begin_phase("backward")
    output.grad_fn.prehook(None)
    compute = cuda.current_stream()
    compute.launch(0.010)
    work = group.collective(Tensor(4096), async_op=True)
    compute.launch(0.020)
    queue.append(lambda: work.wait())  # DDP's finalize, queued by the reducer after ours
    run_final_callbacks(queue)
    rec.end_phase()
    rec.end_step()
    cuda.run(1.0)
    (call,) = tracker.drain()
    assert call["op"] == collective_tracker.DDP_OP and call["ph"] == "backward"
    assert call["d"] == pytest.approx(0.005)


class HookedDDP(SyncingDDP):
    """DDP's register_comm_hook: the reducer calls the hook it is given for each ready bucket."""

    def register_comm_hook(self, state, hook):
        self.hook = functools.partial(hook, state)


def test_a_ddp_comm_hook_s_all_reduce_is_no_wait_only_the_stall_at_finalize_is(cuda, attached, monkeypatch):
    """PyTorch's allreduce_hook (and bf16_compress_hook, PowerSGD) launches ``all_reduce(async_op=True)`` and never
    waits for it: it returns ``work.get_future().then(...)``, which the reducer's finalize waits for. The bucket is
    ready 10 ms into backward and 25 ms on the wire, overlapped with 20 ms more of backward: the compute stream
    stalls 5 ms at finalize. Before, the hook's all-reduce was also recorded, launch to completion: 25 ms."""
    monkeypatch.setattr(dist_wrappers, "_installed", {})
    ddp_waits.watch_comm_hooks(HookedDDP)
    group = FakeNcclGroup(cuda, kernel_s=0.025)
    all_reduce = wrapped("all_reduce", group)

    def allreduce_hook(process_group, bucket):  # torch.distributed.algorithms.ddp_comm_hooks.default_hooks's, in short
        return all_reduce(bucket, group=process_group, async_op=True).get_future().then(lambda fut: fut.value())

    rec, tracker = attached.recorder, attached.collectives
    ddp = HookedDDP(group)
    ddp.register_comm_hook(None, allreduce_hook)
    queue = []
    output = types.SimpleNamespace(grad_fn=OutputNode())
    assert ddp_waits.watch_ddp_backward(ddp, output, queue=queue.append)
    rec.begin_step()
    rec.begin_phase("backward")
    output.grad_fn.prehook(None)
    compute = cuda.current_stream()
    compute.launch(0.010)
    future = ddp.hook(Tensor(4096))  # the reducer runs the hook on the ready bucket
    compute.launch(0.020)
    queue.append(lambda: future.wait())  # finalize waits for the hook's future
    run_final_callbacks(queue)
    rec.end_phase()
    rec.end_step()
    cuda.run(1.0)
    calls = tracker.drain(final=True)
    assert [c["op"] for c in calls] == [collective_tracker.DDP_OP], calls
    assert calls[0]["d"] == pytest.approx(0.005)
    (step,) = rec.timeline.resolve(rec.drain())
    assert step["g"]["p"]["backward"] == pytest.approx(0.035)


def test_a_comm_hook_s_wait_at_finalize_leaves_out_ddp_s_copy_of_the_buckets_into_the_gradients(cuda, attached, monkeypatch):
    """The reducer's finalize waits for each bucket's future, then copies the bucket into its gradients
    (``copy_bucket_to_grad``), on the compute stream, in the same C++ call: timed around finalize the copy was in
    the wait (0.6 ms of one H100 rank's record, whose true wait was ~0). With a comm hook the bucket's future is the
    hook's: its completion, recorded in its done-callback (on a stream that waits for the kernel), ends the wait.
    Here the stall is 5 ms and the copy 0.6 ms after it: 5 ms recorded (5.6 before); a rank whose buckets were all
    done before finalize waited for nothing (0.6 before)."""
    monkeypatch.setattr(dist_wrappers, "_installed", {})
    ddp_waits.watch_comm_hooks(HookedDDP)
    group = FakeNcclGroup(cuda, kernel_s=0.025)
    all_reduce = wrapped("all_reduce", group)

    def allreduce_hook(process_group, bucket):
        return all_reduce(bucket, group=process_group, async_op=True).get_future().then(lambda fut: fut.value())

    rec, tracker = attached.recorder, attached.collectives
    ddp = HookedDDP(group)
    ddp.register_comm_hook(None, allreduce_hook)
    compute = cuda.current_stream()
    pool = tracker.device.available
    for backward_s in (0.020, 0.040):  # the stall: 5 ms, then none (the bucket done 5 ms before finalize)
        queue = []
        output = types.SimpleNamespace(grad_fn=OutputNode())
        assert ddp_waits.watch_ddp_backward(ddp, output, queue=queue.append)
        rec.begin_step()
        rec.begin_phase("backward")
        output.grad_fn.prehook(None)
        compute.launch(0.010)
        future = ddp.hook(Tensor(4096))
        compute.launch(backward_s)
        queue.append(lambda future=future: (future.wait(), compute.launch(0.0006)))  # finalize: wait, then copy
        run_final_callbacks(queue)
        rec.end_phase()
        rec.end_step()
    cuda.run(1.0)
    calls = tracker.drain(final=True)
    assert [c["op"] for c in calls] == [collective_tracker.DDP_OP] * 2, calls
    assert calls[0]["d"] == pytest.approx(0.005)
    assert calls[1]["d"] == pytest.approx(0.0)
    assert tracker.device.available == pool  # every event back in the pool: none lost per backward


def test_on_the_host_a_comm_hook_s_wait_ends_when_its_last_future_completed_unless_one_is_not_known(monkeypatch):
    """gloo with CPU tensors: the reducer's finalize blocks in each bucket's future and copies it into the
    gradients on the host. A CPU future calls back when its work is done: the wait ends at the last bucket's
    callback. A callback not yet run when finalize returns (gloo wakes the waiter before its callbacks) leaves the
    wait at finalize's end, as before; a late one of an earlier backward counts for nothing."""
    torch = pytest.importorskip("torch")
    clock = [100.0]
    monkeypatch.setattr(collective_tracker, "_perf", lambda: clock[0])
    monkeypatch.setattr(ddp_waits, "_perf", lambda: clock[0])
    tracker = CollectiveTracker(Recorder())
    monkeypatch.setattr(dist_wrappers, "_tracker", tracker)
    monkeypatch.setattr(dist_wrappers, "_installed", {})
    ddp_waits.watch_comm_hooks(HookedDDP)
    futures = []

    def hook(state, bucket):  # a gloo all-reduce's future, completed later
        futures.append(torch.futures.Future())
        return futures[-1]

    ddp = HookedDDP(None)
    ddp.__dict__["_ranktop_what"] = (8192, "float32", 2, False)  # CPU tensors: the host's clock
    ddp.register_comm_hook(None, hook)

    def backward(complete_all):
        futures.clear()
        queue = []
        output = types.SimpleNamespace(grad_fn=OutputNode())
        assert ddp_waits.watch_ddp_backward(ddp, output, queue=queue.append)
        output.grad_fn.prehook(None)
        ddp.hook(Tensor(4096))
        ddp.hook(Tensor(4096))
        clock[0] += 0.010
        futures[0].set_result(None)
        clock[0] += 0.004
        queue.append(lambda: None)  # DDP's finalize, queued after ours
        run_final_callbacks(queue[:1])  # ours: the wait begins
        clock[0] += 0.003
        if complete_all:
            futures[1].set_result(None)  # the last bucket done 3 ms into finalize
        clock[0] += 0.002  # finalize copies the buckets into the gradients
        run_final_callbacks(queue[1:])
        if not complete_all:
            futures[1].set_result(None)
        (call,) = tracker.drain()
        return call["d"]

    assert backward(True) == pytest.approx(0.003)  # 0.005 before: the copy was in it
    assert backward(False) == pytest.approx(0.005)


def test_ddp_keeps_its_own_all_reduce_and_a_comm_hook_registered_after_the_first_forward_works(tmp_path):
    """No comm hook of ours (the reducer's fused C++ all-reduce stays), so a script may register its own late;
    the wait is still one ddp_allreduce record per synchronised backward, with every gradient's bytes."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    rec = Recorder()
    tracker = CollectiveTracker(rec)
    try:
        assert collectives.install(tracker)
        model = DDP(torch.nn.Linear(8, 4))
        assert model._comm_hooks == [] if hasattr(model, "_comm_hooks") else True
        model(torch.randn(2, 8)).sum().backward()  # the first forward and backward
        calls = []

        def own_hook(state, bucket):
            calls.append(bucket.buffer().numel())
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        model.register_comm_hook(None, own_hook)  # after the first forward: worked before ranktop, works now
        with model.no_sync():
            model(torch.randn(2, 8)).sum().backward()  # no sync: no wait to time
        model(torch.randn(2, 8)).sum().backward()
        assert calls == [8 * 4 + 4]
        records = tracker.drain()
        assert [r["op"] for r in records] == [collective_tracker.DDP_OP] * 2
        assert all(r["b"] == (8 * 4 + 4) * 4 and r["dt"] == "float32" and r["g"] == 1 and r["d"] >= 0 for r in records)
        assert tracker.blocked_since == 0.0
    finally:
        collectives.uninstall()
        dist.destroy_process_group()


def test_ddp_with_pytorch_s_stock_allreduce_hook_records_only_its_wait_at_finalize(tmp_path):
    """Real DDP and PyTorch's own ``allreduce_hook`` (gloo): the hook's all_reduce, launched and never waited for,
    is DDP's all-reduce, not a wait of its own: one ddp_allreduce per synchronised backward, nothing else."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    tracker = CollectiveTracker(Recorder())
    try:
        assert collectives.install(tracker)
        model = DDP(torch.nn.Linear(8, 4))
        model.register_comm_hook(None, default_hooks.allreduce_hook)
        for _ in range(3):
            model(torch.randn(2, 8)).sum().backward()
        with model.no_sync():
            model(torch.randn(2, 8)).sum().backward()
        assert [r["op"] for r in tracker.drain(final=True)] == [collective_tracker.DDP_OP] * 3
        assert model._get_ddp_logging_data().get("comm_hook") == "allreduce_hook"  # DDP logs the hook by its name
    finally:
        collectives.uninstall()
        dist.destroy_process_group()


@pytest.mark.parametrize("how", ("torch.compile(DDP(model))", "DDP(model).compile()"))
def test_a_whole_compiled_ddp_model_has_its_wait_per_synchronised_backward_in_process(tmp_path, how):
    """A DDP compiled as a whole, for real (dynamo with DDPOptimizer, the eager backend): one ddp_allreduce per
    synchronised backward, none under no_sync (before issue 51: none at all); uninstalled, the compiled wrapper's
    call and torch.compile are torch's own again."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    compile_before = torch.compile
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    tracker = CollectiveTracker(Recorder())
    try:
        assert collectives.install(tracker)
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
        if how.startswith("torch.compile"):
            model = torch.compile(model, backend="eager")
        else:
            model.compile(backend="eager")
        for _ in range(3):
            model(torch.randn(2, 8)).sum().backward()
        with model.no_sync():
            model(torch.randn(2, 8)).sum().backward()
        records = tracker.drain(final=True)
        assert [r["op"] for r in records] == [collective_tracker.DDP_OP] * 3
        assert all(r["b"] == (8 * 8 + 8 + 8 + 1) * 4 for r in records)
    finally:
        collectives.uninstall()
        dist.destroy_process_group()
        torch._dynamo.reset()
    from torch._dynamo.eval_frame import OptimizedModule

    assert not getattr(OptimizedModule.__call__, "_ranktop", False)
    assert torch.compile is compile_before or not getattr(torch.compile, "_ranktop_ddp", False)


def test_a_hung_collective_shows_as_a_rank_inside_it_though_the_host_returned(cuda, attached):
    group = FakeNcclGroup(cuda)
    group.peer_late = 1e9  # a peer that never comes
    wrapped("all_reduce", group)(Tensor())
    tracker = attached.collectives
    assert tracker.state()["inside"] is False  # the host returned at once
    cuda.run(1.0)
    assert tracker.drain() == []
    state = tracker.state()
    assert state["inside"] is True and state["op"].startswith("all_reduce")


def test_a_collective_on_cpu_tensors_keeps_its_host_time(cuda, attached):
    """A gloo all-reduce of CPU tensors in a GPU job blocks the host; the GPU's streams know nothing of it."""
    import time

    def gloo_all_reduce(tensor, group=None, async_op=False):
        time.sleep(0.02)

    group = FakeNcclGroup(cuda)
    cuda.current_stream().launch(5.0)  # the stream is busy: events around the call would both end later
    dist_wrappers._wrap("all_reduce", "tensor", gloo_all_reduce, FakeDist(group))(Tensor(is_cuda=False))
    (call,) = attached.collectives.drain()
    assert call["d"] >= 0.02


def test_call_starts_stay_exact_hours_into_a_run(cuda, attached):
    """t0 is read against a reference event, renewed every minute (elapsed_time is a float32 of ms)."""
    group = FakeNcclGroup(cuda)
    all_reduce = wrapped("all_reduce", group)
    tracker = attached.collectives
    before = tracker.device.available
    starts = []
    for _ in range(3):
        cuda.host(3600.0)  # an hour later
        cuda.run(3600.0)
        all_reduce(Tensor())
        cuda.run(1.0)
        starts.append(tracker.drain()[0]["t0"])
    assert [b - a for a, b in zip(starts, starts[1:])] == [pytest.approx(3600.0, abs=1e-6)] * 2
    assert tracker.device._epoch_perf == starts[-1] and tracker.device.available == before  # no event lost


def test_device_timing_never_synchronises(cuda, attached):
    # FakeCuda.synchronize and FakeEvent.synchronize raise: every test above would have failed. Here: many calls.
    group = FakeNcclGroup(cuda)
    all_reduce = wrapped("all_reduce", group)
    for _ in range(20):
        all_reduce(Tensor())
    cuda.run(1.0)
    assert len(attached.collectives.drain()) == 20 and cuda.syncs == 0


def test_the_wait_is_taken_out_of_the_phase_on_the_device_clock(cuda, attached):
    """Phase and wait on the same clock: a backward of 10 ms of kernels plus 40 ms waiting for a peer."""
    group = FakeNcclGroup(cuda, kernel_s=0.0)
    group.peer_late = 0.040
    rec = attached.recorder
    all_reduce = wrapped("all_reduce", group)
    rec.begin_step()
    rec.begin_phase("backward")
    cuda.current_stream().launch(0.010)
    all_reduce(Tensor())
    rec.end_phase()
    rec.end_step()
    cuda.run(1.0)
    records = rec.drain()
    (step,) = [r for r in rec.timeline.resolve(records) if "g" in r]
    (call,) = attached.collectives.drain()
    assert step["p"]["backward"] < 0.005  # the host only launched
    assert step["g"]["p"]["backward"] == pytest.approx(0.050)
    assert call["d"] == pytest.approx(0.040) and call["ph"] == "backward"


# -- 2. device timing in init()/step() mode -------------------------------------------------------------


def test_init_and_step_mode_attaches_device_timing_once_the_script_has_cuda(cuda, monkeypatch):
    monkeypatch.setenv("RANKTOP_DEVICE_TIMING", "")
    probe = probe_on(cuda)
    rec = probe.recorder
    gpu_timing.arm(probe, find_cuda=lambda: cuda if cuda.is_initialized() else None)
    rec.begin_step()
    rec.end_step()
    assert rec.timeline is None and cuda.created == 0  # CUDA not up: the probe touched nothing
    cuda.set_device(3)  # the script's own set_device initialises CUDA
    for _ in range(3):
        rec.begin_step()
        rec.begin_phase("forward")
        cuda.current_stream().launch(0.005)
        rec.end_phase()
        rec.end_step()
    assert rec.timeline is not None and probe.collectives.device is not None
    assert probe.sender.device == "cuda:3 NVIDIA H100 80GB HBM3"
    cuda.run(1.0)
    timed = [r for r in rec.timeline.resolve(rec.drain()) if "g" in r]
    assert [r["n"] for r in timed] == [1, 2, 3] and timed[-1]["g"]["p"]["forward"] == pytest.approx(0.005)


def test_init_mode_times_the_device_the_training_holds_memory_on_not_the_threads_default(cuda, monkeypatch):
    """A script that moves its model to cuda:2 without set_device: the training thread's current device is 0."""
    monkeypatch.setenv("RANKTOP_DEVICE_TIMING", "")
    probe = probe_on(cuda)
    gpu_timing.arm(probe, find_cuda=lambda: cuda if cuda.is_initialized() else None)
    cuda.init()
    cuda.reserved[2] = 1 << 30  # model.to("cuda:2")
    probe.recorder.begin_step()
    assert probe.sender.device == "cuda:2 NVIDIA H100 80GB HBM3"
    assert cuda.current_device() == 0  # the thread's own device left as it was


# -- 4. no CUDA from the probe's own threads ------------------------------------------------------------


def test_the_hello_and_the_gpu_locator_touch_no_cuda_from_the_probes_threads(cuda, monkeypatch, tmp_path):
    from ranktop.probe import gpu_sampler
    from ranktop.transport.identity import detect
    from ranktop.probe.sender import Sender

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda, __version__="2.13.0"))
    rec = Recorder()
    sender = Sender(detect("job22"), rec, rate_hz=4, directory=str(tmp_path), on_fault=lambda e: None)
    seen = {}

    def on_probe_thread():
        seen["hello"] = sender.hello()
        seen["where"] = gpu_sampler.locate_rank_gpu(0, lambda: None)

    thread = threading.Thread(target=on_probe_thread, name="ranktop-probe")
    thread.start()
    thread.join()
    assert "ranktop-probe" not in cuda.calls_by_thread and not cuda.is_initialized()
    assert seen["hello"]["device"] == "cpu" and seen["where"] is None
    probe = types.SimpleNamespace(recorder=rec, collectives=None, sender=sender)
    cuda.set_device(1)  # the training thread's device, not the thread's default 0
    gpu_timing.attach_cuda(probe, cuda, work_class=FakeWork)
    assert sender.hello()["device"] == "cuda:1 NVIDIA H100 80GB HBM3"


# -- 5. gpu_timing --------------------------------------------------------------------------------------


def timed_steps(rec, cuda, count, seconds=0.004):
    for _ in range(count):
        rec.begin_step()
        rec.begin_phase("forward")
        cuda.current_stream().launch(seconds)
        rec.end_phase()
        rec.end_step()


def test_a_step_whose_gpu_work_ends_long_after_the_host_drained_it_keeps_its_device_times(cuda, attached, monkeypatch):
    rec = attached.recorder
    timed_steps(rec, cuda, 3)
    clock = [100.0]
    monkeypatch.setattr(gpu_timing, "_perf", lambda: clock[0])
    assert rec.timeline.resolve(rec.drain()) == []
    clock[0] += 5.0  # the GPU is 5 s behind the host (a deep queue): no reason to lose the times
    assert rec.timeline.resolve([]) == []
    cuda.run(1.0)
    out = rec.timeline.resolve([])
    assert [("g" in r) for r in out] == [True, True, True]


def test_records_held_for_their_events_are_bounded_in_number(cuda, attached, monkeypatch):
    monkeypatch.setattr(gpu_timing, "MAX_HELD", 3)
    rec = attached.recorder
    timed_steps(rec, cuda, 5, seconds=10.0)  # the device is far behind and does not move
    out = rec.timeline.resolve(rec.drain())
    assert [r["n"] for r in out] == [0, 1] and all("g" not in r for r in out)  # the oldest go, untimed


def test_each_boundary_records_on_the_stream_current_then(cuda, attached):
    rec = attached.recorder
    side = cuda.Stream(cuda, "side")
    timed_steps(rec, cuda, 1)
    with cuda.stream(side):  # the script's work moves to its own stream
        rec.begin_step()
        rec.begin_phase("forward")
        side.launch(0.020)
        rec.end_phase()
        rec.end_step()
    cuda.run(1.0)
    first, second = rec.timeline.resolve(rec.drain())
    assert first["g"]["p"]["forward"] == pytest.approx(0.004)
    assert second["g"]["p"]["forward"] == pytest.approx(0.020)


def test_a_graph_capture_neither_breaks_nor_switches_off_the_probe(cuda, attached):
    rec = attached.recorder
    group = FakeNcclGroup(cuda)
    all_reduce = wrapped("all_reduce", group)
    timed_steps(rec, cuda, 2)
    with cuda.graph_capture():
        timed_steps(rec, cuda, 1)  # no timing event may go into a graph
        all_reduce(Tensor())
        records = rec.timeline.resolve(rec.drain())  # the sender thread during the capture: no query
        calls = attached.collectives.drain()
    assert not cuda.capture_invalidated
    cuda.run(1.0)
    records += rec.timeline.resolve([])
    calls += attached.collectives.drain()
    assert [("g" in r) for r in records] == [True, True, False]
    assert len(calls) == 1


def test_an_event_the_device_cannot_time_costs_its_step_the_device_times_only(cuda, attached, monkeypatch):
    rec = attached.recorder
    timed_steps(rec, cuda, 2)
    cuda.run(1.0)

    def broken(self, end):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(type(rec.timeline.pool._free[0]), "elapsed_time", broken)
    out = rec.timeline.resolve(rec.drain())
    assert [r["n"] for r in out] == [0, 1] and all("g" not in r for r in out)


def test_events_are_created_on_the_device_at_attach_never_on_the_hot_path(cuda, attached):
    created = cuda.created
    assert created >= 2 * 64  # the timeline's pool and the waits' pool, each event recorded once
    group = FakeNcclGroup(cuda)
    all_reduce = wrapped("all_reduce", group)
    for _ in range(5):
        timed_steps(attached.recorder, cuda, 1)
        all_reduce(Tensor())
    assert cuda.created == created


def test_automatic_mode_attaches_on_the_optimizers_device(cuda, monkeypatch):
    monkeypatch.setenv("RANKTOP_DEVICE_TIMING", "")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    probe = probe_on(cuda)
    gpu_timing.arm(probe, find_cuda=lambda: cuda if cuda.is_initialized() else None)
    start = gpu_timing.starter(probe)  # auto mode: disarms init/step mode's attach
    device = types.SimpleNamespace(type="cuda", index=3)
    optimizer = types.SimpleNamespace(param_groups=[{"params": [types.SimpleNamespace(device=device)]}])
    start(optimizer)
    assert probe.recorder.timeline is not None and probe.sender.device == "cuda:3 NVIDIA H100 80GB HBM3"
    assert not hasattr(cuda._local, "device")  # the thread's own current device was left as it was


def test_the_work_wait_wrapper_passes_real_gloo_works_through(tmp_path, cuda):
    """torch's Work is a pybind class: its wait() can be wrapped class-wide, and a work ranktop does not time
    (here gloo's, on CPU) waits as before."""
    import torch
    import torch.distributed as dist

    work_class = dist.distributed_c10d.Work
    original = work_class.wait
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        waits = device_waits.DeviceWaits(cuda, pool_size=4)
        device_waits.watch_work(work_class, waits)
        assert getattr(work_class.wait, "_ranktop_device", False)
        t = torch.ones(4)
        work = dist.all_reduce(t, async_op=True)
        assert work.wait() is True and t.tolist() == [1.0] * 4
    finally:
        device_waits.unwatch()
        work_class.wait = original
        dist.destroy_process_group()


# -- 6. what a read of CUDA's, NCCL's and DDP's own source says (issue 33) ------------------------------------


def test_a_model_on_another_device_than_the_thread_s_is_timed_there_and_no_context_opens_elsewhere(cuda, monkeypatch):
    """The model on cuda:2, no set_device: the training thread's current device stays 0. Events made on device 2
    must be recorded on device 2's stream (CUDAEvent::record refuses another device's), and the sender thread's
    queries must run under device 2 (cudaEventQuery has no device guard: a new thread is on device 0, and every
    rank of a node would open a context on GPU 0)."""
    probe = probe_on(cuda)
    assert cuda.current_device() == 0
    assert gpu_timing.attach_cuda(probe, cuda, device=2, work_class=FakeWork)
    monkeypatch.setattr(dist_wrappers, "_tracker", probe.collectives)
    with cuda.device(2):
        group = FakeNcclGroup(cuda, kernel_s=0.001)
    rec = probe.recorder
    all_reduce = wrapped("all_reduce", group)
    for _ in range(3):
        rec.begin_step()
        rec.begin_phase("forward")
        cuda.current_stream(2).launch(0.004)
        rec.end_phase()
        all_reduce(Tensor())
        rec.end_step()
    cuda.run(1.0)
    out = {}

    def sender():
        out["steps"] = rec.timeline.resolve(rec.drain())
        out["calls"] = probe.collectives.drain()

    thread = threading.Thread(target=sender, name="ranktop-sender")
    thread.start()
    thread.join()
    assert [("g" in r) for r in out["steps"]] == [True] * 3
    assert out["steps"][0]["g"]["p"]["forward"] == pytest.approx(0.004) and len(out["calls"]) == 3
    assert cuda.contexts == {2}  # nothing on device 0, from either thread
    assert cuda.current_device() == 0


def test_a_cuda_error_recording_an_event_turns_device_timing_off_with_one_line_never_an_exception(cuda, attached, capsys, monkeypatch):
    rec, tracker = attached.recorder, attached.collectives
    group = FakeNcclGroup(cuda)
    all_reduce = wrapped("all_reduce", group)
    timed_steps(rec, cuda, 1)
    original, count = cuda.Event.record, [0]

    def failing(self, stream=None):
        count[0] += 1
        if count[0] >= 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return original(self, stream)

    monkeypatch.setattr(cuda.Event, "record", failing)
    timed_steps(rec, cuda, 2)  # would raise into the training loop before
    all_reduce(Tensor())
    work = all_reduce(Tensor(), async_op=True)
    work.wait()  # Work.wait: the device path is off, the wait itself goes through
    monkeypatch.setattr(cuda.Event, "record", original)
    timed_steps(rec, cuda, 1)
    cuda.run(1.0)
    steps = rec.timeline.resolve(rec.drain(), final=True)
    assert [r["n"] for r in steps] == [0, 1, 2, 3]
    assert "g" in steps[0] and all("g" not in r for r in steps[2:])  # off for good, host times go on
    calls = tracker.drain(final=True)
    assert len(calls) == 2 and all(c["d"] >= 0 for c in calls)
    err = capsys.readouterr().err
    assert err.count("ranktop: device timing off on rank") == 1 and "illegal memory access" in err


def test_a_side_stream_collective_waits_where_the_compute_stream_waits_for_it(cuda, attached):
    """A blocking collective inside ``with stream(side)`` runs and waits on the side stream: its 20 ms of kernel
    are no stall of the compute stream, which computes 5 ms meanwhile. Its wait is where the compute stream waits
    for the side stream (``wait_stream``: an event recorded there, waited for on the compute stream): 15 ms; its
    kernel's 20 ms go as its kernel time."""
    group = FakeNcclGroup(cuda, kernel_s=0.020)
    all_gather = wrapped("all_gather_into_tensor", group)
    rec = attached.recorder
    compute = cuda.current_stream()
    side = cuda.Stream(device=cuda.current_device())
    rec.begin_step()
    rec.begin_phase("forward")
    with cuda.stream(side):
        all_gather(Tensor())
    compute.launch(0.005)  # forward work that does not need the gathered parameters
    compute.wait_stream(side)
    rec.end_phase()
    rec.end_step()
    cuda.run(1.0)
    (call,) = attached.collectives.drain()
    (step,) = rec.timeline.resolve(rec.drain())
    assert call["d"] == pytest.approx(0.015) and call["ph"] == "forward"
    assert call["kd"] == pytest.approx(0.020)
    assert step["g"]["p"]["forward"] == pytest.approx(0.020)


def test_a_side_stream_collective_the_compute_stream_never_waits_for_keeps_its_host_time(cuda, attached):
    """No event on the side stream after it, or one nobody on the compute stream waits for: no stall to time."""
    group = FakeNcclGroup(cuda, kernel_s=0.020)
    all_gather = wrapped("all_gather_into_tensor", group)
    side = cuda.Stream(device=cuda.current_device())
    before = attached.collectives.device.available
    with cuda.stream(side):
        all_gather(Tensor())
    event = side.record_event()
    other = cuda.Stream(device=cuda.current_device())
    other.wait_event(event)  # another side stream waits: not the compute stream
    del event
    cuda.run(1.0)
    (call,) = attached.collectives.drain(final=True)
    assert call["d"] < 0.001 and call["kd"] == pytest.approx(0.020)
    assert attached.collectives.device.available == before  # every event back in the pool


def test_an_async_collective_waited_on_a_side_stream_is_no_wait_of_the_compute_stream(cuda, attached):
    """``work = all_reduce(async_op=True)``; ``with stream(side): work.wait()``: the side stream joins the kernel,
    the compute stream computes on and never waits for it. Counted before as a full-kernel wait (20 ms), on a
    stream that never stalled; now its wait is the host's (none, with NCCL), its kernel time 20 ms."""
    group = FakeNcclGroup(cuda, kernel_s=0.020)
    all_reduce = wrapped("all_reduce", group)
    compute = cuda.current_stream()
    side = cuda.Stream(device=cuda.current_device())
    work = all_reduce(Tensor(), async_op=True)
    with cuda.stream(side):
        work.wait()
    compute.launch(0.030)  # the compute stream never waits for the side stream
    del work
    cuda.run(1.0)
    (call,) = attached.collectives.drain(final=True)
    assert call["d"] < 0.001
    assert call["kd"] == pytest.approx(0.020)


def test_an_async_collective_waited_on_a_side_stream_waits_where_the_compute_stream_joins_that_stream(cuda, attached):
    """The same, and the compute stream joins the side stream (``wait_event`` on an event recorded there) after
    5 ms of its own work: 15 ms of stall, in the phase where it waits."""
    group = FakeNcclGroup(cuda, kernel_s=0.020)
    all_reduce = wrapped("all_reduce", group)
    rec = attached.recorder
    compute = cuda.current_stream()
    side = cuda.Stream(device=cuda.current_device())
    rec.begin_step()
    rec.begin_phase("backward")
    work = all_reduce(Tensor(), async_op=True)
    with cuda.stream(side):
        work.wait()
        joined = cuda.Event()
        joined.record()  # on the current stream: the side stream
    rec.end_phase()
    rec.begin_phase("optimizer")
    compute.launch(0.005)
    compute.wait_event(joined)
    rec.end_phase()
    rec.end_step()
    cuda.run(1.0)
    (call,) = attached.collectives.drain()
    assert call["d"] == pytest.approx(0.015) and call["ph"] == "optimizer"
    assert call["kd"] == pytest.approx(0.020)


class FakeFsdpParamGroup:
    """FSDP2's unshard and wait_for_unshard as torch 2.13 runs them on a GPU (torch/distributed/fsdp/_fully_shard:
    ``foreach_all_gather`` and ``foreach_all_gather_copy_out``): the all-gather with async_op=False inside
    ``with stream(all_gather_stream)``, an event recorded there right after it, and the compute stream's
    ``current_stream().wait_event(event)`` where the layer needs its parameters."""

    def __init__(self, cuda, all_gather, all_gather_stream):
        self.cuda, self.all_gather, self.stream = cuda, all_gather, all_gather_stream
        self.result = None

    def unshard(self):
        with self.cuda.stream(self.stream):
            self.all_gather(Tensor())
            self.result = self.stream.record_event()  # AllGatherResult.all_gather_event

    def wait_for_unshard(self):
        self.cuda.current_stream().wait_event(self.result)
        self.result = None  # the copy-out: the event is dropped


def test_fsdp2_s_wait_for_unshard_is_the_all_gather_s_wait(cuda, attached):
    """FSDP2 prefetches layer 2's all-gather while layer 1 computes; layer 2's ``wait_for_unshard`` is where the
    compute stream stalls for it: the all-gather's wait, matched to it through its unshard event, in forward.
    Before, nothing was measured there (the side stream's wait was dropped, the stall stayed in the phase)."""
    group = FakeNcclGroup(cuda, kernel_s=0.012)
    all_gather = wrapped("all_gather_into_tensor", group)
    rec = attached.recorder
    side = cuda.Stream(device=cuda.current_device())
    layer1, layer2 = FakeFsdpParamGroup(cuda, all_gather, side), FakeFsdpParamGroup(cuda, all_gather, side)
    rec.begin_step()
    rec.begin_phase("forward")
    layer1.unshard()
    layer1.wait_for_unshard()  # nothing to overlap: the compute stream waits the whole 12 ms
    layer2.unshard()  # prefetched
    cuda.current_stream().launch(0.008)  # layer 1's forward
    layer2.wait_for_unshard()  # the all-gather ends 12 ms after it began: 4 ms of stall
    cuda.current_stream().launch(0.008)
    rec.end_phase()
    rec.end_step()
    cuda.run(1.0)
    first, second = attached.collectives.drain()
    assert first["op"].startswith("all_gather_into_tensor") and second["op"] == first["op"]
    assert first["d"] == pytest.approx(0.012) and second["d"] == pytest.approx(0.004)
    assert first["kd"] == pytest.approx(0.012) and second["kd"] == pytest.approx(0.012)
    assert first["ph"] == second["ph"] == "forward"
    assert stream_waits_matched(attached) == 2


def test_fsdp2_s_reduce_scatter_waits_at_whichever_later_event_the_compute_stream_waits_for_first(cuda, attached):
    """FSDP2's foreach_reduce: the reduce-scatter on its stream, ``reduce_scatter_event`` recorded after it, then
    the division and ``post_reduce_event`` on the same stream; the compute stream waits for the latter at the end of
    backward. Both events come after the collective on its stream: either covers it."""
    group = FakeNcclGroup(cuda, kernel_s=0.010)
    reduce_scatter = wrapped("reduce_scatter_tensor", group)
    rec = attached.recorder
    side = cuda.Stream(device=cuda.current_device())
    rec.begin_step()
    rec.begin_phase("backward")
    with cuda.stream(side):
        reduce_scatter(Tensor())
        reduce_scatter_event = side.record_event()
        side.launch(0.001)  # the division of the reduced gradients
        post_reduce_event = side.record_event()
    cuda.current_stream().launch(0.004)
    cuda.current_stream().wait_event(post_reduce_event)  # the compute stream stalls 7 ms
    cuda.current_stream().wait_event(reduce_scatter_event)  # already past: no second wait of it
    rec.end_phase()
    rec.end_step()
    cuda.run(1.0)
    (call,) = attached.collectives.drain()
    assert call["d"] == pytest.approx(0.007) and call["ph"] == "backward" and call["kd"] == pytest.approx(0.010)


def stream_waits_matched(probe):
    return probe.collectives.device.sides.matched


def test_a_wait_on_a_collective_of_cpu_tensors_keeps_its_host_time(cuda, attached):
    """``wait_tensor`` (and ``Work.wait``) of a gloo collective in a GPU job: the host blocks, the streams know
    nothing; device timing read ~0 for it before."""
    import time

    wait = dist_wrappers._timed_wait(lambda handle: time.sleep(0.02), "wait_tensor", collective_tracker.FUNCTIONAL)
    cuda.current_stream().launch(5.0)  # a busy stream: events around the wait would read nothing useful
    wait(Tensor(is_cuda=False))
    (call,) = attached.collectives.drain()
    assert call["d"] >= 0.02


def test_a_future_completing_after_its_wait_takes_no_event_from_the_pool(cuda, attached):
    """A work whose future calls back late (after ``wait()``, as gloo's may): no provisional end for a closed
    wait, so every event goes back to the pool."""

    class LateFuture:
        def add_done_callback(self, callback):
            self.callback = callback

    class LateWork(FakeWork):
        future = LateFuture()

        def get_future(self):
            return self.future

    tracker = attached.collectives
    before = tracker.device.available
    work = dist_wrappers._wrap("all_reduce", "tensor", lambda tensor, async_op=False: LateWork(cuda, 0.0),
                             FakeDist(FakeNcclGroup(cuda)))(Tensor(), async_op=True)  # fmt: skip
    work.wait()
    LateWork.future.callback(LateWork.future)  # completes now, after the wait
    cuda.run(1.0)
    assert len(tracker.drain()) == 1
    assert tracker.device.available == before


def test_call_starts_are_not_shifted_by_the_queue_at_attach(cuda, monkeypatch):
    """t0's reference event goes on an idle stream: on the training stream, 5 s behind at attach, it completed
    only then, and every start read 5 s early."""
    probe = probe_on(cuda)
    cuda.set_device(2)
    cuda.current_stream().launch(5.0)  # the device is 5 s behind the host when timing attaches
    assert gpu_timing.attach_cuda(probe, cuda, work_class=FakeWork)
    monkeypatch.setattr(dist_wrappers, "_tracker", probe.collectives)
    epoch_perf = probe.collectives.device._epoch_perf
    cuda.host(6.0)
    cuda.run(6.0)  # 6 s later the device has caught up
    wrapped("all_reduce", FakeNcclGroup(cuda))(Tensor())
    cuda.run(1.0)
    (call,) = probe.collectives.drain()
    assert call["t0"] - epoch_perf == pytest.approx(6.0)


def test_an_async_collective_launched_on_a_side_stream_is_timed_where_the_compute_stream_waits_for_it(cuda, attached):
    """What benchmarks/gpu_check.py checks on a GPU: a side stream holds an async all-reduce back 10 ms; the
    compute stream, idle, waits for it at ``work.wait()``: that is the wait, 10 ms and the kernel."""
    group = FakeNcclGroup(cuda, kernel_s=0.001)
    all_reduce = wrapped("all_reduce", group)
    side = cuda.Stream(device=cuda.current_device())
    with cuda.stream(side):
        side.launch(0.010)
        work = all_reduce(Tensor(), async_op=True)
    work.wait()
    cuda.run(1.0)
    (call,) = attached.collectives.drain()
    assert call["d"] == pytest.approx(0.011)


def test_automatic_mode_records_no_event_inside_a_cuda_graph_capture(cuda, attached):
    """``torch.cuda.graph`` / ``mode="reduce-overhead"``: the script's module calls run during the capture, and
    automatic mode's hooks fire there; no timing event may go into the graph, and nothing may be queried while
    it is captured (both would ruin the capture). Steps around it keep their device times."""
    import torch

    from ranktop.probe import auto

    rec = attached.recorder
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hooks = auto.TorchHooks(auto.AutoTimer(rec), model=model, optimizer=opt).install()
    try:

        def step():
            model(torch.ones(4)).sum().backward()
            opt.step()
            opt.zero_grad()

        step()
        with cuda.graph_capture():
            before = cuda.records
            step()  # captured: hooks fire, the recorder's boundaries come, no event is recorded
            assert cuda.records == before
            assert rec.timeline.resolve(rec.drain()) == []  # the sender during the capture: no query
        step()
        step()
        cuda.run(1.0)
        out = rec.timeline.resolve(rec.drain())
    finally:
        hooks.remove()
    assert not cuda.capture_invalidated
    # steps are contiguous (one ends at the next training forward): the step before the capture ends inside it and
    # the captured one begins there, so both go without device times; the next one has them again
    assert [("g" in r) for r in out] == [False, False, True]


# -- captures of every kind ----------------------------------------------------------------------------


def test_a_capture_through_torch_accelerator_graph_is_one_too(cuda, monkeypatch):
    """torch 2.13's ``torch.accelerator.Graph`` (``with graph:`` calls its capture_begin/capture_end): the same
    rules as ``torch.cuda.CUDAGraph``. Before, only the latter was watched: the sender queried during the
    capture, which ruins it."""
    accelerator = types.SimpleNamespace(Graph=type("Graph", (cuda.CUDAGraph.__mro__[1],), {"cuda": cuda}))
    probe = probe_on(cuda)
    cuda.set_device(2)
    assert gpu_timing.attach_cuda(probe, cuda, work_class=FakeWork, accelerator=accelerator)
    monkeypatch.setattr(dist_wrappers, "_tracker", probe.collectives)
    rec = probe.recorder
    timed_steps(rec, cuda, 2)
    graph = accelerator.Graph()
    graph.capture_begin()
    before = cuda.records
    timed_steps(rec, cuda, 1)
    wrapped("all_reduce", FakeNcclGroup(cuda))(Tensor())
    records = rec.timeline.resolve(rec.drain())  # the sender during the capture: no query
    calls = probe.collectives.drain()
    assert cuda.records == before and not cuda.capture_invalidated
    graph.capture_end()
    cuda.run(1.0)
    records += rec.timeline.resolve([])
    assert [("g" in r) for r in records] == [True, True, False] and len(calls + probe.collectives.drain()) == 1


def test_a_capture_begun_in_cpp_is_seen_by_asking_cuda_before_each_event(cuda, attached):
    """A capture no Python wrapper sees begin (a library's own, in C++): the training thread asks CUDA
    (``is_current_stream_capturing``, on the training device) before it records an event, records none, and
    the sender queries nothing until the training thread has seen the capture end."""
    rec = attached.recorder
    timed_steps(rec, cuda, 2)
    cuda.capturing = True  # begun in C++: no capture_begin of ours ran
    before = cuda.records
    timed_steps(rec, cuda, 1)
    wrapped("all_reduce", FakeNcclGroup(cuda))(Tensor())
    records = rec.timeline.resolve(rec.drain())
    attached.collectives.drain()
    assert cuda.records == before and not cuda.capture_invalidated
    assert not rec.timeline.off and not attached.collectives.device.off  # a capture is no fault
    cuda.capturing = False
    timed_steps(rec, cuda, 2)
    cuda.run(1.0)
    records += rec.timeline.resolve(rec.drain())
    assert [("g" in r) for r in records] == [True, True, False, True, True]
    assert cuda.contexts == {2}  # asked of the training device only


def test_automatic_mode_waits_out_a_capture_before_it_attaches(cuda, monkeypatch):
    """Automatic mode attaches at the first optimizer step; a step captured whole (``torch.cuda.graph`` around
    forward, backward and a capturable optimizer's step) would have had the pool's events made (each recorded
    once) inside the capture, which ruins it. It attaches at the first step outside one."""
    monkeypatch.setenv("RANKTOP_DEVICE_TIMING", "")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    probe = probe_on(cuda)
    start = gpu_timing.starter(probe)
    device = types.SimpleNamespace(type="cuda", index=3)
    optimizer = types.SimpleNamespace(param_groups=[{"params": [types.SimpleNamespace(device=device)]}])
    with cuda.graph_capture():
        assert start(optimizer) == gpu_timing.AGAIN
    cuda.capturing = True  # one begun in C++
    assert start(optimizer) == gpu_timing.AGAIN
    assert probe.recorder.timeline is None and cuda.created == 0 and not cuda.capture_invalidated
    cuda.capturing = False
    start(optimizer)
    assert probe.recorder.timeline is not None


def test_automatic_mode_calls_its_first_step_callback_again_when_asked():
    import torch

    from ranktop.probe import auto

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    hooks = auto.TorchHooks(auto.AutoTimer(Recorder()), model=model, optimizer=opt)
    hooks._on_first_step = lambda optimizer: seen.append(optimizer) or (gpu_timing.AGAIN if len(seen) < 2 else None)
    hooks.install()
    try:
        for _ in range(4):
            model(torch.ones(2)).sum().backward()
            opt.step()
    finally:
        hooks.remove()
    assert len(seen) == 2
