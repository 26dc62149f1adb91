"""The join of NCCL ranks to the GPUs they ran on, and what NCCL's timing says per GPU."""

from __future__ import annotations

import dataclasses

import pytest

from gpuwait.analysis.collectives import join_ranks_to_gpus
from gpuwait.collectors.gpu.payload import GpuDevice, GpuDeviceData, OwnerUse
from gpuwait.collectors.nccl import window
from gpuwait.collectors.rdma.payload import RdmaData, RdmaDeviceData, RdmaPortData
from gpuwait.nvml.values import GpuProcess
from nccl_readings import WALL, gauge_rank, rank, reading_at, steady, view_of


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
    view = view_of([latest])
    joined = join_ranks_to_gpus(view, node, node_hostname="hgx-a17")
    assert joined.unmatched == 2
    by_index = {g.index: g for g in joined.gpus.values()}
    assert sorted(by_index) == [0, 1, 2]
    assert (by_index[0].ranks, by_index[0].matched_by, by_index[0].owner) == (2, "pid", "kubernetes:pod-a")
    assert by_index[1].matched_by == "uuid"
    assert by_index[2].matched_by == "device_index"
    # the GPU's most recent operation: at WALL + 9, read at WALL + 10
    assert by_index[0].last_operation_age_seconds == pytest.approx(1.0)
    assert join_ranks_to_gpus(view, node, at=112.0).gpus[node.gpus[0].uuid].last_operation_age_seconds == pytest.approx(3.0)
    assert joined.gpus[node.gpus[0].uuid] is by_index[0]
    # without the node's host name the device index is not trusted
    assert 2 not in {g.index for g in join_ranks_to_gpus(view, node).gpus.values()}


def test_a_process_on_several_gpus_is_joined_only_where_its_file_names_the_gpu():
    node = gpus(gpu(0, pids=[900]), gpu(1, pids=[900]))
    latest = reading_at(110.0, rank(pid=900), dataclasses.replace(rank(pid=900, comm="0xf"), device_uuid=node.gpus[1].uuid))
    joined = join_ranks_to_gpus(view_of([latest]), node)
    assert joined.unmatched == 1
    assert [g.index for g in joined.gpus.values()] == [1]


def test_time_share_bandwidth_and_capacity_of_a_gpu():
    node = gpus(gpu(0, pids=[4242], owners=["slurm:4411872", "host"], nics={"mlx5_0": "PIX", "mlx5_1": "PIX", "mlx5_2": "SYS"}))
    fabric = RdmaData((nic("mlx5_0", 50e9), nic("mlx5_1", 50e9, 50e9, states=[4, 1]), nic("mlx5_2", 50e9)))
    # two communicators: 20 % and 70 % of the time in NCCL kernels, at 20 and 40 GB/s
    readings = [reading_at(100.0 + s, rank(comm="0xa", n_nodes=2, ops=20 * s, exec_s=0.2 * s, bus=0.2 * s * 20e9),
                           rank(comm="0xb", ops=10 * s, exec_s=0.7 * s, bus=0.7 * s * 40e9)) for s in range(11)]
    view = view_of(readings)
    assert window.exec_share(window.ranks(view)[0]) == pytest.approx(0.2)
    (g,) = join_ranks_to_gpus(view, node, fabric, owner_of={4242: "slurm:4411872"}).gpus.values()
    assert g.exec_ratio == pytest.approx(0.9)
    assert g.bus_bytes_per_second == pytest.approx((0.2 * 20e9 + 0.7 * 40e9) / 0.9)
    # inter-node: bound by the nearest NICs' active ports (mlx5_0 and the active port of mlx5_1)
    assert (g.capacity, g.capacity_bytes_per_second) == ("nic", 100e9)
    assert g.bus_capacity_ratio == pytest.approx(g.bus_bytes_per_second / 100e9)
    assert g.owner == "slurm:4411872"  # the attribution says so; NVML lists two owners on the GPU
    # the time share is capped where communicators overlap
    both = [reading_at(100.0 + s, rank(comm="0xa", ops=s, exec_s=0.8 * s), rank(comm="0xb", ops=s, exec_s=0.8 * s))
            for s in range(11)]
    (capped,) = join_ranks_to_gpus(view_of(both), node).gpus.values()
    assert capped.exec_ratio == 1.0
    assert capped.owner == ""  # two owners on the GPU and no attribution given


def test_intra_node_capacity_is_the_callers_nvlink_figure_and_gauges_stand_in_for_counts():
    node = gpus(gpu(0, owners=["host"]))
    view = view_of([reading_at(100.0 + s, gauge_rank(uuid=node.gpus[0].uuid, bw=450e9)) for s in range(3)])
    (g,) = join_ranks_to_gpus(view, node).gpus.values()
    assert g.exec_ratio is None and g.bus_bytes_per_second == pytest.approx(450e9)
    assert (g.capacity, g.capacity_bytes_per_second, g.bus_capacity_ratio) == ("", None, None)
    assert g.owner == "host"
    (g,) = join_ranks_to_gpus(view, node, nvlink_capacity={node.gpus[0].uuid: 900e9}).gpus.values()
    assert (g.capacity, g.bus_capacity_ratio) == ("nvlink", pytest.approx(0.5))


def test_nothing_to_join():
    assert join_ranks_to_gpus(None, gpus(gpu(0))).gpus == {}
    assert join_ranks_to_gpus(view_of(steady(2)), None).gpus == {}
