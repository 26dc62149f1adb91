"""Instrumented loops in the verdict: the simulated job's ranks report their timing as
gpuwait.workload does, through the real record format, collector and analysis."""

import pytest

from gpuwait.core.registry import registry
from gpuwait.core.registry import resolve
from gpuwait.simulate.model import SCENARIOS
from gpuwait.simulate.table import run

INSTRUMENTED = ("data_pipeline", "storage", "straggler", "network_allreduce", "low_load_inference", "healthy")


def settings(*args):
    registry()
    return resolve(list(args))[0]


@pytest.fixture(scope="module")
def outcomes():
    s = settings()
    return {name: run(SCENARIOS[name].with_params(workload=1), s) for name in INSTRUMENTED}


@pytest.mark.parametrize("name", INSTRUMENTED)
def test_instrumented_loops_give_the_same_verdict(outcomes, name):
    outcome = outcomes[name]
    assert {g.verdict for g in outcome.affected()} == {outcome.scenario.expected}


def test_the_loops_numbers_reach_the_verdict_inputs(outcomes):
    result = outcomes["data_pipeline"].result
    assert all(g.demand for g in result.gpus)


def test_a_reported_data_wait_alone_is_evidence_of_a_data_wait():
    # Without the host-side evidence (the owner's CPU use is deemed too small to blame a
    # saturated core on it), only the loop's own account can name the data pipeline.
    blind = settings("--verdict.cpu.owner-cores=1000")
    scenario = SCENARIOS["data_pipeline"]
    uninstrumented = run(scenario, blind)
    instrumented = run(scenario.with_params(workload=1), blind)
    assert {g.verdict for g in uninstrumented.affected()} == {"insufficient_work"}
    assert {g.verdict for g in instrumented.affected()} == {"data_pipeline"}
    for g in instrumented.affected():
        assert g.attribution.wait_ratio["data_pipeline"] == pytest.approx(0.5, abs=0.05)


def test_a_reported_data_wait_with_storage_evidence_is_storage(outcomes):
    for g in outcomes["storage"].affected():
        assert g.attribution.wait_ratio["storage"] > 0.4
        assert g.attribution.wait_ratio["data_pipeline"] < 0.05


def test_an_inference_server_with_few_requests_has_no_demand(outcomes):
    for g in outcomes["low_load_inference"].result.gpus:
        assert not g.demand
        assert g.verdict == "none"
