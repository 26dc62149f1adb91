"""The pure window statistics of core.series, with known answers."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, strategies as st

from gpuwait.core.series import (
    burstiness,
    increase,
    interval_rates,
    maximum,
    mean,
    quantile,
    total_increase,
    window_rate,
)

NAN = math.nan


# -- series helpers ------------------------------------------------------------------------


def test_increase_plain_reset_and_wrap():
    assert increase(10.0, 15.0) == 5.0
    assert increase(15.0, 10.0) is None
    m32 = float(2**32)
    assert increase(m32 - 10, 5.0, modulus=m32) == 15.0
    # A fall from the lower half of the range is a reset (device re-plugged), not a wrap.
    assert increase(1000.0, 5.0, modulus=m32) is None


def test_interval_rates_skip_nan_and_resets_never_negative():
    times = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    values = [0.0, 10.0, NAN, 30.0, 5.0, 15.0]
    # 0->10 over 1 s, 10->30 over 2 s (NaN skipped), 30->5 reset dropped, 5->15 over 1 s.
    assert interval_rates(times, values) == [10.0, 10.0, 10.0]
    assert all(r >= 0 for r in interval_rates(times, [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]))


def test_interval_rates_with_wrap():
    m = 256.0
    assert interval_rates([0.0, 0.5], [250.0, 4.0], modulus=m) == [20.0]


def test_total_increase_and_window_rate():
    times = [0.0, 1.0, 2.0, 3.0]
    values = [100.0, 110.0, 0.0, 30.0]
    # The reset interval 1->2 is excluded from both the increase and the time it covers.
    assert total_increase(times, values) == (40.0, 2.0)
    assert window_rate(times, values) == 20.0
    assert window_rate([0.0], [1.0]) is None
    assert window_rate([0.0, 1.0], [NAN, NAN]) is None
    assert total_increase([0.0, 0.0], [1.0, 2.0]) is None


def test_mean_maximum_skip_nan():
    assert mean([1.0, NAN, 3.0]) == 2.0
    assert maximum([1.0, NAN, 3.0]) == 3.0
    assert mean([NAN]) is None and maximum([]) is None


def test_quantile_known_answers():
    vals = [4.0, 1.0, NAN, 3.0, 2.0]
    assert quantile(vals, 0.0) == 1.0
    assert quantile(vals, 1.0) == 4.0
    assert quantile(vals, 0.5) == 2.5
    assert quantile(vals, 0.9) == pytest.approx(3.7)
    assert quantile([7.0], 0.99) == 7.0
    assert quantile([NAN], 0.5) is None


def test_burstiness_known_answers():
    assert burstiness([5.0, 5.0, 5.0, 5.0]) == 0.0
    assert burstiness([0.0, 2.0]) == pytest.approx(1.0)
    # One burst in four intervals: mean 1, variance 3.
    assert burstiness([0.0, 0.0, 0.0, 4.0]) == pytest.approx(math.sqrt(3.0))
    assert burstiness([0.0, 0.0]) == 0.0
    assert burstiness([1.0]) is None
    assert burstiness([1.0, NAN]) is None


def _rates_pair_by_pair(times, values, modulus=None):
    rates, prev = [], None
    for t, v in zip(times, values):
        if v != v:
            continue
        if prev is not None and t > prev[0]:
            d = increase(prev[1], v, modulus)
            if d is not None:
                rates.append(d / (t - prev[0]))
        prev = (t, v)
    return rates


@given(steps=st.lists(st.tuples(st.sampled_from([0.1, 0.0, 0.25]),
                                st.one_of(st.floats(0, 1e9), st.just(-3.0), st.just(math.nan))), max_size=30))
def test_interval_rates_are_each_pair_s_quotient_steady_or_not(steps):
    times, values, t, v = [], [], 0.0, 0.0
    for dt, step in steps:
        t += dt
        v = step if step != step else (max(0.0, v + step) if step >= 0 else 1.0)
        times.append(t)
        values.append(v)
    assert interval_rates(times, values) == _rates_pair_by_pair(times, values)
    assert interval_rates(times, values, 2.0**32) == _rates_pair_by_pair(times, values, 2.0**32)


@given(rates=st.lists(st.one_of(st.floats(0, 1e12), st.just(math.nan)), max_size=40))
def test_burstiness_is_the_coefficient_of_variation(rates):
    vals = [r for r in rates if r == r]
    got = burstiness(rates)
    if len(vals) < 2:
        assert got is None
        return
    # The exact coefficient of variation, from exact rationals, rounded at the end: burstiness
    # sums exactly too, so it is within an ulp or two (the float formula, deviations from a
    # rounded mean, is off by 1e-10 where the spread is a billionth of the mean).
    exact = [Fraction(v) for v in vals]
    avg = sum(exact) / len(exact)
    want = 0.0 if avg <= 0 else math.sqrt(sum((v - avg) ** 2 for v in exact) / len(exact) / avg**2)
    assert got == pytest.approx(want, rel=1e-15, abs=1e-300)


@given(values=st.lists(st.floats(0, 1e12) | st.floats(0, 1e-6), min_size=2, max_size=40), data=st.data())
def test_moments_take_out_exactly_what_they_put_in(values, data):
    from gpuwait.core.series import Moments
    moments = Moments()
    for v in values:
        moments.add(v)
    kept = data.draw(st.integers(0, len(values)))
    order = data.draw(st.permutations(values))
    for v in order[kept:]:
        moments.remove(v)
    fresh = Moments()
    for v in order[:kept]:
        fresh.add(v)
    assert moments.count == fresh.count == kept
    assert repr(moments.variation()) == repr(fresh.variation())
    if kept >= 2:
        assert moments.variation() == burstiness(list(order[:kept]))


def test_an_infinite_rate_gets_the_float_formula():
    assert math.isnan(burstiness([1.0, math.inf, 2.0]))
