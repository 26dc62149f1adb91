"""The metric catalog against its generated docs, its own conventions, and what a real
exporter process serves with every registered collector on the fixture host."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwait.catalog import CATALOG, render_markdown
from gpuwait.core.metric import WINDOW_NOTE, MetricSpec
from gpuwait.core.registry import registry
from fixture_host import host_args, host_env
from support import REPO, ExporterProcess

DOCS = pathlib.Path(REPO) / "docs" / "metrics.md"
COLLECTORS = {c.name: c for c in registry()}

#: Suffixes that betray a non-base unit: Prometheus wants seconds, bytes and 0-1 ratios.
NON_BASE_UNITS = {"milliseconds", "microseconds", "nanoseconds", "ms", "us", "ns", "minutes", "hours",
                  "kilobytes", "megabytes", "gigabytes", "kib", "mib", "gib", "kb", "mb", "gb",
                  "bits", "percent", "percentage", "pct"}
#: prometheus_client and OpenMetrics derive these sample names; a metric must not collide with them.
RESERVED_SUFFIXES = ("_created", "_bucket", "_count", "_sum", "_gcount", "_gsum")


def test_docs_match_catalog():
    assert DOCS.exists(), "docs/metrics.md is missing: python -m gpuwait.catalog > docs/metrics.md"
    assert DOCS.read_text() == render_markdown(), (
        "docs/metrics.md is out of date; regenerate it with: python -m gpuwait.catalog > docs/metrics.md"
    )


def test_docs_list_every_metric():
    text = DOCS.read_text()
    for name in CATALOG:
        assert f"`{name}`" in text


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_spec_valid(name):
    spec = CATALOG[name]
    # Re-running the constructor's checks catches a spec mutated after import.
    dataclasses.replace(spec)
    assert spec.source == "exporter" or spec.source in COLLECTORS, (
        f"{name}: source {spec.source!r} is no registered collector"
    )
    assert not name.endswith(RESERVED_SUFFIXES), name
    assert not NON_BASE_UNITS & set(name.split("_")), f"{name}: use base units (seconds, bytes, 0-1 ratio)"
    assert "\n" not in spec.help
    if spec.source != "exporter":
        assert spec.claims, f"{name}: cite the claims (A1-A14) the metric serves"
        # Window statistics say so in their name, so a query shows it is not a raw reading. The
        # verdict's results are all analysis of the window; their names are the product's
        # vocabulary (gpuwait_gpu_verdict, gpuwait_gpu_wait_ratio) and their HELP says so.
        if spec.source == "verdict":
            assert spec.window and "_window_" not in name, name
        else:
            assert spec.window == ("_window_" in name), f"{name}: window={spec.window} but name says otherwise"
    if spec.name.endswith("_ratio"):
        assert spec.unit == "ratio", f"{name}: _ratio metrics declare unit='ratio'"
    for unit in ("seconds", "bytes"):
        if name.endswith((f"_{unit}", f"_{unit}_total")):
            assert spec.unit == unit, f"{name}: declare unit={unit!r}"


def test_spec_rejects_bad_declarations():
    good = dict(name="gpuwait_x_total", type="counter", help="Things.")
    MetricSpec(**good)
    for bad in (
        dict(good, name="node_x_total"), dict(good, type="summary"), dict(good, name="gpuwait_x"),
        dict(good, type="gauge"), dict(good, help="no period"), dict(good, claims=("A15",)),
        dict(good, labels=("cpu", "cpu")), dict(good, labels=("__name__",)), dict(good, unit="bytes"),
        dict(name="gpuwait_util", type="gauge", help="Fraction.", unit="ratio"),
    ):
        with pytest.raises(ValueError):
            MetricSpec(**bad)


def test_help_texts_unique():
    seen: dict[str, str] = {}
    for name, spec in CATALOG.items():
        assert spec.help not in seen, f"{name} and {seen.get(spec.help)} share a help text"
        seen[spec.help] = name


def test_every_collector_declares_metrics():
    declared = {spec.source for spec in CATALOG.values()}
    for name in COLLECTORS:
        assert name in declared, f"collector {name} declares no metric in the catalog"


# -- the exposition of a real process ------------------------------------------------------


def contributions(text: str) -> dict[str, set[str]]:
    """collector (or "exporter") -> catalog names with at least one sample in the text."""
    by_source: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        if family.samples and name in CATALOG:
            by_source.setdefault(CATALOG[name].source, set()).add(name)
    return by_source


WINDOW_DECLARED = {spec.source for spec in CATALOG.values() if spec.window and spec.source in COLLECTORS}


def complete(text: str) -> bool:
    by_source = contributions(text)
    return all(by_source.get(c) for c in COLLECTORS) and all(
        any(CATALOG[n].window for n in by_source.get(c, ())) for c in WINDOW_DECLARED)


@pytest.fixture(scope="module")
def exposition() -> str:
    with ExporterProcess(host_args(), env=host_env()) as exp:
        # Window statistics appear after analysis passes over at least two samples; the
        # slow tier and the GPUs' sample buffers take a little longer. The tests below say
        # what is missing if it never comes.
        deadline = time.monotonic() + 20
        text = exp.scrape_text()
        while not complete(text) and time.monotonic() < deadline:
            time.sleep(0.2)
            text = exp.scrape_text()
        return text


def test_exposition_uses_only_catalog_metrics(exposition):
    for family in text_string_to_metric_families(exposition):
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in CATALOG, f"{name} is exposed but not in the catalog"
        spec = CATALOG[name]
        assert family.type == spec.type, f"{name}: exposed as {family.type}, catalog says {spec.type}"
        assert family.documentation == spec.help_text
        for sample in family.samples:
            assert sample.name == spec.name, f"unexpected sample {sample.name} in family {family.name}"
            assert tuple(sorted(sample.labels)) == tuple(sorted(spec.labels)), (
                f"{name}: labels {sorted(sample.labels)}, catalog says {sorted(spec.labels)}"
            )


def test_window_metrics_say_so_in_help(exposition):
    for family in text_string_to_metric_families(exposition):
        name = family.name + ("_total" if family.type == "counter" else "")
        assert family.documentation.endswith(WINDOW_NOTE) == CATALOG[name].window, name


def test_every_registered_collector_contributes(exposition):
    by_source = contributions(exposition)
    missing = [c for c in COLLECTORS if not by_source.get(c)]
    assert not missing, f"collectors with no series on the fixture host: {missing}"
    for collector in WINDOW_DECLARED:
        assert any(CATALOG[n].window for n in by_source[collector]), f"{collector}: no window statistics exposed"


def test_promtool_accepts_exposition(exposition):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (.ci/run does)"
    result = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stdout + result.stderr
