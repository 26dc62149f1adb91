import math

import pytest

from gpuwait.analysis.attribution import DIRECT, HOST, INFERRED, VerdictRules, attribute, verdict
from gpuwait.core.facts import CAUSES


def run(idle, evidence=None, demand=True, throttled=False, start=0):
    n = len(idle)
    return attribute(idle, dict(evidence or {}), [demand] * n, [throttled] * n, start=start)


def test_busy_gpu_is_none():
    a = run([0.05] * 100)
    assert a.idle_ratio == pytest.approx(0.05)
    assert verdict(a) == "none"


def test_idle_is_fractional_and_shares_sum_to_it():
    idle = [0.1, 1.0, 0.5, 1.0, 0.1, 0.4, 0.1, 1.0, math.nan, 1.0]
    storage = [0, DIRECT, DIRECT, 0, 0, 0, 0, 0, 0, 0]
    network = [0, 0, DIRECT, DIRECT, 0, 0, 0, 0, 0, 0]
    a = run(idle, {"storage": storage, "network": network})
    assert a.samples == 9
    assert a.idle_ratio == pytest.approx(sum(x for x in idle if x == x) / 9)
    assert sum(a.wait_ratio.values()) == pytest.approx(a.idle_ratio)
    assert a.wait_ratio["storage"] == pytest.approx(1.5 / 9)  # equal strength: the method's order
    assert a.wait_ratio["network"] == pytest.approx(1.0 / 9)
    assert a.wait_ratio["insufficient_work"] == pytest.approx((0.1 * 3 + 0.4 + 2.0) / 9)
    assert set(a.wait_ratio) == set(CAUSES)


def test_stronger_evidence_wins_over_the_order():
    idle = [1.0] * 10
    a = run(idle, {"data_pipeline": [INFERRED] * 10, "network": [DIRECT] * 10})
    assert verdict(a) == "network"
    b = run(idle, {"data_pipeline": [INFERRED] * 10, "storage": [HOST] * 10})
    assert verdict(b) == "data_pipeline"


def test_gaps_shorter_than_a_sample_still_count():
    # A loop idle 0.1 s of every 0.2 s reads about 50 % in every 1/6 s sample: never below 5 %.
    a = run([0.5] * 100, {"data_pipeline": [INFERRED] * 100})
    assert a.idle_ratio == pytest.approx(0.5)
    assert verdict(a) == "data_pipeline"


def test_idle_without_evidence_depends_on_demand():
    idle = [1.0] * 50 + [0.0] * 50
    assert verdict(run(idle, demand=True)) == "insufficient_work"
    assert verdict(run(idle, demand=False)) == "none"


def test_checkpoint_pause_is_none():
    idle = [1.0] * 40 + [0.0] * 60
    a = run(idle, {"checkpoint": [DIRECT] * 100, "storage": [DIRECT] * 100})
    assert a.wait_ratio["none"] == pytest.approx(0.4)
    assert verdict(a) == "none"


def test_weak_cause_is_not_named():
    idle = [1.0] * 60 + [0.0] * 40
    a = run(idle, {"network": [DIRECT] * 10 + [0.0] * 90})
    assert verdict(a) == "insufficient_work"
    assert verdict(a, VerdictRules(min_cause_share=0.9)) == "none"


def test_throttled_when_busy_under_clock_limits():
    assert verdict(run([0.03] * 100, throttled=True)) == "throttled"
    assert verdict(run([0.03] * 100, throttled=False)) == "none"


def test_short_idle_is_computing():
    idle = [1.0] * 5 + [0.0] * 95
    assert verdict(run(idle, {"storage": [DIRECT] * 100})) == "none"


def test_start_leaves_out_the_earlier_instants():
    idle = [0.0] * 80 + [1.0] * 20
    a = run(idle, {"storage": [DIRECT] * 100}, start=80)
    assert a.samples == 20 and a.idle_ratio == 1.0
    assert verdict(a) == "storage"


def test_no_samples():
    a = run([math.nan] * 10)
    assert a.samples == 0
    assert verdict(a) == "none"


def test_idle_under_a_resident_kernel_is_no_upstream_wait():
    # Kernels too small to keep the SMs busy, resident 90 % of each instant: a busy core next to
    # them (a decoder, or the very thread that launches them) explains only the 10 % with no
    # kernel at all; the rest is work too small for the GPU (A4).
    idle = [1.0] * 100
    resident = [0.9] * 100
    a = attribute(idle, {"data_pipeline": [INFERRED] * 100, "storage": [DIRECT] * 100}, [True] * 100, [False] * 100,
                  resident=resident)
    assert a.idle_ratio == pytest.approx(1.0)
    assert a.wait_ratio["storage"] == pytest.approx(0.1)
    assert a.wait_ratio["insufficient_work"] == pytest.approx(0.9)
    assert verdict(a) == "insufficient_work"
    # The look-alike: a collective waiting inside its kernel is a resident wait, and the
    # network or a peer explains it.
    b = attribute(idle, {"data_pipeline": [INFERRED] * 100, "sync": [INFERRED] * 100}, [True] * 100, [False] * 100,
                  resident=resident)
    assert b.wait_ratio["sync"] == pytest.approx(0.9)
    assert b.wait_ratio["data_pipeline"] == pytest.approx(0.1)  # equal strength: the method's order
    assert verdict(b) == "sync"
    # No kernel resident: the same evidence names the upstream wait.
    c = attribute(idle, {"data_pipeline": [INFERRED] * 100}, [True] * 100, [False] * 100, resident=[0.0] * 100)
    assert verdict(c) == "data_pipeline"


def test_a_resident_kernel_is_work_whatever_the_owners_demand():
    # A kernel resident on idle SMs is work the GPU has (too small for it, A4), even where the
    # owner's CPU shows no demand; the time with no kernel at all stays the owner's to explain.
    idle = [1.0] * 100
    a = attribute(idle, {}, [False] * 100, [False] * 100, resident=[0.3] * 100)
    assert a.wait_ratio["insufficient_work"] == pytest.approx(0.3)
    assert a.wait_ratio["none"] == pytest.approx(0.7)
    # No kernel resident and no demand: nothing to fix (A1).
    b = attribute(idle, {}, [False] * 100, [False] * 100, resident=[0.0] * 100)
    assert b.wait_ratio["none"] == pytest.approx(1.0)
