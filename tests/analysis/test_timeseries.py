import math
import random

import pytest

from gpuwait.analysis.timeseries import (
    Grid,
    autocorrelation,
    dominant_period,
    grid,
    interval_rates_at,
    pearson,
    sample_and_hold,
)

NAN = math.nan


def square_wave(n, period_samples, duty, high=1.0, low=0.0, phase=0):
    return [high if ((i + phase) % period_samples) < duty * period_samples else low for i in range(n)]


def test_a_series_shared_on_a_grid_is_worked_out_once_per_key_and_source():
    g = Grid([0.0, 0.1], 0.1)
    made = []

    def make(value):
        made.append(value)
        return [value, value]

    first, second = object(), object()
    assert g.shared("rate", first, lambda: make(1.0)) == [1.0, 1.0]
    assert g.shared("rate", first, lambda: make(2.0)) == [1.0, 1.0]
    # Another view of the next pass, or another series of the same view: their own.
    assert g.shared("rate", second, lambda: make(3.0)) == [3.0, 3.0]
    assert g.shared("other", first, lambda: make(4.0)) == [4.0, 4.0]
    assert made == [1.0, 3.0, 4.0]
    # A new grid (the next pass) starts afresh.
    assert Grid([0.0, 0.1], 0.1).shared("rate", first, lambda: make(5.0)) == [5.0, 5.0]


def test_grid_is_inclusive_and_even():
    assert grid(0.0, 1.0, 0.25) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert grid(1.0, 0.0, 0.1) == []
    with pytest.raises(ValueError):
        grid(0, 1, 0)


def test_sample_and_hold_respects_max_age_and_skips_nan():
    times = [0.0, 1.0, 2.0]
    values = [10.0, NAN, 30.0]
    held = sample_and_hold(times, values, [-0.5, 0.0, 0.5, 1.5, 2.0, 2.4, 3.5], max_age=1.0)
    assert math.isnan(held[0])
    assert held[1:3] == [10.0, 10.0]
    assert math.isnan(held[3])  # 10.0 is 1.5 s old and the 1.0 sample is missing
    assert held[4:6] == [30.0, 30.0]
    assert math.isnan(held[6])


def test_interval_rates_at_uses_covering_interval_and_skips_resets():
    times = [0.0, 0.1, 0.2, 0.3, 0.4]
    counter = [0.0, 10.0, 30.0, 5.0, 15.0]  # reset between 0.2 and 0.3
    rates = interval_rates_at(times, counter, [0.05, 0.1, 0.25, 0.35, 0.45], max_gap=0.5)
    assert rates[0] == pytest.approx(100.0)
    assert rates[1] == pytest.approx(200.0)
    assert math.isnan(rates[2])
    assert rates[3] == pytest.approx(100.0)
    assert math.isnan(rates[4])  # nothing after the last sample


def test_interval_rates_at_wraps_with_modulus():
    rates = interval_rates_at([0.0, 1.0], [2**32 - 10, 20.0], [0.5], max_gap=2, modulus=2**32)
    assert rates == [30.0]


def test_pearson_known_answers():
    xs = [float(i) for i in range(50)]
    assert pearson(xs, [2 * x + 1 for x in xs]) == pytest.approx(1.0)
    assert pearson(xs, [-x for x in xs]) == pytest.approx(-1.0)
    assert pearson(xs, [1.0] * 50) is None
    assert pearson([1.0, NAN, 3.0, 4.0], [1.0, 5.0, 3.0, 4.0]) == pytest.approx(1.0)


def test_pearson_of_independent_noise_is_small():
    rng = random.Random(7)
    xs = [rng.random() for _ in range(600)]
    ys = [rng.random() for _ in range(600)]
    assert abs(pearson(xs, ys)) < 0.15


def test_autocorrelation_starts_at_one():
    r = autocorrelation(square_wave(100, 10, 0.5), 20)
    assert r[0] == pytest.approx(1.0)
    assert r[10] > 0.8
    assert r[5] < -0.8


@pytest.mark.parametrize("period,duty", [(10, 0.5), (25, 0.8), (7, 0.3), (50, 0.9)])
def test_dominant_period_of_square_wave(period, duty):
    found = dominant_period(square_wave(600, period, duty), step=0.1)
    assert found is not None
    seconds, strength = found
    assert seconds == pytest.approx(period * 0.1, rel=0.05)
    assert strength > 0.8


def test_dominant_period_survives_noise():
    rng = random.Random(3)
    values = [v + rng.gauss(0, 0.15) for v in square_wave(600, 20, 0.7)]
    seconds, strength = dominant_period(values, step=0.1)
    assert seconds == pytest.approx(2.0, rel=0.05)
    assert 0.4 < strength < 1.0


def test_dominant_period_of_noise_and_ramps_is_weak_or_none():
    rng = random.Random(11)
    noise = [rng.random() for _ in range(600)]
    found = dominant_period(noise, step=0.1)
    assert found is None or found[1] < 0.3
    assert dominant_period([i / 600 for i in range(600)], step=0.1) is None
    assert dominant_period([1.0] * 600, step=0.1) is None
    assert dominant_period([1.0, 0.0], step=0.1) is None


def test_period_must_repeat_min_cycles():
    # One slow cycle in the window is not a periodic pattern.
    assert dominant_period(square_wave(600, 400, 0.5), step=0.1) is None
