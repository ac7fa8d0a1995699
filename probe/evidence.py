"""Why a rank may be slow, as figures its peers can be held against: time in the garbage collector, waits for a CPU,
the rows its experts receive, the inputs it takes, its DataLoader workers' CPU, memory under pressure.

The viewer names a slow rank and its phase from the step times; these figures
say why (watch/analysis/causes.py compares each with the rank's peers'). Each
is a rate over the last :data:`WINDOW_S` seconds, so the viewer, which keeps a
rank's latest state only, compares like with like:

- ``gc``: seconds per second the training thread spent in Python's garbage
  collector. ``gc.callbacks`` marks each collection's start and stop; only the
  training thread's collections are timed (a DataLoader thread's are not the
  step's). The callback adds two floats: no lock, no allocation worth the name.
- ``runq`` and ``nvcsw``: seconds per second the training thread waited on a
  run queue for a CPU (``/proc/self/task/<tid>/schedstat``, second field) and
  its involuntary context switches per second (``.../status``): a busy process
  on its core shows there first. Read by the sender thread (Linux only;
  elsewhere the fields are left out).

- ``a2a_rows``: rows per second this rank *received* in ``all_to_all`` /
  ``all_to_all_single`` (the output's first dimension, which the split sizes
  already fix): a rank that hosts a hot expert of a mixture of experts receives
  more tokens than its peers. The collective wrappers (probe/collectives.py)
  add one integer per call; nothing more on the training thread.
- ``samples`` and ``tokens``: what the rank took in per step, as the job says it
  (:func:`ranktop.probe.add_inputs`, two integer adds per call; else the work
  per step it declared with ``set_work``).
- ``kids`` and ``kids_n``: CPUs the training thread's child processes (its
  DataLoader workers) used, and how many there are (``/proc/<pid>/task/<tid>/children``
  and each child's ``stat``; Linux only).
- ``swap``: bytes of the process swapped out (``VmSwap``), and ``retries``:
  the CUDA caching allocator's retries per second (a ``cudaMalloc`` that failed,
  so the cache was freed and the call tried again: a synchronisation each).
- ``padded``: the tokens per step the rank computed on, padding included, where
  the job says both (``probe.add_inputs(tokens=real, padded=with_padding)``):
  batches padded to one length take the same compute whatever their real tokens,
  so the load is judged on these.
- ``cpu``: seconds per second the training thread ran on a CPU (schedstat's first
  field, read with ``runq``); ``pcpu``, ``thr`` and ``cores``: the whole process's
  CPU seconds per second, its threads, and the CPUs it may run on
  (``/proc/self/stat``, ``sched_getaffinity``): a thread that waits for a CPU
  while its own process uses every core it has is its own contention.
- ``sys``: seconds per second the training thread ran in the kernel (its ``stime``, in clock ticks): page faults
  and system calls, CPU time that is not its Python's.
- ``majflt``: major page faults per second of the process (``/proc/self/stat``, read with ``pcpu``): each a page
  read from disk that the faulting thread waited for (memory swapped out, a mapped file's page not in memory).
- ``node_cpu`` and ``ncpu``: CPU seconds per second busy on the whole node, every process's (``/proc/stat``'s
  first line), and its online CPUs: less what the node's ranks use, what other processes there take.
- ``doing``: when the rank has finished no step for :data:`STUCK_S`, what its training thread's stack is in now
  (:func:`doing`: compiling, a checkpoint's save or load, a DataLoader, the garbage collector): a stall's cause.
- ``ld`` and ``ld_cpu``: seconds per second the training thread spent inside a
  DataLoader iterator's ``__next__``, and the CPU it used there
  (:class:`LoaderTimer`: two clock reads a batch, on a method dynamo never traces);
  the difference is the time it waited for the workers' batches.
- ``jit``, ``jit_n`` and ``breaks``: seconds per second torch.compile spent
  compiling on the rank, the frames it compiled (recompiles included) and the
  graph breaks it met per second: dynamo's own running totals
  (``torch._dynamo.utils.counters`` and ``compilation_time_metrics``), read by
  the sender thread; nothing is added inside a compiled region.

Everything but the GC callback and the counters' adds runs on the sender thread
with each state (:meth:`Evidence.sample`), at most every :data:`SAMPLE_EVERY_S`.
"""

from __future__ import annotations

import collections
import gc
import os
import sys
import threading
import time
from typing import Any, Callable

from . import dynamo_guard

#: The window the rates are over: long enough to smooth a step's noise, short enough to follow a change.
WINDOW_S = 10.0
#: How often the counters are read (the state goes more often; between reads it carries the last figures).
SAMPLE_EVERY_S = 0.5
#: The fewest seconds of counters a rate is given over: a first rate over a tenth of a second says little.
MIN_SPAN_S = 1.0


class GcTimer:
    """Seconds the training thread spent in the garbage collector, and its collections, as running totals."""

    def __init__(self, thread_ident: int):
        self.thread = thread_ident
        self.seconds = 0.0  # written by the training thread only, read by the sender (a float: atomic)
        self.collections = 0
        self._started = 0.0
        self._installed = False

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        # The training thread, inside every collection: two comparisons and an add; never an exception out.
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self.seconds += time.perf_counter() - self._started
            self.collections += 1
            self._started = 0.0

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self)
            self._installed = True

    def remove(self) -> None:
        if self._installed:
            self._installed = False
            try:
                gc.callbacks.remove(self)
            except ValueError:
                pass


def read_sched(native_id: int) -> tuple[float, int] | None:
    """The thread's run-queue wait (seconds, since it began) and involuntary context switches, or None where
    /proc does not say them (not Linux, schedstats off)."""
    sched = read_thread(native_id)
    return None if sched is None else (sched[0], sched[1])


def read_thread(native_id: int) -> tuple[float, int, int | None] | None:
    """:func:`read_sched`'s two figures and the process's bytes swapped out (None: not said), in one pass over
    the thread's ``status``."""
    read = read_thread_cpu(native_id)
    return None if read is None else read[:3]


def read_thread_cpu(native_id: int) -> tuple[float, int, int | None, float] | None:
    """:func:`read_thread`'s three figures and the seconds the thread has run on a CPU (schedstat's first field)."""
    base = f"/proc/self/task/{native_id}/"
    try:
        with open(base + "schedstat", "rb") as f:
            fields = f.read().split()
        on_cpu_ns, wait_ns = int(fields[0]), int(fields[1])
        swap = None
        with open(base + "status", "rb") as f:
            for line in f:
                if line.startswith(b"VmSwap:"):
                    swap = int(line.split()[1]) * 1024  # kB
                elif line.startswith(b"nonvoluntary_ctxt_switches:"):  # the last line of the file
                    return wait_ns / 1e9, int(line.split()[1]), swap, on_cpu_ns / 1e9
    except (OSError, ValueError, IndexError):
        return None
    return None


def read_thread_system(native_id: int, clock_ticks: int = 0) -> float | None:
    """Seconds thread ``native_id`` of this process has run in the kernel (``stime``: page faults, system calls),
    or None where /proc does not say (not Linux). Its CPU time less this is its own code's: Python, not the
    kernel reading a page from disk for it."""
    try:
        with open(f"/proc/self/task/{native_id}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[12]) / (clock_ticks or _CLOCK_TICKS)
    except (OSError, ValueError, IndexError):
        return None


def read_process(pid: int | None = None, clock_ticks: int = 0, thread: int = 0) -> tuple[float, int, int] | None:
    """The process's CPU seconds so far (all its threads), its threads, and the CPUs thread ``thread`` (a native
    id; 0: the caller) may run on; None where /proc does not say (not Linux)."""
    read = read_process_faults(pid, clock_ticks, thread)
    return None if read is None else read[:3]


def read_process_faults(pid: int | None = None, clock_ticks: int = 0, thread: int = 0) -> tuple[float, int, int, int] | None:
    """:func:`read_process`'s three figures and the process's major page faults so far (``majflt``, the same
    line: each a read from disk the faulting thread waited for, a page swapped out or a mapped file's page not
    in memory)."""
    ticks = clock_ticks or _CLOCK_TICKS
    try:
        with open(f"/proc/{os.getpid() if pid is None else pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        seconds = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        threads = int(fields[17])
        majflt = int(fields[9])
    except (OSError, ValueError, IndexError):
        return None
    try:
        cores = len(os.sched_getaffinity(thread)) or 1
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return seconds, threads, cores, majflt


def read_node(path: str = "/proc/stat", clock_ticks: int = 0) -> tuple[float, int] | None:
    """The node's CPU seconds so far busy (every CPU's time but idle and iowait: what every process on it ran)
    and its online CPUs; None where /proc does not say (not Linux). ``/proc/stat``'s first line, the sum."""
    ticks = clock_ticks or _CLOCK_TICKS
    try:
        with open(path, "rb") as f:
            first = f.readline().split()
            cpus = sum(1 for line in f if line.startswith(b"cpu"))
        if first[0] != b"cpu":
            return None
        times = [int(v) for v in first[1:]]
        busy = sum(times[:8]) - times[3] - times[4]  # user nice system idle iowait irq softirq steal; guests are in user
    except (OSError, ValueError, IndexError):
        return None
    return busy / ticks, max(1, cpus)


#: Files of a thread's stack that say what a rank stuck in a step is doing (the innermost match wins): the
#: answer ``doing`` carries while it has finished no step for :data:`STUCK_S`.
DOING_MARKERS = (
    ("compile", ("/torch/_dynamo/", "/torch/_inductor/", "/torch/_functorch/", "/torch/fx/")),
    ("checkpoint", ("/torch/serialization.py", "/torch/distributed/checkpoint/", "/safetensors/")),
    ("loader", ("/torch/utils/data/",)),
)
#: A rank that has finished no step for this long is looked at: what its training thread is in.
STUCK_S = 2.0
#: The most frames walked (a deep recursion is not ours to follow to its end).
MAX_FRAMES = 256


def doing(thread_ident: int, in_gc: bool = False) -> str | None:
    """What the thread ``thread_ident`` is in now, by its stack: ``compile``, ``checkpoint``, ``loader``, or
    ``gc`` (a collection under way: ``in_gc``); None when none of these. One walk of its frames, from the sender
    thread (``sys._current_frames``: the frames as they are, no signal sent to the thread)."""
    if in_gc:
        return "gc"
    frame = sys._current_frames().get(thread_ident)
    depth = 0
    while frame is not None and depth < MAX_FRAMES:
        name = frame.f_code.co_filename.replace("\\", "/")
        for what, markers in DOING_MARKERS:
            if any(m in name for m in markers):
                return what
        frame = frame.f_back
        depth += 1
    return None


def read_children(native_id: int | None = None, pid: int | None = None, clock_ticks: int = 0) -> tuple[float, int] | None:
    """CPU seconds the live child processes of thread ``native_id`` of process ``pid`` (this process's calling
    thread) have used, and how many there are; None where /proc does not list children (not Linux, a kernel
    without ``CONFIG_PROC_CHILDREN``). A DataLoader forks its workers from the thread that iterates it: the
    training thread; reading its children alone is one file, where every thread's would be dozens."""
    pid = os.getpid() if pid is None else pid
    native_id = threading.get_native_id() if native_id is None else native_id
    ticks = clock_ticks or _CLOCK_TICKS
    try:
        with open(f"/proc/{pid}/task/{native_id}/children", "rb") as f:
            kids = f.read().split()
    except OSError:
        return None
    seconds = 0.0
    for kid in kids[:MAX_CHILDREN]:
        try:
            with open(b"/proc/%s/stat" % kid, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # after the name, which may hold spaces
            seconds += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        except (OSError, ValueError, IndexError):
            continue  # ended between the two reads
    return seconds, len(kids)


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (AttributeError, ValueError, OSError):
        return 100


_CLOCK_TICKS = _clock_ticks()
#: The most child processes read per sample (a DataLoader has a few; a fork bomb is not ours to walk).
MAX_CHILDREN = 64


class Inputs:
    """What the rank took in, as running totals the job adds to (:func:`ranktop.probe.add_inputs`): two integer
    adds on the training thread, read by the sender's."""

    __slots__ = ("samples", "tokens", "padded", "calls", "padded_calls")

    def __init__(self) -> None:
        self.samples = 0
        self.tokens = 0
        self.padded = 0
        self.calls = 0
        self.padded_calls = 0

    def add(self, samples: int = 0, tokens: int = 0, padded: int | None = None) -> None:
        self.samples += samples
        self.tokens += tokens
        self.calls += 1
        if padded is not None:
            self.padded += padded
            self.padded_calls += 1


class LoaderTimer:
    """Seconds the training thread spent inside DataLoader iterators' ``__next__`` and the CPU it used there, as
    running totals: the wall time less the CPU is the time it was blocked (its workers' batches late, I/O, a run
    queue). ``__next__`` is wrapped once torch's dataloader module is imported (:meth:`install`, from the sender
    thread if not yet at start); the wrapper reads two clocks per batch, on the training thread only."""

    def __init__(self, thread_ident: int):
        self.thread = thread_ident
        self.seconds = 0.0  # written by the training thread only, read by the sender (floats: atomic)
        self.cpu = 0.0
        self.batches = 0
        self._owner: Any = None
        self._original: Any = None
        self._wrapper: Any = None

    def install(self) -> bool:
        """Wrap ``_BaseDataLoaderIter.__next__`` if torch's dataloader is imported (never imports it); True once
        wrapped."""
        if self._owner is not None:
            return True
        module = sys.modules.get("torch.utils.data.dataloader")
        owner = getattr(module, "_BaseDataLoaderIter", None) if module is not None else None
        original = getattr(owner, "__next__", None)
        if owner is None or original is None:  # (no owner has no __next__)
            return False
        timer, get_ident, clock, cpu_clock = self, threading.get_ident, time.perf_counter, time.thread_time

        def __next__(it: Any) -> Any:
            if get_ident() != timer.thread or dynamo_guard.is_tracing():
                return original(it)
            wall, cpu = clock(), cpu_clock()
            try:
                return original(it)
            finally:
                timer.cpu += cpu_clock() - cpu
                timer.seconds += clock() - wall
                timer.batches += 1

        __next__.__wrapped__ = original  # type: ignore[attr-defined]
        self._owner, self._original, self._wrapper = owner, original, __next__
        owner.__next__ = __next__
        return True

    def remove(self) -> None:
        """Unwrap, where ours is still the method (another wrapper set over it since keeps it)."""
        owner, self._owner = self._owner, None
        if owner is not None and owner.__dict__.get("__next__") is self._wrapper:
            owner.__next__ = self._original


class CompileCounters:
    """torch.compile's work on this process, from dynamo's own running totals (never imported here: read once
    the script has imported dynamo): seconds compiling, frames compiled, graph breaks. Read by the sender thread;
    nothing is added to the training thread or a compiled region."""

    #: dynamo's timing of one frame's whole compile (``compilation_time_metrics``).
    COMPILE_KEY = "_compile.compile_inner"

    def __init__(self) -> None:
        self._seen = 0  # compile times already summed
        self._seconds = 0.0

    def read(self) -> tuple[float, int, int] | None:
        utils = sys.modules.get("torch._dynamo.utils")
        if utils is None:
            return None
        counters = getattr(utils, "counters", None)
        times = getattr(utils, "compilation_time_metrics", {}).get(self.COMPILE_KEY)
        if counters is None:
            return None
        if times is not None:
            new = list(times[self._seen :])  # one C-level copy: the list may grow meanwhile
            self._seen += len(new)
            self._seconds += float(sum(new))
        frames = int(counters.get("frames", {}).get("total", 0))
        breaks = int(sum(list(counters.get("graph_break", {}).values())))
        return self._seconds, frames, breaks


class Evidence:
    """The rates a rank's state carries as ``ev`` (wire/messages.py ``Evidence``), from running totals kept over
    :data:`WINDOW_S`. Built on the training thread (which it times), sampled by the sender thread.

    ``rows_in``: the rows received in all-to-alls so far (probe/collectives.py); ``steps``: the steps finished
    so far (the recorder's); ``work``: the work per step the job declared (``set_work``); ``retries``: the CUDA
    allocator's retries so far (None: no CUDA). Each is read on the sender thread; any may be left out."""

    def __init__(
        self, thread_ident: int | None = None, native_id: int | None = None, *, clock: Callable[[], float] = time.monotonic,
        rows_in: Callable[[], int] | None = None, steps: Callable[[], int] | None = None,
        work: Callable[[], dict[str, Any]] | None = None, retries: Callable[[], int | None] | None = None,
        children: Callable[[int], tuple[float, int] | None] = read_children,
    ):  # fmt: skip
        self.gc = GcTimer(threading.get_ident() if thread_ident is None else thread_ident)
        self.loader = LoaderTimer(self.gc.thread)
        self.compiles = CompileCounters()
        self.inputs = Inputs()
        self.native_id = threading.get_native_id() if native_id is None else native_id
        self._clock = clock
        self._sources = {"rows": rows_in, "steps": steps, "retries": retries}
        self._work = work
        self._children = children
        self._totals: collections.deque[dict[str, Any]] = collections.deque()
        self._next = 0.0
        self._latest: dict[str, Any] | None = None
        self._node = read_node
        self._last_steps: tuple[int, float] | None = None  # the steps finished so far, and since when

    def start(self) -> None:
        self.gc.install()
        self.loader.install()

    def stop(self) -> None:
        self.gc.remove()
        self.loader.remove()

    def sample(self) -> dict[str, Any] | None:
        """The rates over the window, read now if the last read is :data:`SAMPLE_EVERY_S` old (the sender thread)."""
        now = self._clock()
        if now < self._next:
            return self._latest
        self._next = now + SAMPLE_EVERY_S
        reading = self.read(now)
        totals = self._totals
        totals.append(reading)
        while len(totals) > 2 and now - totals[1]["t"] >= WINDOW_S:
            totals.popleft()
        out = rates(totals[0], reading)
        if out is not None:
            out.update(levels(reading, self._work))
        self._latest = out
        return out

    def read(self, now: float) -> dict[str, Any]:
        """The running totals now: ``t``, ``gc``, ``gc_n`` always, the rest where known."""
        inputs = self.inputs
        reading: dict[str, Any] = {"t": now, "gc": self.gc.seconds, "gc_n": self.gc.collections}
        thread = read_thread_cpu(self.native_id)
        if thread is not None:
            reading["runq"], reading["nvcsw"], swap, reading["cpu"] = thread
            if swap is not None:
                reading["swap"] = swap
        system = read_thread_system(self.native_id)
        if system is not None:
            reading["sys"] = system
        process = read_process_faults(thread=self.native_id)
        if process is not None:
            reading["pcpu"], reading["thr"], reading["cores"], reading["majflt"] = process
        node = _call(self._node)
        if node is not None:
            reading["node_cpu"], reading["ncpu"] = node
        loader = self.loader
        if loader.install():  # (the sender thread, once torch's dataloader is imported)
            reading["ld"], reading["ld_cpu"] = loader.seconds, loader.cpu
        compiled = _call(self.compiles.read)
        if compiled is not None:
            reading["jit"], reading["jit_n"], reading["breaks"] = compiled
        for name, source in self._sources.items():
            value = _call(source)
            if value is not None:
                reading[name] = value
        # counted from nothing: the first window after the job starts counting is short of what it took in
        reading["samples"], reading["tokens"], reading["counted"] = inputs.samples, inputs.tokens, inputs.calls > 0
        if inputs.padded_calls:
            reading["padded"] = inputs.padded
        children = _call(self._children, self.native_id)
        if children is not None:
            reading["kids"], reading["kids_n"] = children
        steps = reading.get("steps")
        if steps is not None:  # stuck in a step: what is it in (a stall's cause)
            if self._last_steps is None or self._last_steps[0] != steps:
                self._last_steps = (steps, now)
            elif now - self._last_steps[1] >= STUCK_S:
                gc_timer = self.gc
                what = _call(doing, gc_timer.thread, bool(gc_timer._started))
                if what is not None:
                    reading["doing"] = what
        return reading


def _call(source: Callable[..., Any] | None, *args: Any) -> Any:
    if source is None:
        return None
    try:
        return source(*args)
    except Exception:
        return None  # a figure the rank cannot read is left out, never the state


#: Running totals sent as a rate per second: the reading's name -> the wire's.
PER_SECOND = {"gc": "gc", "gc_n": "gc_n", "runq": "runq", "nvcsw": "nvcsw", "rows": "a2a_rows", "kids": "kids",
              "retries": "retries", "cpu": "cpu", "pcpu": "pcpu", "ld": "ld", "ld_cpu": "ld_cpu", "jit": "jit",
              "jit_n": "jit_n", "breaks": "breaks", "majflt": "majflt", "node_cpu": "node_cpu", "sys": "sys"}  # fmt: skip
#: Running totals that start at nothing when first read (the loader's, once wrapped; dynamo's, once imported): a
#: window whose first reading lacks them counts them from nothing, not from its first reading that has them.
FROM_NOTHING = frozenset({"ld", "ld_cpu", "jit", "jit_n", "breaks"})
#: Running totals sent per step (over the steps the window holds).
PER_STEP = ("samples", "tokens", "padded")


def rates(first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any] | None:
    """Per second (or per step) between two readings of the totals (:meth:`Evidence.read`); None below
    :data:`MIN_SPAN_S`. A figure one of them lacks is left out."""
    span = last["t"] - first["t"]
    if span < MIN_SPAN_S:
        return None
    out: dict[str, Any] = {"win": span}
    for name, wire in PER_SECOND.items():
        if name in last and (name in first or name in FROM_NOTHING):
            out[wire] = max(0.0, (last[name] - first.get(name, 0.0)) / span)
    steps = last.get("steps", 0) - first.get("steps", 0) if "steps" in first and "steps" in last else 0
    if steps > 0 and last.get("counted"):
        for name in PER_STEP:
            if name in last:  # (padded tokens are read once first said: counted from nothing before)
                out[name] = max(0.0, (last[name] - first.get(name, 0)) / steps)
    return out


def levels(reading: dict[str, Any], work: Callable[[], dict[str, Any]] | None) -> dict[str, Any]:
    """The figures sent as they are now: workers, swap, and the declared work per step where nothing was counted."""
    out: dict[str, Any] = {}
    if "kids_n" in reading:
        out["kids_n"] = reading["kids_n"]
    if "swap" in reading:
        out["swap"] = float(reading["swap"])
    for name in ("thr", "cores", "ncpu"):
        if name in reading:
            out[name] = int(reading[name])
    if "doing" in reading:
        out["doing"] = reading["doing"]
    declared = _call(work) if not reading.get("counted") else None
    if declared:
        for name, key in (("samples", "batch"), ("tokens", "tokens")):
            value = declared.get(key)
            if isinstance(value, (int, float)) and value > 0:
                out[name] = float(value)
    return out
