"""probe/evidence.py: the rates a rank's state carries, from the garbage collector and the scheduler."""

from __future__ import annotations

import gc
import sys
import threading

import pytest
from support import wait_for

from ranktop.probe import evidence
from ranktop.wire.messages import Evidence, State


def test_only_the_training_threads_collections_are_timed():
    timer = evidence.GcTimer(threading.get_ident())
    timer.install()
    try:
        gc.collect()
        own = timer.collections
        other = threading.Thread(target=gc.collect)
        other.start()
        other.join()
    finally:
        timer.remove()
    assert own == 1 and timer.seconds > 0
    assert timer.collections == own  # the other thread's collection is not the step's
    assert timer not in gc.callbacks


def test_the_rates_are_over_the_window_and_fit_the_wire():
    clock = [100.0]
    ev = evidence.Evidence(clock=lambda: clock[0])
    assert ev.sample() is None  # one reading: no rate yet
    ev.gc.seconds, ev.gc.collections = 0.5, 10
    clock[0] += 2.0
    rates = ev.sample()
    assert rates["win"] == 2.0 and rates["gc"] == pytest.approx(0.25) and rates["gc_n"] == pytest.approx(5.0)
    clock[0] += 0.1
    assert ev.sample() is rates  # read at most every SAMPLE_EVERY_S
    for _ in range(40):  # the oldest readings leave the window
        clock[0] += 1.0
        rates = ev.sample()
    assert rates["win"] <= evidence.WINDOW_S + 1.0 and rates["gc"] == 0.0
    State(ev=Evidence(**rates))  # the wire's type takes it as it is


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/task is Linux's")
def test_the_training_threads_run_queue_wait_and_involuntary_switches_are_read():
    sched = evidence.read_sched(threading.get_native_id())
    assert sched is not None and sched[0] >= 0 and sched[1] >= 0
    assert evidence.read_sched(2**31 - 1) is None  # no such thread: nothing, no error


ALL_TO_ALL_SCRIPT = r"""
import os
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], RANK="0", WORLD_SIZE="1")
import torch, torch.distributed as dist
dist.init_process_group("gloo")
from ranktop.probe import collectives
from ranktop.probe.collective_tracker import CollectiveTracker
from ranktop.probe.recorder import Recorder
tracker = CollectiveTracker(Recorder())
collectives.install(tracker)
dist.all_to_all_single(torch.empty(6, 3), torch.ones(6, 3), output_split_sizes=[6], input_split_sizes=[6])
dist.all_to_all_single(output=torch.empty(2, 3), input=torch.ones(2, 3), async_op=True).wait()
dist.all_reduce(torch.ones(9, 3))  # no all-to-all: no rows
import torch.distributed._functional_collectives as funcol
funcol.all_to_all_single(torch.ones(7, 2), [7], [7], dist.group.WORLD).sum()
print(tracker.rows_in)
"""


def test_the_rows_an_all_to_all_receives_are_counted_in_the_wrappers(tmp_path):
    import socket
    import subprocess

    with socket.socket() as free:  # a port nobody holds now (a random one met another session's, here)
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = dict(__import__("os").environ, PORT=str(port), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", ALL_TO_ALL_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == 6 + 2 + 7  # each call's output rows (the functional one: its split sizes)


def test_rows_received_inputs_and_allocator_retries_go_out_per_second_or_per_step():
    clock = [0.0]
    totals = {"rows": 0, "steps": 0, "retries": 3}
    ev = evidence.Evidence(clock=lambda: clock[0], rows_in=lambda: totals["rows"], steps=lambda: totals["steps"],
                           retries=lambda: totals["retries"], children=lambda tid: (1.0, 2))  # fmt: skip
    ev.sample()
    clock[0] += 2.0
    totals.update(rows=800, steps=20, retries=4)
    for _ in range(20):
        ev.inputs.add(samples=8, tokens=1000)
    rates = ev.sample()
    assert rates["a2a_rows"] == 400.0 and rates["retries"] == 0.5
    assert rates["tokens"] == 1000.0 and rates["samples"] == 8.0
    clock[0] += 2.0
    totals.update(steps=40)
    for _ in range(20):
        ev.inputs.add(samples=8, tokens=3000)
    rates = ev.sample()
    assert rates["tokens"] == 2000.0 and rates["samples"] == 8.0  # the mean per step over the window's steps
    assert rates["kids"] == 0.0 and rates["kids_n"] == 2  # workers that used no more CPU: none a second
    State(ev=Evidence(**rates))


def test_a_declared_work_per_step_stands_for_inputs_never_counted():
    clock = [0.0]
    ev = evidence.Evidence(clock=lambda: clock[0], work=lambda: {"batch": 32, "tokens": 4096, "dtype": "bf16"})
    ev.sample()
    clock[0] += 2.0
    rates = ev.sample()
    assert rates["samples"] == 32.0 and rates["tokens"] == 4096.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/task/*/children is Linux's")
def test_the_cpu_of_child_processes_is_read_from_proc():
    import subprocess

    before = evidence.read_children()
    assert before is not None
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        # 0.3 s of CPU: a second on a quiet machine, and as long as a busy one takes to give it to the child
        seconds, count = wait_for(lambda: (read := evidence.read_children()) and read[0] >= 0.25 and read, 30,
                                  "the child's CPU never showed", seen=lambda: f"children: {evidence.read_children()}")  # fmt: skip
        assert count == before[1] + 1 and seconds >= 0.25
    finally:
        child.kill()
        child.wait()
    assert evidence.read_children(pid=2**22 + 12345) is None  # no such process: nothing, no error


def test_add_inputs_before_init_or_after_shutdown_does_nothing_and_never_raises():
    from ranktop import probe

    assert probe.get() is None
    probe.add_inputs(samples=8, tokens=4096)
    probe.add_inputs()


DATALOADER_SCRIPT = r"""
import time, torch
from torch.utils.data import DataLoader, Dataset
from ranktop.probe import evidence

ITEM_CPU_S, BATCH, IN_FLIGHT = 0.01, 4, 2 * 2  # two workers, each two batches ahead (DataLoader's prefetch_factor)

class Busy(Dataset):
    def __len__(self):
        return 100_000
    def __getitem__(self, i):
        end = time.process_time() + ITEM_CPU_S  # a transform that costs CPU
        while time.process_time() < end:
            pass
        return torch.zeros(4)

now = [0.0]
def clock():
    now[0] = time.monotonic()
    return now[0]

ev = evidence.Evidence(clock=clock)
ev.sample()
loader = iter(DataLoader(Busy(), batch_size=BATCH, num_workers=2))
came, rates, end = [], None, time.monotonic() + 120
while time.monotonic() < end:
    next(loader)
    came.append(time.monotonic())
    fresh = ev.sample()
    if fresh is rates or fresh is None:
        continue
    rates = fresh
    # the batches that came in the window were made in it, but for those the workers had made ahead
    made = sum(1 for at in came if at >= now[0] - rates["win"]) - IN_FLIGHT
    if made * BATCH * ITEM_CPU_S >= 0.4:
        break
print(rates["kids_n"], rates["kids"] * rates["win"], made * BATCH * ITEM_CPU_S)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/task/*/children is Linux's")
def test_a_dataloader_s_workers_and_the_cpu_they_use_are_in_the_evidence():
    import subprocess

    out = subprocess.run([sys.executable, "-c", DATALOADER_SCRIPT], capture_output=True, text=True, timeout=180,
                         env=dict(__import__("os").environ, OMP_NUM_THREADS="1"))  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    workers, used, spent = out.stdout.split()
    # the CPU seconds the evidence says the workers used in its window: at least what they spent on the batches
    # that came in it (whatever share of the cores a busy machine left them), less /proc's ticks
    assert int(workers) == 2 and float(spent) >= 0.4 and float(used) >= 0.9 * float(spent) - 0.05, out.stdout


LOADER_AND_COMPILE_SCRIPT = r"""
import threading, time, torch
from torch.utils.data import DataLoader, Dataset
from ranktop.probe import evidence

class Slow(Dataset):  # a loader that waits (storage) for 5 ms an item, on the training thread
    def __len__(self):
        return 100_000
    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.zeros(4)

ev = evidence.Evidence()  # built on this (the training) thread, after torch's dataloader is imported
ev.start()
loader = iter(DataLoader(Slow(), batch_size=2, num_workers=0))
for _ in range(20):
    next(loader)
other = threading.Thread(target=lambda: [next(iter(DataLoader(Slow(), batch_size=2))) for _ in range(5)])
other.start(); other.join()  # another thread's batches are not the training thread's
print("loader", ev.loader.batches, ev.loader.seconds, ev.loader.cpu)
torch._dynamo.config.recompile_limit = 64
f = torch.compile(lambda x: x * 2 + 1, backend="eager", dynamic=False)
for n in range(3, 9):  # a new shape each call: a recompile each
    f(torch.ones(n))
print("compile", *ev.compiles.read())
ev.stop()
print("unwrapped", type(loader).__next__ is not ev.loader._wrapper)
"""


@pytest.mark.slow
def test_the_time_inside_a_dataloader_s_next_and_dynamo_s_compiles_are_counted():
    """A real DataLoader and a real torch.compile in a fresh process: the training thread's time inside
    ``__next__`` (blocked: little CPU) and its batches, another thread's left out; dynamo's compile time and
    frames from its own counters; the wrapper gone at stop."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", LOADER_AND_COMPILE_SCRIPT], capture_output=True, text=True, timeout=300,
                         env=dict(__import__("os").environ, OMP_NUM_THREADS="1"))  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines() if line.strip()}
    batches, seconds, cpu = int(lines["loader"][0]), float(lines["loader"][1]), float(lines["loader"][2])
    assert batches == 20 and seconds >= 20 * 2 * 0.005 and cpu < seconds / 2, out.stdout
    jit_s, frames, _breaks = float(lines["compile"][0]), int(lines["compile"][1]), int(lines["compile"][2])
    assert frames >= 6 and jit_s > 0, out.stdout
    assert lines["unwrapped"] == ["True"], out.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_the_training_thread_s_cpu_and_its_process_s_cpu_threads_and_cores_are_rates_on_the_wire():
    clock = [0.0]
    ev = evidence.Evidence(clock=lambda: clock[0], steps=lambda: 0)
    ev.sample()
    end = __import__("time").thread_time() + 0.2
    while __import__("time").thread_time() < end:  # 0.2 s of this thread's CPU
        pass
    clock[0] += 1.0
    rates = ev.sample()
    assert rates["cpu"] >= 0.15 and rates["pcpu"] >= 0.1 and rates["thr"] >= 1 and rates["cores"] >= 1, rates
    State(ev=Evidence(**rates))


def test_padded_tokens_go_out_per_step_beside_the_real_ones_and_the_old_call_still_works():
    clock = [0.0]
    steps = [0]
    ev = evidence.Evidence(clock=lambda: clock[0], steps=lambda: steps[0])
    ev.sample()
    clock[0] += 2.0
    steps[0] = 10
    for _ in range(10):
        ev.inputs.add(8, 600, 1024)  # 600 real tokens, padded to 1024
    rates = ev.sample()
    assert (rates["tokens"], rates["padded"], rates["samples"]) == (600.0, 1024.0, 8.0)
    State(ev=Evidence(**rates))
    old = evidence.Evidence(clock=lambda: clock[0], steps=lambda: steps[0])
    old.sample()
    clock[0] += 2.0
    steps[0] = 20
    old.inputs.add(samples=8, tokens=600)
    assert "padded" not in old.sample()  # not said: judged on the tokens


def test_totals_that_appear_within_the_window_are_counted_from_nothing():
    """dynamo imported (or a DataLoader's module) after the window's first reading: its compile time and frames
    so far all fell in the window, so the rate is over the window from nothing, not left out."""
    first = {"t": 0.0, "gc": 0.0}
    last = {"t": 2.0, "gc": 0.0, "jit": 1.0, "jit_n": 6, "ld": 0.5, "runq": 3.0}
    out = evidence.rates(first, last)
    assert (out["jit"], out["jit_n"], out["ld"]) == (0.5, 3.0, 0.25)
    assert "runq" not in out  # a total since the thread began: no rate without two readings


def _cold_pages(path, size: int) -> int:
    """Read ``size`` bytes of the file at ``path`` through a mapping, one byte a page, after dropping its pages from
    the page cache (``POSIX_FADV_DONTNEED``) and with readahead off (``MADV_RANDOM``): each page is read from disk
    on a major fault. Returns the pages touched."""
    import mmap
    import os

    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
            m.madvise(mmap.MADV_RANDOM)
            return sum(1 for i in range(0, size, mmap.PAGESIZE) if m[i] >= 0)
    finally:
        os.close(fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/stat is Linux's")
def test_major_page_faults_of_a_cold_mapped_file_are_counted_and_go_out_per_second(tmp_path):
    import os

    path = tmp_path / "cold.bin"
    size = 4 * 2**20
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())  # (dirty pages are not dropped from the cache)
    clock = [100.0]
    ev = evidence.Evidence(clock=lambda: clock[0])
    before = evidence.read_process_faults()
    assert ev.sample() is None
    pages = _cold_pages(path, size)
    after = evidence.read_process_faults()
    assert before is not None and after is not None
    assert after[3] - before[3] >= pages // 2  # (a page of it may still be in a mapping elsewhere: most fault)
    clock[0] += 2.0
    rates = ev.sample()
    assert rates["majflt"] >= pages // 2 / 2.0 and rates["sys"] >= 0.0  # (its kernel time: ticks of 10 ms)
    State(ev=Evidence(**rates))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_the_node_s_busy_cpu_and_its_cpus_are_read_and_go_out_per_second(tmp_path):
    busy, cpus = evidence.read_node()
    assert busy > 0 and cpus >= 1
    fake = tmp_path / "stat"
    fake.write_text("cpu  100 0 50 1000 30 0 0 0 0 0\ncpu0 100 0 50 1000 30 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\nintr 1\n")
    assert evidence.read_node(str(fake), clock_ticks=100) == (1.5, 2)  # user + system, not idle nor iowait
    clock = [100.0]
    ev = evidence.Evidence(clock=lambda: clock[0])
    ev.sample()
    clock[0] += 2.0
    rates = ev.sample()
    assert rates["node_cpu"] >= 0 and rates["ncpu"] == cpus
    State(ev=Evidence(**rates))


def test_a_rank_stuck_in_a_step_says_what_its_training_thread_s_stack_is_in(tmp_path):
    torch = pytest.importorskip("torch")
    release = threading.Event()

    class SlowFile:
        """A checkpoint's file whose writes wait: the saving thread stays inside torch.save."""

        def write(self, data):
            release.wait(30)
            return len(data)

        def flush(self):
            pass

    entered = threading.Event()
    idents = {}

    def save():
        idents["me"] = threading.get_ident()
        entered.set()
        torch.save({"w": torch.zeros(4)}, SlowFile())

    saver = threading.Thread(target=save)
    saver.start()
    try:
        entered.wait(10)
        wait_for(lambda: evidence.doing(idents["me"]) == "checkpoint", 10, "the saving thread inside torch.save")
        clock = [100.0]
        steps = [7]
        ev = evidence.Evidence(idents["me"], clock=lambda: clock[0], steps=lambda: steps[0])
        ev.sample()
        clock[0] += 1.0
        assert "doing" not in ev.sample()  # not stuck yet: nothing looked at
        clock[0] += evidence.STUCK_S
        rates = ev.sample()
        assert rates["doing"] == "checkpoint"
        State(ev=Evidence(**rates))
        steps[0] += 1  # a step finished: no longer stuck
        clock[0] += 1.0
        assert "doing" not in ev.sample()
    finally:
        release.set()
        saver.join()
    assert evidence.doing(threading.get_ident()) is None  # this test's own stack is in none of them
    assert evidence.doing(threading.get_ident(), in_gc=True) == "gc"
