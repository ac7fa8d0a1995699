"""The CUDA allocator's snapshot written as ``pickle.dump`` would, a piece at a time, and what writing it cost training.

A memory capture's writer thread takes the snapshot (``torch.cuda.memory._snapshot()``) and pickles it for
pytorch.org/memory_viz. Both hold the GIL: the snapshot is one C++ call that builds the Python objects (nothing
to be done about it but to time it), and ``pickle.dump`` of a 10,000-event history is one C call of a few
hundred milliseconds, during which the training thread cannot run a line of Python. So :func:`dump` writes the
same stream, a piece at a time, and lets the GIL go between pieces:

- the top-level dict and its lists are opened and filled by hand with the opcodes ``pickle`` itself writes
  (protocol 2: ``EMPTY_DICT``, ``EMPTY_LIST``, ``APPEND``, ``SETITEM``: no framing, and nothing
  memory_viz's own unpickler does not read);
- each list's items go in pieces of :data:`PIECE` through one ``Pickler`` per piece, whose memo is kept
  across its ``dump`` calls, so the frames torch shares between the entries of a trace stay shared within a
  piece (each ``dump``'s leading ``PROTO`` and trailing ``STOP`` are cut); a new piece's memo starts again,
  and its puts overwrite the old slots, which nothing reads again;
- after each piece, ``time.sleep(0)``: the GIL goes to a thread waiting for it.

``pickle.load`` of the result gives an equal object. :class:`StallMeter` measures the cost to training
directly: a thread that asks for the GIL every millisecond, whose longest wait is the longest any thread (the
training thread among them) waited while the capture wrote.
"""

from __future__ import annotations

import io
import pickle
import threading
import time
from typing import Any, BinaryIO, Callable

#: Items of a list pickled in one go (a few milliseconds for the entries of an allocator trace).
PIECE = 128
_PROTOCOL = 2
_HEADER = pickle.PROTO + bytes([_PROTOCOL])


def dump(obj: Any, file: BinaryIO, piece: int = PIECE, pause: Callable[[float], None] = time.sleep) -> None:
    """Write ``obj`` to ``file`` as ``pickle.dump(obj, file, protocol=2)`` would (``pickle.load`` reads the same
    object back), a piece at a time, the GIL let go between pieces (``pause(0)``)."""
    file.write(_HEADER)
    _value(obj, file, piece, pause)
    file.write(pickle.STOP)


def _value(obj: Any, file: BinaryIO, piece: int, pause: Callable[[float], None]) -> None:
    kind = type(obj)
    if kind is dict:
        file.write(pickle.EMPTY_DICT)
        for key, value in obj.items():
            _pieces([key], file, piece, pause)
            _value(value, file, piece, pause)
            file.write(pickle.SETITEM)
    elif kind is list and obj and type(obj[0]) in (list, dict):
        file.write(pickle.EMPTY_LIST)
        if type(obj[0]) is list:
            for item in obj:
                _value(item, file, piece, pause)
                file.write(pickle.APPEND)
        else:
            for start in range(0, len(obj), piece):
                _pieces(obj[start : start + piece], file, piece, pause, append=True)
                pause(0)
    else:
        _pieces([obj], file, piece, pause)


def _pieces(items: list[Any], file: BinaryIO, piece: int, pause: Callable[[float], None], append: bool = False) -> None:
    """``items`` through one Pickler (its memo shared among them), each written without PROTO and STOP."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, _PROTOCOL)
    out = bytearray()
    for item in items:
        buffer.seek(0)
        buffer.truncate()
        pickler.dump(item)
        data = buffer.getbuffer()
        out += data[len(_HEADER) : -1]
        del data
        if append:
            out += pickle.APPEND
    file.write(out)


class StallMeter:
    """The longest time a thread waited for the GIL while this context ran: a thread that sleeps a millisecond
    at a time and notes how late it woke (``longest``, seconds; ``total``: its lateness summed)."""

    def __init__(self, tick_s: float = 0.001):
        self.tick_s = tick_s
        self.longest = 0.0
        self.total = 0.0
        self._stop = threading.Event()
        self._ticking = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "StallMeter":
        self._thread = threading.Thread(target=self._run, name="ranktop-capture-stalls", daemon=True)
        self._thread.start()
        self._ticking.wait(1.0)  # its first tick has begun: a GIL held from now on is seen
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        tick, perf, stop = self.tick_s, time.perf_counter, self._stop
        while not stop.is_set():
            began = perf()
            self._ticking.set()
            time.sleep(tick)
            late = perf() - began - tick
            if late > 0:
                self.total += late
                if late > self.longest:
                    self.longest = late
