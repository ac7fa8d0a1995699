"""The viewer's heap (watch/heap.py): what a burst leaves free goes back to the system, what the next snapshot
takes again stays. Each case runs in a process of its own, since the settings are the whole process's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ranktop.watch import heap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or heap._libc() is None or heap._MALLINFO2 is None,
                                reason="glibc 2.33 or later only")  # fmt: skip

# Frees ``mb`` MB of heap blocks (256 KB each: the heap's, under the viewer's mmap threshold) that a block made
# after them keeps in the middle of the heap (glibc gives the top back by itself on free), then hands back.
SCRIPT = """
import sys
from ranktop.watch import heap

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

heap.settle_for_viewing()
blocks = [bytearray(256 * 1024) for _ in range(int(sys.argv[1]) * 4)]
pin = bytearray(300 * 1024)  # (bigger than any free block: carved from the top, after them)
before = rss_mb()
del blocks
freed = rss_mb()
handed = heap.hand_back()
print(handed, round(before - freed), round(freed - rss_mb()))
"""


def _run(mb: int) -> tuple[bool, int, int]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(mb)], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()  # fmt: skip
    return out[0] == "True", int(out[1]), int(out[2])


def test_a_burst_past_is_handed_back():
    handed, on_free, on_hand_back = _run(200)
    assert handed
    assert on_free < 10  # free keeps it in the heap ...
    assert on_hand_back > 150  # ... the hand-back returns it


def test_what_a_snapshot_takes_again_stays():
    handed, on_free, on_hand_back = _run(heap.KEEP_FREE_BYTES // 2**20 // 2)
    assert not handed
    assert on_free < 10 and on_hand_back < 10
