"""The series of one rendering, grouped by catalog metric.

A ``Family`` keeps each series as its label values, in the catalog's label order, and its
number: what the encoders in ``encoding`` write from, one %-format a line. prometheus-client's
families keep a dict of labels and a sample tuple per series, which cost more to build than
the scrape then spends writing them (bench/scrape_cost.py); they are made from a Family only
where something reads them (``Family.metric``: ``collect()``, a format written by
prometheus-client).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpuwait.catalog import CATALOG
from gpuwait.core.plugin import Sample

if TYPE_CHECKING:
    from prometheus_client.core import Metric


class UnknownMetric(KeyError):
    pass


class Family:
    """One metric's series: ``name`` as prometheus-client names the family (a counter's
    without ``_total``), ``labels`` the label names, ``rows`` (label values, number) pairs."""

    __slots__ = ("name", "type", "documentation", "labels", "rows")

    def __init__(self, name: str, type: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.type = type
        self.documentation = documentation
        self.labels = labels
        self.rows: list[tuple[tuple[str, ...], float]] = []

    def add(self, values: tuple[str, ...], number: float) -> None:
        # -0.0 is written as 0.0: the same number to Prometheus, and one text per value lets
        # the encoders keep each number's text once per encoding.
        self.rows.append((values, float(number) + 0.0))

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.type == "counter" else self.name

    def metric(self) -> Metric:
        """The same series as a prometheus-client family (the library is imported here, by
        the readers that need one: see ``encoding``)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        cls = CounterMetricFamily if self.type == "counter" else GaugeMetricFamily
        family = cls(self.name, self.documentation, labels=self.labels)
        for values, number in self.rows:
            family.add_metric(list(values), number)
        return family

    @property
    def samples(self):
        """prometheus-client's samples of the family, for readers that look at one."""
        return self.metric().samples


class FamilyBuilder:
    """Groups samples into families declared by the catalog, in the order of their first series."""

    def __init__(self) -> None:
        self._families: dict[str, Family] = {}

    def add(self, sample: Sample) -> None:
        name, values, number = sample
        family = self._families.get(name)
        if family is None:
            spec = CATALOG.get(name)
            if spec is None:
                raise UnknownMetric(f"{name} is not in the metric catalog")
            if len(values) != len(spec.labels):
                raise ValueError(f"{name}: expected labels {spec.labels}, got {values}")
            if number is None or number != number:
                return  # not available (None or NaN): the series is absent rather than NaN
            family = self._families[name] = Family(spec.family_name, spec.type, spec.help_text, spec.labels)
        elif len(values) != len(family.labels):
            raise ValueError(f"{name}: expected labels {family.labels}, got {values}")
        elif number is None or number != number:
            return
        family.rows.append((values, float(number) + 0.0))

    def extend(self, samples: Iterable[Sample]) -> None:
        add = self.add
        for sample in samples:
            add(sample)

    def families(self) -> list[Family]:
        return list(self._families.values())
