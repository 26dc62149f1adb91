"""What the nfs source's Reading holds: per mount point, the counters of mountstats."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ByteCounters:
    #: read through the page cache by applications (read(), mmap faults)
    normal_read: int
    normal_write: int
    #: read with O_DIRECT
    direct_read: int
    direct_write: int
    #: payload actually fetched from / sent to the server by READ / WRITE operations
    server_read: int
    server_write: int
    read_pages: int
    write_pages: int


@dataclass(frozen=True, slots=True)
class OpCounters:
    """One RPC procedure of one mount, cumulative since mount; times in milliseconds."""

    ops: int
    transmissions: int
    timeouts: int
    bytes_sent: int
    bytes_received: int
    queue_ms: int
    rtt_ms: int
    execute_ms: int
    #: calls that ended with an error status; None before Linux 5.3, which did not count them
    errors: int | None


@dataclass(frozen=True, slots=True)
class NfsMountData:
    export: str
    fstype: str
    #: NFS protocol version from the mount options ("3", "4.2")
    version: str
    #: transport of the first RPC connection ("tcp", "rdma", "udp")
    protocol: str
    bytes: ByteCounters
    #: the selected operations present in this mount's statistics, counters since mount
    ops: dict[str, OpCounters]
    #: operations of METADATA_OPS and of every procedure, since mount
    metadata_ops: int
    all_ops: int


@dataclass(frozen=True, slots=True)
class NfsData:
    #: mount point -> statistics
    mounts: dict[str, NfsMountData]
    #: NFS mounts hidden under a later mount on the same mount point (not an error: only the
    #: visible one is reported)
    shadowed: int
