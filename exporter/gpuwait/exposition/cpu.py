"""Metrics of the cpu collector."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors import CollectorSpec, Sample, Snapshot, SourceSpec
from gpuwait.config import Settings
from gpuwait.sources.base import HostPaths
from gpuwait.sources.cpu import CpuData, CpuSource
from gpuwait.stats import cpu as cpu_stats


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    reading, stats = snapshots["cpu"]
    if reading is not None:
        data: CpuData = reading.data
        for cpu, modes in data.cores.items():
            for mode, seconds in modes.items():
                yield Sample("gpuwait_cpu_seconds_total", (cpu, mode), seconds)
        yield Sample("gpuwait_procs_running", (), data.procs_running)
        yield Sample("gpuwait_procs_blocked", (), data.procs_blocked)
    if stats is not None:
        for cpu, ratio in stats.busy_ratio.items():
            yield Sample("gpuwait_cpu_window_busy_ratio", (cpu,), ratio)
        yield Sample("gpuwait_cpu_window_busy_mean_ratio", (), stats.busy_mean_ratio)
        yield Sample("gpuwait_cpu_window_busy_max_ratio", (), stats.busy_max_ratio)
        yield Sample("gpuwait_cpu_window_saturated_cores", (), stats.saturated_cores)
        yield Sample("gpuwait_procs_window_running_mean", (), stats.procs_running_mean)
        yield Sample("gpuwait_procs_window_running_max", (), stats.procs_running_max)
        yield Sample("gpuwait_procs_window_blocked_mean", (), stats.procs_blocked_mean)
        yield Sample("gpuwait_procs_window_blocked_max", (), stats.procs_blocked_max)


COLLECTOR = CollectorSpec(
    name="cpu",
    help="Per-core CPU time, run queue and saturation (A2, A3).",
    sources=(SourceSpec("cpu", lambda s: CpuSource(HostPaths.from_settings(s)), cpu_stats.columns, cpu_stats.summarize, payload=CpuData),),
    expose=expose,
)
