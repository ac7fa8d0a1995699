"""A node digest's steps as packed columns: how the relay packs them, how decode checks them, how to read them.

At 4,096 ranks a viewer takes about 2,000 digests a second. Sent as MessagePack
lists of numbers, each digest's steps (8 ranks x a dozen figures) became a
hundred Python floats at decode and went back into numpy arrays after it: a
fifth of what the viewer spent receiving. Packed, each column is one
MessagePack ``bin``: decode copies a few byte strings, and the viewer joins a
go of digests' columns and reads them with ``numpy.frombuffer`` in a few
operations (watch/engine/rank_store.py).

The block (wire/messages.py's ``NodeSteps``), every number little-endian,
position ``i`` of every column being rank ``r[i]``'s interval:

- ``r``: the ranks, int32, each once;
- ``n``: the interval's last step, int64; ``c``: how many steps it stands
  for, int64;
- ``f``: float64, rank by rank: its start (unix s, chosen so that start +
  mean wall is when its last step ended), its mean wall time, then its mean
  own time in each phase of ``p`` (0.0 for a phase it spent nothing in);
- ``p``: the phases' names, in the order of ``f``;
- ``g`` (absent when no rank's steps carry device times): one byte a rank,
  1 where its steps carry device times.

Standard library only: the probe's side imports wire/, and numpy is the
viewer's alone (tests/test_layering.py). :func:`check` bounds every figure as
the rest of the wire does (wire/messages.py), with a few C-level passes rather
than one Python call per number; :func:`read` turns a block into plain lists,
for readers without numpy and for tests.
"""

from __future__ import annotations

import struct
import sys
from array import array
from itertools import chain
from typing import Any, Final, Literal

from .messages import MAX_FIGURE, MAX_PHASES, MAX_RANKS, NodeSteps

#: The columns' element types, as :mod:`array` and numpy name them.
Code = Literal["i", "q", "d", "B"]
RANK: Final = "i"
WHOLE: Final = "q"
FIGURE: Final = "d"
FLAG: Final = "B"
DTYPES = {"r": "<i4", "n": "<i8", "c": "<i8", "f": "<f8", "g": "u1"}
#: Figures in ``f`` per rank before its phases: start, mean wall.
LEADING = 2
#: Bytes of one rank in ``r`` (int32).
RANK_BYTES = 4

_SWAP = sys.byteorder == "big"  # the wire is little-endian; a big-endian host swaps
#: A figure within [0, MAX_FIGURE], read as the int64 of its bits: from 0 (0.0) to MAX_FIGURE's bits, in order;
#: NaN, infinities and negative figures fall outside (-0.0, whose bits are int64's least, is let through).
_TOP_BITS = struct.unpack("<q", struct.pack("<d", MAX_FIGURE))[0]
_NEG_ZERO_BITS = -(1 << 63)
_WHOLE = int(MAX_FIGURE)
#: The top bytes of the float64s in [0, 2**49): sign clear, exponent below 2**49's (0x430).
_SMALL_TIME_TOPS = bytes(range(0x43))
#: The third byte of an int32 rank below MAX_RANKS (2**22), whose top byte is 0.
_RANK_BYTE2 = bytes(range(MAX_RANKS >> 16))
_EIGHT_ZEROS = bytes(8)
#: Rank columns (``r``) already found sound: a node's digests name the same ranks interval after interval, so
#: :func:`check` reads each column's numbers once, not 2,000 times a second at 4,096 ranks. At most this many
#: bytes of them (a job of 16,384 ranks on 2,048 nodes holds 64 KB; a column comes from the network and may be
#: megabytes): when full it starts again.
SOUND_RANKS_BYTES = 1 << 20
_SOUND_RANKS: set[bytes] = set()
_sound_bytes = 0  # the bytes of the columns in _SOUND_RANKS


def _remember_sound(r: bytes) -> None:
    """Note a rank column :func:`check` found sound, within :data:`SOUND_RANKS_BYTES`."""
    global _sound_bytes
    if _sound_bytes + len(r) > SOUND_RANKS_BYTES:
        _SOUND_RANKS.clear()
        _sound_bytes = 0
    if len(r) <= SOUND_RANKS_BYTES:
        _SOUND_RANKS.add(r)
        _sound_bytes += len(r)


def _packed(code: Code, values: Any) -> bytes:
    out = array(code, values)
    if _SWAP:
        out.byteswap()
    return out.tobytes()


def _numbers(code: Code, data: bytes) -> list[Any]:
    if _SWAP:
        out = array(code)
        out.frombytes(data)
        out.byteswap()
        return out.tolist()
    return memoryview(data).cast(code).tolist()


def pack(
    ranks: list[int], last: list[int], count: list[int], start: list[float], wall: list[float],
    own: dict[str, list[float]], device: list[bool] | None = None,
) -> NodeSteps:  # fmt: skip
    """The block of the given columns (each as long as ``ranks``; ``own``: a column per phase)."""
    return NodeSteps(
        r=_packed(RANK, ranks),
        n=_packed(WHOLE, last),
        c=_packed(WHOLE, count),
        f=_packed(FIGURE, chain.from_iterable(zip(start, wall, *own.values()))),
        p=list(own),
        g=bytes(map(bool, device)) if device is not None and any(device) else None,
    )


def check(steps: NodeSteps) -> None:
    """Raises ValueError (its text names the fault, never the data) unless the block is whole and every figure
    is within the wire's bounds: ranks in [0, MAX_RANKS) and each once, steps within +-MAX_FIGURE, counts at
    least 1, times in [0, MAX_FIGURE], flags 0 or 1.

    It runs for each of the 2,000 digests a second a viewer of 4,096 ranks takes, and a Python comparison per
    number would cost what decoding them as lists did. So the common case is read off each number's most
    significant byte, a few C-level byte operations for the whole column: a time whose top byte is under 0x43 is a
    float64 in [0, 2**49 s), a step number whose top byte is 0x00 or 0xff is within +-2**56, a count whose top byte
    is 0x00 is under 2**56 (and none is 0 where no eight bytes in a row are). Only a column with a number outside
    those is compared number by number. A node's rank column, the same interval after interval, is read once
    (:data:`SOUND_RANKS_BYTES`)."""
    r, last, count, figures, names, flags = steps.r, steps.n, steps.c, steps.f, steps.p, steps.g
    k = len(r) // RANK_BYTES
    whole = 8 * k  # (bytes of a column of int64 or float64)
    if len(r) != RANK_BYTES * k or not k or len(last) != whole or len(count) != whole:
        raise ValueError("step columns of unequal length")
    if len(figures) != whole * (LEADING + len(names)) or (flags is not None and len(flags) != k):
        raise ValueError("step columns of unequal length")
    if len(names) > MAX_PHASES or len(set(names)) != len(names):
        raise ValueError("step columns name a phase twice or too many phases")
    if r not in _SOUND_RANKS:  # (a node's ranks come again every interval: each column of them is read once)
        ranks = _numbers(RANK, r)
        if not (_only(r[3::4], b"\0") and _only(r[2::4], _RANK_BYTE2)) and (min(ranks) < 0 or max(ranks) >= MAX_RANKS):
            raise ValueError("a rank out of range in the step columns")
        if len(set(ranks)) != k:
            raise ValueError("a rank twice in the step columns")
        _remember_sound(r)
    # (inline below, what _only does: this runs 2,000 times a second in a viewer of 4,096 ranks)
    if last[7::8].translate(None, b"\0\xff"):
        numbers = _numbers(WHOLE, last)
        if min(numbers) < -_WHOLE or max(numbers) > _WHOLE:
            raise ValueError("a step number out of range in the step columns")
    if count[7::8].translate(None, b"\0") or _EIGHT_ZEROS in count:  # not all within [1, 2**56): compared
        numbers = _numbers(WHOLE, count)
        if min(numbers) < 1 or max(numbers) > _WHOLE:
            raise ValueError("a step count out of range in the step columns")
    if figures[7::8].translate(None, _SMALL_TIME_TOPS):
        bits = _numbers(WHOLE, figures)
        if max(bits) > _TOP_BITS or (min(bits) < 0 and any(b < 0 and b != _NEG_ZERO_BITS for b in bits)):
            raise ValueError("a time out of range in the step columns")
    if flags is not None and flags.translate(None, b"\0\1"):
        raise ValueError("a device-times flag that is neither 0 nor 1")


def _only(data: bytes, allowed: bytes) -> bool:
    """Every byte of ``data`` is one of ``allowed`` (in C: what deleting them leaves is empty)."""
    return not data.translate(None, allowed)


def size(steps: NodeSteps) -> int:
    """How many ranks a (checked) block holds."""
    return len(steps.r) // RANK_BYTES


def read(steps: NodeSteps) -> dict[str, Any]:
    """The block as plain lists, as it was built: ``r``, ``n``, ``c``, ``t``, ``w``, ``p`` (a list per phase
    name) and ``g`` (a bool per rank, where the block has it)."""
    width = LEADING + len(steps.p)
    figures = _numbers(FIGURE, steps.f)
    out: dict[str, Any] = {
        "r": _numbers(RANK, steps.r),
        "n": _numbers(WHOLE, steps.n),
        "c": _numbers(WHOLE, steps.c),
        "t": figures[0::width],
        "w": figures[1::width],
        "p": {name: figures[LEADING + j :: width] for j, name in enumerate(steps.p)},
    }
    if steps.g is not None:
        out["g"] = [bool(b) for b in steps.g]
    return out
