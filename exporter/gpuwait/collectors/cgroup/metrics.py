"""Metrics of the owner cgroups: catalog entries and the mapping of readings and window
statistics to samples. Every series carries ``owner``, the key of gpuwait_gpu_owner_info."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors.cgroup.payload import OwnerCgroupData
from gpuwait.collectors.cgroup.window import OwnerCgroupWindowStats
from gpuwait.core.config import Settings
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import Sample, Snapshot

SOURCE = "cgroup"
_CPU = ("A2", "A3")
_PRESSURE = ("A2", "A6")
_IO = ("A6",)
_OWNER = ("owner",)
_LEVEL = ("owner", "cgroup")
_DEVICE = ("owner", "device")
_PSI = ("owner", "resource", "scope")
_LEVELS_NOTE = (" One series for the owner's cgroup and one for each child cgroup with a quota of its own"
                " (a pod's containers), named by cgroup.")

METRICS = (
    MetricSpec("gpuwait_owner_cgroup_info", "gauge",
               "Always 1 per owner of a GPU process whose cgroup is read: cgroup is its path below the cgroup"
               " root (the pod's, the Slurm job's, the container's or the unit's), version 2 or 1.",
               labels=("owner", "cgroup", "version"), source=SOURCE, claims=_CPU),
    MetricSpec("gpuwait_owner_cpu_seconds_total", "counter",
               "CPU time used by the tasks of the owner's cgroup and its descendants (cgroup v2 cpu.stat"
               " usage_usec, v1 cpuacct.usage).",
               labels=_OWNER, unit="seconds", source=SOURCE, claims=_CPU),
    MetricSpec("gpuwait_owner_cpu_user_seconds_total", "counter",
               "User-mode part of gpuwait_owner_cpu_seconds_total (v2 user_usec, v1 cpuacct.stat user).",
               labels=_OWNER, unit="seconds", source=SOURCE, claims=_CPU),
    MetricSpec("gpuwait_owner_cpu_system_seconds_total", "counter",
               "Kernel-mode part of gpuwait_owner_cpu_seconds_total (v2 system_usec, v1 cpuacct.stat system).",
               labels=_OWNER, unit="seconds", source=SOURCE, claims=_CPU),
    MetricSpec("gpuwait_owner_cpu_periods_total", "counter",
               "CPU bandwidth enforcement periods that elapsed while the cgroup had runnable tasks (cpu.stat"
               " nr_periods)." + _LEVELS_NOTE,
               labels=_LEVEL, source=SOURCE, claims=_CPU),
    MetricSpec("gpuwait_owner_cpu_throttled_periods_total", "counter",
               "Periods in which the cgroup's own CPU quota ran out and its runnable tasks waited for the next"
               " period (cpu.stat nr_throttled); a parent's quota running out counts at the parent only."
               + _LEVELS_NOTE,
               labels=_LEVEL, source=SOURCE, claims=_CPU),
    MetricSpec("gpuwait_owner_cpu_throttled_seconds_total", "counter",
               "Time the cgroup's run queues spent throttled by its own quota, summed over the CPUs they were"
               " throttled on (v2 cpu.stat throttled_usec, v1 throttled_time)." + _LEVELS_NOTE,
               labels=_LEVEL, unit="seconds", source=SOURCE, claims=_CPU),
    MetricSpec("gpuwait_owner_cpu_quota_cores", "gauge",
               "CPU quota of the cgroup in cores: quota over period of cpu.max (v1 cpu.cfs_quota_us over"
               " cpu.cfs_period_us); absent where no quota is set." + _LEVELS_NOTE,
               labels=_LEVEL, source=SOURCE, claims=_CPU),
    MetricSpec("gpuwait_owner_pressure_stalled_seconds_total", "counter",
               "Seconds the owner's tasks were stalled waiting for the resource, from its cgroup's"
               " cpu.pressure, io.pressure and memory.pressure (PSI); scope some: at least one of its tasks"
               " stalled, full: all of its non-idle tasks at once.",
               labels=_PSI, unit="seconds", source=SOURCE, claims=_PRESSURE),
    MetricSpec("gpuwait_owner_io_read_bytes_total", "counter",
               "Bytes the owner's cgroup and its descendants read from the block device (v2 io.stat rbytes;"
               " v1 blkio.throttle.io_service_bytes, which counts only on a disk some cgroup has a throttle"
               " limit on).",
               labels=_DEVICE, unit="bytes", source=SOURCE, claims=_IO),
    MetricSpec("gpuwait_owner_io_write_bytes_total", "counter",
               "Bytes the owner's cgroup and its descendants wrote to the block device (v2 io.stat wbytes).",
               labels=_DEVICE, unit="bytes", source=SOURCE, claims=_IO),
    MetricSpec("gpuwait_owner_io_reads_total", "counter",
               "Read operations the owner's cgroup issued to the block device (v2 io.stat rios; v1 io_serviced).",
               labels=_DEVICE, source=SOURCE, claims=_IO),
    MetricSpec("gpuwait_owner_io_writes_total", "counter",
               "Write operations the owner's cgroup issued to the block device (v2 io.stat wios).",
               labels=_DEVICE, source=SOURCE, claims=_IO),
    MetricSpec("gpuwait_owner_io_discard_bytes_total", "counter",
               "Bytes the owner's cgroup discarded on the block device (v2 io.stat dbytes), where the kernel counts them.",
               labels=_DEVICE, unit="bytes", source=SOURCE, claims=_IO),
    MetricSpec("gpuwait_owner_io_discards_total", "counter",
               "Discard operations the owner's cgroup issued to the block device (v2 io.stat dios), where the kernel counts them.",
               labels=_DEVICE, source=SOURCE, claims=_IO),
    MetricSpec("gpuwait_owner_cpu_window_usage_cores", "gauge",
               "CPU the owner's cgroup used over the window, in cores (CPU seconds per second).",
               labels=_OWNER, source=SOURCE, claims=_CPU, window=True),
    MetricSpec("gpuwait_owner_cpu_window_throttled_ratio", "gauge",
               "Share of the window's CPU bandwidth periods in which a quota held the owner's tasks back, at"
               " the owner's cgroup or at the child cgroup whose quota throttled the largest share.",
               labels=_OWNER, unit="ratio", source=SOURCE, claims=_CPU, window=True),
    MetricSpec("gpuwait_owner_pressure_window_stalled_ratio", "gauge",
               "Fraction of the window the owner's tasks were stalled waiting for the resource (its cgroup's PSI).",
               labels=_PSI, unit="ratio", source=SOURCE, claims=_PRESSURE, window=True),
    MetricSpec("gpuwait_owner_io_window_read_bytes_per_second", "gauge",
               "Bytes per second the owner's cgroup read from block devices over the window, all devices together.",
               labels=_OWNER, unit="bytes", source=SOURCE, claims=_IO, window=True),
)


def _level_path(path: str, level: str) -> str:
    return path if not level else f"{path.rstrip('/')}/{level}"


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    reading, stats = snapshots["owner_cgroup"]
    if reading is not None:
        data: OwnerCgroupData = reading.data
        for owner, cg in data.owners.items():
            yield Sample("gpuwait_owner_cgroup_info", (owner, cg.path, str(cg.version)), 1.0)
            yield Sample("gpuwait_owner_cpu_seconds_total", (owner,), cg.cpu_usage_seconds)
            yield Sample("gpuwait_owner_cpu_user_seconds_total", (owner,), cg.cpu_user_seconds)
            yield Sample("gpuwait_owner_cpu_system_seconds_total", (owner,), cg.cpu_system_seconds)
            levels = [("", cg.cpu_periods, cg.cpu_throttled_periods, cg.cpu_throttled_seconds, cg.cpu_quota_cores)]
            levels += [(name, c.periods, c.throttled_periods, c.throttled_seconds, c.quota_cores) for name, c in cg.children.items()]
            for level, periods, throttled, seconds, quota in levels:
                labels = (owner, _level_path(cg.path, level))
                yield Sample("gpuwait_owner_cpu_periods_total", labels, periods)
                yield Sample("gpuwait_owner_cpu_throttled_periods_total", labels, throttled)
                yield Sample("gpuwait_owner_cpu_throttled_seconds_total", labels, seconds)
                yield Sample("gpuwait_owner_cpu_quota_cores", labels, quota)
            for (resource, scope), seconds in cg.pressure.items():
                yield Sample("gpuwait_owner_pressure_stalled_seconds_total", (owner, resource, scope), seconds)
            for device, io in cg.io.items():
                labels = (owner, data.devices.get(device, device))
                yield Sample("gpuwait_owner_io_read_bytes_total", labels, io.read_bytes)
                yield Sample("gpuwait_owner_io_write_bytes_total", labels, io.write_bytes)
                yield Sample("gpuwait_owner_io_reads_total", labels, io.reads)
                yield Sample("gpuwait_owner_io_writes_total", labels, io.writes)
                yield Sample("gpuwait_owner_io_discard_bytes_total", labels, io.discard_bytes)
                yield Sample("gpuwait_owner_io_discards_total", labels, io.discards)
    if stats is not None:
        s: OwnerCgroupWindowStats = stats
        for owner, w in s.owners.items():
            yield Sample("gpuwait_owner_cpu_window_usage_cores", (owner,), w.usage_cores)
            yield Sample("gpuwait_owner_cpu_window_throttled_ratio", (owner,), w.throttled_ratio)
            for (resource, scope), ratio in w.stalled_ratio.items():
                yield Sample("gpuwait_owner_pressure_window_stalled_ratio", (owner, resource, scope), ratio)
            yield Sample("gpuwait_owner_io_window_read_bytes_per_second", (owner,), w.read_bytes_per_second)
