import math

import pytest

from gpuwait.analysis.attribution import VerdictRules, attribute, verdict
from gpuwait.core.facts import CAUSES


def run(util, evidence=None, demand=True, throttled=False):
    n = len(util)
    ev = {k: v for k, v in (evidence or {}).items()}
    return attribute(util, ev, [demand] * n, [throttled] * n, idle_threshold=0.1)


def test_busy_gpu_is_none():
    a = run([0.95] * 100)
    assert a.idle_ratio == 0
    assert verdict(a) == "none"


def test_shares_sum_to_idle_fraction():
    util = [0.9, 0.0, 0.0, 0.0, 0.9, 0.0, 0.9, 0.0, math.nan, 0.0]
    storage = [False, True, True, False, False, False, False, False, False, False]
    network = [False, False, True, True, False, False, False, False, False, False]
    a = run(util, {"storage": storage, "network": network})
    assert a.samples == 9
    assert a.idle_ratio == pytest.approx(6 / 9)
    assert sum(a.wait_ratio.values()) == pytest.approx(a.idle_ratio)
    assert a.wait_ratio["storage"] == pytest.approx(2 / 9)  # storage wins the overlap
    assert a.wait_ratio["network"] == pytest.approx(1 / 9)
    assert a.wait_ratio["insufficient_work"] == pytest.approx(3 / 9)
    assert set(a.wait_ratio) == set(CAUSES)


def test_idle_without_evidence_depends_on_demand():
    util = [0.0] * 50 + [0.9] * 50
    assert verdict(run(util, demand=True)) == "insufficient_work"
    assert verdict(run(util, demand=False)) == "none"


def test_dominant_evidence_names_the_cause():
    util = [0.0, 1.0] * 50
    ev = {"data_pipeline": [True, False] * 50}
    assert verdict(run(util, ev)) == "data_pipeline"


def test_weak_cause_is_not_named():
    util = [0.0] * 60 + [1.0] * 40
    ev = {"network": [True] * 10 + [False] * 90}
    a = run(util, ev, demand=True)
    assert verdict(a) == "insufficient_work"
    assert verdict(a, VerdictRules(min_cause_share=0.9)) == "none"


def test_throttled_when_busy_under_clock_limits():
    assert verdict(run([0.97] * 100, throttled=True)) == "throttled"
    assert verdict(run([0.97] * 100, throttled=False)) == "none"


def test_short_idle_is_computing():
    util = [0.0] * 5 + [1.0] * 95
    assert verdict(run(util, {"storage": [True] * 100})) == "none"


def test_no_samples():
    a = run([math.nan] * 10)
    assert a.samples == 0
    assert verdict(a) == "none"
