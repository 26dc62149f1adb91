"""Every GPU of every scenario has an argued, cited truth, and the set covers every cause
with steady and onset scenarios."""

import pytest

from evaluation.scenarios import all_scenarios, check_failures, select
from evaluation.sources import CITATIONS
from evaluation.truth import VERDICTS

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
