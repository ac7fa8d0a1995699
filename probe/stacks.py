"""The Python stacks of every thread of this rank, taken from the probe's own thread.

``sys._current_frames()`` reads every thread's current frame without that
thread's help, so the answer comes even while the training thread is blocked
inside a collective, the data loader or a sleep: those release the GIL, and
the sender thread that runs this needs nothing else. The result is plain data
(lists of maps of strings and ints) for the wire, and bounded: a job with
hundreds of threads or a deep recursion still answers with a reply far below
the wire's maximum body.

Which frames are library code (torch, the standard library, ranktop itself) is
decided by the TUI; this side only says where those libraries live here, since
only the rank knows where its interpreter and packages are installed.
"""

from __future__ import annotations

import hashlib
import linecache
import os
import sys
import sysconfig
import threading
from types import FrameType
from typing import Any

#: Innermost frames kept per thread; the outer ones are counted, not sent.
MAX_FRAMES = 48
#: Threads reported at most (the main thread always, then by name).
MAX_THREADS = 24
#: Past this many characters in total, threads other than the main one keep only their innermost frames.
BUDGET_CHARS = 256 * 1024
FRAMES_OVER_BUDGET = 6
MAX_PATH, MAX_CODE, MAX_NAME = 200, 160, 80


def _clip(text: str, limit: int, keep_end: bool = False) -> str:
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :] if keep_end else text[: limit - 1] + "…"


def _frames(frame: FrameType | None, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Frames of one thread, outermost first (as a traceback prints them), the innermost ``limit`` kept."""
    chain: list[FrameType] = []
    while frame is not None:
        chain.append(frame)
        frame = frame.f_back
    omitted = max(0, len(chain) - limit)
    out = []
    for f in reversed(chain[:limit]):
        code = f.f_code
        filename = code.co_filename
        line = f.f_lineno or 0
        out.append(
            {
                "file": _clip(filename, MAX_PATH, keep_end=True),
                "line": line,
                "function": _clip(code.co_name, MAX_NAME),
                "code": _clip(linecache.getline(filename, line).strip(), MAX_CODE),
            }
        )
    return out, omitted


def library_roots() -> dict[str, list[str]]:
    """Where this interpreter keeps code that is not the user's: {kind: [folder, ...]}."""
    here = os.path.dirname(os.path.abspath(__file__))
    ranktop = [here]
    wire = sys.modules.get("ranktop.wire")
    wire_file = getattr(wire, "__file__", None) if wire is not None else None
    if wire_file:
        ranktop.append(os.path.dirname(os.path.abspath(wire_file)))
    paths = sysconfig.get_paths()
    stdlib = sorted({paths[k] for k in ("stdlib", "platstdlib") if paths.get(k)})
    site = sorted({paths[k] for k in ("purelib", "platlib") if paths.get(k)})
    roots = {"ranktop": ranktop, "stdlib": stdlib, "site": site}
    torch = sys.modules.get("torch")  # never imported here: only reported if the job uses it
    torch_file = getattr(torch, "__file__", None) if torch is not None else None
    if torch_file:
        roots["torch"] = [os.path.dirname(os.path.abspath(torch_file))]
    return roots


def collect(max_frames: int = MAX_FRAMES, max_threads: int = MAX_THREADS) -> dict[str, Any]:
    """Every thread's stack: ``{"threads": [...], "omitted_threads": n, "roots": {...}}``.

    Each thread is ``{"name", "ident", "main", "daemon", "frames", "omitted"}``
    with frames ``{"file", "line", "function", "code"}``, outermost first.
    """
    frames = sys._current_frames()
    known = {t.ident: t for t in threading.enumerate()}
    main_ident = threading.main_thread().ident
    me = threading.get_ident()

    def order(ident: int) -> tuple[bool, bool, str, int]:
        thread = known.get(ident)
        return (ident != main_ident, ident == me, thread.name if thread else "~", ident)

    idents = sorted(frames, key=order)
    threads: list[dict[str, Any]] = []
    for ident in idents[:max_threads]:
        thread = known.get(ident)
        stack, omitted = _frames(frames[ident], max_frames)
        threads.append(
            {
                "name": _clip(thread.name if thread else f"thread-{ident}", MAX_NAME),
                "ident": ident,
                "main": ident == main_ident,
                "daemon": bool(thread.daemon) if thread else True,
                "frames": stack,
                "omitted": omitted,
            }
        )
    del frames  # frame objects keep whole call chains alive
    size = sum(len(f["file"]) + len(f["code"]) + len(f["function"]) + 24 for t in threads for f in t["frames"])
    if size > BUDGET_CHARS:
        for t in threads:
            if not t["main"] and len(t["frames"]) > FRAMES_OVER_BUDGET:
                t["omitted"] += len(t["frames"]) - FRAMES_OVER_BUDGET
                t["frames"] = t["frames"][-FRAMES_OVER_BUDGET:]
    return {"threads": threads, "omitted_threads": max(0, len(idents) - max_threads), "roots": library_roots()}


def fingerprint(collected: dict[str, Any]) -> str:
    """A short fingerprint of the main thread's stack: what a viewer groups ranks by.

    At thousands of ranks a viewer first asks every rank for this alone, then one
    rank per distinct fingerprint for its full stacks (see watch/analysis/stacks.py).
    The same frames (file, line, function) give the same fingerprint on every rank.
    """
    main = next((t for t in collected.get("threads", ()) if t.get("main")), None)
    frames = main["frames"] if main is not None else ()
    text = "\n".join(f"{f['file']}:{f['line']}:{f['function']}" for f in frames) if main is not None else "<no main thread>"
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]


def answer(collected: dict[str, Any], state: dict[str, Any], fingerprint_only: bool = False) -> dict[str, Any]:
    """The reply to a ``stacks`` command: the stacks, or only their fingerprint, with where the rank is."""
    if fingerprint_only:
        return {"fingerprint": fingerprint(collected), "state": state}
    return dict(collected, fingerprint=fingerprint(collected), state=state)
