"""Metrics of the diskstats collector."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors.diskstats.payload import Diskstats
from gpuwait.core.config import Settings
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import Sample, Snapshot

SOURCE = "diskstats"
_A6 = ("A6",)
_A67 = ("A6", "A7")
_DEV = ("device",)
_WRAP = " The kernel keeps it in 32-bit milliseconds, so it wraps to 0 after 2^32 ms accumulated."


def _counter(name: str, help: str, unit: str = "", claims: tuple[str, ...] = _A6) -> MetricSpec:
    return MetricSpec(name, "counter", help, labels=_DEV, unit=unit, source=SOURCE, claims=claims)


def _window(name: str, help: str, unit: str = "", claims: tuple[str, ...] = _A67) -> MetricSpec:
    return MetricSpec(name, "gauge", help, labels=_DEV, unit=unit, source=SOURCE, claims=claims, window=True)


METRICS = (
    _counter("gpuwait_disk_reads_completed_total", "Reads completed, from /proc/diskstats.", claims=_A67),
    _counter("gpuwait_disk_writes_completed_total", "Writes completed, from /proc/diskstats.", claims=_A67),
    _counter("gpuwait_disk_reads_merged_total", "Adjacent reads merged into one request before they were issued."),
    _counter("gpuwait_disk_writes_merged_total", "Adjacent writes merged into one request before they were issued."),
    _counter("gpuwait_disk_read_bytes_total", "Bytes read.", unit="bytes", claims=_A67),
    _counter("gpuwait_disk_write_bytes_total", "Bytes written.", unit="bytes", claims=_A67),
    _counter("gpuwait_disk_read_time_seconds_total", "Seconds reads spent from issue to completion, summed over reads." + _WRAP, unit="seconds"),
    _counter("gpuwait_disk_write_time_seconds_total", "Seconds writes spent from issue to completion, summed over writes." + _WRAP, unit="seconds"),
    _counter("gpuwait_disk_discards_completed_total", "Discards completed (kernel 4.18 and later)."),
    _counter("gpuwait_disk_discards_merged_total", "Adjacent discards merged into one request (kernel 4.18 and later)."),
    _counter("gpuwait_disk_discard_bytes_total", "Bytes discarded (kernel 4.18 and later).", unit="bytes"),
    _counter("gpuwait_disk_discard_time_seconds_total", "Seconds discards spent from issue to completion, summed over discards (kernel 4.18 and later)." + _WRAP, unit="seconds"),
    _counter("gpuwait_disk_flushes_completed_total", "Cache flush requests completed (kernel 5.5 and later)."),
    _counter("gpuwait_disk_flush_time_seconds_total", "Seconds flush requests spent from issue to completion, summed over flushes (kernel 5.5 and later)." + _WRAP, unit="seconds"),
    MetricSpec("gpuwait_disk_io_now", "gauge", "Requests issued to the device driver and not yet completed, at the latest sample.",
               labels=_DEV, source=SOURCE, claims=_A6),
    _counter("gpuwait_disk_io_time_seconds_total", "Seconds the device had at least one request in flight." + _WRAP, unit="seconds"),
    _counter("gpuwait_disk_io_time_weighted_seconds_total", "Seconds requests spent in flight, summed over requests; its rate is the average queue depth." + _WRAP, unit="seconds"),
    _window("gpuwait_disk_window_queue_depth_mean", "Average number of requests in flight over the window (rate of the weighted IO time)."),
    _window("gpuwait_disk_window_queue_depth_max", "Largest average number of requests in flight over any one sample interval of the window."),
    _window("gpuwait_disk_window_in_flight_max", "Largest number of requests in flight seen in any sample of the window."),
    _window("gpuwait_disk_window_read_await_seconds", "Average time from issue to completion of the reads completed in the window; absent when none completed.", unit="seconds"),
    _window("gpuwait_disk_window_write_await_seconds", "Average time from issue to completion of the writes completed in the window; absent when none completed.", unit="seconds"),
    _window("gpuwait_disk_window_reads_per_second", "Reads completed per second over the window (read IOPS)."),
    _window("gpuwait_disk_window_writes_per_second", "Writes completed per second over the window (write IOPS)."),
    _window("gpuwait_disk_window_read_bytes_per_second", "Bytes read per second over the window.", unit="bytes"),
    _window("gpuwait_disk_window_write_bytes_per_second", "Bytes written per second over the window.", unit="bytes"),
    _window("gpuwait_disk_window_read_request_size_bytes", "Average size of the reads completed in the window: large for sequential streaming, small for many small files or random access; absent when none completed.", unit="bytes"),
    _window("gpuwait_disk_window_write_request_size_bytes", "Average size of the writes completed in the window; absent when none completed.", unit="bytes"),
    _window("gpuwait_disk_window_utilization_ratio", "Fraction of the window the device had at least one request in flight; near 1 means busy, not necessarily saturated, for devices that serve requests in parallel (NVMe, RAID).", unit="ratio"),
)


#: Metric name -> DiskCounters field, for the values read straight from the latest reading.
READING_FIELDS = (
    ("gpuwait_disk_reads_completed_total", "reads_completed"),
    ("gpuwait_disk_writes_completed_total", "writes_completed"),
    ("gpuwait_disk_reads_merged_total", "reads_merged"),
    ("gpuwait_disk_writes_merged_total", "writes_merged"),
    ("gpuwait_disk_read_bytes_total", "read_bytes"),
    ("gpuwait_disk_write_bytes_total", "write_bytes"),
    ("gpuwait_disk_read_time_seconds_total", "read_time_seconds"),
    ("gpuwait_disk_write_time_seconds_total", "write_time_seconds"),
    ("gpuwait_disk_discards_completed_total", "discards_completed"),
    ("gpuwait_disk_discards_merged_total", "discards_merged"),
    ("gpuwait_disk_discard_bytes_total", "discard_bytes"),
    ("gpuwait_disk_discard_time_seconds_total", "discard_time_seconds"),
    ("gpuwait_disk_flushes_completed_total", "flushes_completed"),
    ("gpuwait_disk_flush_time_seconds_total", "flush_time_seconds"),
    ("gpuwait_disk_io_now", "io_now"),
    ("gpuwait_disk_io_time_seconds_total", "io_time_seconds"),
    ("gpuwait_disk_io_time_weighted_seconds_total", "io_time_weighted_seconds"),
)

#: Metric name -> DeviceWindowStats field.
WINDOW_FIELDS = (
    ("gpuwait_disk_window_queue_depth_mean", "queue_depth_mean"),
    ("gpuwait_disk_window_queue_depth_max", "queue_depth_max"),
    ("gpuwait_disk_window_in_flight_max", "in_flight_max"),
    ("gpuwait_disk_window_read_await_seconds", "read_await_seconds"),
    ("gpuwait_disk_window_write_await_seconds", "write_await_seconds"),
    ("gpuwait_disk_window_reads_per_second", "reads_per_second"),
    ("gpuwait_disk_window_writes_per_second", "writes_per_second"),
    ("gpuwait_disk_window_read_bytes_per_second", "read_bytes_per_second"),
    ("gpuwait_disk_window_write_bytes_per_second", "write_bytes_per_second"),
    ("gpuwait_disk_window_read_request_size_bytes", "read_request_size_bytes"),
    ("gpuwait_disk_window_write_request_size_bytes", "write_request_size_bytes"),
    ("gpuwait_disk_window_utilization_ratio", "utilization_ratio"),
)


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    reading, stats = snapshots["diskstats"]
    if reading is not None:
        data: Diskstats = reading.data
        for name, field in READING_FIELDS:
            for device, counters in data.devices.items():
                yield Sample(name, (device,), getattr(counters, field))
    if stats is not None:
        for name, field in WINDOW_FIELDS:
            for device, window in stats.devices.items():
                yield Sample(name, (device,), getattr(window, field))
