"""The flight recorder's file: a job's telemetry frames as they came off the wire, with their arrival times.

Why this shape:

* Frames are stored exactly as the receiver got them (``[topic, msgpack body]``),
  never re-encoded and never pickled, so a replay decodes them with the same
  :func:`ranktop.wire.schema.decode` as a live session and trusts them no more.
* The file is a header and a run of independent *chunks*, each compressed on its
  own (lzma) with its length and CRC in front. A viewer killed mid-write leaves
  every closed chunk readable; the reader stops at the first torn one.
* The receiver thread never waits on the disk: :meth:`FlightRecorder.tap` puts the frames
  in a bounded queue and returns; a writer thread batches, compresses and writes.
  When the queue is full the frame is dropped and counted, never blocked on.
* Size is capped by rotation: past ``max_bytes`` the file becomes ``FILE.1``
  (``FILE.1`` becomes ``FILE.2``, ...), ``keep`` old segments stay. Ranks re-send
  their hello every 2 s, so each segment is readable on its own.

Layout (little endian)::

    file   = MAGIC, u32 header length, msgpack header map, chunk*
    chunk  = CHUNK_MAGIC, u32 payload length, u32 crc32(payload), f64 first t, f64 last t, u32 entries, payload
    payload = lzma(msgpack entry*)   entry = [t, endpoint, frames]  (frames None: endpoint announced, then host)

``t`` is wall-clock seconds (unix), kept monotonic during a recording: the
wall time at its start plus the monotonic time since.
"""

from __future__ import annotations

import lzma
import os
import collections
import socket
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import msgpack  # type: ignore[import-untyped]  # msgpack ships no type hints

from ranktop.watch.errors import RanktopError
from ranktop.wire import __version__

MAGIC = b"RANKTOP-REC\x01"
CHUNK_MAGIC = b"RTCK"
_CHUNK_HEAD = struct.Struct("<4sIIddI")
FORMAT_VERSION = 1

#: A chunk is closed after this many seconds or raw bytes, whichever comes first: a crash loses at most this much.
CHUNK_SECONDS = 5.0
CHUNK_RAW_BYTES = 4 << 20
#: Frames waiting for the writer; beyond this they are dropped and counted (the viewer never waits on the disk).
QUEUE_FRAMES = 50_000
#: Rotation defaults: 64 MiB a segment, 3 old segments kept (256 MiB at most on disk).
DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_KEEP = 3
#: Reading refuses chunks and headers larger than this (a damaged or foreign file).
MAX_CHUNK_BYTES = 256 << 20
_MAX_HEADER_BYTES = 1 << 20


class RecordingError(RanktopError):
    """A file that is not a ranktop recording, or cannot be read; the message is the whole story."""


@dataclass
class Entry:
    t: float  # arrival, wall-clock seconds
    endpoint: str | None
    frames: list[bytes] | None  # None: the endpoint was announced (host in ``host``)
    host: str | None = None


@dataclass
class FlightRecorderStats:
    frames: int = 0  # frames written
    dropped: int = 0  # frames the full queue refused
    chunks: int = 0
    bytes: int = 0  # compressed bytes written, all segments
    raw_bytes: int = 0  # the frames' own bytes before compression
    segments: int = 1
    error: str | None = None  # the writer stopped: why


def _now_fn() -> Callable[[], float]:
    """Wall-clock time that never goes backwards during one recording."""
    wall0, mono0 = time.time(), time.monotonic()
    return lambda: wall0 + (time.monotonic() - mono0)


class FlightRecorder:
    """Writes what the receiver hears to ``path``, from its own thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        job: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: int = DEFAULT_KEEP,
        chunk_seconds: float = CHUNK_SECONDS,
        queue_frames: int = QUEUE_FRAMES,
    ):
        self.path = Path(path)
        self.job = job
        self.max_bytes = max_bytes
        self.keep = keep
        self.chunk_seconds = chunk_seconds
        self.stats = FlightRecorderStats()
        self.clock = _now_fn()
        # A deque, not a queue.Queue: append and popleft are single C calls, so neither the receiver nor the
        # writer holds the GIL for long (the viewer's refresh shares it). Bounded by the length check in tap().
        self._pending: collections.deque[tuple[float, str | None, list[bytes] | None, str | None]] = collections.deque()
        self._max_pending = queue_frames
        self._wake_s = max(0.005, min(0.2, chunk_seconds))
        self._thread = threading.Thread(target=self._run, name="ranktop-recorder", daemon=True)
        self._file: IO[bytes] | None = None  # the segment being written
        self._segment_bytes = 0
        self._stopping = threading.Event()
        self._endpoints: dict[str | None, str | None] = {}  # (url -> host) re-announced at the top of each segment
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._open_segment()
        except OSError as exc:
            raise RecordingError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    # -- the receiver's side: never blocks ----------------------------------------

    def tap(self, frames: list[bytes], endpoint: str | None) -> None:
        """One message as it arrived (called on the receiver thread)."""
        if len(self._pending) >= self._max_pending:
            self.stats.dropped += 1
            return
        self._pending.append((self.clock(), endpoint, frames, None))

    def endpoint(self, url: str, host: str | None = None) -> None:
        """An endpoint the receiver dials (so a replay lists it, with its host, before its ranks speak)."""
        if len(self._pending) >= self._max_pending:
            self.stats.dropped += 1
            return
        self._pending.append((self.clock(), url, None, host))

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> "FlightRecorder":
        self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, close the last chunk and the file."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        elif self._file is not None:
            self._file.close()
            self._file = None

    # -- the writer thread ------------------------------------------------------------

    def _run(self) -> None:
        entries: list[list[Any]] = []
        raw = 0
        opened = time.monotonic()
        pending = self._pending
        try:
            while True:
                stopping = self._stopping.wait(self._wake_s)
                for _ in range(len(pending)):  # what is there now; more may arrive meanwhile
                    t, url, frames, host = pending.popleft()
                    if frames is None:
                        self._endpoints[url] = host
                        entries.append([t, url, None, host])
                    else:
                        size = sum(map(len, frames))
                        entries.append([t, url, frames])
                        raw += size
                        self.stats.frames += 1
                        self.stats.raw_bytes += size
                    if len(entries) == 1:
                        opened = time.monotonic()
                    if raw >= CHUNK_RAW_BYTES:
                        self._write_chunk(entries)
                        entries, raw = [], 0
                if entries and (stopping or time.monotonic() - opened >= self.chunk_seconds):
                    self._write_chunk(entries)
                    entries, raw = [], 0
                if stopping and not pending:
                    break
        except OSError as exc:
            self.stats.error = f"recording stopped: cannot write {self.path}: {exc.strerror or exc}"
        finally:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _open_segment(self) -> None:
        header = {
            "format": FORMAT_VERSION,
            "ranktop": __version__,
            "job": self.job,
            "started": self.clock(),
            "recorder_host": socket.gethostname(),
            "segment": self.stats.segments - 1,
        }
        body = msgpack.packb(header, use_bin_type=True)
        self._file = open(self.path, "wb")
        self._file.write(MAGIC + struct.pack("<I", len(body)) + body)
        self._file.flush()
        self._segment_bytes = len(MAGIC) + 4 + len(body)
        self.stats.bytes += self._segment_bytes

    def _write_chunk(self, entries: list[list[Any]]) -> None:
        assert self._file is not None  # open from __init__ on, but for the moment _rotate reopens it
        packer = msgpack.Packer(use_bin_type=True)
        payload = lzma.compress(b"".join(packer.pack(e) for e in entries), preset=6)
        head = _CHUNK_HEAD.pack(CHUNK_MAGIC, len(payload), zlib.crc32(payload), entries[0][0], entries[-1][0], len(entries))
        self._file.write(head + payload)
        self._file.flush()
        self.stats.chunks += 1
        self.stats.bytes += len(head) + len(payload)
        self._segment_bytes += len(head) + len(payload)
        if self._segment_bytes >= self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        assert self._file is not None  # (see _write_chunk)
        self._file.close()
        self._file = None
        oldest = segment_path(self.path, self.keep)
        if self.keep == 0:
            self.path.unlink()
        elif oldest.exists():
            oldest.unlink()
        for i in range(self.keep - 1, 0, -1):
            if segment_path(self.path, i).exists():
                os.replace(segment_path(self.path, i), segment_path(self.path, i + 1))
        if self.keep > 0:
            os.replace(self.path, segment_path(self.path, 1))
        self.stats.segments += 1
        self._open_segment()
        if self._endpoints:
            t = self.clock()
            self._write_chunk([[t, url, None, host] for url, host in self._endpoints.items()])


def segment_path(path: Path, index: int) -> Path:
    """The ``index``-th older segment of a rotated recording (0: the file itself)."""
    return path if index == 0 else path.with_name(f"{path.name}.{index}")


def segments_of(path: str | os.PathLike[str]) -> list[Path]:
    """A recording's files, oldest first: ``FILE.N`` ... ``FILE.1``, ``FILE``."""
    path = Path(path)
    older = []
    i = 1
    while segment_path(path, i).exists():
        older.append(segment_path(path, i))
        i += 1
    files = list(reversed(older))
    if path.exists():
        files.append(path)
    return files


@dataclass
class Recording:
    """A recording read whole into memory: its header, every entry in arrival order, and what could not be read."""

    path: Path
    header: dict[str, Any]
    entries: list[Entry]
    files: list[Path] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)  # one line per damaged chunk (a crash mid-write)
    compressed_bytes: int = 0

    @property
    def start(self) -> float:
        return self.entries[0].t if self.entries else float(self.header.get("started", 0.0))

    @property
    def end(self) -> float:
        return self.entries[-1].t if self.entries else self.start

    @property
    def duration_s(self) -> float:
        return self.end - self.start


def read(path: str | os.PathLike[str]) -> Recording:
    """Every readable entry of a recording and its older segments; RecordingError if there is none."""
    path = Path(path)
    files = segments_of(path)
    if not files:
        raise RecordingError(f"no recording at {path}")
    header: dict[str, Any] | None = None
    entries: list[Entry] = []
    torn: list[str] = []
    size = 0
    for file in files:
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise RecordingError(f"cannot read {file}: {exc.strerror or exc}") from None
        size += len(data)
        head, chunks = _parse(file, data, torn)
        header = header or head
        for chunk in chunks:
            entries.extend(chunk)
    entries.sort(key=lambda e: e.t)  # stable: segments and chunks are in order already
    return Recording(path, header or {}, entries, files, torn, size)


def _parse(file: Path, data: bytes, torn: list[str]) -> tuple[dict[str, Any], list[list[Entry]]]:
    if not data.startswith(MAGIC):
        raise RecordingError(f"{file} is not a ranktop recording")
    pos = len(MAGIC)
    if len(data) < pos + 4:
        raise RecordingError(f"{file}: truncated header")
    (n,) = struct.unpack_from("<I", data, pos)
    pos += 4
    if n > _MAX_HEADER_BYTES or len(data) < pos + n:
        raise RecordingError(f"{file}: truncated or damaged header")
    try:
        header = msgpack.unpackb(data[pos : pos + n], raw=False)
    except Exception:
        raise RecordingError(f"{file}: damaged header") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        raise RecordingError(
            f"{file}: recording format {header.get('format') if isinstance(header, dict) else '?'} "
            f"is not {FORMAT_VERSION} (made by another ranktop version)"
        )
    pos += n

    def chunks() -> Iterator[list[Entry]]:
        at = pos
        while at < len(data):
            if len(data) < at + _CHUNK_HEAD.size:
                torn.append(f"{file.name}: a chunk header cut short at byte {at} (the writer stopped mid-chunk)")
                return
            magic, length, crc, _, _, count = _CHUNK_HEAD.unpack_from(data, at)
            at += _CHUNK_HEAD.size
            if magic != CHUNK_MAGIC or length > MAX_CHUNK_BYTES:
                torn.append(f"{file.name}: damaged chunk at byte {at - _CHUNK_HEAD.size}; the rest is skipped")
                return
            payload = data[at : at + length]
            at += length
            if len(payload) < length or zlib.crc32(payload) != crc:
                torn.append(f"{file.name}: the last chunk is incomplete or damaged (the writer stopped mid-chunk)")
                return
            try:
                entries = _entries(lzma.decompress(payload))
            except Exception as exc:  # lzma and msgpack raise several unrelated types
                torn.append(f"{file.name}: chunk not readable ({exc.__class__.__name__})")
                return
            yield entries

    return header, list(chunks())


def _entries(raw: bytes) -> list[Entry]:
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(raw) + 1)
    unpacker.feed(raw)
    out: list[Entry] = []
    for item in unpacker:
        entry = _entry(item)
        if entry is not None:
            out.append(entry)
    return out


def _entry(item: Any) -> Entry | None:
    """One entry, checked: a file is read no more trustingly than the wire."""
    if not isinstance(item, list) or len(item) < 3 or not isinstance(item[0], (int, float)):
        return None
    t, url, frames = item[0], item[1], item[2]
    if url is not None and not isinstance(url, str):
        return None
    if frames is None:
        host = item[3] if len(item) > 3 and isinstance(item[3], str) else None
        return Entry(float(t), url, None, host) if url else None
    if not isinstance(frames, list) or not all(isinstance(f, bytes) for f in frames):
        return None
    return Entry(float(t), url, frames)
