"""The owner cgroups over the analysis window: the ring's columns, the window statistics, and
the typed accessors the verdict reads (A2, A3, A6).

Every accessor answers for one owner, over the window and per sample interval, so that a
verdict can line the owner's CPU throttling or IO up with the intervals its GPUs sat idle in.
A per-interval series is a ``Column`` stamped with the time its interval starts, as the cpu
collector's ``saturated_cores``: ``Grid.hold(column, gap)`` spreads each value over its
interval. Counters are cumulative in the ring; a counter that goes back (a cgroup recreated
under the same path) is a reset and its interval is NaN.

What the verdict can call (``view`` is the ``owner_cgroup`` source's window, ``owner`` the id
of ``gpuwait_gpu_owner_info``):

- ``owners(view) -> list[str]``
- ``cpu_cores(view, owner) -> Rate``: CPU the cgroup used, in cores
- ``quota_cores(view, owner) -> float | None``: the cgroup's own CPU quota, in cores
- ``throttled_ratio(view, owner) -> Throttling``: share of CPU periods its binding quota ran out in
- ``pressure_rate(view, owner, resource, scope) -> Rate``: fraction of time its tasks stalled (PSI)
- ``io_read_rate(view, owner) -> IoRate``: bytes and reads per second to block devices
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple

from gpuwait.collectors.cgroup.payload import OwnerCgroupData
from gpuwait.core.config import Settings
from gpuwait.core.ring import Column, WindowView
from gpuwait.core.series import clamp_ratio, total_increase, window_rate

NAN = math.nan
#: ring column kinds; a column key is (owner id, kind, *detail)
USAGE, USER, SYSTEM = "usage", "user", "system"
PERIODS, THROTTLED, THROTTLED_SECONDS, QUOTA = "periods", "throttled", "throttled_seconds", "quota"
PRESSURE = "pressure"
READ_BYTES, READS, WRITE_BYTES, WRITES = "read_bytes", "reads", "write_bytes", "writes"
#: the level of the owner's own cgroup among the bandwidth columns (children go by name)
OWN = ""


def columns(data: OwnerCgroupData) -> dict[Hashable, float]:
    out: dict[Hashable, float] = {}
    for owner, cg in data.owners.items():
        for kind, value in ((USAGE, cg.cpu_usage_seconds), (USER, cg.cpu_user_seconds), (SYSTEM, cg.cpu_system_seconds)):
            if value is not None:
                out[(owner, kind)] = value
        levels = [(OWN, cg.cpu_periods, cg.cpu_throttled_periods, cg.cpu_throttled_seconds, cg.cpu_quota_cores)]
        levels += [(name, c.periods, c.throttled_periods, c.throttled_seconds, c.quota_cores) for name, c in cg.children.items()]
        for level, periods, throttled, seconds, quota in levels:
            for kind, value in ((PERIODS, periods), (THROTTLED, throttled), (THROTTLED_SECONDS, seconds), (QUOTA, quota)):
                if value is not None:
                    out[(owner, kind, level)] = float(value)
        for (resource, scope), seconds in cg.pressure.items():
            out[(owner, PRESSURE, resource, scope)] = seconds
        for device, io in cg.io.items():
            out[(owner, READ_BYTES, device)] = float(io.read_bytes)
            out[(owner, READS, device)] = float(io.reads)
            out[(owner, WRITE_BYTES, device)] = float(io.write_bytes)
            out[(owner, WRITES, device)] = float(io.writes)
    return out


# -- what the verdict reads ------------------------------------------------------------------


class Rate(NamedTuple):
    """A counter's increase per second: over the window, and over each sample interval."""

    #: over the whole window; None with fewer than two reads
    mean: float | None
    #: over each sample interval, stamped at its start; NaN where a read is missing or the
    #: counter went back
    intervals: Column


class IoRate(NamedTuple):
    """Reads summed over the owner's block devices."""

    bytes_per_second: Rate
    ops_per_second: Rate


class Throttling(NamedTuple):
    """How much of the time the kernel's CPU quota held the owner's tasks back.

    The owner's own cgroup and each child with a quota of its own (a container's limit inside
    a pod) count throttling separately: each counts only the periods in which its own quota
    ran out (sched-bwc.rst, "Hierarchical considerations"). The level that throttled the
    largest share of its periods is the one that binds; its figures are these.
    """

    #: throttled periods / periods over the window at the binding level; None without periods
    ratio: float | None
    #: OWN ("") for the owner's cgroup, else the child cgroup's name; None without periods
    level: str | None
    #: that level's quota, in cores
    quota_cores: float | None
    #: seconds the level's tasks spent throttled, per second, summed over the CPUs they wait on
    throttled_seconds_rate: float | None
    #: per sample interval, stamped at its start: the throttled share of the periods, the
    #: largest over the levels
    intervals: Column


def _interval_rates(times: list[float], values: list[float]) -> list[float]:
    """Rate over each pair of consecutive rows, one per interval, NaN where either read is
    missing, time does not advance, or the counter went back (``core.series.interval_rates``
    leaves such intervals out, which loses their place in the window)."""
    rates = []
    for i in range(1, len(times)):
        prev, cur, dt = values[i - 1], values[i], times[i] - times[i - 1]
        rates.append((cur - prev) / dt if cur == cur and prev == prev and dt > 0 and cur >= prev else NAN)
    return rates


def _rate(view: WindowView, key: Hashable, clamp: bool = False) -> Rate:
    values = view.column(key)
    mean = window_rate(view.times, values)
    series = _interval_rates(view.times, values)
    if clamp:
        mean = clamp_ratio(mean)
        series = [v if v != v else clamp_ratio(v) for v in series]
    return Rate(mean, Column(view.times[:-1], series))


def _summed(view: WindowView, keys: list[Hashable]) -> Rate:
    """The rates of several counters added up (one per device); an interval counts once every
    counter that has a read on both sides of it has been added."""
    means = [m for k in keys if (m := window_rate(view.times, view.column(k))) is not None]
    per_key = [_interval_rates(view.times, view.column(k)) for k in keys]
    series = []
    for i in range(max(0, len(view.times) - 1)):
        known = [rates[i] for rates in per_key if rates[i] == rates[i]]
        series.append(math.fsum(known) if known else NAN)
    return Rate(math.fsum(means) if means else None, Column(view.times[:-1], series))


def owners(view: WindowView) -> list[str]:
    """The owners with any column in the window."""
    return sorted({key[0] for key in view.columns})


def cpu_cores(view: WindowView, owner: str) -> Rate:
    """CPU the owner's cgroup used, in cores (CPU seconds per second), its descendants included."""
    return _rate(view, (owner, USAGE))


def quota_cores(view: WindowView, owner: str) -> float | None:
    """The CPU quota of the owner's own cgroup at the latest read, in cores; None without one.
    Quotas set only on its children are in ``throttled_ratio(...).quota_cores``."""
    for value in reversed(view.column((owner, QUOTA, OWN))):
        if value == value:
            return value
    return None


def _levels(view: WindowView, owner: str) -> list[str]:
    return sorted({key[2] for key in view.columns if key[0] == owner and key[1] == PERIODS})


def throttled_ratio(view: WindowView, owner: str) -> Throttling:
    """The share of CPU bandwidth periods in which a quota held the owner's tasks back, at the
    level (its own cgroup or a child's) whose quota binds."""
    best: tuple[float, str] | None = None
    per_level: list[tuple[list[float], list[float]]] = []
    for level in _levels(view, owner):
        periods = view.column((owner, PERIODS, level))
        throttled = view.column((owner, THROTTLED, level))
        per_level.append((_interval_rates(view.times, periods), _interval_rates(view.times, throttled)))
        elapsed, done = total_increase(view.times, periods), total_increase(view.times, throttled)
        if elapsed is None or done is None or elapsed[0] <= 0:
            continue
        ratio = min(1.0, done[0] / elapsed[0])
        if best is None or ratio > best[0]:
            best = (ratio, level)
    series = []
    for i in range(max(0, len(view.times) - 1)):
        # Both counters are rates over the same interval: their quotient is the share of the
        # periods that ended throttled.
        shares = [min(1.0, t[i] / p[i]) for p, t in per_level if p[i] == p[i] and t[i] == t[i] and p[i] > 0]
        series.append(max(shares) if shares else NAN)
    intervals = Column(view.times[:-1], series)
    if best is None:
        return Throttling(None, None, None, None, intervals)
    ratio, level = best
    quotas = [v for v in view.column((owner, QUOTA, level)) if v == v]
    seconds = window_rate(view.times, view.column((owner, THROTTLED_SECONDS, level)))
    return Throttling(ratio, level, quotas[-1] if quotas else None, seconds, intervals)


def pressure_rate(view: WindowView, owner: str, resource: str, scope: str) -> Rate:
    """Seconds per second the owner's tasks stalled on ``resource`` ("cpu", "io", "memory"):
    ``some``, at least one of them; ``full``, all of its non-idle tasks at once (psi.rst)."""
    return _rate(view, (owner, PRESSURE, resource, scope), clamp=True)


def io_read_rate(view: WindowView, owner: str) -> IoRate:
    """Bytes and read operations per second the owner's cgroup issued to block devices."""
    devices = sorted({key[2] for key in view.columns if key[0] == owner and key[1] == READ_BYTES})
    return IoRate(_summed(view, [(owner, READ_BYTES, d) for d in devices]), _summed(view, [(owner, READS, d) for d in devices]))


# -- window statistics for the exposition ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnerWindow:
    usage_cores: float | None
    throttled_ratio: float | None
    #: (resource, scope) -> stalled seconds per second
    stalled_ratio: dict[tuple[str, str], float]
    read_bytes_per_second: float | None


@dataclass(frozen=True, slots=True)
class OwnerCgroupWindowStats:
    owners: dict[str, OwnerWindow]


def summarize(view: WindowView, settings: Settings) -> OwnerCgroupWindowStats:
    out: dict[str, OwnerWindow] = {}
    for owner in owners(view):
        stalled = {}
        for key in sorted(k for k in view.columns if k[0] == owner and k[1] == PRESSURE):
            ratio = pressure_rate(view, owner, key[2], key[3]).mean
            if ratio is not None:
                stalled[(key[2], key[3])] = ratio
        out[owner] = OwnerWindow(
            cpu_cores(view, owner).mean, throttled_ratio(view, owner).ratio, stalled,
            io_read_rate(view, owner).bytes_per_second.mean,
        )
    return OwnerCgroupWindowStats(out)
