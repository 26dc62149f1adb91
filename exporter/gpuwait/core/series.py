"""Pure statistics over window columns (lists of floats, NaN for missing).

Counters are turned into per-interval increases with resets skipped: a value that goes
backwards means the device was re-plugged or the counter reset, and publishing the negative
difference would invent a rate. Where a counter's width is known (``modulus``) a decrease
from the upper half of its range is taken as a wrap instead.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from itertools import islice, repeat


def increase(prev: float, cur: float, modulus: float | None = None) -> float | None:
    """The counter's increase between two reads, or None for a reset."""
    if cur >= prev:
        return cur - prev
    if modulus is not None and prev >= modulus / 2 and cur < modulus / 2:
        return cur + modulus - prev
    return None


def interval_rates(
    times: Sequence[float], values: Sequence[float], modulus: float | None = None
) -> list[float]:
    """Per-second rate over each pair of consecutive valid samples, resets skipped."""
    # ``increase`` inlined: this runs over every column of every window each analysis pass.
    rates = []
    append = rates.append
    half = modulus / 2 if modulus is not None else None
    prev_t = prev_v = None
    for t, v in zip(times, values):
        if v != v:
            continue
        if prev_v is not None and t > prev_t:
            if v >= prev_v:
                append((v - prev_v) / (t - prev_t))
            elif half is not None and prev_v >= half and v < half:
                append((v + modulus - prev_v) / (t - prev_t))
        prev_t, prev_v = t, v
    return rates


def total_increase(
    times: Sequence[float], values: Sequence[float], modulus: float | None = None
) -> tuple[float, float] | None:
    """(increase, seconds covered) summed over valid intervals, or None if there are none."""
    if len(values) >= 2 and steady(times, values):
        # No gap, reset or wrap: the sum of the increases telescopes to last minus first
        # (exactly, where the running sum would round at every step).
        return values[-1] - values[0], times[-1] - times[0]
    inc_sum = 0.0
    span = 0.0
    half = modulus / 2 if modulus is not None else None
    prev_t = prev_v = None
    for t, v in zip(times, values):
        if v != v:
            continue
        if prev_v is not None and t > prev_t:
            if v >= prev_v:
                inc_sum += v - prev_v
                span += t - prev_t
            elif half is not None and prev_v >= half and v < half:
                inc_sum += v + modulus - prev_v
                span += t - prev_t
        prev_t, prev_v = t, v
    return (inc_sum, span) if span > 0 else None


def steady(times: Sequence[float], values: Sequence[float]) -> bool:
    """Every value of a counter read (no NaN) and none going back, times strictly increasing: the usual
    window of a counter, checked at C speed (a NaN fails every comparison)."""
    return (len(times) == len(values) and all(map(operator.le, values, islice(values, 1, None)))
            and all(map(operator.lt, times, islice(times, 1, None))))


def window_rate(
    times: Sequence[float], values: Sequence[float], modulus: float | None = None
) -> float | None:
    """Mean per-second increase over the window, or None with fewer than two samples."""
    covered = total_increase(times, values, modulus)
    return covered[0] / covered[1] if covered else None


def clamp_ratio(value: float | None) -> float | None:
    """A fraction of time measured between two reads, kept in 0..1.

    A sample's time is taken before its files are read, so the kernel's interval between two
    reads can be a little longer than the measured one and the quotient come out just above
    1, which no fraction of time can be.
    """
    return None if value is None else min(1.0, max(0.0, value))


def valid(values: Sequence[float]) -> list[float]:
    # A NaN anywhere makes the sum NaN: a column with none (most) is copied at C speed.
    total = sum(values)
    if total == total:
        return list(values)
    return [v for v in values if v == v]  # NaN is the only float unequal to itself


def mean(values: Sequence[float]) -> float | None:
    vals = valid(values)
    return math.fsum(vals) / len(vals) if vals else None


def maximum(values: Sequence[float]) -> float | None:
    total = sum(values)
    if total == total:
        # No NaN: the valid values are all of them, read in place (an array is not copied).
        return max(values) if len(values) else None
    vals = [v for v in values if v == v]
    return max(vals) if vals else None


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated quantile (q in 0..1) of the valid values."""
    return _quantile_of_sorted(sorted(valid(values)), q)


def quantiles(values: Sequence[float], qs: Sequence[float]) -> list[float | None]:
    """``quantile`` of the same values at each q, sorting them once."""
    vals = sorted(valid(values))
    return [_quantile_of_sorted(vals, q) for q in qs]


def _quantile_of_sorted(vals: list[float], q: float) -> float | None:
    if not vals:
        return None
    pos = q * (len(vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def burstiness(rates: Sequence[float]) -> float | None:
    """Coefficient of variation of per-interval rates: ~0 for steady traffic, >1 for bursts."""
    vals = valid(rates)
    if len(vals) < 2:
        return None
    moments = Moments()
    try:
        for v in vals:
            moments.add(v)
    except (OverflowError, ValueError):  # an infinite rate: no exact sum, the float formula
        avg = math.fsum(vals) / len(vals)
        if avg <= 0:
            return 0.0
        deviations = list(map(operator.sub, vals, repeat(avg)))
        var = math.fsum(map(operator.mul, deviations, deviations)) / len(vals)
        return math.sqrt(var) / avg
    return moments.variation()


class Moments:
    """The count, sum and sum of squares of finite floats, exactly: each value is an integer
    times a power of two, and the sums are integers on the finest scale seen so far. A value
    is taken out as exactly as it was put in, so a window's sums can follow it value by value
    for ever without drifting (``ring.RateShape``), and the coefficient of variation is the
    exact one rounded once."""

    __slots__ = ("count", "_scale", "_sum", "_squares")

    def __init__(self) -> None:
        self.count = 0
        self._scale = 0  # the sums count units of 2**-_scale (squares: 2**-2*_scale)
        self._sum = 0
        self._squares = 0

    def _units(self, value: float) -> int:
        numerator, denominator = value.as_integer_ratio()  # OverflowError/ValueError: inf, NaN
        scale = denominator.bit_length() - 1
        if scale > self._scale:
            finer = scale - self._scale
            self._sum <<= finer
            self._squares <<= 2 * finer
            self._scale = scale
        return numerator << (self._scale - scale)

    def add(self, value: float) -> None:
        units = self._units(value)
        self._sum += units
        self._squares += units * units
        self.count += 1

    def remove(self, value: float) -> None:
        units = self._units(value)
        self._sum -= units
        self._squares -= units * units
        self.count -= 1

    def variation(self) -> float | None:
        """Standard deviation over mean (the population's); 0.0 where the mean is not
        positive, None for fewer than two values. sd/mean = sqrt(n·Σx² − (Σx)²) / Σx, whose
        square is a quotient of exact integers that Python rounds once."""
        if self.count < 2:
            return None
        if self._sum <= 0:
            return 0.0
        square = self._sum * self._sum
        return math.sqrt((self.count * self._squares - square) / square)


def added(*columns: Sequence[float]) -> list[float]:
    """Sample by sample sum of aligned columns (a link's two directions); NaN wherever any
    of them is NaN, since a sum with a part missing is not the total."""
    if not columns:
        return []
    # What sum() of each row computes (0.0 plus each part in turn), one column at a time at C
    # speed: the sign of a zero sum and every rounding are the same.
    total = map(operator.add, repeat(0.0), columns[0])
    for column in columns[1:]:
        total = map(operator.add, total, column)
    return list(total)
