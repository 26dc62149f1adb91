"""Pure parsers of a cgroup's CPU, IO and pressure files, cgroup v2 and v1.

Formats and units (Documentation/admin-guide/cgroup-v2.rst, Documentation/scheduler/sched-bwc.rst,
Documentation/admin-guide/cgroup-v1/cpuacct.rst and blkio-controller.rst,
Documentation/accounting/psi.rst):

==============================  ===============================================================
v2 cpu.stat                     flat keyed, microseconds: usage_usec user_usec system_usec always;
                                nr_periods nr_throttled throttled_usec when the cpu controller is
                                enabled for the cgroup (nr_bursts, burst_usec, nice_usec... later)
v2 cpu.max                      ``$MAX $PERIOD`` in microseconds, ``max`` for no limit
v2 io.stat                      ``MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=.. dbytes=.. dios=..``;
                                the io cost and latency controllers append keys of their own
v1 cpu.stat                     nr_periods nr_throttled throttled_time (nanoseconds)
v1 cpu.cfs_quota_us/period_us   microseconds; quota -1 for no limit
v1 cpuacct.usage / .stat        nanoseconds / ``user N`` ``system N`` in USER_HZ
v1 blkio.throttle.io_service_   ``MAJ:MIN Read|Write|Sync|Async|Discard|Total N`` per device,
bytes, io_serviced              then ``Total N``
*.pressure                      as /proc/pressure (gpuwait.core.psi); cpu's ``full`` line
                                has a meaning per cgroup, unlike system-wide
==============================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpuwait.collectors.cgroup.payload import CgroupIo
from gpuwait.core.errors import ParseError
from gpuwait.core.fields import parse_devices, u64
from gpuwait.core.psi import parse_pressure


@dataclass(frozen=True, slots=True)
class CpuStat:
    usage_seconds: float | None = None
    user_seconds: float | None = None
    system_seconds: float | None = None
    periods: int | None = None
    throttled_periods: int | None = None
    throttled_seconds: float | None = None


def _flat_keyed(text: str) -> dict[str, str]:
    """'key value' per line -> {key: value}; values are checked only where they are used, so a
    key a later kernel adds costs nothing."""
    fields: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise ParseError(f"line {lineno}: expected 'key value', got {line[:80]!r}")
        key, value = parts
        if key in fields:
            raise ParseError(f"line {lineno}: key {key!r} listed twice")
        fields[key] = value
    return fields


def _counter(fields: dict[str, str], key: str) -> int | None:
    value = fields.get(key)
    if value is None:
        return None
    try:
        return u64(value)
    except ParseError as e:
        raise ParseError(f"{key}: {e}") from None


def _bandwidth(fields: dict[str, str], throttled_key: str, per_second: float) -> tuple[int | None, int | None, float | None]:
    periods, throttled, throttled_time = (_counter(fields, k) for k in ("nr_periods", "nr_throttled", throttled_key))
    present = [v is not None for v in (periods, throttled, throttled_time)]
    if any(present) and not all(present):
        raise ParseError(f"nr_periods, nr_throttled and {throttled_key} come together; some are missing")
    return periods, throttled, None if throttled_time is None else throttled_time / per_second


def parse_cpu_stat_v2(text: str) -> CpuStat:
    """v2 cpu.stat: usage always; the bandwidth counters only where the cpu controller is on."""
    fields = _flat_keyed(text)
    usage = _counter(fields, "usage_usec")
    if usage is None:
        raise ParseError("no usage_usec")
    user, system = _counter(fields, "user_usec"), _counter(fields, "system_usec")
    periods, throttled, throttled_seconds = _bandwidth(fields, "throttled_usec", 1e6)
    return CpuStat(
        usage / 1e6,
        None if user is None else user / 1e6,
        None if system is None else system / 1e6,
        periods, throttled, throttled_seconds,
    )


def parse_cpu_stat_v1(text: str) -> CpuStat:
    """v1 cpu.stat: the bandwidth counters only; usage comes from cpuacct."""
    periods, throttled, throttled_seconds = _bandwidth(_flat_keyed(text), "throttled_time", 1e9)
    if periods is None:
        raise ParseError("no nr_periods")
    return CpuStat(periods=periods, throttled_periods=throttled, throttled_seconds=throttled_seconds)


def _single(text: str, what: str) -> str:
    parts = text.split()
    if len(parts) != 1:
        raise ParseError(f"{what}: expected one value, got {text[:40]!r}")
    return parts[0]


def _period(token: str) -> int:
    period = u64(token)
    if period == 0:
        raise ParseError("period of 0")
    return period


def parse_cpu_max(text: str) -> float | None:
    """v2 cpu.max -> quota in cores (quota / period); None for "max"."""
    parts = text.split()
    if len(parts) != 2:
        raise ParseError(f"expected '$MAX $PERIOD', got {text[:40]!r}")
    quota, period = parts
    period_us = _period(period)
    if quota == "max":
        return None
    return u64(quota) / period_us


def parse_cfs_quota(quota_text: str, period_text: str) -> float | None:
    """v1 cpu.cfs_quota_us and cpu.cfs_period_us -> quota in cores; None for no limit (-1)."""
    quota = _single(quota_text, "cpu.cfs_quota_us")
    period_us = _period(_single(period_text, "cpu.cfs_period_us"))
    if quota.startswith("-"):
        # The kernel prints -1 for an unconstrained group, whatever negative value was written.
        u64(quota[1:])
        return None
    return u64(quota) / period_us


def parse_cpuacct_usage(text: str) -> float:
    """v1 cpuacct.usage (nanoseconds) -> seconds."""
    return u64(_single(text, "cpuacct.usage")) / 1e9


def parse_cpuacct_stat(text: str, ticks_per_second: float) -> tuple[float, float]:
    """v1 cpuacct.stat -> (user, system) seconds; the file counts in USER_HZ."""
    fields = _flat_keyed(text)
    user, system = _counter(fields, "user"), _counter(fields, "system")
    if user is None or system is None:
        raise ParseError("expected user and system lines")
    return user / ticks_per_second, system / ticks_per_second


def _is_device(name: str) -> bool:
    major, colon, minor = name.partition(":")
    return bool(colon) and major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit()


_IO_KEYS = ("rbytes", "wbytes", "rios", "wios", "dbytes", "dios")


def _io_line(tokens: list[str]) -> CgroupIo:
    values: dict[str, int] = {}
    for token in tokens:
        key, eq, value = token.partition("=")
        if not eq:
            raise ParseError(f"not key=value: {token[:40]!r}")
        if key not in _IO_KEYS:
            continue  # io.cost / io.latency statistics
        if key in values:
            raise ParseError(f"{key} listed twice")
        values[key] = u64(value)
    missing = [k for k in _IO_KEYS[:4] if k not in values]
    if missing:
        raise ParseError(f"missing {', '.join(missing)}")
    return CgroupIo(values["rbytes"], values["wbytes"], values["rios"], values["wios"], values.get("dbytes"), values.get("dios"))


def _io_stat_lines(text: str) -> Iterator[tuple[str, list[str] | None]]:
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if _is_device(parts[0]):
            yield parts[0], parts[1:]
        else:
            yield f"line {lineno}", None


def parse_io_stat(text: str) -> tuple[dict[str, CgroupIo], tuple[str, ...]]:
    """v2 io.stat -> ({"major:minor": CgroupIo}, malformed device lines). A device with no IO
    yet is not listed, so an empty file is no IO, not an error."""
    return parse_devices(_io_stat_lines(text), _io_line, None, "io.stat device")


_RWSTAT_OPS = ("Read", "Write", "Sync", "Async", "Discard", "Total")


def parse_blkio_rwstat(text: str) -> tuple[dict[str, dict[str, int]], tuple[str, ...]]:
    """v1 blkio.throttle.io_service_bytes / io_serviced (and their _recursive forms) ->
    ({"major:minor": {op: count}}, malformed devices). A device whose lines do not parse is
    dropped whole; the closing "Total N" line is the sum over devices and is not kept."""
    devices: dict[str, dict[str, int]] = {}
    malformed: dict[str, None] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) == 2 and parts[0] == "Total":
            continue
        if len(parts) != 3 or not _is_device(parts[0]):
            malformed[f"line {lineno}"] = None
            continue
        device, op, value = parts
        ops = devices.setdefault(device, {})
        try:
            if op not in _RWSTAT_OPS or op in ops:
                raise ParseError(f"operation {op!r}")
            ops[op] = u64(value)
        except ParseError:
            malformed[device] = None
    for device in list(devices):
        if device in malformed or "Read" not in devices[device] or "Write" not in devices[device]:
            del devices[device]
            malformed[device] = None
    if malformed and not devices:
        raise ParseError(f"no blkio device line parsed; malformed: {', '.join(list(malformed)[:5])}")
    return devices, tuple(malformed)


def blkio_io(service_bytes: dict[str, dict[str, int]], serviced: dict[str, dict[str, int]]) -> dict[str, CgroupIo]:
    """The two v1 files of one cgroup as one CgroupIo per device. A device in one file only
    (its first IO landed between the two reads) waits for the next read."""
    return {
        device: CgroupIo(b["Read"], b["Write"], ops["Read"], ops["Write"], b.get("Discard"), ops.get("Discard"))
        for device, b in sorted(service_bytes.items())
        if (ops := serviced.get(device)) is not None
    }


def parse_cgroup_pressure(text: str, resource: str) -> dict[tuple[str, str], float]:
    """A cgroup's <resource>.pressure -> {(resource, scope): stalled seconds}."""
    return {(resource, scope): line.total_seconds for scope, line in parse_pressure(text).items()}
