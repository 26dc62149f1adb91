"""Who owns a GPU process, and what that owner's processes are doing on the CPU side.

A GPU sitting idle between batches is often waiting for its feeders (A2): the data loader
workers, which are child processes that never touch the GPU, and decode threads inside the
GPU process. Whether those are running (R), blocked in the kernel (D) or asleep (S) separates
a CPU-bound pipeline from one stuck on IO, and the CPUs they ran on show whether a few cores
carry it all (A3). Grouping GPUs by owner (pod, Slurm job, container, systemd unit) tells
which GPUs belong to one job and should move in step (A12).

Built to be called about once a second for a handful of GPU processes and their children:
each owner is read from /proc/<pid>/cgroup once per process lifetime (the cache is keyed by
pid and start time, so a reused pid is a new process), single-threaded processes cost one
read, and the descendant scan is cached for a few seconds.

Failures follow the sources' rule: a process that is gone is simply absent (processes exit
all the time); anything else is a SourceError whose ``cause`` is a stable key (the pid
replaced by ``<pid>``), collected in the ``errors`` of the aggregate results.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpuwait.core import pseudofile
from gpuwait.core.errors import ParseError, SourceError
from gpuwait.core.source import HostPaths, user_hz
from gpuwait.owners.cgroup import Owner, PodResolver, owner_from_cgroup, parse_cgroup, resolve_owner
from gpuwait.owners.procpid import (
    PidStat,
    parse_children,
    parse_io_read_bytes,
    parse_pid_stat,
    parse_ppid,
    parse_task_state,
    parse_uptime,
)

Clock = Callable[[], float]


def _read(path: str, cause_path: str) -> str | None:
    """A /proc file's text, or None when the process (or thread) no longer exists."""
    return pseudofile.read_present(path, cause_path=cause_path)


def _listdir(path: str, cause_path: str) -> list[str] | None:
    return pseudofile.list_present(path, cause_path=cause_path)


class _Files:
    """Paths of the per-process files, and their pid-free spellings for error causes."""

    __slots__ = ("paths", "stat_cause", "task_cause", "task_stat_cause", "children_cause", "io_cause")

    def __init__(self, paths: HostPaths) -> None:
        self.paths = paths
        self.stat_cause = paths.proc("<pid>", "stat")
        self.task_cause = paths.proc("<pid>", "task")
        self.task_stat_cause = paths.proc("<pid>", "task", "<tid>", "stat")
        self.children_cause = paths.proc("<pid>", "task", "<tid>", "children")
        self.io_cause = paths.proc("<pid>", "io")

    def stat(self, pid: int) -> PidStat | None:
        text = _read(self.paths.proc(str(pid), "stat"), self.stat_cause)
        return None if text is None else _parsed(parse_pid_stat, text, self.stat_cause)

    def read_bytes(self, pid: int) -> int | None:
        """The process's storage reads so far; None if it is gone."""
        text = _read(self.paths.proc(str(pid), "io"), self.io_cause)
        return None if text is None else _parsed(parse_io_read_bytes, text, self.io_cause)

    def thread_states(self, pid: int) -> list[tuple[str, int | None]] | None:
        """(state, last CPU) of each thread; None if the process is gone."""
        task = self.paths.proc(str(pid), "task")
        tids = _listdir(task, self.task_cause)
        if tids is None:
            return None
        threads = []
        for tid in tids:
            text = _read(os.path.join(task, tid, "stat"), self.task_stat_cause)
            if text is not None:  # threads come and go between the listing and the read
                threads.append(_parsed(parse_task_state, text, self.task_stat_cause))
        return threads


def _parsed(parse, text: str, cause_path: str):
    try:
        return parse(text)
    except ParseError as e:
        raise SourceError(f"parse:{cause_path}", str(e)) from None


# -- one process --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    ppid: int
    comm: str
    #: the main thread's state: R running or runnable, S sleeping, D blocked in the kernel
    #: (usually IO), Z zombie, T/t stopped/traced, I idle kernel thread, X dead
    state: str
    num_threads: int
    #: user + system CPU time of all its threads, exited ones included
    cpu_seconds: float
    #: seconds after boot at which it started (the clock of /proc/uptime)
    start_seconds: float
    #: ticks after boot; (pid, starttime) names one process across pid reuse
    starttime: int
    #: CPU the main thread last ran on
    processor: int | None

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.starttime)

    @classmethod
    def from_stat(cls, stat: PidStat, ticks_per_second: float) -> ProcessInfo:
        return cls(
            pid=stat.pid,
            ppid=stat.ppid,
            comm=stat.comm,
            state=stat.state,
            num_threads=stat.num_threads,
            cpu_seconds=(stat.utime + stat.stime) / ticks_per_second,
            start_seconds=stat.starttime / ticks_per_second,
            starttime=stat.starttime,
            processor=stat.processor,
        )


def read_process(paths: HostPaths, pid: int, ticks_per_second: float | None = None) -> ProcessInfo | None:
    """The process's /proc/<pid>/stat; None if it is gone. Raises SourceError otherwise."""
    stat = _Files(paths).stat(pid)
    return None if stat is None else ProcessInfo.from_stat(stat, ticks_per_second or user_hz())


def read_owner(paths: HostPaths, pid: int, resolve_pod: PodResolver | None = None) -> Owner | None:
    """The owner named by /proc/<pid>/cgroup; None if the process is gone.

    Raises SourceError (cause ``permission:/proc/<pid>/cgroup``, ``parse:...``) otherwise.
    """
    cause = paths.proc("<pid>", "cgroup")
    text = _read(paths.proc(str(pid), "cgroup"), cause)
    if text is None:
        return None
    # A process that exits while the kernel prints the file can leave it empty.
    if not text.strip():
        return None
    return owner_from_cgroup(_parsed(parse_cgroup, text, cause), resolve_pod)


# -- the owner cache ----------------------------------------------------------------------


@dataclass(slots=True)
class _Cached:
    owner: Owner
    read_at: float


class OwnerCache:
    """Owners by (pid, starttime), so /proc/<pid>/cgroup is read once per process, not per tick.

    A pid reused by a new process has another start time and so misses. Entries are re-read
    after ``revalidate_after`` seconds because a process can be moved between cgroups (systemd-run
    --scope, a Slurm step adopting a process). At ``max_entries`` the entries of processes that
    have exited are dropped, then the least recently used.
    """

    def __init__(
        self,
        paths: HostPaths,
        *,
        max_entries: int = 4096,
        revalidate_after: float = 60.0,
        resolve_pod: PodResolver | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.paths = paths
        self.max_entries = max_entries
        self.revalidate_after = revalidate_after
        self.resolve_pod = resolve_pod
        self.clock = clock
        self._files = _Files(paths)
        self._entries: OrderedDict[tuple[int, int], _Cached] = OrderedDict()
        self._swept_at: float | None = None
        #: cgroup files read, for tests and self-metrics
        self.reads = 0

    def __len__(self) -> int:
        return len(self._entries)

    def owner(self, pid: int, starttime: int) -> Owner | None:
        """The owner of the process (pid, starttime); None if that process is gone."""
        key = (pid, starttime)
        now = self.clock()
        cached = self._entries.get(key)
        if cached is not None and now - cached.read_at < self.revalidate_after:
            self._entries.move_to_end(key)
            if self.resolve_pod is not None and cached.owner.kind == "kubernetes" and cached.owner.pod is None:
                # The resolver may learn of a pod after its processes are first seen.
                cached.owner = resolve_owner(cached.owner, self.resolve_pod)
            return cached.owner
        self.reads += 1
        owner = read_owner(self.paths, pid, self.resolve_pod)
        # The cgroup file is only this process's if the pid still has the same start time.
        if owner is None or not self._same_process(pid, starttime):
            self._entries.pop(key, None)
            return None
        if cached is None and len(self._entries) >= self.max_entries:
            self._make_room()
        self._entries[key] = _Cached(owner, now)
        self._entries.move_to_end(key)
        return owner

    def _same_process(self, pid: int, starttime: int) -> bool:
        try:
            stat = self._files.stat(pid)
        except SourceError:
            return False
        return stat is not None and stat.starttime == starttime

    def _make_room(self) -> None:
        # A sweep reads one stat file per entry; when the cache is full of live processes,
        # sweeping on every insertion would cost that much per tick, so at most once a period.
        now = self.clock()
        if self._swept_at is None or now - self._swept_at >= self.revalidate_after:
            self._swept_at = now
            self.forget_dead()
        while len(self._entries) >= self.max_entries:
            self._entries.popitem(last=False)

    def forget_dead(self) -> int:
        """Drop entries whose process has exited or whose pid now names another process."""
        dead = [key for key in self._entries if not self._same_process(*key)]
        for key in dead:
            del self._entries[key]
        return len(dead)


# -- activity per owner -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnerActivity:
    """What one owner's processes (those asked about) were doing at one instant.

    Thread counts cover every thread of every process: data loader workers are processes,
    but decode and prefetch threads live inside them and inside the GPU process itself.
    """

    owner: Owner
    processes: int
    threads: int
    #: threads on a CPU or waiting for one (R)
    running: int
    #: threads in uninterruptible sleep, nearly always waiting for IO (D)
    blocked: int
    #: threads waiting for an event: a queue, a lock, a socket, a timer (S)
    sleeping: int
    #: stopped, traced, zombie, idle and dead threads
    other: int
    #: user + system CPU seconds of the processes alive now. It drops when one of them exits;
    #: OwnerTracker keeps a total that does not.
    cpu_seconds: float
    #: CPUs the threads last ran on
    cpus: frozenset[int]
    #: CPUs the running (R) threads last ran on
    running_cpus: frozenset[int]
    #: bytes the processes alive now read from block devices (/proc/<pid>/io read_bytes),
    #: summed over those whose file could be read; None when none could (another user's
    #: processes without CAP_SYS_PTRACE). It drops when one of them exits.
    read_bytes: float | None = None


@dataclass(frozen=True, slots=True)
class ActivityReport:
    #: owner id -> activity
    owners: dict[str, OwnerActivity]
    #: pid -> owner, for every process that could be read
    owner_of: dict[int, Owner]
    processes: dict[int, ProcessInfo]
    errors: tuple[str, ...] = ()
    #: filled in by OwnerTracker: each asked-about pid -> its descendants' pids
    descendants: dict[int, frozenset[int]] = field(default_factory=dict)
    #: filled in by OwnerTracker: owner id -> CPU seconds that never decrease (see OwnerCpuCounter)
    cpu_seconds_total: dict[str, float] = field(default_factory=dict)


class _Tally:
    __slots__ = (
        "owner", "processes", "threads", "running", "blocked", "sleeping", "other", "ticks", "cpus", "running_cpus",
        "read_bytes",
    )

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.processes = self.threads = self.running = self.blocked = self.sleeping = self.other = 0
        self.ticks = 0
        self.cpus: set[int] = set()
        self.running_cpus: set[int] = set()
        self.read_bytes: int | None = None

    def add_thread(self, state: str, processor: int | None) -> None:
        self.threads += 1
        if state == "R":
            self.running += 1
            if processor is not None:
                self.running_cpus.add(processor)
        elif state == "S":
            self.sleeping += 1
        elif state == "D":
            self.blocked += 1
        else:
            self.other += 1
        if processor is not None:
            self.cpus.add(processor)

    def freeze(self, ticks_per_second: float) -> OwnerActivity:
        return OwnerActivity(
            owner=self.owner,
            processes=self.processes,
            threads=self.threads,
            running=self.running,
            blocked=self.blocked,
            sleeping=self.sleeping,
            other=self.other,
            cpu_seconds=self.ticks / ticks_per_second,
            cpus=frozenset(self.cpus),
            running_cpus=frozenset(self.running_cpus),
            read_bytes=None if self.read_bytes is None else float(self.read_bytes),
        )


def owner_activity(
    paths: HostPaths,
    pids: Iterable[int],
    *,
    cache: OwnerCache | None = None,
    ticks_per_second: float | None = None,
) -> ActivityReport:
    """Group the processes ``pids`` by owner and count their threads by state.

    Only the processes given are read: pass a GPU process together with its descendants
    (see ``descendants``) to see its data loader workers. Pass a long-lived ``cache``; without
    one every call re-reads every cgroup file.
    """
    hz = float(ticks_per_second or user_hz())
    if cache is None:
        cache = OwnerCache(paths)
    files = _Files(paths)
    tallies: dict[str, _Tally] = {}
    owner_of: dict[int, Owner] = {}
    processes: dict[int, ProcessInfo] = {}
    errors: set[str] = set()
    for pid in sorted(set(pids)):
        try:
            stat = files.stat(pid)
            if stat is None:
                continue
            owner = cache.owner(pid, stat.starttime)
            if owner is None:
                continue
            threads = [(stat.state, stat.processor)] if stat.num_threads <= 1 else files.thread_states(pid)
        except SourceError as e:
            errors.add(e.cause)
            continue
        if threads is None:
            continue  # exited between the reads
        tally = tallies.get(owner.id)
        if tally is None:
            tally = tallies[owner.id] = _Tally(owner)
        tally.processes += 1
        tally.ticks += stat.utime + stat.stime
        try:
            read = files.read_bytes(pid)
        except SourceError as e:
            # Unreadable (another user's process) or malformed: the process still counts,
            # without its reads.
            errors.add(e.cause)
            read = None
        if read is not None:
            tally.read_bytes = (tally.read_bytes or 0) + read
        if threads:
            for state, processor in threads:
                tally.add_thread(state, processor)
        else:
            tally.add_thread(stat.state, stat.processor)
        owner_of[pid] = owner
        processes[pid] = ProcessInfo.from_stat(stat, hz)
    return ActivityReport(
        owners={oid: t.freeze(hz) for oid, t in tallies.items()},
        owner_of=owner_of,
        processes=processes,
        errors=tuple(sorted(errors)),
    )


# -- descendants --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescendantReport:
    #: each pid asked about that exists -> the pids of all its descendants (not itself)
    of: dict[int, frozenset[int]]
    #: "children" (/proc/<pid>/task/<tid>/children) or "scan" (ppid of every /proc/<pid>/stat);
    #: None while none of the pids asked about existed to tell which the kernel offers
    method: str | None
    errors: tuple[str, ...] = ()
    #: the scan stopped at max_processes, so some descendants may be missing
    truncated: bool = False


class DescendantFinder:
    """Descendants of processes, cached for ``ttl`` seconds.

    With CONFIG_PROC_CHILDREN the kernel lists each thread's children in
    /proc/<pid>/task/<tid>/children; a child forked by any thread, not only the main one, is
    listed under that thread, so every thread's file is read. Without it (the file is absent),
    every /proc/<pid>/stat is read once per ``ttl`` for its ppid, at most ``max_processes`` of
    them. The kernel documents the children file as exact only for a stopped process; for
    workers that live for seconds or longer either way finds them.
    """

    def __init__(
        self,
        paths: HostPaths,
        *,
        ttl: float = 3.0,
        max_processes: int = 32768,
        method: str = "auto",
        clock: Clock = time.monotonic,
    ) -> None:
        if method not in ("auto", "children", "scan"):
            raise ValueError(f"method must be auto, children or scan: {method!r}")
        self.paths = paths
        self.ttl = ttl
        self.max_processes = max_processes
        self.clock = clock
        self._method = None if method == "auto" else method
        self._files = _Files(paths)
        self._found: dict[int, tuple[float, frozenset[int]]] = {}
        self._ppid_map: dict[int, list[int]] = {}
        self._ppid_map_at: float | None = None
        self._truncated = False
        self._scan_errors: frozenset[str] = frozenset()
        #: whole-host scans made, for tests and self-metrics
        self.scans = 0

    @property
    def method(self) -> str | None:
        """The method in use; None while "auto" has not yet seen a process to decide on."""
        return self._method

    def find(self, pids: Iterable[int]) -> DescendantReport:
        now = self.clock()
        roots = sorted(set(pids))
        errors: set[str] = set()
        method = self._method or self._detect(roots)
        result: dict[int, frozenset[int]] = {}
        fresh: dict[int, tuple[float, frozenset[int]]] = {}
        if method == "scan" and any(
            not (hit := self._found.get(root)) or now - hit[0] >= self.ttl for root in roots
        ):
            self._refresh_ppid_map(now, errors)
        for root in roots:
            hit = self._found.get(root)
            if hit is not None and now - hit[0] < self.ttl:
                fresh[root] = hit
                result[root] = hit[1]
                continue
            found = self._walk(root, method, errors)
            if found is None:
                continue  # the root itself is gone
            fresh[root] = (now, found)
            result[root] = found
        # Keeping only the roots asked about now bounds the cache by the caller's working set.
        self._found = fresh
        if method == "scan":
            # Reported with every answer drawn from a scan, not only the one that made it.
            errors |= self._scan_errors
        return DescendantReport(
            of=result,
            method=method,
            errors=tuple(sorted(errors)),
            truncated=method == "scan" and self._truncated,
        )

    def _detect(self, roots: list[int]) -> str | None:
        for root in roots:
            task = self.paths.proc(str(root), "task")
            try:
                tids = os.listdir(task)
            except OSError:
                continue
            if not tids:
                continue
            if os.path.exists(os.path.join(task, tids[0], "children")):
                self._method = "children"
            elif os.path.isdir(os.path.join(task, tids[0])):
                self._method = "scan"
            else:
                continue
            return self._method
        return None

    def _walk(self, root: int, method: str | None, errors: set[str]) -> frozenset[int] | None:
        if method == "children":
            children = self._children_via_files
            first = children(root, errors)
            if first is None:
                return None
        else:
            if not os.path.exists(self.paths.proc(str(root))):
                return None
            children = self._children_via_map
            first = children(root, errors)
        seen = {root}
        found: list[int] = []
        expand = [first or ()]
        while expand and len(found) < self.max_processes:
            frontier = []
            for kids in expand:
                for child in kids:
                    # A pid reused during the scan could close a loop; visit each pid once.
                    if child not in seen:
                        seen.add(child)
                        found.append(child)
                        frontier.append(child)
            expand = [kids for pid in frontier if (kids := children(pid, errors))]
        return frozenset(found)

    def _children_via_files(self, pid: int, errors: set[str]) -> list[int] | None:
        f = self._files
        try:
            tids = _listdir(self.paths.proc(str(pid), "task"), f.task_cause)
            if tids is None:
                return None
            children: list[int] = []
            for tid in tids:
                text = _read(self.paths.proc(str(pid), "task", tid, "children"), f.children_cause)
                if text is not None:
                    children.extend(_parsed(parse_children, text, f.children_cause))
            return children
        except SourceError as e:
            errors.add(e.cause)
            return []

    def _children_via_map(self, pid: int, errors: set[str]) -> list[int] | None:
        return self._ppid_map.get(pid)

    def _refresh_ppid_map(self, now: float, errors: set[str]) -> None:
        if self._ppid_map_at is not None and now - self._ppid_map_at < self.ttl:
            return
        self.scans += 1
        f = self._files
        ppid_map: dict[int, list[int]] = {}
        truncated = False
        try:
            names = _listdir(self.paths.procfs, self.paths.procfs) or []
        except SourceError as e:
            errors.add(e.cause)
            names = []
        count = 0
        for name in names:
            if not name.isdigit():
                continue
            if count >= self.max_processes:
                truncated = True
                break
            count += 1
            try:
                text = _read(self.paths.proc(name, "stat"), f.stat_cause)
                if text is None:
                    continue
                pid, ppid = _parsed(parse_ppid, text, f.stat_cause)
            except SourceError as e:
                errors.add(e.cause)
                continue
            ppid_map.setdefault(ppid, []).append(pid)
        self._ppid_map = ppid_map
        self._ppid_map_at = now
        self._truncated = truncated
        self._scan_errors = frozenset(errors)


def descendants(
    paths: HostPaths, pids: Iterable[int], *, method: str = "auto", max_processes: int = 32768
) -> DescendantReport:
    """Descendants of each of ``pids``, read now (use a DescendantFinder to cache)."""
    return DescendantFinder(paths, ttl=0.0, max_processes=max_processes, method=method).find(pids)


# -- CPU time as a counter ----------------------------------------------------------------


class OwnerCpuCounter:
    """CPU seconds per owner that never decrease, for publishing as a counter.

    Summing the live processes' CPU time drops whenever a worker exits, and data loaders
    without persistent workers replace all of them every epoch. This sums each process's
    increase between updates instead, so an exited process keeps what it had used. A process
    first seen after it started (the exporter just started, or it only now became a GPU
    process's child) counts from then on, or its whole past would land in one interval; one
    that started since the previous update counts in full.
    """

    def __init__(self, *, forget_after: float = 600.0, clock: Clock = time.monotonic) -> None:
        self.forget_after = forget_after
        self.clock = clock
        self._totals: dict[str, float] = {}
        self._seen_at: dict[str, float] = {}
        self._last: dict[tuple[int, int], float] = {}
        self._previous_boot_seconds: float | None = None

    def update(self, report: ActivityReport, boot_seconds: float | None) -> dict[str, float]:
        """Fold in one report; ``boot_seconds`` is /proc/uptime read just before it was taken.

        Returns the totals of the owners in the report.
        """
        now = self.clock()
        last: dict[tuple[int, int], float] = {}
        previous = self._previous_boot_seconds
        totals = self._totals
        for pid, info in report.processes.items():
            owner_id = report.owner_of[pid].id
            before = self._last.get(info.key)
            if before is not None:
                increase = max(0.0, info.cpu_seconds - before)
            elif previous is not None and info.start_seconds >= previous:
                increase = info.cpu_seconds
            else:
                increase = 0.0
            totals[owner_id] = totals.get(owner_id, 0.0) + increase
            self._seen_at[owner_id] = now
            last[info.key] = info.cpu_seconds
        self._last = last
        self._previous_boot_seconds = boot_seconds
        for owner_id in [o for o, t in self._seen_at.items() if now - t > self.forget_after]:
            del self._seen_at[owner_id]
            del totals[owner_id]
        return {owner_id: totals[owner_id] for owner_id in report.owners}


# -- all of it, for a collector -----------------------------------------------------------


class OwnerTracker:
    """One object for a collector to keep: call ``sample(gpu_pids)`` once per tick.

    Reads the GPU processes and all their descendants, groups them by owner, and keeps the
    caches and the CPU counter between calls.
    """

    def __init__(
        self,
        paths: HostPaths,
        *,
        resolve_pod: PodResolver | None = None,
        ticks_per_second: float | None = None,
        descendants_ttl: float = 3.0,
        max_processes: int = 32768,
        children_method: str = "auto",
        clock: Clock = time.monotonic,
    ) -> None:
        self.paths = paths
        self.ticks_per_second = float(ticks_per_second or user_hz())
        self.cache = OwnerCache(paths, resolve_pod=resolve_pod, clock=clock)
        self.finder = DescendantFinder(
            paths, ttl=descendants_ttl, max_processes=max_processes, method=children_method, clock=clock
        )
        self.counter = OwnerCpuCounter(clock=clock)
        self._uptime_path = paths.proc("uptime")

    def _boot_seconds(self, errors: set[str]) -> float | None:
        try:
            text = _read(self._uptime_path, self._uptime_path)
            if text is None:
                errors.add(f"missing:{self._uptime_path}")
                return None
            return _parsed(parse_uptime, text, self._uptime_path)
        except SourceError as e:
            errors.add(e.cause)
            return None

    def sample(self, gpu_pids: Iterable[int]) -> ActivityReport:
        roots = set(gpu_pids)
        errors: set[str] = set()
        boot_seconds = self._boot_seconds(errors)
        tree = self.finder.find(roots)
        errors.update(tree.errors)
        if tree.truncated:
            errors.add(f"truncated:{self.paths.procfs}")
        members = set(roots)
        for found in tree.of.values():
            members |= found
        report = owner_activity(self.paths, members, cache=self.cache, ticks_per_second=self.ticks_per_second)
        errors.update(report.errors)
        return ActivityReport(
            owners=report.owners,
            owner_of=report.owner_of,
            processes=report.processes,
            errors=tuple(sorted(errors)),
            descendants=tree.of,
            cpu_seconds_total=self.counter.update(report, boot_seconds),
        )
