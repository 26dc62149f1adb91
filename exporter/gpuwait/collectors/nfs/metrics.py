"""Metrics of the nfs collector.

Series carry the mount point only; the export (server:/path), NFS version and transport are
on gpuwait_nfs_mount_info. The mount point is what a job's configuration names and stays
put when a mount is re-pointed (another server address, a failover), which would otherwise
split every counter of the mount into new series; and an export string repeated on the
~100 series of each mount costs memory in every TSDB that stores them. Join with
``* on (mount) group_left (export) gpuwait_nfs_mount_info``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors.nfs.payload import NfsData
from gpuwait.core.config import Settings
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import Sample, Snapshot

SOURCE = "nfs"
_A6 = ("A6",)
_A67 = ("A6", "A7")
_OP = ("mount", "op")
_FROM = "from the mount's per-op statistics in mountstats"

METRICS = (
    MetricSpec("gpuwait_nfs_mount_info", "gauge",
               "NFS mount seen in mountstats (value 1): export (server:/path), filesystem type, NFS version and RPC transport of the mount point.",
               labels=("mount", "export", "fstype", "version", "protocol"), source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_shadowed_mounts", "gauge",
               "NFS mounts hidden under a later mount on the same mount point at the latest read; only the visible one is reported.",
               source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_operations_total", "counter",
               f"NFS operations completed per mount and operation, {_FROM}.",
               labels=_OP, source=SOURCE, claims=_A67),
    MetricSpec("gpuwait_nfs_transmissions_total", "counter",
               f"RPC transmissions of NFS operations, {_FROM}; transmissions minus operations are retransmissions.",
               labels=_OP, source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_timeouts_total", "counter",
               f"Major timeouts of NFS operations (the server did not answer within the mount's timeo), {_FROM}.",
               labels=_OP, source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_errors_total", "counter",
               f"NFS operations that completed with an error status (a LOOKUP of a name that does not exist counts), {_FROM}; absent before Linux 5.3, which did not count them.",
               labels=_OP, source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_request_bytes_total", "counter",
               f"Bytes sent for NFS operations including RPC headers, {_FROM}.",
               labels=_OP, unit="bytes", source=SOURCE, claims=_A67),
    MetricSpec("gpuwait_nfs_response_bytes_total", "counter",
               f"Bytes received in replies to NFS operations including RPC headers, {_FROM}.",
               labels=_OP, unit="bytes", source=SOURCE, claims=_A67),
    MetricSpec("gpuwait_nfs_queue_seconds_total", "counter",
               f"Seconds NFS operations waited in the client before being sent (slot table full, connection down), {_FROM}.",
               labels=_OP, unit="seconds", source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_rtt_seconds_total", "counter",
               f"Seconds from sending NFS operations to receiving their replies (network and server), {_FROM}.",
               labels=_OP, unit="seconds", source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_execute_seconds_total", "counter",
               f"Seconds from starting NFS operations to completing them, queueing and retransmissions included, {_FROM}.",
               labels=_OP, unit="seconds", source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_read_bytes_total", "counter",
               "Bytes applications read from files of the mount, through the page cache (io=buffered) or with O_DIRECT (io=direct), from the bytes line of mountstats.",
               labels=("mount", "io"), unit="bytes", source=SOURCE, claims=_A67),
    MetricSpec("gpuwait_nfs_write_bytes_total", "counter",
               "Bytes applications wrote to files of the mount, through the page cache (io=buffered) or with O_DIRECT (io=direct), from the bytes line of mountstats.",
               labels=("mount", "io"), unit="bytes", source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_server_read_bytes_total", "counter",
               "File data fetched from the server by READ operations; less than gpuwait_nfs_read_bytes_total when the page cache served part of the reads.",
               labels=("mount",), unit="bytes", source=SOURCE, claims=_A67),
    MetricSpec("gpuwait_nfs_server_write_bytes_total", "counter",
               "File data sent to the server by WRITE operations.",
               labels=("mount",), unit="bytes", source=SOURCE, claims=_A6),
    MetricSpec("gpuwait_nfs_window_operations_per_second", "gauge",
               "NFS operations completed per second, per mount and operation.",
               labels=_OP, source=SOURCE, claims=_A67, window=True),
    MetricSpec("gpuwait_nfs_window_execute_mean_seconds", "gauge",
               "Mean time from start to completion of one NFS operation (client queue, network, server), per mount and operation; absent when the window saw none.",
               labels=_OP, unit="seconds", source=SOURCE, claims=_A6, window=True),
    MetricSpec("gpuwait_nfs_window_metadata_ratio", "gauge",
               "Share of a mount's NFS operations that were GETATTR, LOOKUP, ACCESS or OPEN (metadata, no file data); near 1 means many small files rather than large sequential reads.",
               labels=("mount",), unit="ratio", source=SOURCE, claims=_A67, window=True),
)


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
