"""Metrics of the nccl collector: NCCL's own timing of each rank's collectives and
point-to-point operations, read from NCCL Inspector's dump files (A9, A10, A12)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors.nccl.payload import NcclData, NcclRank
from gpuwait.collectors.nccl.window import Ident, NcclStats, completion_age
from gpuwait.core.config import Settings
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import Sample, Snapshot

SOURCE = "nccl"
_CLAIMS = ("A9", "A10", "A12")
#: One series per rank of a communicator in a process, per kind of operation. ``device`` is
#: the CUDA ordinal the process used and ``uuid`` the GPU's NVML UUID, where the dump says.
RANK = ("comm", "rank", "pid", "device", "uuid", "kind")


def _rank(name: str, type: str, help: str, unit: str = "", window: bool = False) -> MetricSpec:
    return MetricSpec(name, type, help, labels=RANK, unit=unit, source=SOURCE, claims=_CLAIMS, window=window)


def _reader(name: str, type: str, help: str, unit: str = "") -> MetricSpec:
    return MetricSpec(name, type, help, unit=unit, source=SOURCE, claims=_CLAIMS)


METRICS = (
    _rank("gpuwait_nccl_operations_total", "counter",
          "Operations NCCL Inspector recorded as completed by the rank (kind collective or p2p) since the exporter first saw it; JSON mode only, and only those of messages at or above NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES."),
    _rank("gpuwait_nccl_exec_seconds_total", "counter",
          "Execution time of the rank's completed operations, timed by their kernels on the GPU (waiting for the peers included), summed.",
          unit="seconds"),
    _rank("gpuwait_nccl_message_bytes_total", "counter",
          "Message sizes of the rank's completed operations, summed.", unit="bytes"),
    _rank("gpuwait_nccl_bus_bytes_total", "counter",
          "Bus bandwidth times execution time of the rank's completed operations, summed: its rate divided by the rate of gpuwait_nccl_exec_seconds_total is NCCL's bus bandwidth.",
          unit="bytes"),
    _rank("gpuwait_nccl_last_operation_age_seconds", "gauge",
          "Seconds from the rank's latest completed operation (the time the plugin wrote it) to the exporter's latest read of the dump; it grows while a collective hangs.",
          unit="seconds"),
    _rank("gpuwait_nccl_window_bus_bandwidth_bytes_per_second", "gauge",
          "NCCL's bus bandwidth of the rank's operations over the window, weighted by their execution time (Prometheus mode: the mean of the plugin's latest bandwidth gauge).",
          unit="bytes", window=True),
    _rank("gpuwait_nccl_window_exec_ratio", "gauge",
          "Share of the window the rank's operations were running on the GPU, waits for the peers included; JSON mode only.",
          unit="ratio", window=True),
    _reader("gpuwait_nccl_ranks", "gauge",
            "Ranks (communicator, rank, process, kind of operation) tracked at the latest read of the dump directory."),
    _reader("gpuwait_nccl_dump_files", "gauge",
            "NCCL Inspector dump files found at the latest read of collector.nccl.dump-dir."),
    _reader("gpuwait_nccl_read_bytes_total", "counter",
            "Bytes read from NCCL Inspector's dump files.", unit="bytes"),
    _reader("gpuwait_nccl_malformed_lines_total", "counter",
            "Lines of the dump files (or whole Prometheus files) that were not records and were skipped."),
    _reader("gpuwait_nccl_skipped_bytes_total", "counter",
            "Bytes of the dump files passed over unread because they grew faster than collector.nccl.max-bytes-per-read allows.",
            unit="bytes"),
    _reader("gpuwait_nccl_unsupported_records_total", "counter",
            "Records of an NCCL Inspector output format version this exporter does not read, skipped."),
    _reader("gpuwait_nccl_evicted_ranks_total", "counter",
            "Ranks dropped to stay within collector.nccl.max-ranks; their series are gone."),
)


def rank_labels(rank: NcclRank) -> tuple[str, ...]:
    return _labels(rank.comm, rank.rank, rank.pid, rank.device, rank.device_uuid, rank.kind)


def _labels(comm: str, rank: int, pid: int, device: int | None, uuid: str, kind: str) -> tuple[str, ...]:
    return (comm, str(rank) if rank >= 0 else "", str(pid) if pid > 0 else "",
            "" if device is None else str(device), uuid, kind)


def _ident_labels(key: Ident) -> tuple[str, ...]:
    kind, comm, rank, pid, _hostname, uuid, device = key
    return _labels(comm, rank, pid, device, uuid, kind)


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    reading, stats = snapshots["nccl"]
    if reading is not None:
        data: NcclData = reading.data
        yield Sample("gpuwait_nccl_ranks", (), len(data.ranks))
        yield Sample("gpuwait_nccl_dump_files", (), data.files)
        yield Sample("gpuwait_nccl_read_bytes_total", (), data.bytes_read_total)
        yield Sample("gpuwait_nccl_malformed_lines_total", (), data.malformed_total)
        yield Sample("gpuwait_nccl_skipped_bytes_total", (), data.skipped_bytes_total)
        yield Sample("gpuwait_nccl_unsupported_records_total", (), data.unsupported_total)
        yield Sample("gpuwait_nccl_evicted_ranks_total", (), data.evicted_total)
        seen: set[tuple[str, ...]] = set()
        for rank in data.ranks:
            labels = rank_labels(rank)
            if labels in seen:
                continue  # two processes of two hosts that a shared directory mixes: first one wins
            seen.add(labels)
            if rank.collectives_total is not None:
                yield Sample("gpuwait_nccl_operations_total", labels, rank.collectives_total)
                yield Sample("gpuwait_nccl_exec_seconds_total", labels, rank.exec_seconds_total)
                yield Sample("gpuwait_nccl_message_bytes_total", labels, rank.msg_bytes_total)
                yield Sample("gpuwait_nccl_bus_bytes_total", labels, rank.bus_bytes_total)
            yield Sample("gpuwait_nccl_last_operation_age_seconds", labels, completion_age(data, rank))
    if stats is not None:
        s: NcclStats = stats
        seen = set()
        for key, window in s.ranks.items():
            labels = _ident_labels(key)
            if labels in seen:
                continue
            seen.add(labels)
            yield Sample("gpuwait_nccl_window_bus_bandwidth_bytes_per_second", labels, window.bus_bytes_per_second)
            yield Sample("gpuwait_nccl_window_exec_ratio", labels, window.exec_ratio)
