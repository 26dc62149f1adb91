"""Metrics of the workload collector: what instrumented loops report (A8, A13)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors.workload.payload import WorkloadData
from gpuwait.collectors.workload.window import WorkloadStats
from gpuwait.core.config import Settings
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import Sample, Snapshot

SOURCE = "workload"
OWNER = ("owner", "kind")

METRICS = (
    MetricSpec("gpuwait_workload_processes", "gauge",
               "Processes of the owner whose loops report their timing (gpuwait.workload) at the latest read of the spool.",
               labels=OWNER, source=SOURCE, claims=("A8", "A13")),
    MetricSpec("gpuwait_workload_window_data_wait_ratio", "gauge",
               "Share of the owner's instrumented loop time spent waiting for the next batch: the direct measure of a data-bound job.",
               labels=OWNER, unit="ratio", source=SOURCE, claims=("A8",), window=True),
    MetricSpec("gpuwait_workload_window_compute_ratio", "gauge",
               "Share of the owner's instrumented loop time spent computing (the loop body outside data wait and communication).",
               labels=OWNER, unit="ratio", source=SOURCE, claims=("A8",), window=True),
    MetricSpec("gpuwait_workload_window_comm_ratio", "gauge",
               "Share of the owner's instrumented loop time spent in marked communication (collectives, parameter exchange).",
               labels=OWNER, unit="ratio", source=SOURCE, claims=("A8", "A12"), window=True),
    MetricSpec("gpuwait_workload_window_step_seconds", "gauge",
               "Loop time per step of the owner's processes (data wait, compute and communication together).",
               labels=OWNER, unit="seconds", source=SOURCE, claims=("A1", "A8"), window=True),
    MetricSpec("gpuwait_workload_window_steps_per_second", "gauge",
               "Steps (or inference batches) per second, summed over the owner's processes.",
               labels=OWNER, source=SOURCE, claims=("A1", "A13"), window=True),
    MetricSpec("gpuwait_workload_window_samples_per_second", "gauge",
               "Samples per second, summed over the owner's processes: the throughput.",
               labels=OWNER, source=SOURCE, claims=("A1",), window=True),
    MetricSpec("gpuwait_workload_window_requests_per_second", "gauge",
               "Requests per second an inference owner accepted; low load, not a fault, when it is low.",
               labels=OWNER, source=SOURCE, claims=("A1", "A13"), window=True),
    MetricSpec("gpuwait_workload_window_throughput_drop_ratio", "gauge",
               "How far the throughput over the latest collector.workload.recent fell below the owner's rate over the rest of the window (0: no drop); the impact evidence for alerts.",
               labels=OWNER, unit="ratio", source=SOURCE, claims=("A1",), window=True),
)


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    reading, stats = snapshots["workload"]
    if reading is not None:
        data: WorkloadData = reading.data
        counts: dict[tuple[str, str], int] = {}
        for owned in data.records:
            key = (owned.owner, owned.record.kind)
            counts[key] = counts.get(key, 0) + 1
        for labels, count in sorted(counts.items()):
            yield Sample("gpuwait_workload_processes", labels, count)
    if stats is not None:
        s: WorkloadStats = stats
        for owner, w in s.owners.items():
            labels = (owner, w.kind)
            yield Sample("gpuwait_workload_window_data_wait_ratio", labels, w.data_wait_ratio)
            yield Sample("gpuwait_workload_window_compute_ratio", labels, w.compute_ratio)
            yield Sample("gpuwait_workload_window_comm_ratio", labels, w.comm_ratio)
            yield Sample("gpuwait_workload_window_step_seconds", labels, w.step_seconds)
            yield Sample("gpuwait_workload_window_steps_per_second", labels, w.steps_per_second)
            yield Sample("gpuwait_workload_window_samples_per_second", labels, w.samples_per_second)
            yield Sample("gpuwait_workload_window_requests_per_second", labels, w.requests_per_second)
            yield Sample("gpuwait_workload_window_throughput_drop_ratio", labels, w.throughput_drop_ratio)
