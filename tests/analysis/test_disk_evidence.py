"""The disks' storage and checkpoint evidence: judged interval by interval on a ring, each
interval once across passes, it is what the rates on the grid give, instant by instant."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from gpuwait.analysis.evidence.checkpoint import WRITE_TO_READ, checkpoint
from gpuwait.analysis.evidence.storage import MIN_READ_IOPS, QUEUE_DEPTH, storage
from gpuwait.analysis.timeseries import Grid
from gpuwait.collectors.diskstats import window as disk_window
from gpuwait.collectors.diskstats.payload import DiskCounters, Diskstats
from gpuwait.core.plugin import AnalysisInputs
from gpuwait.core.registry import resolve
from gpuwait.core.ring import ColumnRing, WindowView

GAP = 0.3


@pytest.fixture(scope="module")
def settings():
    return resolve([])[0]


# -- the definitions, instant by instant on the grid -----------------------------------------


def _reading_and_queue(view: WindowView, grid: Grid, settings) -> tuple[list[bool], list[bool]]:
    n = len(grid)
    reading, long_queue = [False] * n, [False] * n
    for device in disk_window.devices(view):
        counters = disk_window.device_counters(view, device)
        reads, queue = grid.rates(counters.reads, GAP), grid.rates(counters.queue_time, GAP)
        for i in range(n):
            if reads[i] == reads[i] and reads[i] >= settings[MIN_READ_IOPS]:
                reading[i] = True
                if queue[i] == queue[i] and queue[i] >= settings[QUEUE_DEPTH]:
                    long_queue[i] = True
    return reading, long_queue


def _saving(view: WindowView, grid: Grid, settings) -> list[bool]:
    saving = [False] * len(grid)
    for device in disk_window.devices(view):
        counters = disk_window.device_counters(view, device)
        read_bytes = grid.rates(counters.read_bytes, GAP)
        write_bytes = grid.rates(counters.write_bytes, GAP)
        writes = grid.rates(counters.writes, GAP)
        for i in range(len(grid)):
            if (writes[i] == writes[i] and writes[i] >= settings[MIN_READ_IOPS] and write_bytes[i] == write_bytes[i]
                    and write_bytes[i] > WRITE_TO_READ * (read_bytes[i] if read_bytes[i] == read_bytes[i] else 0.0)):
                saving[i] = True
    return saving


# -- the windows ------------------------------------------------------------------------------


def _counters(reads: float, writes: float, read_bytes: float, write_bytes: float, queue: float) -> DiskCounters:
    return DiskCounters(0, 0, reads_completed=reads, reads_merged=0, read_bytes=read_bytes, read_time_seconds=0.0,
                        writes_completed=writes, writes_merged=0, write_bytes=write_bytes, write_time_seconds=0.0,
                        io_now=0, io_time_seconds=0.0, io_time_weighted_seconds=queue)


#: A sampling step: its length (0.6 is past GAP, 0 a clock that stood still) and per disk,
#: None for a disk missing from the read, "reset" for counters back at 0, or each counter's
#: step (reads and writes 0-30 a step: 0-300/s at 0.1 s, 0-50/s over 0.6 s, around 20/s).
_step = st.tuples(
    st.sampled_from([0.1, 0.1, 0.1, 0.25, 0.6, 0.0]),
    st.lists(st.one_of(st.none(), st.just("reset"),
                       st.tuples(st.sampled_from([0, 1, 3, 10, 30]), st.sampled_from([0, 2, 10, 30]),
                                 st.sampled_from([0, 4096, 65536]), st.sampled_from([0, 8192, 1 << 20]),
                                 st.sampled_from([0.0, 0.1, 0.5, 3.0]))),
             min_size=2, max_size=2),
)


@hypothesis_settings(max_examples=150, deadline=None)
@given(steps=st.lists(_step, min_size=2, max_size=40), capacity=st.integers(3, 12),
       phase=st.floats(-0.3, 0.3), stalled=st.booleans())
def test_disk_evidence_marked_per_interval_is_the_grid_s_instant_by_instant(settings, steps, capacity, phase, stalled):
    ring = ColumnRing(capacity)
    totals = {disk: [0.0] * 5 for disk in ("nvme0n1", "nvme1n1")}
    t = 10.0
    for dt, disks in steps:
        t += dt
        devices = {}
        for disk, step in zip(totals, disks):
            if step is None:
                continue
            if step == "reset":
                totals[disk] = [0.0] * 5
            else:
                totals[disk] = [total + s for total, s in zip(totals[disk], step)]
            devices[disk] = _counters(*totals[disk])
        ring.append(t, disk_window.columns(Diskstats(devices)))
        view = ring.view()
        if len(view) < 2:
            continue
        grid = Grid([view.times[0] + phase + 0.1 * i for i in range(int((view.times[-1] - view.times[0]) / 0.1) + 4)], 0.1)
        # With IO pressure all the time storage is where the disks read; without, where they
        # read with a long queue (no NFS, no blocked tasks).
        psi = WindowView(list(view.times), {("io", "some"): [1.0 * x for x in range(len(view))]})
        views = {"diskstats": view, "pressure": psi} if stalled else {"diskstats": view}
        inputs = AnalysisInputs(views=views, stats={}, latest={}, end=t)
        reading, long_queue = _reading_and_queue(view, Grid(grid.times, 0.1), settings)
        expected = reading if stalled else long_queue
        assert storage(inputs, grid, settings, GAP) == expected
        assert checkpoint(inputs, grid, settings, GAP) == _saving(view, Grid(grid.times, 0.1), settings)


def test_a_steady_disk_is_judged_on_its_new_intervals_only(settings):
    """The second pass over a window that moved on by one row judges one interval."""
    ring = ColumnRing(50)
    judged = []
    for i in range(40):
        ring.append(i * 0.1, disk_window.columns(Diskstats({"nvme0n1": _counters(5.0 * i, 0, 0, 0, 0.0)})))
    from gpuwait.analysis import timeseries

    def counting(rates):
        judged.append(rates)
        return 0

    view = ring.view()
    keys = disk_window.steady_counters(view, "nvme0n1", "reads", "queue_time")
    assert keys is not None
    timeseries.interval_marks(view, "test", [keys], counting, GAP)
    assert len(judged) == 39 and judged[0] == [pytest.approx(50.0), 0.0]
    ring.append(4.0, disk_window.columns(Diskstats({"nvme0n1": _counters(200.0, 0, 0, 0, 0.0)})))
    timeseries.interval_marks(ring.view(), "test", [keys], counting, GAP)
    assert len(judged) == 40
    # A disk reset inside the window is no longer steady: the grid judges it.
    ring.append(4.1, disk_window.columns(Diskstats({"nvme0n1": _counters(0.0, 0, 0, 0, 0.0)})))
    assert disk_window.steady_counters(ring.view(), "nvme0n1", "reads", "queue_time") is None
    assert not math.isnan(ring.view().times[-1])


def test_a_disk_that_becomes_steady_is_judged_on_the_intervals_already_held(settings):
    """nvme1n1 misses the first read, so it is judged on the grid until that row leaves the
    window; from then on with the steady disks, on every interval held, not just the new."""
    ring = ColumnRing(8)
    for i in range(12):
        devices = {"nvme0n1": _counters(0.0, 0, 0, 0, 0.0)}
        if i > 0:
            devices["nvme1n1"] = _counters(10.0 * i, 10.0 * i, 0, 1e6 * i, 0.0)
        ring.append(i * 0.1, disk_window.columns(Diskstats(devices)))
        view = ring.view()
        if len(view) < 2:
            continue
        grid = Grid([t + 0.05 for t in view.times[:-1]], 0.1)
        inputs = AnalysisInputs(views={"diskstats": view}, stats={}, latest={}, end=view.times[-1])
        expected = _saving(view, Grid(grid.times, 0.1), settings)
        assert checkpoint(inputs, grid, settings, GAP) == expected
        assert all(expected[1:] if i < 8 else expected)
