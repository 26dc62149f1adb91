"""Metrics of the cpu collector: declared once here (the catalog assembles them) and mapped
from the latest reading and the window statistics."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.core.metric import MetricSpec
from gpuwait.collectors.cpu.payload import CpuData
from gpuwait.core.config import Settings
from gpuwait.core.plugin import Sample, Snapshot

SOURCE = "cpu"
_A23 = ("A2", "A3")

METRICS = (
    MetricSpec("gpuwait_cpu_seconds_total", "counter",
               "Seconds each core spent in each mode, from /proc/stat.",
               labels=("cpu", "mode"), unit="seconds", source=SOURCE, claims=_A23),
    MetricSpec("gpuwait_procs_running", "gauge",
               "Runnable tasks (procs_running in /proc/stat) at the latest sample.",
               source=SOURCE, claims=_A23),
    MetricSpec("gpuwait_procs_blocked", "gauge",
               "Tasks blocked in uninterruptible IO wait (procs_blocked in /proc/stat) at the latest sample.",
               source=SOURCE, claims=("A3", "A6")),
    MetricSpec("gpuwait_cpu_window_busy_ratio", "gauge",
               "Fraction of the window each core was busy (user, nice, system, irq, softirq, steal).",
               labels=("cpu",), unit="ratio", source=SOURCE, claims=_A23, window=True),
    MetricSpec("gpuwait_cpu_window_busy_mean_ratio", "gauge",
               "Mean over all cores of the busy fraction; read it next to the maximum and the saturated count, since a mean hides one pinned core.",
               unit="ratio", source=SOURCE, claims=_A23, window=True),
    MetricSpec("gpuwait_cpu_window_busy_max_ratio", "gauge",
               "Busy fraction of the busiest core.",
               unit="ratio", source=SOURCE, claims=_A23, window=True),
    MetricSpec("gpuwait_cpu_window_saturated_cores", "gauge",
               "Cores busy at least collector.cpu.saturation-threshold (default 0.95) of the window.",
               source=SOURCE, claims=_A23, window=True),
    MetricSpec("gpuwait_procs_window_running_mean", "gauge",
               "Mean number of runnable tasks over the window's samples.",
               source=SOURCE, claims=_A23, window=True),
    MetricSpec("gpuwait_procs_window_running_max", "gauge",
               "Largest number of runnable tasks in any sample of the window.",
               source=SOURCE, claims=_A23, window=True),
    MetricSpec("gpuwait_procs_window_blocked_mean", "gauge",
               "Mean number of tasks in uninterruptible IO wait over the window's samples.",
               source=SOURCE, claims=("A3", "A6"), window=True),
    MetricSpec("gpuwait_procs_window_blocked_max", "gauge",
               "Largest number of tasks in uninterruptible IO wait in any sample of the window.",
               source=SOURCE, claims=("A3", "A6"), window=True),
)


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

