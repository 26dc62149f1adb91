"""What the diskstats source's Reading holds: counters in bytes and seconds, per device."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class DiskCounters:
    major: int
    minor: int
    reads_completed: int
    reads_merged: int
    read_bytes: int
    read_time_seconds: float
    writes_completed: int
    writes_merged: int
    write_bytes: int
    write_time_seconds: float
    #: Requests issued to the driver and not yet completed, at the time of the read.
    io_now: int
    #: Time with at least one request in flight.
    io_time_seconds: float
    #: Sum over requests of their time in flight: its rate is the average queue depth.
    io_time_weighted_seconds: float
    #: None on kernels before 4.18.
    discards_completed: int | None = None
    discards_merged: int | None = None
    discard_bytes: int | None = None
    discard_time_seconds: float | None = None
    #: None on kernels before 5.5.
    flushes_completed: int | None = None
    flush_time_seconds: float | None = None


#: DiskCounters' fields in the order /proc/diskstats prints them
COUNTER_FIELDS = tuple(f.name for f in fields(DiskCounters))


@dataclass(frozen=True, slots=True)
class Diskstats:
    #: device -> counters; a live reading holds a core.fields.DeviceTable
    devices: Mapping[str, DiskCounters]
    #: Device names (or "line N" where there was no name) of lines that did not parse.
    malformed: tuple[str, ...] = ()
