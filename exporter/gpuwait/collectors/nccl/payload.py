"""The ``nccl`` source's Reading payload: what NCCL Inspector wrote since the previous read,
aggregated per (communicator, rank) so that a Reading stays bounded whatever the collective
rate. The fields after ``timing_source`` and after ``malformed`` extend the documented trace
payload and have defaults, so a trace written without them still decodes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NcclRank:
    """One rank of one communicator in one process, with the operations of one kind
    (collectives, or point-to-point sends and receives)."""

    #: the communicator hash (JSON header.id, Prometheus comm_id); the communicator's name
    #: where the file gives only that (Prometheus buckets of NCCL 2.30 and later)
    comm: str
    #: -1 where the file does not give it (Prometheus buckets)
    rank: int
    n_ranks: int
    n_nodes: int | None
    #: the pid the process wrote, in its own pid namespace; 0 where the file does not give it
    pid: int
    hostname: str
    #: the CUDA device ordinal the process used, when the file gives it (gpu_device_id)
    device: int | None
    #: operations completed since the previous read; None for Prometheus-mode files, which
    #: give no counts (the sums below are then their latest gauges, taken once)
    collectives: int | None
    #: sums over those operations, in seconds and bytes
    exec_seconds: float
    max_exec_seconds: float
    msg_bytes: float
    #: bus bandwidth times execution time, so that bus_bytes / exec_seconds is the bandwidth
    bus_bytes: float
    #: the sequence number and the write time (wall clock, seconds since the epoch) of the
    #: latest completed operation seen; kept across reads
    last_seq: int | None
    last_unix: float | None
    #: kernel_gpu | kernel_cpu | collective_cpu, of the latest operation
    timing_source: str = ""
    #: "collective" or "p2p"
    kind: str = "collective"
    comm_name: str = ""
    #: the GPU's UUID as NVML spells it ("GPU-..."), when the file names the device (the
    #: Prometheus files are named after it)
    device_uuid: str = ""
    #: cumulative since the exporter first saw the rank, for counters: None with
    #: ``collectives``
    collectives_total: int | None = None
    exec_seconds_total: float = 0.0
    msg_bytes_total: float = 0.0
    bus_bytes_total: float = 0.0


@dataclass(frozen=True, slots=True)
class NcclData:
    ranks: tuple[NcclRank, ...] = ()
    #: dump files seen this read
    files: int = 0
    bytes_read: int = 0
    #: lines skipped (partial last lines are kept for the next read, not counted)
    malformed: int = 0
    #: the wall clock (seconds since the epoch) at the read: ``read_unix - last_unix`` is how
    #: long before the read a rank's latest operation completed, on any clock the Reading is
    #: replayed on
    read_unix: float | None = None
    #: bytes passed over unread because the files grew faster than the read budget
    skipped_bytes: int = 0
    #: records of a format version that is not read
    unsupported: int = 0
    #: cumulative since the exporter started, for counters
    bytes_read_total: int = 0
    malformed_total: int = 0
    skipped_bytes_total: int = 0
    unsupported_total: int = 0
    #: ranks dropped because collector.nccl.max-ranks were tracked already
    evicted_total: int = 0
