"""What one read of the owner cgroups holds: cumulative counters in base units, per owner of a
GPU process (the trace format's ``owner_cgroup`` source)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class CgroupIo:
    """One block device's IO by the cgroup and its descendants, since the cgroup was created."""

    read_bytes: int
    write_bytes: int
    reads: int
    writes: int
    #: cgroup v2 before 5.0 and v1 before 4.19 count no discards
    discard_bytes: int | None = None
    discards: int | None = None


@dataclass(frozen=True, slots=True)
class CgroupBandwidth:
    """A CPU quota set on a cgroup below the owner's, with its own throttling counters.

    The kernel counts throttling where the quota that ran out is set (sched-bwc.rst,
    "Hierarchical considerations"; cgroup-v2.rst: cpu.stat's bandwidth stats are not
    hierarchical), so a container's limit inside a pod shows in the container's cpu.stat only.
    """

    quota_cores: float
    periods: int | None = None
    throttled_periods: int | None = None
    throttled_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class OwnerCgroup:
    #: the cgroup path below the cgroup root
    path: str
    #: 2 for the unified hierarchy, 1 for the v1 controller hierarchies
    version: int
    #: v2 cpu.stat usage_usec; v1 cpuacct.usage. Both count the cgroup's descendants too.
    cpu_usage_seconds: float | None
    #: v2 user_usec; v1 cpuacct.stat user (USER_HZ)
    cpu_user_seconds: float | None
    cpu_system_seconds: float | None
    #: cpu.stat nr_periods: enforcement periods in which the cgroup had runnable tasks
    cpu_periods: int | None
    #: cpu.stat nr_throttled: periods in which the cgroup's own quota ran out
    cpu_throttled_periods: int | None
    #: v2 throttled_usec; v1 throttled_time (ns)
    cpu_throttled_seconds: float | None
    #: cpu.max quota/period (v1 cfs_quota_us/cfs_period_us); None without a quota
    cpu_quota_cores: float | None
    #: (resource, scope) -> stalled seconds from the cgroup's cpu/io/memory.pressure "total="
    pressure: dict[tuple[str, str], float]
    #: "major:minor" -> the device's IO (v2 io.stat; v1 blkio.throttle.*)
    io: dict[str, CgroupIo]
    #: child cgroup name -> its own CPU quota and throttling, for children that set a quota
    #: (the containers of a pod); empty when none does
    children: dict[str, CgroupBandwidth] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OwnerCgroupData:
    #: owner id (as in gpu_device's owners: "kubernetes:<pod uid>", "slurm:<job>", ...) -> its cgroup
    owners: dict[str, OwnerCgroup]
    #: "major:minor" -> block device name (/sys/dev/block), for the devices in ``io``
    devices: dict[str, str] = field(default_factory=dict)
