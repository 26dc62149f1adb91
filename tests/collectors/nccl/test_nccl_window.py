"""Window statistics of the nccl source, the accessors the analysis reads, and its metrics."""

from __future__ import annotations

import dataclasses

import pytest

from gpuwait.collectors.nccl import window
from gpuwait.collectors.nccl.metrics import expose, rank_labels
from gpuwait.collectors.nccl.window import completion_age, summarize
from gpuwait.core.plugin import Snapshot
from gpuwait.core.registry import resolve
from nccl_readings import WALL, gauge_rank, rank, reading_at, steady, view_of


def settings():
    return resolve([])[0]


def window_of(readings):
    return summarize(view_of(readings), settings())


def test_window_of_a_steady_rank():
    stats = window_of(steady())
    (stat,) = stats.ranks.values()
    assert stat.operations == 200 and stat.seconds == 10
    assert stat.exec_seconds == pytest.approx(2.0)
    assert stat.exec_ratio == pytest.approx(0.2)
    assert stat.bus_bytes_per_second == pytest.approx(200e9)
    assert stat.msg_bytes == pytest.approx(200e6)


def test_a_rank_that_restarts_counts_from_its_new_totals():
    readings = steady(5) + [reading_at(106.0 + s, rank(ops=20 * s, exec_s=0.2 * s, bus=0.2 * s * 200e9)) for s in range(5)]
    (stat,) = window_of(readings).ranks.values()
    assert stat.operations == 100 + 80  # the drop to 0 is a reset, not a negative count
    assert stat.seconds == 9


def test_prometheus_mode_gives_the_bandwidth_gauge_only():
    readings = [reading_at(100.0 + s, gauge_rank(bw=bw)) for s, bw in enumerate((300e9, 310e9, 320e9))]
    (stat,) = window_of(readings).ranks.values()
    assert stat.operations is None and stat.exec_ratio is None
    assert stat.bus_bytes_per_second == pytest.approx(310e9)


# -- the accessors ----------------------------------------------------------------------------

def test_accessors_of_a_steady_rank():
    (r,) = window.ranks(view_of(steady(n_nodes=2, device=3, device_uuid="GPU-aa")))
    assert (r.kind, r.comm, r.rank, r.pid, r.hostname, r.uuid, r.device) == (
        "collective", "0xa", 0, 4242, "hgx-a17", "GPU-aa", 3)
    assert window.n_nodes(r) == 2
    assert window.activity(r) == window.Activity(200, pytest.approx(2.0), pytest.approx(200e6),
                                                 pytest.approx(400e9), 10)
    assert window.exec_share(r) == pytest.approx(0.2)
    assert window.bus_bytes_per_second(r) == pytest.approx(200e9)
    assert window.completion_interval(r) == pytest.approx(0.05)
    assert window.seconds_since_completion(r) == 0.0
    assert window.seconds_since_completion(r, at=112.5) == pytest.approx(2.5)
    assert not window.stalled(r, intervals=20)
    assert window.stalled(r, intervals=20, at=111.01)  # 1.01 s without one: > 20 intervals of 50 ms


def test_a_collective_that_does_not_end_is_a_stall():
    """The rank completes collectives for 5 s, then none: the plugin writes nothing more, and
    the reads see its latest completion grow older."""
    progressing = steady(5)
    hung = [reading_at(106.0 + s, rank(ops=100, exec_s=1.0, bus=1.0 * 200e9, last=WALL + 5)) for s in range(10)]
    (r,) = window.ranks(view_of(progressing + hung))
    assert window.seconds_since_completion(r) == pytest.approx(10.0)
    assert window.completion_interval(r) == pytest.approx(15 / 100)
    assert window.stalled(r, intervals=20)
    assert not window.stalled(r, intervals=100)
    # once the window holds nothing but the hang, it is a stall at any factor
    (quiet,) = window.ranks(view_of(hung))
    assert window.completion_interval(quiet) is None and window.exec_share(quiet) == 0.0
    assert window.stalled(quiet, intervals=1000)


def test_accessors_without_counts_or_times():
    (gauge,) = window.ranks(view_of([reading_at(100.0 + s, gauge_rank(bw=300e9)) for s in range(3)]))
    assert window.activity(gauge) is None and window.exec_share(gauge) is None
    assert window.bus_bytes_per_second(gauge) == pytest.approx(300e9)
    assert window.seconds_since_completion(gauge) is None and window.completion_interval(gauge) is None
    assert not window.stalled(gauge, intervals=1)
    (once,) = window.ranks(view_of(steady(0)))
    assert window.activity(once) is None and not window.stalled(once, intervals=1, at=1e6)
    assert window.ranks(view_of([reading_at(100.0)])) == []


def test_completion_age_never_negative_and_absent_without_times():
    ahead = reading_at(100.0, rank(last=WALL + 5.0))
    assert completion_age(ahead.data, ahead.data.ranks[0]) == 0.0
    unknown = reading_at(100.0, rank(last=None))
    assert completion_age(unknown.data, unknown.data.ranks[0]) is None
    (r,) = window.ranks(view_of([ahead, dataclasses.replace(ahead, t=103.0, data=dataclasses.replace(
        ahead.data, read_unix=WALL + 3.0))]))
    assert window.seconds_since_completion(r) == 0.0


# -- metrics ----------------------------------------------------------------------------------

def test_metrics_of_a_reading_and_its_window():
    readings = steady(last=WALL - 3.0) + [reading_at(111.0, gauge_rank(uuid="GPU-aa", device=0, last=WALL - 40.0))]
    stats = window_of(readings)
    latest = reading_at(111.0, rank(ops=220, exec_s=2.2, bus=2.2 * 200e9, last=WALL - 3.0),
                        gauge_rank(uuid="GPU-aa", device=0, last=WALL - 40.0))
    latest = dataclasses.replace(latest, data=dataclasses.replace(latest.data, bytes_read_total=12345, files=2))
    samples = {(s.name, s.labels): s.value for s in expose({"nccl": Snapshot(latest, stats)}, settings())}
    json_labels = ("0xa", "0", "4242", "", "", "collective")
    prom_labels = ("DP Group 0", "", "", "0", "GPU-aa", "collective")
    assert rank_labels(latest.data.ranks[0]) == json_labels
    assert samples[("gpuwait_nccl_operations_total", json_labels)] == 220
    assert samples[("gpuwait_nccl_bus_bytes_total", json_labels)] == pytest.approx(440e9)
    assert ("gpuwait_nccl_operations_total", prom_labels) not in samples  # no counts in Prometheus mode
    # the read was at wall WALL + 11: 14 s after the latest operation
    assert samples[("gpuwait_nccl_last_operation_age_seconds", json_labels)] == pytest.approx(14.0)
    assert samples[("gpuwait_nccl_last_operation_age_seconds", prom_labels)] == pytest.approx(51.0)
    assert samples[("gpuwait_nccl_window_exec_ratio", json_labels)] == pytest.approx(0.2)
    assert samples[("gpuwait_nccl_window_bus_bandwidth_bytes_per_second", prom_labels)] == pytest.approx(300e9)
    assert samples[("gpuwait_nccl_read_bytes_total", ())] == 12345
    assert samples[("gpuwait_nccl_dump_files", ())] == 2
    assert samples[("gpuwait_nccl_ranks", ())] == 2


def test_no_reading_no_series():
    assert list(expose({"nccl": Snapshot(None, None)}, settings())) == []
