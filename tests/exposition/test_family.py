"""gpuwait.exposition.family: what the catalog refuses, what is left out, and the same series
as prometheus-client's families."""

from __future__ import annotations

import math

import pytest

from gpuwait.core.plugin import Sample
from gpuwait.exposition.family import FamilyBuilder, UnknownMetric


def test_a_name_outside_the_catalog_is_refused():
    with pytest.raises(UnknownMetric, match="gpuwait_not_declared"):
        FamilyBuilder().add(Sample("gpuwait_not_declared", (), 1.0))


def test_label_values_must_match_the_catalog_s_label_names_on_every_series():
    builder = FamilyBuilder()
    with pytest.raises(ValueError, match="gpuwait_source_up"):
        builder.add(Sample("gpuwait_source_up", (), 1.0))
    builder.add(Sample("gpuwait_source_up", ("cpu",), 1.0))
    with pytest.raises(ValueError, match="gpuwait_source_up"):
        builder.add(Sample("gpuwait_source_up", ("cpu", "extra"), 1.0))


def test_a_value_not_available_leaves_its_series_out_and_a_family_without_series_is_absent():
    builder = FamilyBuilder()
    builder.extend([
        Sample("gpuwait_analysis_runs_total", (), math.nan),
        Sample("gpuwait_source_up", ("cpu",), None),
        Sample("gpuwait_source_up", ("disk",), 0.0),
        Sample("gpuwait_source_up", ("nic",), math.nan),
        Sample("gpuwait_source_up", ("gpu",), 1),
    ])
    families = builder.families()
    assert [f.name for f in families] == ["gpuwait_source_up"]
    assert families[0].rows == [(("disk",), 0.0), (("gpu",), 1.0)]


def test_families_keep_the_order_of_their_first_series_and_convert_to_prometheus_client_s():
    builder = FamilyBuilder()
    builder.extend([
        Sample("gpuwait_analysis_runs_total", (), math.nan),
        Sample("gpuwait_source_reads_total", ("cpu",), 3),
        Sample("gpuwait_analysis_runs_total", (), 7),
        Sample("gpuwait_source_reads_total", ("disk",), -0.0),
    ])
    reads, runs = builder.families()
    assert (reads.name, runs.name) == ("gpuwait_source_reads", "gpuwait_analysis_runs")
    metric = reads.metric()
    assert (metric.type, metric.name) == ("counter", "gpuwait_source_reads")
    assert [(s.name, s.labels, s.value) for s in metric.samples] == [
        ("gpuwait_source_reads_total", {"source": "cpu"}, 3.0),
        ("gpuwait_source_reads_total", {"source": "disk"}, 0.0),
    ]
    assert math.copysign(1.0, metric.samples[1].value) == 1.0
