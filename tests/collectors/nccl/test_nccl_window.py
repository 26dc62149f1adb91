"""Window statistics of the nccl source, its metrics, and the join of ranks to GPUs."""

from __future__ import annotations

import dataclasses

import pytest

from gpuwait.collectors import registry
from gpuwait.collectors.nccl.metrics import expose, rank_labels
from gpuwait.collectors.nccl.payload import NcclData, NcclRank
from gpuwait.collectors.nccl.window import (
    columns, join_ranks_to_gpus, last_operation_age, rank_window, summarize,
)
from gpuwait.collectors import Snapshot
from gpuwait.config import resolve
from gpuwait.nvml.values import GpuProcess
from gpuwait.reading import Reading
from gpuwait.ring import ColumnRing
from gpuwait.sources.gpu import GpuDevice, GpuDeviceData, OwnerUse
from gpuwait.sources.rdma import RdmaData, RdmaDeviceData, RdmaPortData

WALL = 1_764_081_000.0


def settings():
    registry()
    return resolve([])[0]


def rank(comm="0xa", rank=0, pid=4242, n_nodes=1, ops=0, exec_s=0.0, bus=0.0, last=None, device=None,
         hostname="hgx-a17", **kw) -> NcclRank:
    """A JSON-mode rank whose cumulative sums are ``ops``, ``exec_s`` and ``bus``."""
    return NcclRank(comm=comm, rank=rank, n_ranks=8, n_nodes=n_nodes, pid=pid, hostname=hostname, device=device,
                    collectives=0, exec_seconds=0.0, max_exec_seconds=0.0, msg_bytes=0.0, bus_bytes=0.0,
                    last_seq=None, last_unix=last, collectives_total=ops, exec_seconds_total=exec_s,
                    msg_bytes_total=ops * 1e6, bus_bytes_total=bus, **kw)


def gauge_rank(uuid="", device=None, bw=300e9, exec_s=0.01, last=None) -> NcclRank:
    """A Prometheus-mode rank: gauges only."""
    return NcclRank(comm="DP Group 0", rank=-1, n_ranks=4, n_nodes=1, pid=0, hostname="hgx-a17", device=device,
                    collectives=None, exec_seconds=exec_s, max_exec_seconds=exec_s, msg_bytes=4e9,
                    bus_bytes=bw * exec_s, last_seq=None, last_unix=last, device_uuid=uuid)


def window_of(readings):
    ring = ColumnRing(100)
    for reading in readings:
        ring.append(reading.t, columns(reading.data))
    return summarize(ring.view(), settings())


def reading_at(t, *ranks) -> Reading:
    return Reading("nccl", t, NcclData(ranks=tuple(ranks), wall_minus_monotonic=WALL - 100.0))


def steady(seconds=10, **kw):
    """One rank doing 20 collectives a second of 10 ms each at 200 GB/s bus bandwidth."""
    return [reading_at(100.0 + s, rank(ops=20 * s, exec_s=0.2 * s, bus=0.2 * s * 200e9, **kw)) for s in range(seconds + 1)]


def test_window_of_a_steady_rank():
    stats = window_of(steady())
    (window,) = stats.ranks.values()
    assert window.operations == 200 and window.seconds == 10
    assert window.exec_seconds == pytest.approx(2.0)
    assert window.exec_ratio == pytest.approx(0.2)
    assert window.bus_bytes_per_second == pytest.approx(200e9)
    assert window.msg_bytes == pytest.approx(200e6)


def test_a_rank_that_restarts_counts_from_its_new_totals():
    readings = steady(5) + [reading_at(106.0 + s, rank(ops=20 * s, exec_s=0.2 * s, bus=0.2 * s * 200e9)) for s in range(5)]
    (window,) = window_of(readings).ranks.values()
    assert window.operations == 100 + 80  # the drop to 0 is a reset, not a negative count
    assert window.seconds == 9


def test_prometheus_mode_gives_the_bandwidth_gauge_only():
    readings = [reading_at(100.0 + s, gauge_rank(bw=bw)) for s, bw in enumerate((300e9, 310e9, 320e9))]
    (window,) = window_of(readings).ranks.values()
    assert window.operations is None and window.exec_ratio is None
    assert window.bus_bytes_per_second == pytest.approx(310e9)


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
    # the read was at monotonic 111, i.e. wall WALL + 11: 14 s after the latest operation
    assert samples[("gpuwait_nccl_last_operation_age_seconds", json_labels)] == pytest.approx(14.0)
    assert samples[("gpuwait_nccl_last_operation_age_seconds", prom_labels)] == pytest.approx(51.0)
    assert samples[("gpuwait_nccl_window_exec_ratio", json_labels)] == pytest.approx(0.2)
    assert samples[("gpuwait_nccl_window_bus_bandwidth_bytes_per_second", prom_labels)] == pytest.approx(300e9)
    assert samples[("gpuwait_nccl_read_bytes_total", ())] == 12345
    assert samples[("gpuwait_nccl_dump_files", ())] == 2
    assert samples[("gpuwait_nccl_ranks", ())] == 2


def test_operation_age_never_negative_and_absent_without_times():
    ahead = reading_at(100.0, rank(last=WALL + 5.0))
    assert last_operation_age(ahead, ahead.data.ranks[0]) == 0.0
    assert last_operation_age(ahead, ahead.data.ranks[0], now=110.0) == pytest.approx(5.0)
    unknown = reading_at(100.0, rank(last=None))
    assert last_operation_age(unknown, unknown.data.ranks[0]) is None


# -- the join ---------------------------------------------------------------------------------

def gpus(*devices) -> GpuDeviceData:
    return GpuDeviceData(True, "", "570.124.06", "12.8", tuple(devices))


def gpu(index, pids=(), owners=(), nics=None) -> GpuDevice:
    return GpuDevice(index, f"GPU-{index:08d}-0000-0000-0000-000000000000", True,
                     processes=tuple(GpuProcess(pid, 1e9) for pid in pids),
                     owners=tuple(OwnerUse(owner, 1) for owner in owners), nics=nics or {})


def nic(name, *rates, states=None) -> RdmaDeviceData:
    ports = tuple(RdmaPortData(i + 1, "InfiniBand", "", (states or [4] * len(rates))[i], "", 5, "", rate, "4X", "NDR", {}, {})
                  for i, rate in enumerate(rates))
    return RdmaDeviceData(name, "0000:1a:00.0", 0, "", "28.39.1002", "MT4129", "", ports)


def test_ranks_join_their_gpus_by_pid_uuid_or_device_index():
    node = gpus(gpu(0, pids=[4242], owners=["kubernetes:pod-a"]), gpu(1, pids=[5151]), gpu(2), gpu(3, pids=[6161]))
    latest = reading_at(110.0,
                        rank(comm="0xa", pid=4242, last=WALL + 9.0),
                        rank(comm="0xb", pid=4242, last=WALL + 4.0),
                        gauge_rank(uuid=node.gpus[1].uuid, device=0),
                        rank(comm="0xc", pid=77, device=2),       # not a host pid: weakest evidence
                        rank(comm="0xd", pid=78),                 # another pid namespace, nothing else
                        rank(comm="0xe", pid=88, device=3, hostname="pod-xyz"))  # device index, other host name
    joined = join_ranks_to_gpus(None, latest, node, node_hostname="hgx-a17")
    assert joined.unmatched == 2
    by_index = {g.index: g for g in joined.gpus.values()}
    assert sorted(by_index) == [0, 1, 2]
    assert (by_index[0].ranks, by_index[0].matched_by, by_index[0].owner) == (2, "pid", "kubernetes:pod-a")
    assert by_index[1].matched_by == "uuid"
    assert by_index[2].matched_by == "device_index"
    # the GPU's most recent operation: at WALL + 9, read at WALL + 10
    assert by_index[0].last_operation_age_seconds == pytest.approx(1.0)
    assert joined.gpus[node.gpus[0].uuid] is by_index[0]
    # without the node's host name the device index is not trusted
    assert 2 not in {g.index for g in join_ranks_to_gpus(None, latest, node).gpus.values()}


def test_a_process_on_several_gpus_is_joined_only_where_its_file_names_the_gpu():
    node = gpus(gpu(0, pids=[900]), gpu(1, pids=[900]))
    latest = reading_at(110.0, rank(pid=900), dataclasses.replace(rank(pid=900, comm="0xf"), device_uuid=node.gpus[1].uuid))
    joined = join_ranks_to_gpus(None, latest, node)
    assert joined.unmatched == 1
    assert [g.index for g in joined.gpus.values()] == [1]


def test_time_share_bandwidth_and_capacity_of_a_gpu():
    node = gpus(gpu(0, pids=[4242], owners=["slurm:4411872", "host"], nics={"mlx5_0": "PIX", "mlx5_1": "PIX", "mlx5_2": "SYS"}))
    fabric = RdmaData((nic("mlx5_0", 50e9), nic("mlx5_1", 50e9, 50e9, states=[4, 1]), nic("mlx5_2", 50e9)))
    # two communicators: 20 % and 70 % of the time in NCCL kernels, at 20 and 40 GB/s
    inter = steady(n_nodes=2, comm="0xa")
    intra = [reading_at(100.0 + s, rank(comm="0xb", ops=10 * s, exec_s=0.7 * s, bus=0.7 * s * 40e9)) for s in range(11)]
    inter = [reading_at(r.t, rank(comm="0xa", n_nodes=2, ops=20 * s, exec_s=0.2 * s, bus=0.2 * s * 20e9))
             for s, r in enumerate(inter)]
    readings = [reading_at(a.t, *a.data.ranks, *b.data.ranks) for a, b in zip(inter, intra)]
    stats = window_of(readings)
    assert rank_window(stats, readings[-1].data.ranks[0]).exec_ratio == pytest.approx(0.2)
    result = join_ranks_to_gpus(stats, readings[-1], node, fabric, owner_of={4242: "slurm:4411872"}).gpus
    (g,) = result.values()
    assert g.exec_ratio == pytest.approx(0.9)
    assert g.bus_bytes_per_second == pytest.approx((0.2 * 20e9 + 0.7 * 40e9) / 0.9)
    # inter-node: bound by the nearest NICs' active ports (mlx5_0 and the active port of mlx5_1)
    assert (g.capacity, g.capacity_bytes_per_second) == ("nic", 100e9)
    assert g.bus_capacity_ratio == pytest.approx(g.bus_bytes_per_second / 100e9)
    assert g.owner == "slurm:4411872"  # the attribution says so; NVML lists two owners on the GPU
    # the time share is capped where communicators overlap
    heavy = [reading_at(100.0 + s, rank(comm=c, ops=s, exec_s=0.8 * s)) for s in range(11) for c in ("0xa",)]
    both = [reading_at(r.t, *r.data.ranks, rank(comm="0xb", ops=s, exec_s=0.8 * s)) for s, r in enumerate(heavy)]
    (capped,) = join_ranks_to_gpus(window_of(both), both[-1], node).gpus.values()
    assert capped.exec_ratio == 1.0
    assert capped.owner == ""  # two owners on the GPU and no attribution given


def test_intra_node_capacity_is_the_callers_nvlink_figure_and_gauges_stand_in_for_counts():
    node = gpus(gpu(0, owners=["host"]))
    readings = [reading_at(100.0 + s, gauge_rank(uuid=node.gpus[0].uuid, bw=450e9)) for s in range(3)]
    stats = window_of(readings)
    (g,) = join_ranks_to_gpus(stats, readings[-1], node).gpus.values()
    assert g.exec_ratio is None and g.bus_bytes_per_second == pytest.approx(450e9)
    assert (g.capacity, g.capacity_bytes_per_second, g.bus_capacity_ratio) == ("", None, None)
    assert g.owner == "host"
    (g,) = join_ranks_to_gpus(stats, readings[-1], node, nvlink_capacity={node.gpus[0].uuid: 900e9}).gpus.values()
    assert (g.capacity, g.bus_capacity_ratio) == ("nvlink", pytest.approx(0.5))


def test_nothing_to_join():
    assert join_ranks_to_gpus(None, None, gpus(gpu(0))).gpus == {}
    assert join_ranks_to_gpus(None, reading_at(1.0, rank()), None).gpus == {}
