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


def _loop_report(data_wait: float):
    from gpuwait.collectors.workload.window import OwnerWorkload
    return OwnerWorkload(owner="job", kind="training", processes=1, data_wait_ratio=data_wait,
                         compute_ratio=1 - data_wait, comm_ratio=0.0, step_seconds=1.0, steps_per_second=1.0,
                         samples_per_second=0.0, requests_per_second=0.0, throughput_drop_ratio=None)


def test_a_reported_data_wait_confirms_the_hosts_reading_instant_by_instant():
    # Reads stalled in a few idle instants (owner-scoped, direct), a core busy in many more
    # (only compatible with a decoder): alone, the host already names storage. The loop's
    # report that it waited for data must not turn that over because the busy core spans
    # more instants; at the instants without host evidence it goes to the stronger side.
    from gpuwait.analysis.attribution import DIRECT, HOST, INFERRED, attribute, verdict
    from gpuwait.analysis.evidence import workload
    n = 100
    idle = [1.0 if i % 2 else 0.0 for i in range(n)]
    storage = [DIRECT if i % 2 and i < 40 else 0.0 for i in range(n)]
    cpu = [INFERRED if i % 2 and i < 70 else 0.0 for i in range(n)]
    evidence = {"storage": storage, "data_pipeline": cpu}
    demand, throttled = [True] * n, [False] * n
    alone = attribute(idle, evidence, demand, throttled)
    reported = attribute(idle, workload.with_data_wait(evidence, idle, _loop_report(0.5), settings()), demand, throttled)
    assert verdict(alone) == "storage"
    assert verdict(reported) == "storage"
    assert reported.wait_ratio["storage"] >= alone.wait_ratio["storage"]
    assert reported.wait_ratio["insufficient_work"] < alone.wait_ratio["insufficient_work"]
    # The look-alike: the busy core is where the stalls are; the report makes it the pipeline.
    decoder = {"storage": [HOST if x else 0.0 for x in storage], "data_pipeline": [DIRECT if x else 0.0 for x in cpu]}
    assert verdict(attribute(idle, workload.with_data_wait(decoder, idle, _loop_report(0.5), settings()),
                             demand, throttled)) == "data_pipeline"


def test_a_loop_that_found_no_data_wait_contradicts_inferred_input_evidence():
    # A server whose loop times its wait for the next batch at zero, beside a saturated
    # core (its own sync spin or another tenant): the host's inference is dropped and the
    # idle time is the server's lack of work. A quota that throttles the owner starves the
    # thread launching the kernels too, outside next(): that direct evidence stands.
    from gpuwait.analysis.attribution import DIRECT, INFERRED, HOST, attribute, verdict
    from gpuwait.analysis.evidence import workload
    n = 100
    idle = [1.0 if i % 2 else 0.0 for i in range(n)]
    demand, throttled = [True] * n, [False] * n
    spin = {"storage": [HOST] * n, "data_pipeline": [INFERRED] * n}
    assert verdict(attribute(idle, dict(spin), demand, throttled)) == "data_pipeline"
    none_waited = workload.with_data_wait(spin, idle, _loop_report(0.0), settings())
    assert verdict(attribute(idle, none_waited, demand, throttled)) == "insufficient_work"
    quota = {"data_pipeline": [DIRECT] * n}
    assert verdict(attribute(idle, workload.with_data_wait(quota, idle, _loop_report(0.0), settings()),
                             demand, throttled)) == "data_pipeline"
    # A loop that does wait for data keeps the host's inference.
    assert verdict(attribute(idle, workload.with_data_wait(spin, idle, _loop_report(0.5), settings()),
                             demand, throttled)) == "data_pipeline"


def _server_report(loop_ratio: float, rate: float = 8.0):
    from gpuwait.collectors.workload.window import OwnerWorkload
    return OwnerWorkload(owner="svc", kind="inference", processes=1, data_wait_ratio=0.0, compute_ratio=1.0,
                         comm_ratio=0.0, step_seconds=None, steps_per_second=rate, samples_per_second=rate,
                         requests_per_second=rate, throughput_drop_ratio=None, loop_ratio=loop_ratio)


def test_a_servers_wait_for_requests_explains_as_much_of_its_gpus_idle_time():
    from gpuwait.analysis.attribution import PAUSE, attribute, verdict
    from gpuwait.analysis.evidence import workload
    # Poisson requests of 60 ms GPU work at 8/s: the server is in its loop half the time and
    # the GPU idles half the time, in whole instants (no request queued) and partial ones.
    idle = ([1.0] * 4 + [0.0] * 4 + [0.5] * 2) * 10
    no_request = workload.between_requests(idle, _server_report(loop_ratio=0.5))
    got = attribute(idle, {PAUSE: no_request}, [True] * 100, [False] * 100)
    assert got.wait_ratio["none"] == pytest.approx(0.5) and got.wait_ratio["insufficient_work"] == 0.0
    assert verdict(got) == "none"
    # Batch-1 requests launched by a thread busy 70 % of the time: the GPU idles 80 %, most of
    # it while the server works; that part is idle with demand.
    idle = [1.0] * 80 + [0.0] * 20
    no_request = workload.between_requests(idle, _server_report(loop_ratio=0.7, rate=150.0))
    got = attribute(idle, {PAUSE: no_request}, [True] * 100, [False] * 100)
    assert got.wait_ratio["none"] == pytest.approx(0.3) and got.wait_ratio["insufficient_work"] == pytest.approx(0.5)
    assert verdict(got) == "insufficient_work"
    # A training loop's time outside its loop says nothing about requests.
    assert workload.between_requests(idle, _loop_report(0.0)) is None
