"""The trace file: gzip-compressed JSON lines, one header then one Reading per line.
The format is specified in docs/trace-format.md; keep the two in step."""

from __future__ import annotations

import gzip
import io
import errno
import json
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

from gpuwait import __version__
from gpuwait.core.reading import Reading
from gpuwait.trace.codec import DecodeError, from_jsonable, to_jsonable

log = logging.getLogger("gpuwait.record")

FORMAT = "gpuwait-trace"
#: Version 2 adds sources (nccl, owner_cgroup); a version 1 trace holds a subset of its sources and the
#: same payloads, so both are read.
VERSION = 2
READABLE_VERSIONS = (1, 2)


#: Longest line a trace may have, in characters. A Reading of the largest host is tens of
#: kilobytes; decoding a line costs some 50 times its length, so this bounds a replay's
#: memory to a few hundred MiB whatever the file holds.
MAX_LINE_CHARS = 4 << 20
#: Largest magnitude of a number in a trace: the widest kernel and NVML counters are 64-bit.
#: Beyond it an integer cannot be a counter, and later float arithmetic on it overflows.
MAX_MAGNITUDE = 2 ** 64
#: Latest "t" of a record, in seconds from the start of the recording (about 31 years):
#: beyond it the replay's analysis clock would stop advancing in float steps.
MAX_TRACE_SECONDS = 1e9


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and the line."""


class _ValueRefused(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _ValueRefused(f"{name} is not a number a trace may hold (NaN is written as null, infinities as \"inf\")")


def _checked_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > 20 or int(text) > MAX_MAGNITUDE or int(text) < -MAX_MAGNITUDE:
        raise _ValueRefused(f"integer {text[:24]}{'...' if len(text) > 24 else ''} is beyond 64 bits")
    return int(text)


def _checked_float(text: str) -> float:
    value = float(text)
    if not abs(value) <= MAX_MAGNITUDE:
        raise _ValueRefused(f"number {text[:24]}{'...' if len(text) > 24 else ''} is beyond the magnitude of a 64-bit counter")
    return value


@dataclass(frozen=True)
class TraceHeader:
    version: int
    created: str
    host: str
    #: Free-form facts about the recording (intervals, window, gpuwait version).
    meta: dict[str, Any]


def open_for_recording(path: str) -> IO[bytes]:
    """Open a trace for writing without following a symbolic link at its last component and
    only if it is (or becomes) a regular file: the exporter often runs as root, and a link
    planted where the trace goes would otherwise have it truncate the file the link names.
    Raises OSError; a link or a non-regular file reads as such in its strerror."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(e.errno, "is a symbolic link; not following it", path) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        # Truncated only now that it is known to be a regular file and not a link's target.
        os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


class TraceWriter:
    """Appends Readings as they are taken. Thread-safe: every source thread calls ``write``."""

    def __init__(self, path: str, meta: Mapping[str, Any] | None = None, flush_interval: float = 1.0,
                 origin: float | None = None) -> None:
        raw = open_for_recording(path)
        self._file: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) if path.endswith(".gz") else raw
        self._raw = raw
        self._lock = threading.Lock()
        #: The instant written as t = 0; by default the first Reading written. Sources are read
        #: by their own threads and finish out of order, so a recorder that is attached to a
        #: running sampler passes the instant it started, which precedes every Reading.
        self._origin: float | None = origin
        self._flush_interval = flush_interval
        self._last_flush = time.monotonic()
        #: Readings left out for a line longer than the reader takes, by source.
        self.refused: dict[str, int] = {}
        header = {
            "format": FORMAT,
            "version": VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": socket.gethostname(),
            "meta": {"gpuwait_version": __version__, **dict(meta or {})},
        }
        line = _encode_line(header)
        if line is None:
            self.close()
            raise ValueError(f"trace header longer than {MAX_LINE_CHARS} characters")
        self._file.write(line)

    def write(self, reading: Reading) -> None:
        with self._lock:
            if self._file.closed:
                return
            if self._origin is None:
                self._origin = reading.t
            line = _encode_line({
                "t": round(reading.t - self._origin, 6),
                "source": reading.source,
                "data": to_jsonable(reading.data),
                **({"errors": list(reading.errors)} if reading.errors else {}),
            })
            if line is None:
                # A Reading cannot be split across lines, and a line the reader refuses would
                # end the replay there: leaving this one out keeps the rest of the trace.
                if reading.source not in self.refused:
                    log.warning("record.file: a reading of source %s is longer than the %d characters a trace line "
                                "may hold; such readings are not recorded", reading.source, MAX_LINE_CHARS)
                self.refused[reading.source] = self.refused.get(reading.source, 0) + 1
                return
            self._file.write(line)
            now = time.monotonic()
            if now - self._last_flush >= self._flush_interval:
                # A sync flush per second: a node that dies mid-incident still leaves a readable trace.
                self._file.flush()
                self._last_flush = now

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()
            if not self._raw.closed:
                self._raw.close()


def _encode_line(obj: Any) -> bytes | None:
    """One trace line with its newline, or None if the reader would refuse it as too long.
    JSON is written as ASCII, so its length in bytes is its length in characters."""
    line = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    return line if len(line) <= MAX_LINE_CHARS else None


def _open_text(path: str) -> IO[str]:
    try:
        raw = open(path, "rb")
    except OSError as e:
        raise TraceError(f"{path}: cannot open trace: {e.strerror or e}") from None
    magic = raw.read(2)
    raw.seek(0)
    stream: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw
    return io.TextIOWrapper(stream, encoding="utf-8", errors="strict")


class TraceReader:
    """Reads a trace lazily. ``payloads`` maps source names to payload classes; a line of a
    source not in it is an error, since replaying it would silently lose a signal."""

    def __init__(self, path: str, payloads: Mapping[str, type]) -> None:
        self.path = path
        self.payloads = dict(payloads)
        self._text = _open_text(path)
        self._lineno = 0
        first = self._next_json()
        if first is None:
            raise TraceError(f"{path}: empty trace (no header line)")
        if not isinstance(first, dict) or first.get("format") != FORMAT:
            raise TraceError(f"{path}:1: not a gpuwait trace (header must have \"format\": \"{FORMAT}\")")
        version = first.get("version")
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            readable = " and ".join(str(v) for v in READABLE_VERSIONS)
            raise TraceError(f"{path}:1: trace version {version!r} is not supported (this gpuwait reads versions {readable})")
        self.header = TraceHeader(version, str(first.get("created", "")), str(first.get("host", "")), dict(first.get("meta") or {}))

    def _next_json(self) -> Any:
        while True:
            try:
                line = self._text.readline(MAX_LINE_CHARS + 1)
            except (EOFError, OSError, gzip.BadGzipFile) as e:
                raise TraceError(f"{self.path}:{self._lineno + 1}: truncated or corrupt compressed data ({e})") from None
            except UnicodeDecodeError:
                raise TraceError(f"{self.path}:{self._lineno + 1}: not UTF-8 text") from None
            if not line:
                return None
            self._lineno += 1
            if len(line) > MAX_LINE_CHARS:
                raise TraceError(f"{self.path}:{self._lineno}: line longer than {MAX_LINE_CHARS} characters")
            if not line.strip():
                continue
            if not line.endswith("\n"):
                raise TraceError(f"{self.path}:{self._lineno}: truncated line (no newline at end)")
            try:
                return json.loads(line, parse_int=_checked_int, parse_float=_checked_float, parse_constant=_refuse_constant)
            except json.JSONDecodeError as e:
                raise TraceError(f"{self.path}:{self._lineno}: not valid JSON: {e.msg} at column {e.colno}") from None
            except _ValueRefused as e:
                raise TraceError(f"{self.path}:{self._lineno}: {e}") from None
            except RecursionError:
                raise TraceError(f"{self.path}:{self._lineno}: nested too deeply") from None

    @property
    def lineno(self) -> int:
        """The line last read (1 is the header)."""
        return self._lineno

    def __iter__(self) -> Iterator[Reading]:
        last_t: dict[str, float] = {}
        while True:
            obj = self._next_json()
            if obj is None:
                return
            where = f"{self.path}:{self._lineno}"
            if not isinstance(obj, dict):
                raise TraceError(f"{where}: a record must be a JSON object")
            unknown = set(obj) - {"t", "source", "data", "errors"}
            if unknown:
                raise TraceError(f"{where}: unknown key(s) {sorted(unknown)}")
            t, source = obj.get("t"), obj.get("source")
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= MAX_TRACE_SECONDS:
                raise TraceError(f"{where}: \"t\" must be a number of seconds from 0 to {MAX_TRACE_SECONDS:g}")
            if source not in self.payloads:
                raise TraceError(f"{where}: unknown source {source!r} (known: {', '.join(sorted(self.payloads))})")
            errors = obj.get("errors", [])
            if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
                raise TraceError(f"{where}: \"errors\" must be a list of strings")
            try:
                data = from_jsonable(self.payloads[source], obj.get("data"))
            except DecodeError as e:
                message = str(e)
                raise TraceError(f"{where}: {message if len(message) <= 300 else message[:300] + '...'}") from None
            except RecursionError:
                raise TraceError(f"{where}: data nested too deeply") from None
            # Sources are sampled by separate threads, so lines interleave slightly out of
            # order across sources; within one source time must not go backwards.
            if t < last_t.get(source, 0.0):
                raise TraceError(f"{where}: \"t\" goes backwards for source {source!r} ({t} after {last_t[source]})")
            last_t[source] = t
            yield Reading(source, float(t), data, tuple(errors))

    def close(self) -> None:
        self._text.close()
