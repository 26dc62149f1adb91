"""A collector's window statistics on a view of its ring, which answers steady counters from
the ring's account of them, equal those computed from the same rows as plain lists, for any
mix of steady counters, resets, missing reads, clocks that stall, wraps and stuck values."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from gpuwait.collectors.diskstats import window as diskstats_window
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.collectors.netdev import window as netdev_window
from gpuwait.collectors.pressure import window as pressure_window
from gpuwait.collectors.rdma import window as rdma_window
from gpuwait.collectors.rdma.window import LEGACY_COUNTER_MAX
from gpuwait.core import series
from gpuwait.core.registry import registry, resolve
from gpuwait.core.ring import ColumnRing, WindowView

#: A counter's step: forward by a little or a lot, a reset, a missing read, standing still.
_steps = st.one_of(st.floats(0, 1e4), st.floats(0, 1e9), st.just(-1.0), st.just(math.nan), st.just(0.0))

#: Counter values where the RDMA window has its own cases: the 32-bit field stuck at all ones
#: (in 4-octet words and in packets) and the value after a 32-bit wrap.
_RDMA_SPECIAL = (float(LEGACY_COUNTER_MAX * 4), float(LEGACY_COUNTER_MAX), float(LEGACY_COUNTER_MAX * 4 - 8), 16.0)

KEYS = {
    "netdev": [(d, i) for d in netdev_window.DIRECTIONS for i in ("eth0", "ib0")],
    "rdma": [(k, "mlx5_0", 1, "InfiniBand") for k in ("tx", "rx", "txp", "rxp")],
    "diskstats": [(k, "nvme0n1") for k in ("reads", "writes", "read_bytes", "write_bytes", "read_time", "write_time",
                                           "io_now", "io_time", "weighted")],
    "pressure": [(r, s) for r in ("cpu", "io") for s in ("some", "full")],
    # The PCIe byte counters, and GPM's rates and utilization beside them.
    "gpu": [(signal, "0", "GPU-0") for signal in (gpu_window.PCIE_TX, gpu_window.PCIE_RX, gpu_window.UTIL,
                                                   "gpm_pcie_tx", "gpm_pcie_rx")],
}


def _gpu_summarize(view, _):
    registry()
    return gpu_window.summarize(view, resolve([])[0])


SUMMARIZE = {
    "gpu": _gpu_summarize,
    "netdev": netdev_window.summarize,
    "rdma": rdma_window.summarize,
    "diskstats": diskstats_window.summarize,
    "pressure": pressure_window.summarize,
}


@st.composite
def windows(draw, collector: str):
    keys = KEYS[collector]
    capacity = draw(st.integers(2, 12))
    rows = draw(st.integers(0, 30))
    ring = ColumnRing(capacity)
    t = 100.0
    values = {key: draw(st.floats(0, 1e6)) for key in keys}
    # Most windows are steady: a clock that only goes forward, and counters that never miss a
    # read or go back; the others mix in every fault.
    clock_faults = draw(st.booleans())
    faulty = {key: draw(st.integers(0, 2)) == 0 for key in keys}
    for _ in range(rows):
        t += draw(st.sampled_from([0.1, 0.1, 0.1, 0.1, 0.0, -0.05]) if clock_faults else st.floats(0.01, 0.2))
        row = {}
        for key in keys:
            if collector == "rdma" and draw(st.integers(0, 5)) == 0:
                # Forward to a value of its own (stuck, near the wrap) or back to one.
                special = draw(st.sampled_from(_RDMA_SPECIAL))
                if faulty[key] or special >= values[key]:
                    values[key] = special
            elif not faulty[key]:
                values[key] += draw(st.floats(0, 1e9))
            elif draw(st.integers(0, 9)) == 0:
                continue  # absent from this read: NaN in the ring
            else:
                step = draw(_steps)
                if step != step:
                    row[key] = math.nan
                    continue
                values[key] = values[key] + step if step >= 0 else draw(st.floats(0, 10))
            row[key] = values[key]
        ring.append(t, row)
    since = t - draw(st.floats(0, 2))
    return ring.view(since=since)


def _as_lists(view: WindowView) -> WindowView:
    return WindowView(list(view.times), {key: list(view.columns[key]) for key in view.columns})


def _check(collector: str, view: WindowView) -> None:
    summarize = SUMMARIZE[collector]
    # repr: a NaN, were one to appear, is equal to itself there.
    assert repr(summarize(view, None)) == repr(summarize(_as_lists(view), None))


@pytest.mark.parametrize("collector", sorted(SUMMARIZE))
@hypothesis_settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_statistics_from_the_ring_equal_those_from_the_rows(collector, data):
    _check(collector, data.draw(windows(collector)))


def test_a_steady_window_takes_the_fast_path_and_still_finds_the_peak():
    """The case the fast path is for: every counter read each interval, going forward."""
    ring = ColumnRing(11)
    for i in range(11):
        ring.append(100.0 + 0.1 * i, {key: 1000.0 * i + (5000.0 if i >= 7 else 0.0) for key in KEYS["netdev"]})
    view = ring.view()
    assert all(view.steady(key) for key in KEYS["netdev"])
    stats = netdev_window.summarize(view, None)
    assert stats == netdev_window.summarize(_as_lists(view), None)
    assert math.isclose(stats.receive["eth0"].max_bytes_per_second, 60000.0)


@hypothesis_settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_the_running_account_follows_the_window_pass_after_pass(data):
    """The peak and burstiness kept from pass to pass equal, to the bit, those of the window's
    rates at every pass: views taken after every few appends (or after more than the ring holds),
    over the whole ring or its newest rows, with breaks in the counter that restart the
    account, and rates from bursts of 1e9 to quiet steps of 1e-3."""
    ring = ColumnRing(data.draw(st.integers(2, 40)))
    key = ("receive", "eth0")
    t, value = 0.0, 0.0
    # One draw seeds the steps: drawing each of up to 12,000 steps from Hypothesis's own
    # data would, now and then, exceed the data it allows a test case.
    rnd = random.Random(data.draw(st.integers(0, 2**64 - 1)))
    for _ in range(data.draw(st.integers(1, 60))):
        for _ in range(rnd.choice((1, 2, 3, 10, 50))):
            t += rnd.uniform(0.05, 0.15)
            kind = rnd.random()
            if kind < 0.02:
                value = 0.0  # a reset
            elif kind < 0.1:
                pass  # standing still
            else:
                value += rnd.uniform(0, 1e-3) if kind < 0.5 else rnd.uniform(0, 1e9)
            ring.append(t, {key: value})
        view = ring.view(since=t - rnd.choice([1e9, 1e9, 1.0, 0.3]))
        if rnd.random() < 0.5:
            view.keep_accounts()  # as a pass does for a summary a scrape makes later
        if rnd.random() < 0.3:
            continue  # a pass no scrape followed
        peak, bursts = view.rate_shape(key)
        rates = view.interval_rates(key)
        assert repr((peak, bursts)) == repr((series.maximum(rates), series.burstiness(rates)))


def test_a_steady_counters_account_is_kept_and_not_recomputed():
    ring = ColumnRing(601)
    key = ("receive", "eth0")
    value = 0.0

    def rows(n):
        nonlocal value
        for _ in range(n):
            value += 1000.0 + (50000.0 if len(ring) % 10 == 0 else 0.0)
            ring.append(0.1 * ring._appended, {key: value})
    rows(700)
    view = ring.view()
    assert view.steady(key)
    view.rate_shape(key)
    shape = ring._shapes[key]
    assert len(shape._rates) == 600
    kept = shape._rates
    rows(10)
    view = ring.view()
    peak, bursts = view.rate_shape(key)
    # the next pass kept the account and its buffer, and took in the ten new intervals
    assert ring._shapes[key] is shape and shape._rates is kept and len(kept) == 600 and shape._next == shape._start + 600
    assert (peak, bursts) == (series.maximum(view.interval_rates(key)), series.burstiness(view.interval_rates(key)))


def test_a_pass_brings_the_accounts_up_to_its_view_and_drops_those_of_columns_no_longer_steady():
    ring = ColumnRing(601)
    steady_key, broken_key = ("receive", "eth0"), ("receive", "eth1")
    for i in range(700):
        ring.append(0.1 * i, {steady_key: 1000.0 * i, broken_key: 1000.0 * i})
    ring.view().rate_shape(steady_key)
    ring.view().rate_shape(broken_key)
    shape = ring._shapes[steady_key]
    for i in range(700, 850):
        ring.append(0.1 * i, {steady_key: 1000.0 * i, broken_key: 0.0 if i == 800 else 1000.0 * i})
    view = ring.view()
    view.keep_accounts()
    assert shape._next == view.first_row + len(view) - 1  # every interval of the view taken in
    assert broken_key not in ring._shapes
    steps = shape._next
    assert view.rate_shape(steady_key) == (series.maximum(view.interval_rates(steady_key)),
                                           series.burstiness(view.interval_rates(steady_key)))
    assert shape._next == steps


def test_an_infinite_rate_leaves_the_account_to_the_float_formula():
    ring = ColumnRing(8)
    key = ("receive", "eth0")
    for i, value in enumerate((0.0, 1.0, 1e308, 1.7e308, 1.7e308, 1.8e308)):
        ring.append(0.001 * i, {key: value})
    view = ring.view()
    assert view.steady(key)
    rates = view.interval_rates(key)
    assert math.inf in rates
    assert repr(view.rate_shape(key)) == repr((series.maximum(rates), series.burstiness(rates)))
