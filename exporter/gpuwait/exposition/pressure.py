"""Metrics of the pressure collector."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors import CollectorSpec, Sample, Snapshot, SourceSpec
from gpuwait.config import Settings
from gpuwait.sources.base import HostPaths
from gpuwait.sources.pressure import PressureData, PressureSource
from gpuwait.stats import pressure as pressure_stats


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    reading, stats = snapshots["pressure"]
    if reading is not None:
        data: PressureData = reading.data
        for labels, seconds in data.stalled_seconds.items():
            yield Sample("gpuwait_pressure_stalled_seconds_total", labels, seconds)
    if stats is not None:
        for labels, ratio in stats.stalled_ratio.items():
            yield Sample("gpuwait_pressure_window_stalled_ratio", labels, ratio)
        for labels, ratio in stats.stalled_max_ratio.items():
            yield Sample("gpuwait_pressure_window_stalled_max_ratio", labels, ratio)


COLLECTOR = CollectorSpec(
    name="pressure",
    help="Pressure stall information: time tasks waited for CPU, IO and memory (A2, A6).",
    sources=(SourceSpec("pressure", lambda s: PressureSource(HostPaths.from_settings(s)),
                        pressure_stats.columns, pressure_stats.summarize, payload=PressureData),),
    expose=expose,
)
