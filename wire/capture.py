"""What a rank and a TUI agree on about captures: kinds, states, limits.

A capture is a torch.profiler trace (``trace``) or a CUDA allocator history
(``memory``) of a few consecutive steps, taken by every rank from the same step
number on. The requester (``ranktop capture``, ``ranktop memsnap``, or a key in
the TUI) picks the start step and an id and sends the signed ``capture``
command; each rank checks the arguments (``probe/commands.py``), writes its own
file under the job's capture folder, and reports its progress in the ``cap``
field of its state (``wire/messages.py``: Capture). Paths never come from the network: the
folder is fixed by the job's side (transport/captures.py) and the id is made
safe as one path component by the rank.
"""

from __future__ import annotations

import secrets
import time

TRACE = "trace"  # torch.profiler: a Chrome/Perfetto JSON per rank, for Perfetto, TensorBoard and HTA
MEMORY = "memory"  # torch.cuda.memory: an allocator snapshot pickle per rank, for pytorch.org/memory_viz
KINDS = (TRACE, MEMORY)

# A rank's progress through one capture, in order; DONE and FAILED are final.
WAITING = "waiting"  # for the start step
RECORDING = "recording"
WRITING = "writing"  # the file, off the training thread
DONE = "done"
FAILED = "failed"
STATES = (WAITING, RECORDING, WRITING, DONE, FAILED)
RUNNING = (WAITING, RECORDING, WRITING)

#: Steps one capture may span: a trace of many steps is big and slow to write, and a few show the pattern.
DEFAULT_STEPS = 3
MAX_STEPS = 50
#: How far ahead of a rank's current step a start step may lie (a typo, not a plan).
MAX_LEAD_STEPS = 100_000
#: The requester's margin ahead of the furthest rank: at least this many steps, or this many seconds of steps.
MIN_MARGIN_STEPS = 5
MARGIN_S = 1.5


def new_capture_id(kind: str) -> str:
    """A fresh id, sortable by time: ``20261123-104512-trace-3f9a``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{secrets.token_hex(2)}"


def start_step(current_steps: list[int], steps_per_s: float | None, age_s: float = 0.0) -> int:
    """The step every rank starts at: a margin ahead of the furthest rank, so each rank learns of
    the capture before it gets there (telemetry is a fraction of a second old, commands take a hop).
    ``age_s``: how old the steps are (a screen's snapshot): the ranks went on meanwhile."""
    furthest = max(current_steps, default=-1)
    margin = MIN_MARGIN_STEPS
    if steps_per_s:
        margin = max(margin, int(steps_per_s * MARGIN_S + 0.999)) + int(steps_per_s * max(0.0, age_s) + 0.999)
    return furthest + margin


def check_steps(steps: object) -> str | None:
    """Why a number of steps is not acceptable, or None."""
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        return f"steps must be a whole number from 1 to {MAX_STEPS}, got {steps!r}"
    return None
