"""Metrics of the workload collector: what instrumented loops report (A8, A13)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors import CollectorSpec, Sample, Snapshot, SourceSpec
from gpuwait.config import Settings
from gpuwait.sources.base import HostPaths
from gpuwait.sources.workload import WorkloadData, WorkloadSource
from gpuwait.stats import workload as workload_stats
from gpuwait.stats.workload import WorkloadStats


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


def _source(settings: Settings) -> WorkloadSource:
    return WorkloadSource(HostPaths.from_settings(settings), settings["collector.workload.spool-dir"],
                          settings["collector.workload.stale-after"])


COLLECTOR = CollectorSpec(
    name="workload",
    help="Data wait, compute and communication time, step time and throughput reported by instrumented loops (A8, A13).",
    sources=(SourceSpec("workload", _source, workload_stats.columns, workload_stats.summarize, tier="slow", payload=WorkloadData),),
    expose=expose,
)
