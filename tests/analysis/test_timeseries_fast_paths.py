"""The verdict's signal helpers and the window statistics they share, computed at C speed,
give the same results to the bit as the plain loops they replaced (kept below as the
reference), for series with gaps, resets, wraps, NaN, stalled or backward clocks, grids that
start before or end after the samples, and columns that share their sample times."""

from __future__ import annotations

import math
import operator
import random

from hypothesis import example, given, settings as hypothesis_settings, strategies as st

from gpuwait.analysis.evidence import network
from gpuwait.analysis import timeseries
from gpuwait.analysis.timeseries import Grid, dominant_period, interval_rates_at, pearson
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.core import series
from gpuwait.core.facts import CLOCK_EVENT_REASONS
from gpuwait.core.plugin import AnalysisInputs
from gpuwait.core.registry import registry, resolve
from gpuwait.core.ring import Column
from gpuwait.core.series import increase

NAN = math.nan


# -- the reference: the loops as they were ---------------------------------------------------
def ref_interval_rates_at(times, counter, at, max_gap, modulus=None):
    ts, vs = [], []
    for t, v in zip(times, counter):
        if v == v:
            ts.append(t)
            vs.append(v)
    rates = []
    for k in range(len(ts) - 1):
        dt = ts[k + 1] - ts[k]
        d = vs[k + 1] - vs[k]
        if d < 0:
            d = increase(vs[k], vs[k + 1], modulus)
        rates.append(d / dt if d is not None and 0 < dt <= max_gap else math.nan)
    out = []
    last = len(ts) - 1
    j = 0
    for t in at:
        while j < last and ts[j + 1] <= t:
            j += 1
        out.append(rates[j] if j < last and ts[j] <= t else math.nan)
    return out


def ref_pearson(xs, ys):
    if any(x != x for x in xs) or any(y != y for y in ys) or len(xs) != len(ys):
        pairs = [(x, y) for x, y in zip(xs, ys) if x == x and y == y]
        xs = [p[0] for p in pairs]
        ys = [p[1] for p in pairs]
    n = len(xs)
    if n < 3:
        return None
    mx = sum(xs) / n
    my = sum(ys) / n
    dx = [x - mx for x in xs]
    dy = [y - my for y in ys]
    sxx = sum(x * x for x in dx)
    syy = sum(y * y for y in dy)
    if sxx <= 1e-12 * n * max(1.0, mx * mx) or syy <= 1e-12 * n * max(1.0, my * my):
        return None
    return max(-1.0, min(1.0, sum(x * y for x, y in zip(dx, dy)) / math.sqrt(sxx * syy)))


def ref_in_waits(burst, waiting, share):
    known = [(b, w) for b, w in zip(burst, waiting) if w == w]
    if not known:
        return False
    in_bursts = [w >= 0.5 for b, w in known if b]
    if len(in_bursts) < 3:
        return False
    inside = sum(in_bursts) / len(in_bursts)
    base = sum(1 for _, w in known if w >= 0.5) / len(known)
    return inside >= share and inside - base >= network.MIN_LIFT


def ref_alignment(net, busy, waiting, start=0):
    s = net.settings
    out = []
    before = [False] * start
    busy, waiting = busy[start:], waiting[start:]
    for link, rate in net.links:
        rate = rate[start:]
        peak = ref_quantile(rate, network.PEAK_QUANTILE) or 0.0
        if peak < s[network.MIN_PEAK]:
            out.append((link, [False] * net.n))
            continue
        level = s[network.BURST_SHARE] * peak
        burst = [v == v and v >= level for v in rate]
        r = ref_pearson(busy, rate)
        aligned = (r is not None and r <= -s[network.ANTICORRELATION]) \
            or ref_in_waits(burst, waiting, s[network.BURSTS_IN_WAITS])
        out.append((network.LinkAlignment(link.link, link.kind, link.link_layer, r, aligned),
                    before + [aligned and b for b in burst]))
    return out


def ref_evidence(net, links):
    evidence = [False] * net.n
    for link, bursts in links:
        if link.aligned:
            evidence = [a or b for a, b in zip(evidence, bursts)]
    return evidence


def ref_quiet(net):
    if not net.links:
        return [False] * net.n
    floor = net.settings[network.MIN_PEAK]
    return [all(rate[i] == rate[i] and rate[i] < floor for _, rate in net.links) for i in range(net.n)]


def ref_moving(net):
    out = [0.0] * net.n
    for _, rate in net.links:
        out = [a + r for a, r in zip(out, rate)]
    return out


def ref_dominant_period(values, step, min_cycles=3):
    n = len(values)
    valid = [v for v in values if v == v]
    if len(valid) < 3:
        return None
    m = sum(valid) / len(valid)
    x = [(v - m) if v == v else 0.0 for v in values]
    denom = sum(map(operator.mul, x, x))
    if denom <= 1e-12:
        return None
    r = [sum(map(operator.mul, x, x[lag:])) / denom for lag in range(min(n // min_cycles, n - 1) + 1)]
    if len(r) < 4:
        return None
    first_zero = next((k for k in range(1, len(r)) if r[k] <= 0), None)
    if first_zero is None:
        return None
    peaks = [(k, r[k] * n / (n - k)) for k in range(first_zero + 1, len(r) - 1)
             if r[k] >= r[k - 1] and r[k] >= r[k + 1] and r[k] > 0]
    if not peaks:
        return None
    top = max(strength for _, strength in peaks)
    best_lag, best = next((k, s) for k, s in peaks if s >= 0.9 * top)
    a, b, c = r[best_lag - 1], r[best_lag], r[best_lag + 1]
    denom = a - 2 * b + c
    offset = 0.5 * (a - c) / denom if denom < 0 else 0.0
    return (best_lag + offset) * step, min(1.0, best)


def ref_quantile(values, q):
    vals = sorted(v for v in values if v == v)
    if not vals:
        return None
    pos = q * (len(vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def ref_reason_ratios(bitmasks):
    masks = [int(m) for m in bitmasks if m == m]
    if not masks:
        return {}
    return {name: sum(1 for m in masks if m & bit) / len(masks) for bit, name in CLOCK_EVENT_REASONS}


def same(a, b) -> bool:
    """Equal to the bit: repr tells -0.0 from 0.0 and every float from its neighbours, and
    NaN from nothing but NaN."""
    return repr(a) == repr(b)


# -- inputs ----------------------------------------------------------------------------------
_values = st.one_of(st.floats(-1e3, 1e12), st.just(NAN), st.just(0.0), st.just(-0.0),
                    st.just(2.0 ** 32 - 1), st.just(math.inf))


#: A counter's step between two reads; the faults appear only in the series that allow them.
_STEPS = {
    "forward": st.floats(0, 1e6),
    "reset": st.just("reset"),
    "missing": st.just("missing"),
    "wrap": st.just("wrap"),
    "infinite": st.just("infinite"),
    "still": st.just(0.0),
}


@st.composite
def sampled(draw, min_size=0, max_size=40):
    """(times, values): steady counters on an increasing clock, and counters with resets,
    missing reads, 32-bit wraps or infinities, on clocks that stall, go back or skip."""
    n = draw(st.integers(min_size, max_size))
    faults = draw(st.sets(st.sampled_from(sorted(set(_STEPS) - {"forward"}))))
    clock = draw(st.sampled_from(["regular", "jittery", "faulty"]))
    step = st.one_of(*(_STEPS[k] for k in ("forward", "forward", "forward", *sorted(faults))))
    t = draw(st.floats(0, 100))
    v = draw(st.floats(0, 1e9))
    times, values = [], []
    for _ in range(n):
        if clock == "regular":
            t += 0.1
        elif clock == "jittery":
            t += draw(st.floats(0.01, 0.4))
        else:
            t += draw(st.sampled_from([0.1, 0.1, 0.0, -0.05, 0.5, NAN]))
        move = draw(step)
        if move == "reset":
            v = draw(st.floats(0, v)) if v == v and v < math.inf else 0.0
        elif move == "wrap":
            v = draw(st.floats(0, 1e3)) if v >= 2.0 ** 31 else 2.0 ** 32 - draw(st.floats(1, 1e3))
        elif move == "infinite":
            v = math.inf
        elif move != "missing":
            v = (v if v == v else 0.0) + move
        times.append(t)
        values.append(NAN if move == "missing" else v)
    return times, values


@st.composite
def grids(draw, times):
    """Grid times around the samples: ascending (as the verdict's are, often the very times of
    another source's samples), or not at all."""
    kind = draw(st.sampled_from(["times", "even", "even", "any"]))
    if kind == "times":
        return list(times[draw(st.integers(0, 3)):])
    finite = [t for t in times if t == t] or [0.0]
    start = draw(st.floats(min(finite) - 1, max(finite) + 1))
    steps = draw(st.lists(st.sampled_from([0.1, 0.05, 0.0, 0.3]) if kind == "even" else st.floats(-0.2, 0.3),
                          max_size=50))
    at, t = [], start
    for step in steps:
        t += step
        at.append(t)
    return at


@st.composite
def rate_cases(draw):
    times, values = draw(sampled())
    return times, values, draw(grids(times)), draw(st.sampled_from([0.15, 0.3, 1.0, 15.0])), \
        draw(st.sampled_from([None, 2.0 ** 32, 2.0 ** 64]))


# -- the comparisons ---------------------------------------------------------------------------
@hypothesis_settings(max_examples=400, deadline=None)
@given(rate_cases())
def test_interval_rates_at_equals_the_loop(case):
    times, values, at, gap, modulus = case
    assert same(interval_rates_at(times, values, at, gap, modulus), ref_interval_rates_at(times, values, at, gap, modulus))


@hypothesis_settings(max_examples=200, deadline=None)
@given(st.data())
def test_grid_rates_of_columns_sharing_their_times_equal_the_loop(data):
    n = data.draw(st.integers(2, 30))
    # Two sources with as many samples each, and columns of each that share its times.
    sources = [data.draw(sampled(min_size=n, max_size=n)) for _ in range(2)]
    at = data.draw(grids(sources[0][0]))
    gap = data.draw(st.sampled_from([0.15, 0.3, 15.0]))
    g = Grid(at, 0.1)
    columns = [Column(times, values) for times, values in sources]
    columns += [Column(times, data.draw(sampled(min_size=n, max_size=n))[1]) for times, _ in sources]
    # Another counter missing the same samples as one of them: the same valid times.
    columns += [Column(times, [v + (i % 3) * i if v == v else NAN for i, v in enumerate(values)])
                for times, values in sources]
    # The grid keeps what it worked out from a column's times for the next with the same.
    for column in (*columns, *columns):
        assert same(g.rates(column, gap), ref_interval_rates_at(column.times, column.values, at, gap))


@hypothesis_settings(max_examples=400, deadline=None)
@given(rate_cases())
def test_rates_by_interval_put_on_the_grid_equal_the_loop(case):
    """A slow source's counters are judged an interval at a time and the marks put on the
    grid (analysis.evidence.storage): the interval's rate is the one each instant it covers
    would get, and an instant no interval covers gets none."""
    times, values, at, gap, modulus = case
    g = Grid(at, 0.1)
    column = Column(times, values, modulus)
    per_interval = g.interval_rates(column, gap)
    if per_interval is None:
        # Left to the rates on the grid: a missing sample, fewer than two, or times that must be walked.
        assert len(times) < 2 or not sum(values) == sum(values) or g.on_intervals(times, []) is None
        return
    assert len(per_interval) == len(times) - 1
    assert same(g.on_intervals(times, per_interval, NAN), ref_interval_rates_at(times, values, at, gap, modulus))


def test_a_grid_does_not_take_one_list_of_times_for_another():
    g = Grid([0.5, 1.5, 2.5], 1.0)
    assert g.rates(Column([0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]), 2.0) == [1.0, 1.0, 1.0]
    # Another list, equal in length and key-free: its own intervals, not the first one's.
    assert g.rates(Column([0.0, 2.0, 2.2, 3.0], [0.0, 2.0, 3.0, 3.0]), 2.0) == [1.0, 1.0, 0.0]
    # Nor where a sample is missing, whose intervals are kept by the samples that are valid.
    assert g.rates(Column([0.0, 1.0, 2.0, 3.0], [0.0, NAN, 2.0, 3.0]), 2.0) == [1.0, 1.0, 1.0]
    assert g.rates(Column([0.0, 1.8, 2.0, 3.0], [0.0, NAN, 3.0, 3.0]), 2.0) == [1.5, 1.5, 0.0]


_signal = st.one_of(st.floats(-1e6, 1e6), st.just(NAN), st.just(0.0), st.just(-0.0), st.just(1.0), st.just(math.inf),
                    st.just(-math.inf))


@hypothesis_settings(max_examples=400, deadline=None)
@given(st.lists(_signal, max_size=40), st.lists(_signal, max_size=40), st.booleans())
def test_pearson_equals_the_loop(xs, ys, equal_length):
    if equal_length:
        n = min(len(xs), len(ys))
        xs, ys = xs[:n], ys[:n]
    assert same(pearson(xs, ys), ref_pearson(xs, ys))


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(_signal, max_size=40), st.lists(st.floats(0, 1), min_size=1, max_size=4))
@example([-0.0, 1.0], [0.5])  # sum() starts from 0: a row of one -0.0 adds up to 0.0
def test_valid_quantiles_and_added_equal_the_loops(values, qs):
    assert same(series.valid(values), [v for v in values if v == v])
    assert same(series.quantiles(values, qs), [ref_quantile(values, q) for q in qs])
    assert all(same(series.quantile(values, q), ref_quantile(values, q)) for q in qs)
    halves = (values[: len(values) // 2], values[len(values) // 2:])
    for columns in ((), (values,), halves, (values, values[::-1], values)):
        assert same(series.added(*columns), [sum(row) for row in zip(*columns)])


@hypothesis_settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([0.0, 1.0, 4.0, 5.0, 8.0, 64.0, 255.0, 2.0 ** 40 + 1]), st.just(NAN)),
                max_size=60))
def test_clock_event_ratios_equal_the_loop(masks):
    assert same(gpu_window.reason_ratios(masks), ref_reason_ratios(masks))



_rate = st.one_of(st.floats(0, 1e10), st.just(NAN), st.just(0.0), st.just(1e6), st.just(2e7), st.just(5e9))
_share = st.one_of(st.floats(0, 1), st.just(NAN), st.just(0.0), st.just(0.5), st.just(1.0))


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.data())
def test_network_alignment_equals_the_loop(data):
    # Several GPUs judged against the same links, each at the whole window and a recent start,
    # as a verdict pass does: the links' sides and burst counts are kept between them.
    registry()
    settings = resolve([])[0]
    n = data.draw(st.integers(0, 40))
    net = network.Network(AnalysisInputs(views={}, stats={}, latest={}, end=0.0), Grid([0.1 * i for i in range(n)], 0.1),
                          settings, 0.3)
    for i in range(data.draw(st.integers(0, 5))):
        # A link with bursts half the time, or idle, or one whose rates copy another's NaN.
        kind = data.draw(st.sampled_from(["bursty", "any", "same-nan"]))
        if kind == "bursty":
            rates = [data.draw(st.sampled_from([1e6, 5e9, 5e9, NAN])) for _ in range(n)]
        elif kind == "same-nan" and net.links:
            rates = [NAN if v != v else data.draw(_rate) for v in net.links[0][1]]
        else:
            rates = data.draw(st.lists(_rate, min_size=n, max_size=n))
        net.links.append((network.LinkAlignment(f"eth{i}", "netdev", "", None, False), rates))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["clean", "any"]))
        busy = data.draw(st.lists(st.floats(0, 1) if kind == "clean" else _signal, min_size=n, max_size=n))
        waiting = data.draw(st.lists(_share, min_size=n, max_size=n)) if kind == "any" else [1.0 - b for b in busy]
        if data.draw(st.booleans()):
            # Not on the grid (a shorter series): the loop's truncation.
            busy = busy[: data.draw(st.integers(0, n))]
        for start in data.draw(st.lists(st.sampled_from([0, 0, n // 2, max(n - 2, 0), n]), min_size=1, max_size=3)):
            links = net.alignment(busy, waiting, start)
            assert same(links, ref_alignment(net, busy, waiting, start))
            assert same(net.evidence(links), ref_evidence(net, links))
    assert same(net.quiet(), ref_quiet(net))
    assert same(net.moving(), ref_moving(net))


@st.composite
def activities(draw):
    """A GPU's activity as the verdict sees it: square waves of any period and duty (whose
    autocorrelation ties between lags), levels that repeat exactly, noise, drifts, NaN, a
    constant, and amplitudes from tiny to huge."""
    n = draw(st.one_of(st.integers(0, 40), st.integers(40, 700)))
    rng = random.Random(draw(st.integers(0, 2 ** 32)))
    kind = draw(st.sampled_from(["square", "noisy-square", "noisy-square", "noisy-square", "noise", "levels", "drift",
                                 "constant", "any"]))
    if kind == "any":
        return draw(st.lists(_signal, max_size=60))
    period = draw(st.integers(2, 60))
    duty = draw(st.integers(1, period))
    low, high = draw(st.sampled_from([(0.15, 0.9), (0.0, 1.0), (0.2, 0.95)]))
    # Noise far under the estimates' margin makes near-ties that only exact sums order.
    noise = draw(st.sampled_from([0.0, 1e-12, 1e-9, 1e-7, 1e-5, 1e-3, 0.05, 0.3]))
    out = []
    for i in range(n):
        if kind in ("square", "noisy-square"):
            v = low if i % period < duty else high
            if kind == "noisy-square":
                v += rng.gauss(0, noise)
        elif kind == "noise":
            v = rng.random()
        elif kind == "levels":
            v = rng.choice([0.0, 0.25, 0.5, 1.0]) + rng.gauss(0, noise)
        elif kind == "drift":
            v = i / max(n, 1) + rng.gauss(0, 0.01)
        else:
            v = 0.5
        out.append(v)
    scale = draw(st.sampled_from([1.0, 1.0, 1e-3, 1e6, 1e150, -1.0]))
    out = [v * scale for v in out]
    for _ in range(draw(st.integers(0, 3))):
        if out:
            out[rng.randrange(len(out))] = draw(st.sampled_from([NAN, NAN, 0.0, 0.0, math.inf]))
    return out


@hypothesis_settings(max_examples=600, deadline=None)
@given(activities(), st.sampled_from([3, 3, 2, 5]), st.sampled_from([6, 6, 4, 3]))
@example([0.15 if i % 10 < 3 else 0.9 for i in range(600)], 3, 6)
@example([0.15 if i % 7 == 0 else 0.9 for i in range(598)], 3, 6)
@example([float(i % 2) for i in range(12)], 3, 6)
def test_dominant_period_equals_the_loop(values, min_cycles, pack):
    # Narrower coefficients make coarser estimates, so that far more of the comparisons fall
    # to the exact sums: each must still come out as the loop's.
    kept = timeseries._PACK_BYTES
    timeseries._PACK_BYTES = pack
    try:
        assert same(dominant_period(values, 0.1, min_cycles), ref_dominant_period(values, 0.1, min_cycles))
    finally:
        timeseries._PACK_BYTES = kept


@hypothesis_settings(max_examples=200, deadline=None)
@given(activities(), st.sampled_from([6, 4, 3]))
def test_autocorrelation_estimates_bound_the_exact_values(values, pack):
    valid = [v for v in values if v == v]
    if len(valid) < 3 or len(values) < 12:
        return
    m = sum(valid) / len(valid)
    x = [(v - m) if v == v else 0.0 for v in values]
    denom = sum(map(operator.mul, x, x))
    if not 1e-12 < denom < 1e300:
        return
    kept = timeseries._PACK_BYTES
    timeseries._PACK_BYTES = pack
    try:
        r = timeseries._Autocorrelation(x, denom, len(x) // 3)
    finally:
        timeseries._PACK_BYTES = kept
    exact = [sum(map(operator.mul, x, x[k:])) / denom for k in range(len(x) // 3 + 1)]
    for k, v in enumerate(exact):
        assert abs(r.estimate[k] - v) <= r.margin / 2
        if k:
            lo, hi = r.strength_bounds(k)
            assert lo <= v * len(x) / (len(x) - k) <= hi


def _centred_loop(grid, column, period):
    """The walk over the samples that analysis.activity.centred replaces."""
    pairs = [(t, v) for t, v in zip(column.times, column.values) if v == v]
    out, k = [], 0
    for t in grid.times:
        middle = t + grid.step / 2
        while k < len(pairs) and pairs[k][0] < middle - 1e-9:
            k += 1
        out.append(pairs[k][1] if k < len(pairs) and pairs[k][0] - middle <= period * 1.5 else math.nan)
    return out


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.data())
def test_centred_equals_the_walk_over_the_samples(data):
    from gpuwait.analysis.activity import centred, sample_period

    gaps = data.draw(st.lists(st.sampled_from([0.0, 1e-10, 0.05, 0.1, 0.1, 0.1, 0.1666, 0.3, 1.0]), min_size=2, max_size=60))
    times, t = [], data.draw(st.floats(0.0, 100.0))
    for gap in gaps:
        t += gap
        times.append(t)
    values = [data.draw(st.one_of(st.floats(0.0, 1.0), st.just(math.nan))) for _ in times]
    shift = data.draw(st.sampled_from([0.0, 0.01, 0.05, -0.04]))
    step = data.draw(st.sampled_from([0.1, 0.2]))
    grid = Grid([x + shift for x in times[data.draw(st.integers(0, len(times) - 1)):]], step)
    column = Column(times, values)
    # Columns of one source share their times, and the grid keeps which samples those give
    # each instant: a second column on the same times and grid takes its own values.
    other = Column(times, [data.draw(st.one_of(st.floats(0.0, 1.0), st.just(math.nan))) for _ in times])
    for column in (column, other, column):
        period = sample_period(column)
        expected = grid.hold(column) if period is None else _centred_loop(grid, column, period)
        got = centred(grid, column)
        assert [x if x == x else "nan" for x in got] == [x if x == x else "nan" for x in expected]


def test_centred_takes_a_sample_within_a_nanosecond_before_the_middle_as_the_walk_does():
    from gpuwait.analysis.activity import centred, sample_period

    column = Column([0.0, 0.05 - 5e-10, 0.1], [1.0, 0.5, 0.0])
    grid = Grid([0.0], 0.1)
    assert centred(grid, column) == _centred_loop(grid, column, sample_period(column)) == [0.5]
