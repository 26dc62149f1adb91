"""Every GPU of every scenario has an argued, cited truth, and the set covers every cause
with steady and onset scenarios."""

from types import SimpleNamespace

import pytest

from evaluation.scenarios import all_scenarios, check_failures, select
from evaluation.sources import CITATIONS
from evaluation.truth import VERDICTS, Meter

SCENARIOS = sorted(all_scenarios())


def causes(table):
    return {v for t in table.values() for v in t.expected.split("|")}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_gpu_has_an_argued_truth(name):
    scenario = all_scenarios()[name]
    built = scenario.build(1)
    gpus = {g.index for g in built.node.gpus}
    tables = [built.truth] + ([built.before] if scenario.kind == "onset" else [])
    for table in tables:
        assert set(table) == gpus
        for truth in table.values():
            assert all(v in VERDICTS for v in truth.expected.split("|"))
            assert len(truth.reason) > 60 and truth.cites
            assert all(c in CITATIONS for c in truth.cites)
    if scenario.kind == "onset":
        assert 0 < scenario.onset < scenario.duration
        assert built.onset_action is not None
    assert scenario.checks, "a truth's physics is checked on the model"


def test_the_set_covers_every_cause_steady_and_at_onsets():
    steady = select(kind="steady")
    onset = select(kind="onset")
    assert len(steady) >= 24 and len(onset) >= 12
    steady_causes = set().union(*(causes(s.build(1).truth) for s in steady))
    onset_causes = set().union(*(causes(s.build(1).truth) for s in onset))
    assert steady_causes == set(VERDICTS)
    assert onset_causes == set(VERDICTS)


def test_the_truth_file_has_every_gpu_with_its_physics(short_runs):
    _, truth = short_runs("two_owners_nfs_and_healthy")
    assert [g["gpu"] for g in truth["gpus"]] == list(range(8))
    for g in truth["gpus"]:
        assert g["expected"] and g["reason"] and g["citations"][0].startswith("[")
        assert set(g["physics"]) >= {"time_budget", "kernel_residency", "idle_sample_share", "sm_active"}
        assert g["owner"]
    _, onset = short_runs("onset_straggler")
    assert 0 < onset["onset_seconds"] < onset["duration_seconds"]
    for g in onset["gpus"]:
        assert g["before"]["expected"] == "none" and g["after"]["expected"] in ("sync", "none")


def _physics(budget, reduced=0.0):
    return {"time_budget": budget, "clock_reduced_share": reduced}


def _meter_with(marks):
    meter = Meter(SimpleNamespace(jobs=[], gpus=[SimpleNamespace(index=0)]), [], onset=10.0)
    meter.seconds[0] = marks
    return meter


def test_the_impact_is_the_first_second_the_gpu_waits_more_than_before():
    # healthy: 2 % of each second loading data; from the third second after the onset 30 %
    waits = [0.02, 0.02, 0.30, 0.30, 0.30]
    marks, data = [({"compute": 0.0, "data": 0.0}, 0.0)], 0.0
    for w in waits:
        data += w
        marks.append(({"data": data}, 0.0))
    meter = _meter_with(marks)
    before, after = _physics({"compute": 0.98, "data": 0.02}), _physics({"compute": 0.7, "data": 0.3})
    assert meter.impact(0, before, after) == 2.0
    # a phase that takes less of the GPU's time after the onset is no impact
    assert meter.impact(0, after, before) == 0.0
    # a phase that grows in the window but never by a twentieth of a second within one
    crawl = [({"data": 0.03 * k}, 0.0) for k in range(6)]
    assert _meter_with(crawl).impact(0, before, after) is None


def test_reduced_clocks_are_an_impact_though_no_wait_grows():
    marks = [({"compute": float(k)}, r) for k, r in enumerate((0.0, 0.0, 0.01, 0.5, 1.5))]
    meter = _meter_with(marks)
    before, after = _physics({"compute": 1.0}), _physics({"compute": 1.0}, reduced=0.9)
    assert meter.impact(0, before, after) == 2.0
    assert meter.impact(0, before, before) == 0.0


def test_a_loaders_prepared_batches_delay_the_impact_of_page_cache_eviction(short_runs):
    # 24 workers with 2 batches in flight each hold up to 48 prepared batches; after the
    # eviction the disk delivers about 2 batches/s of the 4 the GPUs consume, so the GPUs go on
    # computing for 48 / 2 = 24 s, less what was still in flight at the onset
    scenario = select("onset_page_cache_eviction")[0]
    _, truth = short_runs("onset_page_cache_eviction", duration=scenario.duration, onset=scenario.onset)
    impacts = {g["impact_seconds"] for g in truth["gpus"]}
    assert all(15.0 <= i <= 30.0 for i in impacts), impacts
    _, capped = short_runs("onset_power_cap_lowered", duration=40.0, onset=20.0)
    assert {g["impact_seconds"] for g in capped["gpus"]} == {0.0}


def test_a_failed_physics_check_is_reported(short_runs):
    scenario = select("two_owners_nfs_and_healthy")[0]
    _, truth = short_runs("two_owners_nfs_and_healthy")
    broken = {**truth, "gpus": [{**g, "physics": {**g["physics"], "kernel_residency": -1.0}} for g in truth["gpus"]]}
    failures = check_failures(scenario, broken)
    assert any("kernel_residency = -1.0" in f for f in failures)


def test_an_unknown_scenario_is_named():
    with pytest.raises(KeyError, match="no_such_scenario"):
        select("no_such_scenario")


def test_the_documented_catalogue_matches_the_scenarios():
    from evaluation.catalogue import PAGE, catalogue

    page = PAGE.read_text()
    assert catalogue() in page, "docs/evaluation.md is stale: python3 -m evaluation.catalogue --write"
