"""One rank of benchmarks/causes.py's jobs (run under torchrun, gloo): every rank trains the same steps, and rank
``--slow-rank`` is slowed by ``--cause``, a known reason ranktop should name (or, for ``sleep`` and ``padded``,
one it cannot measure and should call unknown).

Each step: ``data`` (a DataLoader's next batch), ``forward`` and ``backward`` (a fixed amount of CPU work each,
``--compute-ms``; backward ends in an all_reduce, where the ranks wait for the slowest), ``optimizer`` (a short
sleep). The causes:

- ``gc``: a heap of 400,000 tracked lists and a full ``gc.collect()`` in forward;
- ``busy``: a busy process pinned to its CPU, which it yields to (nice 10) (``--pin`` pins each rank);
- ``threads``: three threads of its own hashing (GIL released) on its one CPU (``--pin``);
- ``imbalance``: ``--size`` times the tokens (``probe.add_inputs``), and as much more compute;
- ``padded``: ``--size`` times the real tokens, padded to the same length as its peers' (the same compute), and
  an unmeasurable sleep: the cause is unknown;
- ``loader``: its Dataset waits (storage) per item, in one DataLoader worker: its batches come late;
- ``recompile``: a ``torch.compile``d function called with a new shape every step;
- ``python``: extra pure-Python work in forward, for the same inputs;
- ``faults``: in forward, ``--pages`` pages of a 64 MiB file read through a fresh mapping after the file's pages are
  dropped from the page cache (``POSIX_FADV_DONTNEED``; readahead off, ``MADV_RANDOM``): a major page fault each,
  the training thread blocked while the page is read from disk (as a model's weights or a dataset mapped from
  storage, or memory swapped out, are read back);
- ``sleep``: a plain sleep in forward: no evidence can say why.
"""

import argparse
import gc
import hashlib
import os
import threading
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from ranktop import probe

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--cause", default="none")
parser.add_argument("--slow-rank", type=int, default=1)
parser.add_argument("--compute-ms", type=float, default=6.0)
parser.add_argument("--slow-ms", type=float, default=25.0)
parser.add_argument("--size", type=float, default=2.0)
parser.add_argument("--pin", action="store_true")
parser.add_argument("--pages", type=int, default=256, help="faults: pages read cold a step")
parser.add_argument("--tag", default="", help="the benchmark's name for this job (it ends what is left by it)")
args = parser.parse_args()

rank = int(os.environ["RANK"])
slow = rank == args.slow_rank
cause = args.cause if slow else "none"
probe.init()
dist.init_process_group("gloo")
if args.pin:
    os.sched_setaffinity(0, {rank % os.cpu_count()})
if cause == "busy":
    # A busy process on its CPU, started from this job's session (the scheduler shares a CPU between sessions
    # first: one started apart from the job would take half of it whatever the job's priorities), by a thread
    # other than the training one (whose child processes would read as DataLoader workers); it ends when this
    # rank does. This rank yields to it (nice 10): on a machine busy already, an equal share is lost in the
    # others' noise, and lowering its own priority hurts nobody else's processes.
    import subprocess
    import sys

    spinner = (f"import os\nos.sched_setaffinity(0, {{{rank % os.cpu_count()}}})\nparent = os.getppid()\n"
               "while os.getppid() == parent:\n    for _ in range(100_000): pass")  # fmt: skip
    threading.Thread(target=lambda: subprocess.Popen([sys.executable, "-c", spinner]), daemon=True).start()
    os.nice(10)
grads = torch.ones(1024)
TOKENS = 4096


def spin(seconds: float) -> None:
    """CPU work of ``seconds`` (a fixed amount: on a shared CPU it takes longer, as real compute does)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Batches(Dataset):
    def __init__(self, wait_s: float):
        self.wait_s = wait_s

    def __len__(self):
        return 10_000_000

    def __getitem__(self, i):
        if self.wait_s:
            time.sleep(self.wait_s)
        return torch.zeros(4)


loader_wait = args.slow_ms / 1000 if cause == "loader" else 0.0  # an item: a batch of 2 takes twice that
# one worker ahead by one batch: a late worker holds the step back by what it adds
batches = iter(DataLoader(Batches(loader_wait), batch_size=2, num_workers=1, prefetch_factor=1))
heap = [[i] for i in range(400_000)] if cause == "gc" else []


def burn() -> None:
    block = b"x" * (1 << 20)
    while True:
        hashlib.sha256(block).digest()


if cause == "threads":
    for _ in range(3):
        threading.Thread(target=burn, daemon=True).start()
compiled = None
if cause == "recompile":
    import torch._dynamo

    torch._dynamo.config.recompile_limit = 1_000_000
    torch._dynamo.config.cache_size_limit = 1_000_000
    compiled = torch.compile(lambda x: (x * 2 + 1).sum(), backend="eager", dynamic=False)
cold = None
if cause == "faults":
    import mmap
    import tempfile

    cold_size = 64 * 2**20
    with tempfile.NamedTemporaryFile(prefix="ranktop-cold-", delete=False) as f:
        for _ in range(cold_size // 2**20):
            f.write(os.urandom(2**20))
        f.flush()
        os.fsync(f.fileno())  # (dirty pages are not dropped from the cache)
        cold_path = f.name
    cold = os.open(cold_path, os.O_RDONLY)
    os.unlink(cold_path)  # (removed with the process: nothing left behind)


def read_cold(n: int) -> int:
    """``--pages`` pages of the cold file, each from disk: a major fault each."""
    span = args.pages * mmap.PAGESIZE
    at = (n * span) % (cold_size - span) // mmap.PAGESIZE * mmap.PAGESIZE
    os.posix_fadvise(cold, at, span, os.POSIX_FADV_DONTNEED)
    with mmap.mmap(cold, span, prot=mmap.PROT_READ, offset=at) as m:
        m.madvise(mmap.MADV_RANDOM)
        return sum(m[i] for i in range(0, span, mmap.PAGESIZE))


compute_s = args.compute_ms / 1000
real = int(TOKENS * args.size) if cause in ("imbalance", "padded") else TOKENS
padded = real if cause == "imbalance" else TOKENS
work = compute_s * (args.size if cause == "imbalance" else 1.0)

for n in range(args.steps):
    with probe.step():
        with probe.phase("data"):
            next(batches)
        with probe.phase("forward"):
            probe.add_inputs(samples=8, tokens=real, padded=padded)
            spin(work)
            if cause == "gc":
                gc.collect()
            elif cause == "python":
                spin(args.slow_ms / 1000)
            elif cause in ("sleep", "padded"):
                time.sleep(args.slow_ms / 1000)
            elif cold is not None:
                read_cold(n)
            elif compiled is not None:  # a new shape every step: a recompile each (every 4th would leave the
                compiled(torch.ones(8 + n))  # median step, and so the verdict, unmoved)
        with probe.phase("backward"):
            spin(work)
            dist.all_reduce(grads)
        with probe.phase("optimizer"):
            time.sleep(0.002)
probe.shutdown()
