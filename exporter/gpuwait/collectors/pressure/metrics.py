"""Metrics of the pressure collector."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors.pressure.payload import PressureData
from gpuwait.core.config import Settings
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import Sample, Snapshot

SOURCE = "pressure"
_CLAIMS = ("A2", "A6")
_LABELS = ("resource", "scope")

METRICS = (
    MetricSpec("gpuwait_pressure_stalled_seconds_total", "counter",
               "Seconds tasks were stalled waiting for the resource, from /proc/pressure (PSI);"
               " scope some: at least one task stalled, full: all non-idle tasks stalled at once."
               " cpu has no full series, the kernel leaves it undefined for the whole system.",
               labels=_LABELS, unit="seconds", source=SOURCE, claims=_CLAIMS),
    MetricSpec("gpuwait_pressure_window_stalled_ratio", "gauge",
               "Fraction of the window tasks were stalled waiting for the resource.",
               labels=_LABELS, unit="ratio", source=SOURCE, claims=_CLAIMS, window=True),
    MetricSpec("gpuwait_pressure_window_stalled_max_ratio", "gauge",
               "Largest stalled fraction of any one sample interval in the window: short stalls"
               " that the window mean and the kernel's avg10 smooth away.",
               labels=_LABELS, unit="ratio", source=SOURCE, claims=_CLAIMS, window=True),
)


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
