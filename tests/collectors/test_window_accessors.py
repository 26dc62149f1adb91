"""The contract between the collectors and the verdict: every typed accessor of a collector's
window.py, on a window its own ``columns()`` (or ``rows``) built from a real payload of the
fixture host, returns values. A column the verdict needs that is renamed, dropped or keyed
differently on one side only makes its accessor come back all NaN (or empty), and fails here,
instead of silently taking that cause's evidence out of every verdict."""

from __future__ import annotations

import math
import shutil
import time

import pytest

from cgroup_owners import GPU_CONTAINER, POD, POD_PATH
from conftest import HOST_TREE, text_fixture
from fixture_host import inspector_line
from gpuwait.collectors.cgroup import window as cgroup_window
from gpuwait.collectors.cgroup.source import OwnerCgroupSource
from gpuwait.collectors.cpu import window as cpu_window
from gpuwait.collectors.cpu.source import CpuSource
from gpuwait.collectors.diskstats import window as disk_window
from gpuwait.collectors.diskstats.source import DEFAULT_DEVICE_EXCLUDE, DiskstatsSource
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.collectors.gpu.source import GpuDeviceSource, GpuSource, fast_rows
from gpuwait.collectors.nccl import window as nccl_window
from gpuwait.collectors.nccl.source import NcclSource
from gpuwait.collectors.netdev import window as netdev_window
from gpuwait.collectors.netdev.source import DEFAULT_DEVICE_EXCLUDE as NETDEV_EXCLUDE, NetdevSource
from gpuwait.collectors.nfs import window as nfs_window
from gpuwait.collectors.nfs.source import NfsSource
from gpuwait.collectors.pressure import window as pressure_window
from gpuwait.collectors.pressure.source import PressureSource
from gpuwait.collectors.rdma import window as rdma_window
from gpuwait.collectors.rdma.source import RdmaTrafficSource
from gpuwait.core.config import parse_regex
from gpuwait.core.registry import resolve
from gpuwait.core.ring import Column, ColumnRing, WindowView
from gpuwait.core.source import HostPaths
from gpuwait.nvml.gateway import Gateway
from nvml_support import HGX_MACHINE, load_double

PATHS = HostPaths(str(HOST_TREE / "proc"), str(HOST_TREE / "sys"))


def window_of(source, columns, reads: int = 3, step: float = 0.1) -> WindowView:
    """A window of ``reads`` real readings, stamped ``step`` apart, through ``columns``."""
    ring = ColumnRing(reads + 1)
    for i in range(reads):
        ring.append(i * step, columns(source.read().data))
    return ring.view()


def has_values(column: Column) -> bool:
    return len(column.times) == len(column.values) > 0 and any(not math.isnan(v) for v in column.values)


def test_cpu_accessors():
    view = window_of(CpuSource(PATHS), cpu_window.columns)
    assert has_values(cpu_window.saturated_cores(view, 0.9))
    assert has_values(cpu_window.procs_blocked(view))


def test_pressure_accessors():
    view = window_of(PressureSource(PATHS), pressure_window.columns)
    stalled = pressure_window.stalled_seconds(view, "io", "some")
    assert stalled is not None and has_values(stalled)
    assert pressure_window.stalled_seconds(view, "cpu", "full") is None  # left out on purpose


def test_diskstats_accessors():
    view = window_of(DiskstatsSource(PATHS, parse_regex(DEFAULT_DEVICE_EXCLUDE)), disk_window.columns)
    devices = disk_window.devices(view)
    assert devices
    for device in devices:
        counters = disk_window.device_counters(view, device)
        for name, column in counters._asdict().items():
            assert has_values(column), (device, name)
        assert counters.queue_time.modulus == pytest.approx(2**32 / 1000)


def test_nfs_accessors():
    view = window_of(NfsSource(PATHS), nfs_window.columns)
    mounts = nfs_window.mounts(view)
    assert mounts == ["/mnt/datasets"]
    operations = nfs_window.operations(view, "/mnt/datasets")
    assert {o.op for o in operations} >= {"READ", "GETATTR", "LOOKUP"}
    for operation in operations:
        assert has_values(operation.count) and has_values(operation.execute_ms), operation.op


def test_netdev_accessors():
    view = window_of(NetdevSource(PATHS, parse_regex(NETDEV_EXCLUDE)), netdev_window.columns)
    links = netdev_window.links(view)
    assert links
    for link in links:
        assert has_values(link.bytes), link.interface


def test_rdma_accessors():
    view = window_of(RdmaTrafficSource(PATHS), rdma_window.columns)
    links = rdma_window.links(view)
    assert {(link.device, link.port, link.link_layer) for link in links} == {
        ("mlx5_0", 1, "InfiniBand"), ("mlx5_1", 1, "Ethernet")}
    for link in links:
        assert has_values(link.bytes), link.device


def test_nccl_accessors(tmp_path):
    """A JSON-mode dump (counts) and a Prometheus-mode one (gauges) side by side."""
    now = time.time()
    (tmp_path / "hgx-a17-pid4242.log").write_text("".join(inspector_line(seq, now) for seq in range(20)))
    (tmp_path / "nccl_inspector_metrics_2b1e8f4c-3d9a-4e6b-8c1d-5a7f9e2b6c3d.prom").write_text(
        text_fixture("nccl", "prom-2.30.prom"))
    view = window_of(NcclSource(PATHS, str(tmp_path)), nccl_window.columns)
    ranks = {(r.kind, r.pid): r for r in nccl_window.ranks(view)}
    counted, gauged = ranks[("collective", 4242)], ranks[("collective", 0)]
    for column in (counted.operations, counted.exec_seconds, counted.msg_bytes, counted.bus_bytes,
                   counted.completion_age, counted.nodes, gauged.bus_bandwidth, gauged.completion_age):
        assert has_values(column)
    assert nccl_window.n_nodes(counted) == 1
    assert nccl_window.exec_share(counted) == 0.0  # nothing completed after the first read
    assert nccl_window.bus_bytes_per_second(gauged) > 0
    assert nccl_window.seconds_since_completion(counted) is not None


@pytest.fixture
def gpu_sources():
    double = load_double()
    double.configure(HGX_MACHINE)
    settings = resolve(["--sample.interval=100ms"])[0]
    gateway = Gateway(call_timeout=0.5, retry_max=0.5, first_retry=0.05, nvml=double)
    fast, slow = GpuSource(PATHS, settings, gateway=gateway), GpuDeviceSource(PATHS, settings, gateway=gateway)
    yield fast, slow
    gateway.close()
    if double.machine() is not None:
        double.machine().release.set()
    double.configure(None)


def test_gpu_accessors(gpu_sources):
    fast, slow = gpu_sources
    ring = ColumnRing(1000)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        for t, values in fast_rows(fast.read()):
            ring.append(t, values)
        if len(ring) >= 5:
            break
        time.sleep(0.1)
    view = ring.view()
    gpu = ("0", next(uuid for index, uuid in gpu_window.gpus(view) if index == "0"))
    assert len(gpu_window.gpus(view)) >= 7
    assert has_values(gpu_window.sm_active(view, gpu))
    assert has_values(gpu_window.utilization(view, gpu))
    assert has_values(gpu_window.clock_event_reasons(view, gpu))
    assert has_values(gpu_window.pcie_bytes(view, gpu))
    rx, tx = gpu_window.gpm_pcie_rates(view, gpu)
    assert has_values(rx) and has_values(tx)


def test_gpu_device_owner_accessors(gpu_sources):
    _, slow = gpu_sources
    device_view = window_of(slow, gpu_window.device_columns, reads=2, step=1.0)
    activity = gpu_window.owner_activity(device_view)
    owners = {use.owner for g in slow.read().data.gpus for use in g.owners}
    assert owners and set(activity) == owners
    for owner, (cores, blocked) in activity.items():
        assert not math.isnan(cores) and not math.isnan(blocked), owner


def test_cgroup_accessors(gpu_sources, tmp_path):
    """The owners the gpu collector attributes, read by the cgroup source from a copy of the
    fixture host's cgroup tree whose GPU container advances under its quota between reads."""
    _, slow = gpu_sources
    slow.read()  # attributes the GPU processes to their owners, into the host's directory
    sysfs = tmp_path / "sys"
    shutil.copytree(HOST_TREE / "sys", sysfs, symlinks=True)
    stat = sysfs / "fs/cgroup" / POD_PATH.lstrip("/") / GPU_CONTAINER / "cpu.stat"
    source = OwnerCgroupSource(HostPaths(PATHS.procfs, str(sysfs)), slow.owner_directory, max_age=60.0)
    ring = ColumnRing(4)
    for i in range(3):
        periods = 10 * i
        stat.write_text(f"usage_usec {periods * 20000}\nuser_usec 0\nsystem_usec 0\nnr_periods {periods}\n"
                        f"nr_throttled {periods // 2}\nthrottled_usec {periods * 40000}\n")
        ring.append(i * 1.0, cgroup_window.columns(source.read().data))
    view = ring.view()
    assert POD in cgroup_window.owners(view)
    cores = cgroup_window.cpu_cores(view, POD)
    assert cores.mean is not None and has_values(cores.intervals)
    assert cgroup_window.quota_cores(view, POD) == pytest.approx(0.4)
    throttling = cgroup_window.throttled_ratio(view, POD)
    assert throttling.ratio == pytest.approx(0.5) and throttling.level == GPU_CONTAINER
    assert has_values(throttling.intervals)
    assert has_values(cgroup_window.pressure_rate(view, POD, "io", "some").intervals)
    io = cgroup_window.io_read_rate(view, POD)
    assert has_values(io.bytes_per_second.intervals) and has_values(io.ops_per_second.intervals)
