"""The cgroup of every owner that holds a GPU process: CPU use and quota throttling, pressure
stalls and block IO, from the cgroup files the kernel keeps for exactly that cgroup (A2, A3, A6).

Host-wide signals cannot say whose they are: a backup agent's reads, another job's compile
saturating cores, and a pod held to 6 CPUs by its quota while decoding on 24 threads (no core
is ever saturated, the quota is) all look alike from /proc. The owner's own cgroup tells.

Which cgroup: ``Owner.cgroup``, the owner's own (a pod's, not one container's; a Slurm job's;
a container's; a systemd unit's; the root for the host). The owners come from the GPU
collector's attribution of its processes (``gpuwait.owners.directory``), so no process is
read twice. An owner the GPU collector has not named for three of its reads is dropped.

Where: cgroup v2 at ``<sysfs>/fs/cgroup``; on v1 hosts the ``cpu``, ``cpuacct`` and ``blkio``
hierarchies below it, and the pressure files of the v2 hierarchy a hybrid host mounts at
``unified``. A reader in a cgroup namespace of its own (a container) sees other processes'
cgroups relative to its namespace root, and the attribution drops the steps up (``/..``): such a
path is looked for below the hierarchy's top directories (``locate``).

What is missing: a file the kernel does not provide for that cgroup (no PSI, no io controller
enabled for it, v1 without cpuacct) leaves its fields None or empty, without an error; a file
that should be there and is not (v2: a controller enabled for the cgroup without its files;
v1: a file the hierarchy's root has) counts as a partial error of this read. A host without any
cgroup filesystem at all is no data (NoData), not a failure; a host whose GPUs no process holds
gives empty readings.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

from gpuwait.collectors.cgroup.parse import (
    CpuStat,
    blkio_io,
    parse_blkio_rwstat,
    parse_cfs_quota,
    parse_cgroup_pressure,
    parse_cpu_max,
    parse_cpu_stat_v1,
    parse_cpu_stat_v2,
    parse_cpuacct_stat,
    parse_cpuacct_usage,
    parse_io_stat,
)
from gpuwait.collectors.cgroup.payload import CgroupBandwidth, CgroupIo, OwnerCgroup, OwnerCgroupData
from gpuwait.core import pseudofile
from gpuwait.core.config import MAX_WINDOW, MIN_INTERVAL, Option, Settings, parse_duration
from gpuwait.core.errors import NoData, ParseError, SourceError
from gpuwait.core.reading import Reading
from gpuwait.core.source import HostPaths, Source, user_hz
from gpuwait.owners.directory import OwnerDirectory, acquire_directory, release_directory

INTERVAL = Option("collector.cgroup.interval", parse_duration, 1.0,
                  "Interval of reading the cgroup of each owner of a GPU process (CPU, quota throttling, pressure, IO).",
                  "DURATION", minimum=MIN_INTERVAL, maximum=MAX_WINDOW)
#: The GPU collector names the owners on every read of its slow tier; an owner it has not
#: named for this many of them no longer holds a GPU.
OWNER_READS_KEPT = 3
PRESSURE_RESOURCES = ("cpu", "io", "memory")
#: Children of an owner's cgroup read for quotas of their own: a pod has a few containers;
#: the bound keeps one owner with thousands of sub-cgroups from costing a read each.
MAX_CHILDREN = 64
#: How deep below the hierarchy's root the ancestor of a namespace-relative path is looked
#: for: a pod under kubepods.slice/kubepods-<qos>.slice is two down, a kubelet that runs in a
#: slice of its own adds one.
LOCATE_DEPTH = 3
LOCATE_MAX_DIRECTORIES = 4096
#: A path not found is looked for again after this long, not on every read.
LOCATE_RETRY_SECONDS = 60.0
#: cgroup v1 blkio files, recursive first: they count the IO of the descendants (a pod's
#: containers) as v2's io.stat does; the plain ones only the cgroup's own tasks' IO.
_BLKIO_FILES = (
    ("blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_serviced_recursive"),
    ("blkio.throttle.io_service_bytes", "blkio.throttle.io_serviced"),
)
#: errnos that mean "not there": the file or cgroup is gone (ENODEV: removed while open), or
#: the kernel was booted with the feature off (psi=0 keeps the files and fails every read).
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.ENODEV, errno.EOPNOTSUPP)


def read_optional(path: str, cause_path: str) -> str | None:
    """The file's text, None where the kernel provides none; SourceError (cause naming
    ``cause_path``, with no owner in it) for every other failure."""
    try:
        return pseudofile.read(path)
    except OSError as e:
        if e.errno in _ABSENT:
            return None
        raise SourceError(pseudofile.os_cause(cause_path, e), str(e)) from None


@dataclass(frozen=True, slots=True)
class Layout:
    """The cgroup hierarchies of a host."""

    version: int
    #: the v2 hierarchy: the whole tree on a v2 host, the controller-less one of a hybrid host
    unified: str | None
    cpu: str | None = None
    cpuacct: str | None = None
    blkio: str | None = None


def _hierarchy(root: str, *names: str) -> str | None:
    for name in names:
        path = os.path.join(root, name)
        if os.path.isfile(os.path.join(path, "cgroup.procs")):
            return path
    return None


def detect_layout(paths: HostPaths) -> Layout | None:
    root = paths.sys("fs", "cgroup")
    if os.path.isfile(os.path.join(root, "cgroup.controllers")):
        return Layout(2, root)
    unified = os.path.join(root, "unified")
    layout = Layout(
        1,
        unified if os.path.isfile(os.path.join(unified, "cgroup.controllers")) else None,
        # systemd mounts cpu and cpuacct together and links both names to it
        _hierarchy(root, "cpu", "cpu,cpuacct", "cpuacct,cpu"),
        _hierarchy(root, "cpuacct", "cpu,cpuacct", "cpuacct,cpu"),
        _hierarchy(root, "blkio"),
    )
    if layout.cpu is None and layout.cpuacct is None and layout.blkio is None and layout.unified is None:
        return None
    return layout


class Locator:
    """Where an owner's cgroup path is below a hierarchy's root; cached per path."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self._found: dict[tuple[str, str], str] = {}
        self._missed: dict[tuple[str, str], float] = {}

    def locate(self, root: str, path: str) -> str | None:
        """The directory of ``path`` relative to ``root`` ("" for the root itself), or None."""
        key = (root, path)
        rel = self._found.get(key)
        if rel is not None:
            if os.path.isdir(os.path.join(root, rel)):
                return rel
            del self._found[key]
        missed = self._missed.get(key)
        now = self.clock()
        if missed is not None and now - missed < LOCATE_RETRY_SECONDS:
            return None
        rel = _search(root, [s for s in path.split("/") if s and s not in (".", "..")])
        if rel is None:
            self._missed[key] = now
            return None
        self._missed.pop(key, None)
        self._found[key] = rel
        return rel


def _search(root: str, segments: list[str]) -> str | None:
    wanted = "/".join(segments)
    if not wanted or os.path.isdir(os.path.join(root, wanted)):
        return wanted
    frontier, visited = [""], 0
    for _ in range(LOCATE_DEPTH):
        deeper = []
        for parent in frontier:
            try:
                entries = sorted(e.name for e in os.scandir(os.path.join(root, parent)) if e.is_dir(follow_symlinks=False))
            except OSError:
                continue
            for name in entries:
                below = f"{parent}/{name}" if parent else name
                visited += 1
                if visited > LOCATE_MAX_DIRECTORIES:
                    return None
                if os.path.isdir(os.path.join(root, below, wanted)):
                    return f"{below}/{wanted}"
                deeper.append(below)
        frontier = deeper
    return None


class _Reader:
    """Reads files of one hierarchy for one read, collecting error causes without owner paths."""

    def __init__(self, root: str, errors: set[str]) -> None:
        self.root = root
        self.errors = errors

    def cause(self, name: str, child: str | None = None) -> str:
        return f"{self.root}/<owner>/{'<child>/' if child else ''}{name}"

    def text(self, rel: str, name: str, required: bool, child: str | None = None) -> str | None:
        cause = self.cause(name, child)
        try:
            text = read_optional(os.path.join(self.root, rel, *((child,) if child else ()), name), cause)
        except SourceError as e:
            self.errors.add(e.cause)
            return None
        if text is None and required:
            self.errors.add(f"missing:{cause}")
        return text

    def parsed(self, rel: str, name: str, parse, required: bool, child: str | None = None):
        text = self.text(rel, name, required, child)
        if text is None:
            return None
        try:
            return parse(text)
        except ParseError:
            self.errors.add(f"parse:{self.cause(name, child)}")
            return None

    def devices(self, rel: str, name: str, parse, required: bool) -> dict | None:
        """A file of one line (or a few) per device: a device whose lines do not parse costs
        only that device, and counts."""
        found = self.parsed(rel, name, parse, required)
        if found is None:
            return None
        devices, malformed = found
        self.errors.update(f"parse:{self.cause(name)}:{device}" for device in malformed)
        return devices

    def children(self, rel: str) -> list[str]:
        try:
            names = sorted(e.name for e in os.scandir(os.path.join(self.root, rel)) if e.is_dir(follow_symlinks=False))
        except OSError:
            return []
        return names[:MAX_CHILDREN]


def _pressure(reader: _Reader, rel: str) -> dict[tuple[str, str], float]:
    stalled: dict[tuple[str, str], float] = {}
    for resource in PRESSURE_RESOURCES:
        found = reader.parsed(rel, f"{resource}.pressure", lambda text, r=resource: parse_cgroup_pressure(text, r), False)
        stalled.update(found or {})
    return stalled


def _bandwidth(stat: CpuStat | None, quota: float) -> CgroupBandwidth:
    if stat is None:
        return CgroupBandwidth(quota)
    return CgroupBandwidth(quota, stat.periods, stat.throttled_periods, stat.throttled_seconds)


class OwnerCgroupSource(Source):
    name = "owner_cgroup"
    tier = "slow"

    def __init__(
        self, paths: HostPaths, directory: OwnerDirectory, max_age: float, *,
        ticks_per_second: float | None = None, on_close=None, clock=time.monotonic,
    ) -> None:
        super().__init__(paths)
        self.directory = directory
        self.max_age = max_age
        self.ticks_per_second = float(ticks_per_second or user_hz())
        self.locator = Locator(clock)
        self._on_close = on_close
        self._device_names: dict[str, str | None] = {}
        #: (hierarchy root, file) -> whether the root has it: on v1 every cgroup of a
        #: hierarchy has the files its root has (the kernel's configuration decides them)
        self._root_has: dict[tuple[str, str], bool] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> OwnerCgroupSource:
        """The source of the host at --path.sysfs, on the owner directory the GPU collector of
        that host fills; the directory is let go when the source closes."""
        paths = HostPaths.from_settings(settings)
        return cls(paths, acquire_directory(paths), OWNER_READS_KEPT * settings.slow_interval,
                   on_close=lambda: release_directory(paths))

    def read(self) -> Reading:
        t = time.monotonic()
        layout = detect_layout(self.paths)
        if layout is None:
            raise NoData(f"unavailable:{self.paths.sys('fs', 'cgroup')}", "no cgroup filesystem mounted there")
        errors: set[str] = set()
        owners: dict[str, OwnerCgroup] = {}
        for owner_id, entry in self.directory.current(self.max_age).items():
            read = self._read_v2 if layout.version == 2 else self._read_v1
            cgroup = read(layout, entry.owner.cgroup, errors)
            if cgroup is None:
                # Only an owner named by the latest attribution must still have its cgroup:
                # an earlier one's job may have ended and its cgroup gone since.
                if entry.latest:
                    errors.add(f"missing:{layout.unified if layout.version == 2 else self.paths.sys('fs', 'cgroup')}/<owner>")
                continue
            owners[owner_id] = cgroup
        devices = {d: name for d in sorted({d for cg in owners.values() for d in cg.io}) if (name := self._device_name(d))}
        return self.reading(t, OwnerCgroupData(owners, devices), tuple(sorted(errors)))

    # -- cgroup v2 -------------------------------------------------------------------------
    def _read_v2(self, layout: Layout, path: str, errors: set[str]) -> OwnerCgroup | None:
        root = layout.unified
        rel = self.locator.locate(root, path)
        if rel is None:
            return None
        reader = _Reader(root, errors)
        # The root cgroup has no cpu.max, no io.stat on older kernels, no pressure files
        # before 5.x: nothing is required of it.
        own = rel != ""
        controllers = set((reader.text(rel, "cgroup.controllers", own) or "").split())
        stat = reader.parsed(rel, "cpu.stat", parse_cpu_stat_v2, own) or CpuStat()
        cpu = own and "cpu" in controllers
        quota = reader.parsed(rel, "cpu.max", parse_cpu_max, cpu) if cpu else None
        children: dict[str, CgroupBandwidth] = {}
        if cpu:
            for child in reader.children(rel):
                child_quota = reader.parsed(rel, "cpu.max", parse_cpu_max, False, child)
                if child_quota is not None:
                    children[child] = _bandwidth(reader.parsed(rel, "cpu.stat", parse_cpu_stat_v2, True, child), child_quota)
        return OwnerCgroup(
            path="/" + rel, version=2,
            cpu_usage_seconds=stat.usage_seconds, cpu_user_seconds=stat.user_seconds, cpu_system_seconds=stat.system_seconds,
            cpu_periods=stat.periods, cpu_throttled_periods=stat.throttled_periods, cpu_throttled_seconds=stat.throttled_seconds,
            cpu_quota_cores=quota,
            pressure=_pressure(reader, rel),
            io=reader.devices(rel, "io.stat", parse_io_stat, own and "io" in controllers) or {},
            children=children,
        )

    # -- cgroup v1 -------------------------------------------------------------------------
    def _has(self, root: str, name: str) -> bool:
        key = (root, name)
        has = self._root_has.get(key)
        if has is None:
            has = self._root_has[key] = os.path.isfile(os.path.join(root, name))
        return has

    def _read_v1(self, layout: Layout, path: str, errors: set[str]) -> OwnerCgroup | None:
        found = []
        usage = user = system = quota = None
        stat = CpuStat()
        children: dict[str, CgroupBandwidth] = {}
        if layout.cpu and (rel := self.locator.locate(layout.cpu, path)) is not None:
            found.append(rel)
            reader = _Reader(layout.cpu, errors)
            stat = reader.parsed(rel, "cpu.stat", parse_cpu_stat_v1, self._has(layout.cpu, "cpu.stat")) or stat
            if self._has(layout.cpu, "cpu.cfs_quota_us"):
                quota = self._cfs_quota(reader, rel)
                for child in reader.children(rel) if rel else ():
                    child_quota = self._cfs_quota(reader, rel, child)
                    if child_quota is not None:
                        children[child] = _bandwidth(reader.parsed(rel, "cpu.stat", parse_cpu_stat_v1, True, child), child_quota)
        if layout.cpuacct and (rel := self.locator.locate(layout.cpuacct, path)) is not None:
            found.append(rel)
            reader = _Reader(layout.cpuacct, errors)
            usage = reader.parsed(rel, "cpuacct.usage", parse_cpuacct_usage, self._has(layout.cpuacct, "cpuacct.usage"))
            times = reader.parsed(rel, "cpuacct.stat", lambda text: parse_cpuacct_stat(text, self.ticks_per_second),
                                  self._has(layout.cpuacct, "cpuacct.stat"))
            if times is not None:
                user, system = times
        io: dict[str, CgroupIo] = {}
        if layout.blkio and (rel := self.locator.locate(layout.blkio, path)) is not None:
            found.append(rel)
            io = self._blkio(_Reader(layout.blkio, errors), rel)
        pressure: dict[tuple[str, str], float] = {}
        if layout.unified and (rel := self.locator.locate(layout.unified, path)) is not None:
            pressure = _pressure(_Reader(layout.unified, errors), rel)
        if not found:
            return None
        return OwnerCgroup(
            path="/" + found[0], version=1,
            cpu_usage_seconds=usage, cpu_user_seconds=user, cpu_system_seconds=system,
            cpu_periods=stat.periods, cpu_throttled_periods=stat.throttled_periods, cpu_throttled_seconds=stat.throttled_seconds,
            cpu_quota_cores=quota, pressure=pressure, io=io, children=children,
        )

    def _cfs_quota(self, reader: _Reader, rel: str, child: str | None = None) -> float | None:
        required = child is None
        quota_text = reader.text(rel, "cpu.cfs_quota_us", required, child)
        period_text = reader.text(rel, "cpu.cfs_period_us", required, child)
        if quota_text is None or period_text is None:
            return None
        try:
            return parse_cfs_quota(quota_text, period_text)
        except ParseError:
            reader.errors.add(f"parse:{reader.cause('cpu.cfs_quota_us', child)}")
            return None

    def _blkio(self, reader: _Reader, rel: str) -> dict[str, CgroupIo]:
        for bytes_name, ios_name in _BLKIO_FILES:
            if self._has(reader.root, bytes_name):
                service_bytes = reader.devices(rel, bytes_name, parse_blkio_rwstat, True)
                serviced = reader.devices(rel, ios_name, parse_blkio_rwstat, True)
                return {} if service_bytes is None or serviced is None else blkio_io(service_bytes, serviced)
        return {}

    # -- device names ----------------------------------------------------------------------
    def _device_name(self, device: str) -> str | None:
        if device not in self._device_names:
            if len(self._device_names) >= 4096:
                self._device_names.clear()
            try:
                # /sys/dev/block/<major:minor> links to the device's directory, named after it.
                name = os.path.basename(os.readlink(self.paths.sys("dev", "block", device)))
            except OSError:
                name = None
            self._device_names[device] = name or None
        return self._device_names[device]

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None
