"""Metrics of the nfs collector.

Series carry the mount point only; the export (server:/path), NFS version and transport are
on gpuwait_nfs_mount_info. The mount point is what a job's configuration names and stays
put when a mount is re-pointed (another server address, a failover), which would otherwise
split every counter of the mount into new series; and an export string repeated on the
~100 series of each mount costs memory in every TSDB that stores them. Join with
``* on (mount) group_left (export) gpuwait_nfs_mount_info``.
"""

from gpuwait.catalog.spec import MetricSpec

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
