"""The prometheus-client Collector: turns what the sampler holds into metric families.

It does no file I/O for sampled sources and never raises: a collector whose mapping fails
is left out of that scrape and counted in ``gpuwait_scrape_errors_total``.
"""

from __future__ import annotations

import logging
import math
import platform
import time
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuwait import __version__
from gpuwait.catalog import CATALOG
from gpuwait.core.plugin import CollectorSpec, Sample, Snapshot
from gpuwait.core.sampler import Sampler

log = logging.getLogger("gpuwait.exposition")


class UnknownMetric(KeyError):
    pass


class FamilyBuilder:
    """Groups samples into families declared by the catalog, in catalog order."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def add(self, sample: Sample) -> None:
        spec = CATALOG.get(sample.name)
        if spec is None:
            raise UnknownMetric(f"{sample.name} is not in the metric catalog")
        if len(sample.labels) != len(spec.labels):
            raise ValueError(f"{sample.name}: expected labels {spec.labels}, got {sample.labels}")
        if sample.value is None or (isinstance(sample.value, float) and math.isnan(sample.value)):
            return  # not available: the series is absent rather than NaN
        family = self._families.get(spec.name)
        if family is None:
            cls = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
            family = cls(spec.family_name, spec.help_text, labels=spec.labels)
            self._families[spec.name] = family
        family.add_metric(list(sample.labels), float(sample.value))

    def extend(self, samples: Iterable[Sample]) -> None:
        for sample in samples:
            self.add(sample)

    def families(self) -> list[Metric]:
        return list(self._families.values())


class GpuwaitCollector(Collector):
    def __init__(self, sampler: Sampler, collectors: list[CollectorSpec]) -> None:
        self.sampler = sampler
        self.collectors = collectors
        self.scrape_errors: dict[str, int] = {c.name: 0 for c in collectors}
        self._logged_failures: set[str] = set()

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            builder = FamilyBuilder()
            try:
                snapshots = {s.name: self.sampler.states[s.name].snapshot() for s in collector.sources}
                if collector.analyse is not None:
                    snapshots[collector.name] = Snapshot(None, self.sampler.analyses.get(collector.name))
                builder.extend(collector.expose(snapshots, self.sampler.settings))
            except Exception:
                self.scrape_errors[collector.name] += 1
                if collector.name not in self._logged_failures:
                    self._logged_failures.add(collector.name)
                    log.error("collector %s failed to map its data; left out of the scrape", collector.name, exc_info=True)
                continue
            yield from builder.families()
        builder = FamilyBuilder()
        builder.extend(self._self_samples())
        yield from builder.families()

    def _self_samples(self) -> Iterator[Sample]:
        yield Sample("gpuwait_build_info", (__version__, platform.python_version()), 1.0)
        for name, state in self.sampler.states.items():
            label = (name,)
            yield Sample("gpuwait_source_up", label, 1.0 if state.up else 0.0)
            yield Sample("gpuwait_source_no_data", label, 1.0 if state.no_data else 0.0)
            taken_at = state.taken_at
            if taken_at is not None and not state.timed_out:
                yield Sample("gpuwait_source_reading_age_seconds", label, max(0.0, time.monotonic() - taken_at))
            yield Sample("gpuwait_source_errors_total", label, state.errors)
            yield Sample("gpuwait_source_reads_total", label, state.reads)
            yield Sample("gpuwait_source_read_seconds_total", label, state.read_seconds)
            yield Sample("gpuwait_source_read_duration_seconds", label, state.mean_read_seconds)
            yield Sample("gpuwait_source_interval_seconds", label, state.interval)
            yield Sample("gpuwait_sampler_lag_seconds", label, state.max_lag_seconds)
            yield Sample("gpuwait_sampler_overruns_total", label, state.overruns)
            yield Sample("gpuwait_window_samples", label, state.window_samples)
        yield Sample("gpuwait_analysis_duration_seconds", (), self.sampler.analysis_seconds)
        yield Sample("gpuwait_analysis_runs_total", (), self.sampler.analysis_runs)
        for name, count in self.scrape_errors.items():
            yield Sample("gpuwait_scrape_errors_total", (name,), count)
