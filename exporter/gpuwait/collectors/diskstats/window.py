"""Window statistics of block devices: queue depth, latency, IOPS, throughput and request size
(A6, A7), from the fast-tier samples.

Average request size next to IOPS and bytes per second tells which regime a device is in:
large sequential reads need throughput, many small files need random-access IOPS (A7).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gpuwait.collectors.diskstats.parse import TIME_FIELD_MODULUS_SECONDS as TIME_MODULUS
from gpuwait.collectors.diskstats.payload import Diskstats
from gpuwait.core.config import Settings
from gpuwait.core.fields import interleaved
from gpuwait.core.ring import Column, ColumnRow, RowKeys, WindowView
from gpuwait.core.series import clamp_ratio, increase, maximum, steady

# Column keys are (kind, device).
_READS, _WRITES, _READ_BYTES, _WRITE_BYTES = "reads", "writes", "read_bytes", "write_bytes"
_READ_TIME, _WRITE_TIME, _IO_NOW, _IO_TIME, _WEIGHTED = "read_time", "write_time", "io_now", "io_time", "weighted"


#: The counters the window statistics need, per device in this order; merges, discards and
#: flushes are exposed from the latest reading alone.
_KINDS = (_READS, _WRITES, _READ_BYTES, _WRITE_BYTES, _READ_TIME, _WRITE_TIME, _IO_NOW, _IO_TIME, _WEIGHTED)
_FIELDS = ("reads_completed", "writes_completed", "read_bytes", "write_bytes", "read_time_seconds",
           "write_time_seconds", "io_now", "io_time_seconds", "io_time_weighted_seconds")
_ROW_KEYS = RowKeys(_KINDS)


def columns(data: Diskstats) -> ColumnRow:
    devices = data.devices
    return ColumnRow(_ROW_KEYS(tuple(devices)), interleaved(devices, _FIELDS))


@dataclass(frozen=True, slots=True)
class DeviceWindowStats:
    queue_depth_mean: float | None
    queue_depth_max: float | None
    in_flight_max: float | None
    read_await_seconds: float | None
    write_await_seconds: float | None
    reads_per_second: float | None
    writes_per_second: float | None
    read_bytes_per_second: float | None
    write_bytes_per_second: float | None
    read_request_size_bytes: float | None
    write_request_size_bytes: float | None
    utilization_ratio: float | None


@dataclass(frozen=True, slots=True)
class DiskstatsWindowStats:
    devices: dict[str, DeviceWindowStats]


def paired_quotient(
    times: Sequence[float],
    numerator: Sequence[float],
    denominator: Sequence[float],
    numerator_modulus: float | None = None,
) -> float | None:
    """Σ numerator increase / Σ denominator increase over the intervals where both counters
    were read and neither was reset, or None when the denominator did not move.

    Skipping an interval for both keeps a reset of one counter (a re-plugged device) from
    pairing the other's increase with nothing.
    """
    if len(times) >= 2 and steady(times, numerator) and steady(times, denominator):
        # Both counters read throughout and never reset: the sums telescope.
        den = denominator[-1] - denominator[0]
        return (numerator[-1] - numerator[0]) / den if den > 0 else None
    num_sum = den_sum = 0.0
    prev_t = prev_n = prev_d = math.nan
    for t, n, d in zip(times, numerator, denominator):
        if n != n or d != d:
            continue
        # The common case (both counters moved forward) without the calls of ``increase``.
        if prev_n == prev_n and t > prev_t:
            if n >= prev_n and d >= prev_d:
                num_sum += n - prev_n
                den_sum += d - prev_d
            else:
                dn = increase(prev_n, n, numerator_modulus)
                dd = increase(prev_d, d)
                if dn is not None and dd is not None:
                    num_sum += dn
                    den_sum += dd
        prev_t, prev_n, prev_d = t, n, d
    return num_sum / den_sum if den_sum > 0 else None


def summarize_device(view: WindowView, device: str) -> DeviceWindowStats:
    t = view.times

    def rate(kind: str, modulus: float | None = None) -> float | None:
        return view.rate((kind, device), modulus)

    def quotient(numerator: str, denominator: str, modulus: float | None = None) -> float | None:
        num, den = (numerator, device), (denominator, device)
        if view.steady(num) and view.steady(den):
            # Both counters steady over the view: the ratio of their increases, from their ends.
            (dn, _), (dd, _) = view.increase(num), view.increase(den)
            return dn / dd if dd > 0 else None
        return paired_quotient(t, view.column(num), view.column(den), modulus)

    return DeviceWindowStats(
        queue_depth_mean=rate(_WEIGHTED, TIME_MODULUS),
        queue_depth_max=view.rate_peak((_WEIGHTED, device), TIME_MODULUS),
        in_flight_max=maximum(view.column((_IO_NOW, device))),
        read_await_seconds=quotient(_READ_TIME, _READS, TIME_MODULUS),
        write_await_seconds=quotient(_WRITE_TIME, _WRITES, TIME_MODULUS),
        reads_per_second=rate(_READS),
        writes_per_second=rate(_WRITES),
        read_bytes_per_second=rate(_READ_BYTES),
        write_bytes_per_second=rate(_WRITE_BYTES),
        read_request_size_bytes=quotient(_READ_BYTES, _READS),
        write_request_size_bytes=quotient(_WRITE_BYTES, _WRITES),
        utilization_ratio=clamp_ratio(rate(_IO_TIME, TIME_MODULUS)),
    )


def summarize(view: WindowView, settings: Settings) -> DiskstatsWindowStats:
    devices = sorted({key[1] for key in view.columns})
    return DiskstatsWindowStats({device: summarize_device(view, device) for device in devices})


# -- what the verdict reads ------------------------------------------------------------------


class DeviceCounters(NamedTuple):
    """A device's counters over the window, for rates on another series' time grid."""

    reads: Column
    writes: Column
    read_bytes: Column
    write_bytes: Column
    #: Seconds requests spent in flight, summed over requests: its rate is the average
    #: queue depth. A 32-bit millisecond field in the kernel, so it carries its modulus.
    queue_time: Column


def devices(view: WindowView) -> list[str]:
    return sorted({key[1] for key in view.columns if isinstance(key, tuple) and key[0] == _READS})


def device_counters(view: WindowView, device: str) -> DeviceCounters:
    return DeviceCounters(
        reads=view.series((_READS, device)),
        writes=view.series((_WRITES, device)),
        read_bytes=view.series((_READ_BYTES, device)),
        write_bytes=view.series((_WRITE_BYTES, device)),
        queue_time=view.series((_WEIGHTED, device), TIME_MODULUS),
    )


#: DeviceCounters' fields -> the kind of their window columns
_COUNTER_KINDS = {"reads": _READS, "writes": _WRITES, "read_bytes": _READ_BYTES, "write_bytes": _WRITE_BYTES,
                  "queue_time": _WEIGHTED}


def steady_counters(view: WindowView, device: str, *counters: str) -> tuple[Hashable, ...] | None:
    """The window's keys of the device's ``counters`` (DeviceCounters' field names), in that
    order, when every one is a steady counter over the window (read at every row, never
    going back, so not wrapping either); None otherwise."""
    keys = tuple((_COUNTER_KINDS[counter], device) for counter in counters)
    return keys if all(map(view.steady, keys)) else None
