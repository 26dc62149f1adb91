"""Reads the directory NCCL Inspector dumps into (collector.nccl.dump-dir), incrementally.

JSON files (``<hostname>-pid<pid>.log``, one per process, appended as operations complete) are
tailed: an offset per file, keyed by inode so that a file renamed by log rotation is followed
and a new file of the same name starts from its beginning; a file that shrinks (truncated, or
rewritten) is read again from the start; a line still being written waits for the next read.
Prometheus files (``nccl_inspector_metrics_<device uuid>.prom``, rewritten in place every dump
interval, removed at the end of the job) are read whole when they change; one without its final
newline is being rewritten and is read on a later pass.

Costs are bounded: at most collector.nccl.max-bytes-per-read bytes per read, shared among the
files with unread data. A file that grew by more than its share is skipped ahead to its last
share (the skipped bytes are counted); one seen for the first time starts at its last read's
worth of bytes. At most collector.nccl.max-ranks (communicator, rank) entries are tracked; a
full table drops the entry quiet for longest. Records older than the analysis window when
read update an entry's latest operation but are not counted as operations of this read: they
cannot belong to the window, and counting them would invent a rate. Entries with no
operation for collector.nccl.stale-after are dropped, and so are those whose file is gone.

The directory and its immediate subdirectories are read (jobs may write to a per-job
subdirectory of a shared root). No directory configured, a directory that does not exist
(yet) and one without dump files are no data (NoData), not a failure: no job on this node
has switched the plugin on, and the next read picks up the first file that appears.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass, field

from gpuwait.collectors.nccl.parse import MAX_LINE_BYTES, Operation, parse_json_lines, parse_prom_text, prom_operations
from gpuwait.collectors.nccl.payload import NcclData, NcclRank
from gpuwait.core.config import ANALYSIS_WINDOW, MAX_WINDOW, MIN_INTERVAL, Option, Settings, parse_duration, parse_positive_int, parse_size
from gpuwait.core.errors import NoData, ParseError, SourceError
from gpuwait.core.pseudofile import os_cause
from gpuwait.core.reading import Reading
from gpuwait.core.source import HostPaths, Source

JSON_NAME = re.compile(r".+\.(?:log|jsonl)(?:\.\d{1,6})?")
PROM_NAME = re.compile(r".+\.prom")
PROM_DEVICE = re.compile(r"nccl_inspector_metrics_([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.prom")
#: Files considered per read, the most recently modified first: a dump root that keeps the
#: logs of every past job must not cost a stat of each one every second.
MAX_FILES = 1024
GB = 1e9
#: Below this a read budget shared among a few files holds less than a handful of records.
MIN_READ_BYTES = 64 * 1024


def parse_read_bytes(value) -> int:
    """A size (parse_size) of at least 64 KiB."""
    size = parse_size(value)
    if size < MIN_READ_BYTES:
        raise ValueError(f"must be at least 64KiB: {value!r}")
    return size


DUMP_DIR = Option(
    "collector.nccl.dump-dir", str, "",
    "Directory NCCL Inspector writes to (the jobs' NCCL_INSPECTOR_DUMP_DIR), read with its immediate "
    "subdirectories; empty: the collector reads nothing.", "PATH")
INTERVAL = Option("collector.nccl.interval", parse_duration, 1.0, "How often the dump directory is read.", "DURATION",
                  minimum=MIN_INTERVAL, maximum=MAX_WINDOW)
MAX_BYTES_PER_READ = Option(
    "collector.nccl.max-bytes-per-read", parse_read_bytes, 4 << 20,
    "Most bytes read from the dump files per read; files that grew by more are skipped ahead "
    "(gpuwait_nccl_skipped_bytes_total).", "BYTES")
MAX_RANKS = Option("collector.nccl.max-ranks", parse_positive_int, 512,
                   "Most (communicator, rank, process) entries tracked, and so series per metric.", "COUNT")
# PyTorch aborts a collective that has not finished after 10 minutes, the default timeout of
# its NCCL process groups (pytorch/pytorch#110947): a hang stays visible until the job's own
# watchdog ends it.
STALE_AFTER = Option(
    "collector.nccl.stale-after", parse_duration, 900.0,
    "Ranks with no completed operation for this long are dropped, as are those whose dump file is gone.",
    "DURATION")

#: (kind, comm, rank, pid, hostname)
RankKey = tuple[str, str, int, int, str]


@dataclass
class _Tail:
    offset: int
    #: bytes after the last newline read so far
    rest: bytes = b""
    #: drop everything up to the next newline first (after a skip, or an overlong line)
    resync: bool = False
    #: whether bytes passed over count as skipped: not before the file's first read, whose
    #: history was never due
    counting: bool = True


@dataclass
class _PromFile:
    size: int
    mtime_ns: int
    ranks: list[NcclRank] = field(default_factory=list)


@dataclass
class _Rank:
    """A tracked (kind, communicator, rank, process): its identity and its sums."""

    key: RankKey
    n_ranks: int
    n_nodes: int | None
    device: int | None
    comm_name: str
    #: the file that last fed it, as (device, inode)
    file: tuple[int, int]
    seen: float
    count: int = 0
    exec_seconds: float = 0.0
    max_exec_seconds: float = 0.0
    msg_bytes: float = 0.0
    bus_bytes: float = 0.0
    total_count: int = 0
    total_exec_seconds: float = 0.0
    total_msg_bytes: float = 0.0
    total_bus_bytes: float = 0.0
    last_seq: int | None = None
    last_unix: float | None = None
    timing_source: str = ""

    def add(self, op: Operation, counted: bool) -> None:
        if op.seq is not None:
            self.last_seq = op.seq
        if op.unix is not None and (self.last_unix is None or op.unix > self.last_unix):
            self.last_unix = op.unix
        if op.timing_source:
            self.timing_source = op.timing_source
        if op.device is not None:
            self.device = op.device
        self.n_ranks = op.n_ranks
        if op.n_nodes is not None:
            self.n_nodes = op.n_nodes
        self.comm_name = op.comm_name or self.comm_name
        if not counted:
            return
        bus = (op.bus_gbs or 0.0) * GB * op.exec_seconds
        self.count += 1
        self.exec_seconds += op.exec_seconds
        self.max_exec_seconds = max(self.max_exec_seconds, op.exec_seconds)
        self.msg_bytes += op.msg_bytes
        self.bus_bytes += bus
        self.total_count += 1
        self.total_exec_seconds += op.exec_seconds
        self.total_msg_bytes += op.msg_bytes
        self.total_bus_bytes += bus

    def freeze(self) -> NcclRank:
        kind, comm, rank, pid, hostname = self.key
        frozen = NcclRank(
            comm=comm, rank=rank, n_ranks=self.n_ranks, n_nodes=self.n_nodes, pid=pid, hostname=hostname,
            device=self.device, collectives=self.count, exec_seconds=self.exec_seconds,
            max_exec_seconds=self.max_exec_seconds, msg_bytes=self.msg_bytes, bus_bytes=self.bus_bytes,
            last_seq=self.last_seq, last_unix=self.last_unix, timing_source=self.timing_source, kind=kind,
            comm_name=self.comm_name, collectives_total=self.total_count,
            exec_seconds_total=self.total_exec_seconds, msg_bytes_total=self.total_msg_bytes,
            bus_bytes_total=self.total_bus_bytes,
        )
        self.count, self.exec_seconds, self.max_exec_seconds, self.msg_bytes, self.bus_bytes = 0, 0.0, 0.0, 0.0, 0.0
        return frozen


@dataclass
class _Found:
    path: str
    kind: str  # "json" or "prom"
    st: os.stat_result

    @property
    def ident(self) -> tuple[int, int]:
        return self.st.st_dev, self.st.st_ino


@dataclass
class _Pass:
    """What one read counted."""

    bytes_read: int = 0
    malformed: int = 0
    skipped: int = 0
    unsupported: int = 0
    errors: set[str] = field(default_factory=set)


class NcclSource(Source):
    name = "nccl"
    tier = "slow"

    def __init__(self, paths: HostPaths, dump_dir: str = "", max_bytes_per_read: int = 4 << 20,
                 max_ranks: int = 512, stale_after: float = 900.0, history: float = 60.0,
                 clock=time.monotonic, wall_clock=time.time) -> None:
        """``history``: records older than this when read are not counted (the analysis
        window)."""
        super().__init__(paths)
        self.dump_dir = dump_dir
        self.max_bytes = max_bytes_per_read
        self.max_ranks = max_ranks
        self.stale_after = stale_after
        self.history = history
        self.clock = clock
        self.wall_clock = wall_clock
        self._tails: dict[tuple[int, int], _Tail] = {}
        self._prom: dict[tuple[int, int], _PromFile] = {}
        self._ranks: dict[RankKey, _Rank] = {}
        self._totals = _Pass()
        self._evicted = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> "NcclSource":
        return cls(HostPaths.from_settings(settings), settings[DUMP_DIR],
                   max_bytes_per_read=settings[MAX_BYTES_PER_READ], max_ranks=settings[MAX_RANKS],
                   stale_after=settings[STALE_AFTER], history=settings[ANALYSIS_WINDOW])

    # -- one read -----------------------------------------------------------------------------
    def read(self) -> Reading:
        t = self.clock()
        wall = self.wall_clock()
        counts = _Pass()
        if not self.dump_dir:
            raise NoData(f"unconfigured:{DUMP_DIR.name}", "no NCCL Inspector dump directory is configured")
        found = self._scan(counts.errors)
        present = {f.ident for f in found}
        for gone in [i for i in self._tails if i not in present]:
            del self._tails[gone]
        for gone in [i for i in self._prom if i not in present]:
            del self._prom[gone]
        budget = self.max_bytes
        prom_ranks: list[NcclRank] = []
        for f in (f for f in found if f.kind == "prom"):
            budget -= self._read_prom(f, wall, counts, prom_ranks)
        self._read_json([f for f in found if f.kind == "json"], max(0, budget), t, wall, counts)
        self._forget(t, wall, present)
        if not found:
            # The files are gone (a job's own directory removed at its end): so are their ranks.
            raise NoData(f"unavailable:{self.dump_dir}", "no NCCL Inspector dump file (NCCL_INSPECTOR_ENABLE=1 writes them)")
        ranks = [self._ranks[k].freeze() for k in sorted(self._ranks)]
        room = max(0, self.max_ranks - len(ranks))
        self._evicted += max(0, len(prom_ranks) - room)
        ranks += prom_ranks[:room]
        total = self._totals
        total.bytes_read += counts.bytes_read
        total.malformed += counts.malformed
        total.skipped += counts.skipped
        total.unsupported += counts.unsupported
        data = NcclData(
            ranks=tuple(ranks), files=len(found), bytes_read=counts.bytes_read, malformed=counts.malformed,
            read_unix=wall, skipped_bytes=counts.skipped, unsupported=counts.unsupported,
            bytes_read_total=total.bytes_read, malformed_total=total.malformed, skipped_bytes_total=total.skipped,
            unsupported_total=total.unsupported, evicted_total=self._evicted,
        )
        return self.reading(t, data, tuple(sorted(counts.errors)))

    # -- the directory --------------------------------------------------------------------------
    def _scan(self, errors: set[str]) -> list[_Found]:
        found: list[_Found] = []
        try:
            subdirs = self._scan_one(self.dump_dir, found)
        except FileNotFoundError:
            return []  # no job has written here yet
        except OSError as e:
            raise SourceError(os_cause(self.dump_dir, e), str(e)) from None
        for sub in sorted(subdirs):
            try:
                self._scan_one(sub, found)
            except FileNotFoundError:
                pass  # removed since it was listed
            except OSError as e:
                errors.add(os_cause(f"{self.dump_dir}/<subdirectory>", e))
        if len(found) > MAX_FILES:
            found.sort(key=lambda f: f.st.st_mtime_ns, reverse=True)
            del found[MAX_FILES:]
        return found

    def _scan_one(self, directory: str, found: list[_Found]) -> list[str]:
        """Appends the dump files of one directory; returns its subdirectories."""
        subdirs = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                kind = "json" if JSON_NAME.fullmatch(entry.name) else "prom" if PROM_NAME.fullmatch(entry.name) else None
                try:
                    if kind is None:
                        if directory == self.dump_dir and entry.is_dir(follow_symlinks=False):
                            subdirs.append(entry.path)
                        continue
                    st = entry.stat()
                except OSError:
                    continue  # removed since it was listed
                if stat.S_ISREG(st.st_mode):
                    found.append(_Found(entry.path, kind, st))
        return subdirs

    # -- JSON lines -------------------------------------------------------------------------------
    def _read_json(self, files: list[_Found], budget: int, t: float, wall: float, counts: _Pass) -> None:
        pending = []
        for f in files:
            tail = self._tails.get(f.ident)
            if tail is None:
                if wall - f.st.st_mtime > self.stale_after:
                    # Written by a job that ended long ago: only what it may still append is read.
                    tail = _Tail(f.st.st_size)
                else:
                    start = max(0, f.st.st_size - self.max_bytes)
                    tail = _Tail(start, resync=start > 0, counting=False)
                self._tails[f.ident] = tail
            elif f.st.st_size < tail.offset:
                tail.offset, tail.rest, tail.resync = 0, b"", False
            if f.st.st_size > tail.offset:
                pending.append((f.st.st_size - tail.offset, f, tail))
        # Water-filling: files with less to read than an equal share leave the rest to others.
        pending.sort(key=lambda p: p[0])
        for n, (backlog, f, tail) in enumerate(pending):
            share = budget // (len(pending) - n)
            used = self._read_tail(f, tail, backlog, share, t, wall, counts)
            budget -= used
        for f in files:
            self._tails[f.ident].counting = True

    def _read_tail(self, f: _Found, tail: _Tail, backlog: int, share: int, t: float, wall: float,
                   counts: _Pass) -> int:
        if backlog > share:
            skip_to = f.st.st_size - share
            if tail.counting:
                counts.skipped += skip_to - tail.offset + len(tail.rest)
            tail.offset, tail.rest, tail.resync = skip_to, b"", True
        try:
            with open(f.path, "rb") as handle:
                st = os.fstat(handle.fileno())
                if (st.st_dev, st.st_ino) != f.ident:
                    return 0  # replaced since it was listed: the next read sees the new one
                handle.seek(tail.offset)
                data = handle.read(min(backlog, share))
        except FileNotFoundError:
            return 0
        except OSError as e:
            counts.errors.add(os_cause(f"{self.dump_dir}/<dump file>", e))
            return 0
        tail.offset += len(data)
        counts.bytes_read += len(data)
        chunk = tail.rest + data
        if tail.resync:
            newline = chunk.find(b"\n")
            if tail.counting:
                counts.skipped += len(chunk) if newline < 0 else newline + 1
            if newline < 0:
                tail.rest = b""
                return len(data)
            chunk, tail.resync = chunk[newline + 1:], False
        lines = parse_json_lines(chunk)
        counts.malformed += lines.malformed
        counts.unsupported += lines.unsupported
        tail.rest = lines.rest
        if len(tail.rest) > MAX_LINE_BYTES:
            counts.malformed += 1
            tail.rest, tail.resync = b"", True
        for op in lines.operations:
            self._add(op, f.ident, t, wall)
        return len(data)

    def _add(self, op: Operation, file: tuple[int, int], t: float, wall: float) -> None:
        if op.unix is not None and wall - op.unix > self.stale_after:
            return  # an operation of a job long gone
        key = (op.kind, op.comm, op.rank, op.pid, op.hostname)
        entry = self._ranks.get(key)
        if entry is None:
            if len(self._ranks) >= self.max_ranks:
                quietest = min(self._ranks.values(), key=lambda r: r.seen)
                del self._ranks[quietest.key]
                self._evicted += 1
            entry = self._ranks[key] = _Rank(key, op.n_ranks, op.n_nodes, op.device, op.comm_name, file, t)
        entry.file, entry.seen = file, t
        entry.add(op, counted=op.unix is None or wall - op.unix <= self.history)

    def _forget(self, t: float, wall: float, present: set[tuple[int, int]]) -> None:
        for key, entry in list(self._ranks.items()):
            age = wall - entry.last_unix if entry.last_unix is not None else t - entry.seen
            if entry.file not in present or age > self.stale_after:
                del self._ranks[key]

    # -- Prometheus text ------------------------------------------------------------------------
    def _read_prom(self, f: _Found, wall: float, counts: _Pass, out: list[NcclRank]) -> int:
        """Adds the file's ranks to ``out``; returns the bytes read."""
        if wall - f.st.st_mtime > self.stale_after:
            return 0  # left behind by a job that did not end cleanly
        cached = self._prom.get(f.ident)
        used = 0
        if cached is None or (cached.size, cached.mtime_ns) != (f.st.st_size, f.st.st_mtime_ns):
            if f.st.st_size > self.max_bytes:
                counts.skipped += f.st.st_size
                self._prom[f.ident] = cached = _PromFile(f.st.st_size, f.st.st_mtime_ns)
            else:
                text, used = self._whole(f, counts)
                if text is not None and text.endswith("\n"):
                    self._prom[f.ident] = cached = _PromFile(f.st.st_size, f.st.st_mtime_ns,
                                                             self._prom_ranks(f, text, counts))
                # else: empty or half written (the plugin truncates and rewrites in place); the
                # previous content stands until the next read finds it whole
        if cached is not None:
            out.extend(cached.ranks)
        return used

    def _whole(self, f: _Found, counts: _Pass) -> tuple[str | None, int]:
        try:
            with open(f.path, "rb") as handle:
                data = handle.read(self.max_bytes + 1)
        except FileNotFoundError:
            return None, 0
        except OSError as e:
            counts.errors.add(os_cause(f"{self.dump_dir}/<dump file>", e))
            return None, 0
        counts.bytes_read += len(data)
        return data.decode("utf-8", "replace"), len(data)

    def _prom_ranks(self, f: _Found, text: str, counts: _Pass) -> list[NcclRank]:
        try:
            samples = parse_prom_text(text)
        except ParseError:
            counts.malformed += 1
            return []
        parsed = prom_operations(samples, unix=f.st.st_mtime)
        counts.malformed += parsed.malformed
        counts.unsupported += parsed.unsupported
        named = PROM_DEVICE.fullmatch(os.path.basename(f.path))
        uuid = f"GPU-{named.group(1).lower()}" if named else ""
        groups: dict[RankKey, list[Operation]] = {}
        for op in parsed.operations:
            groups.setdefault((op.kind, op.comm, op.rank, op.pid, op.hostname), []).append(op)
        return [_gauge_rank(key, ops, uuid) for key, ops in sorted(groups.items())]


def _gauge_rank(key: RankKey, ops: list[Operation], uuid: str) -> NcclRank:
    """A Prometheus file's sample sets of one communicator: each bucket's gauges taken once."""
    kind, comm, rank, pid, hostname = key
    seqs = [op.seq for op in ops if op.seq is not None]
    stamps = [op.unix for op in ops if op.unix is not None]
    devices = [op.device for op in ops if op.device is not None]
    last = max(ops, key=lambda op: (op.unix or 0.0, op.seq or 0))
    return NcclRank(
        comm=comm, rank=rank, n_ranks=last.n_ranks, n_nodes=last.n_nodes, pid=pid, hostname=hostname,
        device=devices[-1] if devices else None, collectives=None,
        exec_seconds=sum(op.exec_seconds for op in ops), max_exec_seconds=max(op.exec_seconds for op in ops),
        msg_bytes=sum(op.msg_bytes for op in ops),
        bus_bytes=sum((op.bus_gbs or 0.0) * GB * op.exec_seconds for op in ops),
        last_seq=max(seqs) if seqs else None, last_unix=max(stamps) if stamps else None,
        timing_source=last.timing_source, kind=kind, comm_name=last.comm_name, device_uuid=uuid,
    )

