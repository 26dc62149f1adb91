"""The metric catalog: every metric gpuwait exposes is declared once, in the ``metrics``
module of the collector that serves it (``collectors/<name>/metrics.py``, the verdict's in
``analysis/metrics.py``) or, for the exporter's own health, in ``catalog/exporter.py``, and
assembled here from the registry. The exposition refuses names that are not here, and
docs/metrics.md is generated from it (``python -m gpuwait.catalog``)."""

from __future__ import annotations

from gpuwait.catalog import exporter
from gpuwait.core.metric import MetricSpec
from gpuwait.core.registry import registry

__all__ = ["MetricSpec", "CATALOG", "metric", "render_markdown"]


def _assemble() -> dict[str, MetricSpec]:
    specs: dict[str, MetricSpec] = {}
    for spec in (*exporter.METRICS, *(m for collector in registry() for m in collector.metrics)):
        if spec.name in specs:
            raise ValueError(f"metric {spec.name} declared twice")
        specs[spec.name] = spec
    return specs


CATALOG: dict[str, MetricSpec] = _assemble()


def metric(name: str) -> MetricSpec:
    return CATALOG[name]


def render_markdown() -> str:
    lines = [
        "# Metrics",
        "",
        "Generated from the metric catalog (the `metrics.py` of each collector under"
        " `exporter/gpuwait/collectors/`, `exporter/gpuwait/analysis/metrics.py` and"
        " `exporter/gpuwait/catalog/exporter.py`) by `python -m gpuwait.catalog > docs/metrics.md`;"
        " do not edit by hand.",
        "",
        "Metrics marked *window* are the exporter's own statistics over its sub-second samples"
        " (`--analysis.window`, default 60s), not values read at scrape time.",
        "Claim ids (A1-A14) refer to the method in the project's article notes.",
        "",
    ]
    by_source: dict[str, list[MetricSpec]] = {}
    for spec in CATALOG.values():
        by_source.setdefault(spec.source, []).append(spec)
    for source in sorted(by_source):
        title = "exporter (self-metrics)" if source == "exporter" else f"collector `{source}`"
        lines += [f"## {title}", "", "| metric | type | labels | claims | description |", "|---|---|---|---|---|"]
        for spec in sorted(by_source[source], key=lambda s: s.name):
            kind = spec.type + (", window" if spec.window else "")
            labels = ", ".join(f"`{label}`" for label in spec.labels) or "-"
            claims = ", ".join(spec.claims) or "-"
            lines.append(f"| `{spec.name}` | {kind} | {labels} | {claims} | {spec.help} |")
        lines.append("")
    return "\n".join(lines)
