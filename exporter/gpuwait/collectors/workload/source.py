"""Workload records from the spool directory that instrumented loops write to (A8, A13).

Each record names its process (pid and start time), so its owner is found the way GPU
processes' owners are: from /proc/<pid>/cgroup. A process in a container writes the pid it
sees in its own pid namespace; when that pid does not name a process with the record's start
time on the host, the host pid is looked up once by start time and NSpid and cached.
Records of processes that are gone, or not rewritten for collector.workload.stale-after, are
dropped (and the files of dead processes removed where the exporter may).
"""

from __future__ import annotations

import os
import time

from gpuwait.client import DEFAULT_SPOOL, SUFFIX
from gpuwait.collectors.workload.parse import parse_record
from gpuwait.collectors.workload.payload import OwnedRecord, WorkloadData, WorkloadRecord
from gpuwait.core import pseudofile
from gpuwait.core.config import Option, parse_duration
from gpuwait.core.errors import ParseError, SourceError
from gpuwait.core.reading import Reading
from gpuwait.core.source import HostPaths, Source
from gpuwait.owners.procpid import parse_pid_stat
from gpuwait.owners.tracker import OwnerCache

#: Larger files are not records; reading them would only cost time.
MAX_RECORD_BYTES = 4096

SPOOL_DIR = Option("collector.workload.spool-dir", str, DEFAULT_SPOOL,
                   "Directory instrumented training and inference loops (gpuwait.workload) write their timing records to.", "PATH")
STALE_AFTER = Option("collector.workload.stale-after", parse_duration, 30.0,
                     "Records not rewritten for this long are dropped, as are those of processes that are gone.", "DURATION")


class WorkloadSource(Source):
    name = "workload"
    tier = "slow"

    def __init__(self, paths: HostPaths, spool: str = DEFAULT_SPOOL, stale_after: float = 30.0,
                 clock=time.monotonic) -> None:
        super().__init__(paths)
        self.spool = spool
        self.stale_after = stale_after
        self.clock = clock
        self.owners = OwnerCache(paths)
        #: (namespaced pid, starttime) -> host pid, for records written inside a pid namespace
        self._host_pids: dict[tuple[int, int], int | None] = {}

    def read(self) -> Reading:
        t = self.clock()
        try:
            names = [n for n in os.listdir(self.spool) if n.endswith(SUFFIX)]
        except FileNotFoundError:
            # No instrumented loop has run on this node yet: nothing to report, nothing wrong.
            return self.reading(t, WorkloadData())
        except OSError as e:
            raise SourceError(f"unreadable:{self.spool}", str(e)) from None
        errors: set[str] = set()
        records = []
        seen: set[tuple[int, int]] = set()
        for name in sorted(names):
            path = os.path.join(self.spool, name)
            text = self._read(path, errors)
            if text is None:
                continue
            try:
                record = parse_record(text)
            except ParseError:
                errors.add(f"parse:{self.spool}/<record>")
                continue
            if t - record.at > self.stale_after:
                continue
            seen.add((record.pid, record.starttime))
            pid = self._host_pid(record, errors)
            if pid is None:
                self._remove_if_dead(path, record)
                continue
            owner = None
            try:
                owner = self.owners.owner(pid, record.starttime)
            except SourceError as e:
                errors.add(e.cause)
            records.append(OwnedRecord(record, owner.id if owner is not None else ""))
        # Misses are kept too: a process the exporter cannot see (another pid namespace without
        # hostPID) must not cost a scan of /proc on every read.
        for key in [k for k in self._host_pids if k not in seen]:
            del self._host_pids[key]
        return self.reading(t, WorkloadData(tuple(records)), tuple(sorted(errors)))

    def _read(self, path: str, errors: set[str]) -> str | None:
        try:
            data = pseudofile.read_bytes(path, MAX_RECORD_BYTES + 1)
        except FileNotFoundError:
            return None  # replaced or removed between listing and reading
        except OSError:
            errors.add(f"unreadable:{self.spool}/<record>")
            return None
        if len(data) > MAX_RECORD_BYTES:
            errors.add(f"parse:{self.spool}/<record>")
            return None
        return data.decode("utf-8", "replace")

    def _starttime(self, pid: int) -> int | None:
        try:
            return parse_pid_stat(pseudofile.read(self.paths.proc(str(pid), "stat"))).starttime
        except (OSError, ParseError):
            return None

    def _host_pid(self, record: WorkloadRecord, errors: set[str]) -> int | None:
        if self._starttime(record.pid) == record.starttime:
            return record.pid
        key = (record.pid, record.starttime)
        if key not in self._host_pids:
            self._host_pids[key] = self._find_namespaced(record)
        return self._host_pids[key]

    def _find_namespaced(self, record: WorkloadRecord) -> int | None:
        """The host pid whose start time is the record's and whose innermost pid (NSpid) is
        the record's pid; None if no such process is alive."""
        try:
            entries = os.listdir(self.paths.procfs)
        except OSError:
            return None
        for entry in entries:
            if not entry.isdigit() or self._starttime(int(entry)) != record.starttime:
                continue
            try:
                status = pseudofile.read(self.paths.proc(entry, "status"))
            except OSError:
                continue
            for line in status.split("\n"):
                if line.startswith("NSpid:"):
                    ids = line.split()[1:]
                    if ids and ids[-1] == str(record.pid):
                        return int(entry)
        return None

    def _remove_if_dead(self, path: str, record: WorkloadRecord) -> None:
        # Only when the record's own pid is gone from this pid namespace: otherwise it may be
        # a live process of another namespace that the exporter cannot see.
        if not os.path.exists(self.paths.proc(str(record.pid))):
            try:
                os.unlink(path)
            except OSError:
                pass
