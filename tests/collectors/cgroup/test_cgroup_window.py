"""The owner cgroups' window: the columns of a reading, the typed accessors the verdict reads
(CPU cores used, quota, throttled ratio at the binding level, pressure, IO read rate) and the
window statistics the exposition serves."""

from __future__ import annotations

import pytest

from gpuwait.collectors.cgroup import window
from gpuwait.collectors.cgroup.payload import CgroupBandwidth, CgroupIo, OwnerCgroup, OwnerCgroupData
from gpuwait.core.ring import ColumnRing


def cgroup(usage: float, periods: int, throttled: int, child_periods: int, child_throttled: int,
           read_bytes: int, some: float) -> OwnerCgroup:
    return OwnerCgroup(
        "/pod", 2, usage, None, None, periods, throttled, None, 4.0,
        {("cpu", "some"): some}, {"259:4": CgroupIo(read_bytes, 0, read_bytes // 4096, 0), "259:0": CgroupIo(4096, 0, 1, 0)},
        {"gpu.scope": CgroupBandwidth(2.0, child_periods, child_throttled, child_throttled * 0.05)},
    )


def view_of(cgroups: list[OwnerCgroup], dt: float = 1.0):
    ring = ColumnRing(len(cgroups) + 1)
    for i, cg in enumerate(cgroups):
        ring.append(100.0 + i * dt, window.columns(OwnerCgroupData({"o": cg})))
    return ring.view()


def test_throttling_is_taken_at_the_level_whose_quota_binds():
    # 10 periods a second; the pod's quota never runs out, its GPU container's does in 6 of 10.
    view = view_of([cgroup(2.0 * i, 10 * i, 0, 10 * i, 6 * i, 4096 * 100 * i, 0.3 * i) for i in range(5)])
    throttling = window.throttled_ratio(view, "o")
    assert throttling.ratio == pytest.approx(0.6) and throttling.level == "gpu.scope"
    assert throttling.quota_cores == 2.0
    assert throttling.throttled_seconds_rate == pytest.approx(0.3)
    # Each interval's share is stamped with the time the interval starts.
    assert throttling.intervals.values == pytest.approx([0.6] * 4) and throttling.intervals.times == view.times[:-1]
    assert window.quota_cores(view, "o") == 4.0
    assert window.cpu_cores(view, "o").mean == pytest.approx(2.0)
    assert window.pressure_rate(view, "o", "cpu", "some").intervals.values == pytest.approx([0.3] * 4)
    io = window.io_read_rate(view, "o")
    assert io.bytes_per_second.mean == pytest.approx(409600.0)  # the busy device; the other reads nothing
    assert io.ops_per_second.intervals.values == pytest.approx([100.0] * 4)


def test_a_counter_reset_leaves_its_interval_out():
    cgs = [cgroup(2.0 * i, 10 * i, 5 * i, 0, 0, 4096 * i, 0.1 * i) for i in range(6)]
    cgs[3] = cgroup(0.0, 0, 0, 0, 0, 0, 0.0)  # the cgroup was recreated: counters from zero
    view = view_of(cgs)
    rates = window.cpu_cores(view, "o").intervals.values
    assert rates[2] != rates[2]  # NaN: the reset interval
    assert rates[0] == pytest.approx(2.0) and rates[4] == pytest.approx(2.0)
    ratio = window.throttled_ratio(view, "o")
    assert ratio.level == "" and ratio.ratio == pytest.approx(0.5)


def test_pressure_is_a_fraction_of_time():
    view = view_of([cgroup(0.0, 0, 0, 0, 0, 0, 1.02 * i) for i in range(3)])
    assert window.pressure_rate(view, "o", "cpu", "some").mean == 1.0
    stats = window.summarize(view, None)
    assert stats.owners["o"].stalled_ratio == {("cpu", "some"): 1.0}


def test_an_owner_without_bandwidth_counters_has_no_ratio():
    cg = OwnerCgroup("/", 2, 1.0, None, None, None, None, None, None, {}, {})
    view = view_of([cg, cg])
    assert window.throttled_ratio(view, "o").ratio is None
    assert window.quota_cores(view, "o") is None
    assert window.io_read_rate(view, "o").bytes_per_second.mean is None


