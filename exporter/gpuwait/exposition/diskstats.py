"""Metrics of the diskstats collector."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors import CollectorSpec, Sample, Snapshot, SourceSpec
from gpuwait.config import Settings
from gpuwait.parsers.diskstats import Diskstats
from gpuwait.sources.base import HostPaths
from gpuwait.sources.diskstats import DiskstatsSource
from gpuwait.stats import diskstats as disk_stats

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


COLLECTOR = CollectorSpec(
    name="diskstats",
    help="Block device IO: throughput, IOPS, latency, queue depth and request size (A6, A7).",
    sources=(SourceSpec("diskstats", lambda s: DiskstatsSource(HostPaths.from_settings(s), s["collector.diskstats.device-exclude"]),
                        disk_stats.columns, disk_stats.summarize, payload=Diskstats),),
    expose=expose,
)
