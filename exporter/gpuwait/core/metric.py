"""The shape of one metric declaration."""

from __future__ import annotations

import re
from dataclasses import dataclass

METRIC_TYPES = ("gauge", "counter")
WINDOW_NOTE = (
    " Computed by the exporter from its own sub-second samples over --analysis.window,"
    " not from scrape values."
)
_NAME = re.compile(r"^gpuwait_[a-z0-9_]+$")
_LABEL = re.compile(r"^[a-z_][a-z0-9_]*$")
_CLAIM = re.compile(r"^A([1-9]|1[0-4])$")


@dataclass(frozen=True)
class MetricSpec:
    """One metric, declared once.

    ``source`` is the collector (``--collector.<name>``) that feeds it, or ``exporter`` for
    self-metrics. ``window`` marks statistics the exporter computes over its sampling window;
    their HELP text says so, because Prometheus users otherwise assume an exporter only
    passes through what it read at scrape time.
    """

    name: str
    type: str
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    source: str = "exporter"
    claims: tuple[str, ...] = ()
    window: bool = False

    def __post_init__(self) -> None:
        problems = []
        if not _NAME.match(self.name):
            problems.append("name must match gpuwait_[a-z0-9_]+")
        if self.type not in METRIC_TYPES:
            problems.append(f"type must be one of {METRIC_TYPES}")
        if (self.type == "counter") != self.name.endswith("_total"):
            problems.append("counters, and only counters, end in _total")
        if self.unit and self.unit not in self.name:
            problems.append(f"unit {self.unit!r} must appear in the name")
        if self.unit == "ratio" and not self.name.endswith("_ratio"):
            problems.append("0-1 fractions end in _ratio")
        for label in self.labels:
            if not _LABEL.match(label) or label.startswith("__"):
                problems.append(f"bad label name {label!r}")
        if len(set(self.labels)) != len(self.labels):
            problems.append("duplicate label")
        for claim in self.claims:
            if not _CLAIM.match(claim):
                problems.append(f"unknown claim id {claim!r}")
        if not self.help.strip().endswith("."):
            problems.append("help is a sentence ending in a period")
        if problems:
            raise ValueError(f"{self.name}: " + "; ".join(problems))

    @property
    def help_text(self) -> str:
        return self.help + (WINDOW_NOTE if self.window else "")

    @property
    def family_name(self) -> str:
        """prometheus_client appends _total to counter families itself."""
        return self.name[: -len("_total")] if self.type == "counter" else self.name
