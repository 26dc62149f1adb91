"""Metrics of the nfs collector."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors import CollectorSpec, Sample, Snapshot, SourceSpec
from gpuwait.config import Settings
from gpuwait.sources.nfs import NfsData, NfsSource
from gpuwait.stats import nfs as nfs_stats

_MS = 0.001


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    reading, stats = snapshots["nfs"]
    if reading is not None:
        data: NfsData = reading.data
        yield Sample("gpuwait_nfs_shadowed_mounts", (), data.shadowed)
        for mount, m in data.mounts.items():
            yield Sample("gpuwait_nfs_mount_info", (mount, m.export, m.fstype, m.version, m.protocol), 1.0)
            b = m.bytes
            yield Sample("gpuwait_nfs_read_bytes_total", (mount, "buffered"), b.normal_read)
            yield Sample("gpuwait_nfs_read_bytes_total", (mount, "direct"), b.direct_read)
            yield Sample("gpuwait_nfs_write_bytes_total", (mount, "buffered"), b.normal_write)
            yield Sample("gpuwait_nfs_write_bytes_total", (mount, "direct"), b.direct_write)
            yield Sample("gpuwait_nfs_server_read_bytes_total", (mount,), b.server_read)
            yield Sample("gpuwait_nfs_server_write_bytes_total", (mount,), b.server_write)
            for op, c in m.ops.items():
                labels = (mount, op)
                yield Sample("gpuwait_nfs_operations_total", labels, c.ops)
                yield Sample("gpuwait_nfs_transmissions_total", labels, c.transmissions)
                yield Sample("gpuwait_nfs_timeouts_total", labels, c.timeouts)
                yield Sample("gpuwait_nfs_errors_total", labels, c.errors)
                yield Sample("gpuwait_nfs_request_bytes_total", labels, c.bytes_sent)
                yield Sample("gpuwait_nfs_response_bytes_total", labels, c.bytes_received)
                yield Sample("gpuwait_nfs_queue_seconds_total", labels, c.queue_ms * _MS)
                yield Sample("gpuwait_nfs_rtt_seconds_total", labels, c.rtt_ms * _MS)
                yield Sample("gpuwait_nfs_execute_seconds_total", labels, c.execute_ms * _MS)
    if stats is not None:
        for (mount, op), rate in stats.op_rate.items():
            yield Sample("gpuwait_nfs_window_operations_per_second", (mount, op), rate)
        for (mount, op), seconds in stats.op_execute_mean_seconds.items():
            yield Sample("gpuwait_nfs_window_execute_mean_seconds", (mount, op), seconds)
        for mount, ratio in stats.metadata_ratio.items():
            yield Sample("gpuwait_nfs_window_metadata_ratio", (mount,), ratio)


COLLECTOR = CollectorSpec(
    name="nfs",
    help="NFS client statistics per mount: operation latency, retransmissions, bytes, metadata share (A6, A7).",
    sources=(SourceSpec("nfs", NfsSource.from_settings, nfs_stats.columns, nfs_stats.summarize, tier="slow", payload=NfsData),),
    expose=expose,
)
