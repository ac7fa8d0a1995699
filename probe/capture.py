"""One capture inside one rank: a torch.profiler trace or the CUDA allocator's history over a few steps.

Who does what, so that the training thread only ever pays at step boundaries:

- the **sender thread** builds a :class:`Capture` once ``probe/commands.py`` has
  checked the command's arguments, and hangs it on ``recorder.capture``: the
  recorder's step boundaries (the one place explicit ``probe.step()`` and
  automatic mode both go through) read that attribute, one read and a ``None``
  test per boundary while no capture is pending;
- the **training thread** starts the profiler when the start step begins, marks
  each following step (``prof.step()``, so the trace's ``ProfilerStep#N`` spans
  carry the job's own step numbers, the same on every rank) and stops it when
  the last step ends, then takes the capture off the recorder;
- a short-lived **writer thread** does everything slow: exports the trace under
  a temporary name and renames it (a file that exists is complete), summarises
  it (``probe/trace_summary.py``), and marks the capture done, or failed with
  the reason.

The sender puts :meth:`Capture.progress` in every state it sends. Any error
fails the capture and is reported; the probe and the training go on.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ranktop.transport import background, rendezvous
from ranktop.wire.capture import DONE, FAILED, MEMORY, RECORDING, RUNNING, TRACE, WAITING, WRITING

from . import memory_dump, trace_summary

#: Allocation events the CUDA allocator keeps while recording (its ring buffer; older ones fall off).
MEMORY_MAX_ENTRIES = 100_000
#: A trace bigger than this is written but not summarised (the writer would hold it all in memory).
MAX_SUMMARY_BYTES = 256 << 20
#: How long the summary's child process may take.
SUMMARY_TIMEOUT_S = 120.0
#: How long a finished capture's summary rides in the state (the path and state stay for good).
SUMMARY_LINGER_S = 120.0
#: A rank gives up waiting for the start step after this long at least (more for slow steps, see
#: :func:`start_timeout`): a stalled job must not hold the job's one capture slot for ever.
MIN_START_TIMEOUT_S = 60.0


class Capture:
    def __init__(
        self,
        capture_id: str,
        kind: str,
        start: int,
        steps: int,
        folder: Path,
        *,
        rank: int,
        host: str,
        torch: Any,
        shapes: bool = False,
        memory: bool = False,
        stacks: bool = False,
        start_timeout_s: float = MIN_START_TIMEOUT_S,
    ):
        self.id = capture_id
        self.kind = kind
        self.start = start
        self.steps = steps
        self.last = start + steps - 1
        self.folder = folder
        self.rank = rank
        self.host = host
        self.options = {"record_shapes": shapes, "profile_memory": memory, "with_stack": stacks}
        self.state = WAITING
        self.step: int | None = None  # the step being recorded
        self.path: str | None = None
        self.error: str | None = None
        self.summary: dict[str, Any] | None = None
        self.finished_at: float | None = None
        self._torch = torch
        self._recorder: Any = None
        self._profiler: Any = None
        self._snapshot: Any = None
        self._tmp: Path | None = None  # the file being written, while it is
        self._cost_ms = [0.0, 0.0]  # what starting and stopping (then exporting) cost the training thread
        self._armed_at = time.monotonic()
        self._transition = threading.Lock()  # waiting -> recording (training thread) vs waiting -> failed (sender)
        self._start_timeout_s = start_timeout_s

    @property
    def running(self) -> bool:
        return self.state in RUNNING

    def attach(self, recorder: Any) -> None:
        """Hand the capture to the training thread (an attribute write: atomic, no lock)."""
        self._recorder = recorder
        recorder.capture = self
        if self.kind == TRACE:
            threading.Thread(target=_warm_up, name="ranktop-capture-warmup", daemon=True).start()

    # -- the training thread, at step boundaries --------------------------------

    def step_begins(self, step: int) -> None:
        try:
            if self.state == WAITING:
                if step == self.start and self._claim_start():
                    self._begin()
                elif step > self.start:
                    self._fail(f"missed the start step {self.start}: this rank began step {step} first")
            elif self.state == RECORDING and self.step is not None and step > self.step:
                self.step = step
                if self._profiler is not None:
                    self._profiler.step()
        except Exception as exc:
            self._fail(f"{exc.__class__.__name__}: {exc}")

    def step_ends(self, step: int) -> None:
        try:
            if self.state == RECORDING and step >= self.last:
                self._end()
        except Exception as exc:
            self._fail(f"{exc.__class__.__name__}: {exc}")

    def _claim_start(self) -> bool:
        """Take the capture from waiting to recording, unless the sender gave it up first.

        The one lock the training thread takes, once per capture at its start step: the
        sender's :meth:`give_up_if_late` makes the opposite move, and only one may win
        (else a profiler could start that nobody ever stops).
        """
        with self._transition:
            if self.state != WAITING:
                return False
            self.state = RECORDING
            return True

    def _begin(self) -> None:
        began = time.perf_counter()
        torch = self._torch
        if self.kind == MEMORY:
            # Python stacks only: stacks="all" (the default) unwinds C++ on every allocation of the training
            # thread, and symbolising those frames is what makes _snapshot() slow at the end
            record = torch.cuda.memory._record_memory_history
            record(stacks="python", max_entries=MEMORY_MAX_ENTRIES, **_global_annotations(record))
        else:
            if _profiler_running(torch):  # starting ours would end the script's own profiling session
                raise RuntimeError("torch.profiler is already running in this process (the script's own?)")
            profiler = importlib.import_module("torch.profiler")
            activities = [profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                activities.append(profiler.ProfilerActivity.CUDA)
            # A schedule (always record) is what makes torch.profiler mark ProfilerStep#N spans.
            prof = profiler.profile(activities=activities, schedule=_always_record, **self.options)
            prof.step_num = self.start  # ProfilerStep#<the job's step number>, on every rank alike
            prof.start()
            self._profiler = prof
            prof.add_metadata_json(
                "ranktop",
                json.dumps({"capture": self.id, "start_step": self.start, "steps": self.steps, "rank": self.rank, "host": self.host}),
            )
        self.step = self.start
        self._cost_ms[0] = (time.perf_counter() - began) * 1000

    def _end(self) -> None:
        began = time.perf_counter()
        if self.kind != MEMORY:  # a memory capture's snapshot is taken by the writer thread
            self._profiler.stop()  # torch collects the events here: the capture's biggest cost to training
        self._cost_ms[1] = (time.perf_counter() - began) * 1000
        self._detach()
        self.state = WRITING
        threading.Thread(target=self._write, name="ranktop-capture-writer", daemon=True).start()

    # -- the writer thread ------------------------------------------------------

    def _write(self) -> None:
        try:
            background.name_thread("ranktop-capture")
            background.lower_priority()
            self.folder.mkdir(parents=True, exist_ok=True)
            stem = f"rank{self.rank}.{rendezvous.safe_name(self.host)}_{os.getpid()}.{int(time.time() * 1000)}"
            # What writing costs the training thread: the longest any thread waited for the GIL meanwhile.
            with memory_dump.StallMeter() as stalls:
                path, summary = self._write_memory(stem) if self.kind == MEMORY else self._write_trace(stem)
            summary["cost_s"] = round(stalls.longest, 4)
            summary["train_ms"] = [round(ms, 1) for ms in self._cost_ms]
            self.path = str(path)
            self.summary = summary
            self.finished_at = time.monotonic()
            self.state = DONE
        except Exception as exc:
            tmp = self._tmp
            if tmp is not None:  # a half-written file never lies in the capture folder: ours, nor kineto's own
                for leftover in (tmp, tmp.with_name(tmp.name + ".tmp")):  # kineto writes PATH.tmp, then renames it
                    with contextlib.suppress(OSError):
                        os.unlink(leftover)
            reason = str(exc) if type(exc) is OSError and exc.errno is None else f"{exc.__class__.__name__}: {exc}"
            self._fail(f"writing failed: {reason}")

    def _write_memory(self, stem: str) -> tuple[Path, dict[str, Any]]:
        """Off the training thread: gathering the snapshot and symbolising its stacks takes long with a full
        history (one C++ call holding the GIL: timed, ``snapshot_s``). The history runs on until this moment (a
        few allocations past the last step), and is switched off whatever happens. The pickle is written a piece
        at a time, the GIL let go between pieces (probe/memory_dump.py)."""
        memory = self._torch.cuda.memory
        began = time.perf_counter()
        try:
            self._snapshot = memory._snapshot()
        finally:
            memory._record_memory_history(enabled=None)
        snapshot_s = time.perf_counter() - began
        path = self.folder / f"{stem}.memory.pickle"
        tmp = self._tmp = self.folder / f".{path.name}.tmp"  # removed by _write if writing fails
        with open(tmp, "wb") as f:
            memory_dump.dump(self._snapshot, f)
        os.replace(tmp, path)
        self._tmp = None
        summary = memory_summary(self._snapshot)
        summary["snapshot_s"] = round(snapshot_s, 4)
        self._snapshot = None
        return path, summary

    def _write_trace(self, stem: str) -> tuple[Path, dict[str, Any]]:
        """The profiler's trace, exported under a temporary name and renamed, then summarised in a child."""
        path = self.folder / f"{stem}.pt.trace.json"  # TensorBoard's trace handler's naming
        # not *.json: HTA reads every *.json of the folder; removed by _write if writing fails
        tmp = self._tmp = self.folder / f".{path.name}.tmp"
        began = time.perf_counter()
        self._profiler.export_chrome_trace(str(tmp))  # C++, holding the GIL: training waits this long too
        self._cost_ms.append((time.perf_counter() - began) * 1000)
        if not tmp.exists():  # kineto logs a failed write and returns as if it had succeeded
            raise OSError(f"torch.profiler could not write the trace in {self.folder}: {why_unwritable(self.folder)}")
        os.replace(tmp, path)
        self._tmp = None
        self._profiler = None
        return path, summarize_file(path)

    def abandon(self, reason: str) -> None:
        """Give up a capture that has not reached its writer (the probe shuts down): from the training thread."""
        if self.state in (WAITING, RECORDING):
            self._fail(reason)

    # -- the sender thread --------------------------------------------------------

    def give_up_if_late(self, now: float | None = None) -> None:
        """Fail a capture whose start step has not begun in time (a stalled or ended job), so that
        the job can take another one. Only a waiting capture is touched (see :meth:`_claim_start`)."""
        if self.state != WAITING or (now or time.monotonic()) - self._armed_at <= self._start_timeout_s:
            return
        with self._transition:
            if self.state != WAITING:
                return  # the training thread started it meanwhile: it runs its course
            self.error = self._late_reason()
            self.finished_at = time.monotonic()
            self.state = FAILED
        self._detach()

    def _late_reason(self) -> str:
        return (
            f"gave up: step {self.start} did not begin within {self._start_timeout_s:.0f}s "
            "(is the job stalled?); another capture can be taken"
        )

    # -- any thread ---------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        if self.state == RECORDING:
            try:
                if self._profiler is not None:
                    self._profiler.stop()
                elif self.kind == MEMORY:
                    self._torch.cuda.memory._record_memory_history(enabled=None)
            except Exception:
                pass
        self._detach()
        self._profiler = self._snapshot = None
        self.error = reason
        self.finished_at = time.monotonic()
        self.state = FAILED

    def _detach(self) -> None:
        recorder = self._recorder
        if recorder is not None and getattr(recorder, "capture", None) is self:
            recorder.capture = None

    def progress(self, now: float | None = None) -> dict[str, Any]:
        """What the state's ``cap`` field carries (``wire/schema.py``): read on the sender thread."""
        out: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "st": self.state,
            "start": self.start,
            "steps": self.steps,
            "dir": str(self.folder),
        }
        if self.step is not None:
            out["at"] = self.step
        if self.path is not None:
            out["path"] = self.path
        if self.error is not None:
            out["err"] = self.error
        summary, finished = self.summary, self.finished_at
        if summary is not None and finished is not None and (now or time.monotonic()) - finished < SUMMARY_LINGER_S:
            out["sum"] = summary
        return out


def start_timeout(lead_steps: int, median_step_s: float | None) -> float:
    """How long a rank waits for the start step: a minute, or four times the steps' expected time."""
    return max(MIN_START_TIMEOUT_S, 4.0 * lead_steps * (median_step_s or 0.0))


def why_unwritable(folder: Path) -> str:
    """The likely reason a file could not be written in ``folder`` (a writer that does not say, like kineto's)."""
    try:
        stat = os.statvfs(folder)
    except OSError as exc:
        return f"the folder cannot be read ({exc.strerror})"
    if stat.f_flag & os.ST_RDONLY or not os.access(folder, os.W_OK):
        return "the folder is read-only"
    if stat.f_bavail * stat.f_frsize < 1 << 20:
        return f"the disk is full ({stat.f_bavail * stat.f_frsize >> 10} KB free)"
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        limit = -1
    if limit >= 0 and limit != getattr(resource, "RLIM_INFINITY", -1):
        return f"this process may write files of {limit:,} bytes at most (ulimit -f)"
    return "the disk may be full or failing (see the job's log)"


def _global_annotations(record: Any) -> dict[str, bool]:
    """``global_record_annotations=True`` where this torch has it (2.6 on).

    With history on, torch also notes ``record_function`` annotations through a
    RecordFunction callback, registered on the calling thread unless asked to
    be global. The history is switched off by the writer thread (after the
    snapshot); a thread-local callback cannot be removed from there: torch
    prints "Requested callback is not found" into the job's log and the
    callback stays on the training thread, one more after each capture (seen on
    an H100). A global one is removed from any thread."""
    try:
        return {"global_record_annotations": True} if "global_record_annotations" in inspect.signature(record).parameters else {}
    except (TypeError, ValueError):
        return {}


def _warm_up() -> None:
    """Import what torch.profiler imports on its first start, before the start step: its
    ``prepare_trace`` touches ``torch._inductor``, whose lazy import takes a second or more,
    which would otherwise stall the training thread at the start step."""
    try:
        importlib.import_module("torch.profiler")
        importlib.import_module("torch._inductor.config")
    except Exception:
        pass  # the start step will import (or fail) on its own


def _profiler_running(torch: Any) -> bool:
    try:
        return bool(torch._C._autograd._profiler_enabled())
    except AttributeError:
        return bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


def _always_record(step: int) -> Any:
    return importlib.import_module("torch.profiler").ProfilerAction.RECORD


def summarize_file(path: Path) -> dict[str, Any]:
    """The trace's summary, computed in a child process: json.load of a trace holds the GIL for
    hundreds of milliseconds, which from any thread of this process would stall training."""
    size = path.stat().st_size
    if size > MAX_SUMMARY_BYTES:
        return {"note": f"trace of {size >> 20} MB not summarised"}
    if not sys.executable:
        return {"note": "not summarised: no Python interpreter to run the summary in"}
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", trace_summary.__file__, str(path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=SUMMARY_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            return {"note": f"not summarised: {lines[-1] if lines else f'exit status {done.returncode}'}"}
        return json.loads(done.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {"note": f"not summarised: {exc.__class__.__name__}: {exc}"}


def memory_summary(snapshot: Any) -> dict[str, Any]:
    """Reserved and allocated bytes at the end, and allocator events recorded (memory_viz shows the rest)."""
    segments = snapshot.get("segments", []) if isinstance(snapshot, dict) else []
    traces = snapshot.get("device_traces", []) if isinstance(snapshot, dict) else []
    return {
        "segments": len(segments),
        "reserved": int(sum(s.get("total_size", 0) for s in segments)),
        "allocated": int(sum(s.get("allocated_size", 0) for s in segments)),
        "events": int(sum(len(t) for t in traces)),
    }
