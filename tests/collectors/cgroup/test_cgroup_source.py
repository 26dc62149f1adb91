"""The owner cgroup source on fixture trees (v2, and a hybrid v1 host), with owners supplied
the way the GPU collector supplies them; its window accessors; its payload in a trace."""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest

from gpuwait.collectors.cgroup import window
from gpuwait.collectors.cgroup.payload import CgroupBandwidth, CgroupIo, OwnerCgroup, OwnerCgroupData
from gpuwait.collectors.cgroup.source import OwnerCgroupSource
from gpuwait.owners import OwnerDirectory, acquire_directory, read_owner, release_directory
from gpuwait.parsers.cgroup import HOST as HOST_OWNER, owner_from_cgroup, parse_cgroup
from gpuwait.reading import Reading
from gpuwait.ring import ColumnRing
from gpuwait.sources.base import HostPaths
from gpuwait.trace.codec import from_jsonable, to_jsonable

FIXTURES = pathlib.Path(__file__).parents[2] / "fixtures"
HOST = FIXTURES / "host"
V1_SYS = FIXTURES / "cgroup" / "v1"
POD = "kubernetes:4312ade9-202f-48f0-beb7-fe4764012968"
POD_PATH = "/kubepods.slice/kubepods-pod4312ade9_202f_48f0_beb7_fe4764012968.slice"
GPU_CTR = "cri-containerd-5599b9703f1a53fd260fdd2966bce88dcf9e74e63894eec94a1379e18e17765a.scope"
SIDECAR = "cri-containerd-8c1f04a2b3e5d6978a0b1c2d3e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f607.scope"
JOB = "slurm:12345"
POD_V1 = "kubernetes:d48336c5-45ad-4e78-b1a0-005736bbcfd9"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def host_paths(sysfs: pathlib.Path = HOST / "sys") -> HostPaths:
    return HostPaths(str(HOST / "proc"), str(sysfs))


def fixture_owners(paths: HostPaths):
    """What the GPU collector attributes on the fixture host: its processes' own cgroup files."""
    return [read_owner(paths, 4242), read_owner(paths, 5151)]


def source_with(paths: HostPaths, owners, clock=None) -> OwnerCgroupSource:
    directory = OwnerDirectory(clock=clock or Clock())
    directory.update(owners)
    return OwnerCgroupSource(paths, directory, max_age=15.0, ticks_per_second=100)


# -- cgroup v2 ------------------------------------------------------------------------------


def test_v2_pod_is_read_at_the_pod_level_with_its_containers_quotas():
    paths = host_paths()
    reading = source_with(paths, fixture_owners(paths)).read()
    assert reading.errors == ()
    pod = reading.data.owners[POD]
    assert pod.path == POD_PATH and pod.version == 2
    assert pod.cpu_usage_seconds == pytest.approx(1.000613)
    assert pod.cpu_quota_cores == pytest.approx(0.4)
    assert (pod.cpu_periods, pod.cpu_throttled_periods) == (53, 0)
    # The GPU container's own 0.2-CPU quota is what throttles; the pause container has none.
    assert pod.children == {
        GPU_CTR: CgroupBandwidth(pytest.approx(0.2), 54, 50, pytest.approx(3.454268)),
        SIDECAR: CgroupBandwidth(pytest.approx(0.2), 0, 0, 0.0),
    }
    assert pod.io["259:4"] == CgroupIo(16781312, 4194304, 257, 64, 0, 0)
    assert pod.pressure[("cpu", "some")] == pytest.approx(2.685992)
    assert reading.data.devices == {"259:0": "nvme0n1", "259:4": "nvme1n1"}


def test_v2_slurm_job_without_the_io_controller_has_no_io_and_no_error():
    paths = host_paths()
    reading = source_with(paths, fixture_owners(paths)).read()
    job = reading.data.owners[JOB]
    assert job.path == "/system.slice/slurmstepd.scope/job_12345"
    assert job.io == {} and job.cpu_quota_cores is None and job.children == {}
    assert job.cpu_usage_seconds == pytest.approx(734.004121)
    assert reading.errors == ()


def test_the_host_owner_reads_the_root_cgroup_and_requires_nothing_of_it():
    reading = source_with(host_paths(), [HOST_OWNER]).read()
    root = reading.data.owners["host"]
    assert root.path == "/" and root.cpu_quota_cores is None and root.children == {}
    assert root.cpu_usage_seconds == pytest.approx(747.932968)
    assert reading.errors == ()


def copy_sysfs(tmp_path: pathlib.Path) -> pathlib.Path:
    sysfs = tmp_path / "sys"
    shutil.copytree(HOST / "sys" / "fs", sysfs / "fs")
    return sysfs


def test_a_missing_file_that_should_exist_costs_its_field_and_counts(tmp_path):
    sysfs = copy_sysfs(tmp_path)
    (sysfs / "fs/cgroup" / POD_PATH.lstrip("/") / "cpu.max").unlink()
    (sysfs / "fs/cgroup" / POD_PATH.lstrip("/") / "io.stat").write_text("garbage\n")
    paths = host_paths(sysfs)
    reading = source_with(paths, fixture_owners(paths)).read()
    root = f"{sysfs}/fs/cgroup"
    assert set(reading.errors) == {f"missing:{root}/<owner>/cpu.max", f"parse:{root}/<owner>/io.stat"}
    pod = reading.data.owners[POD]
    assert pod.cpu_quota_cores is None and pod.io == {}
    assert pod.cpu_periods == 53 and pod.children[GPU_CTR].throttled_periods == 50
    assert reading.data.owners[JOB].cpu_usage_seconds == pytest.approx(734.004121)


def test_files_the_kernel_does_not_provide_are_no_error(tmp_path):
    sysfs = copy_sysfs(tmp_path)
    pod_dir = sysfs / "fs/cgroup" / POD_PATH.lstrip("/")
    for name in ("cpu.pressure", "io.pressure", "memory.pressure"):  # a kernel without PSI
        pod_dir.joinpath(name).unlink()
    pod_dir.joinpath("cgroup.controllers").write_text("cpuset cpu memory pids\n")  # io not enabled here
    pod_dir.joinpath("io.stat").unlink()
    paths = host_paths(sysfs)
    reading = source_with(paths, fixture_owners(paths)).read()
    assert reading.errors == ()
    pod = reading.data.owners[POD]
    assert pod.pressure == {} and pod.io == {} and pod.cpu_quota_cores == pytest.approx(0.4)


def test_no_cgroup_filesystem_is_no_data_not_a_failure(tmp_path):
    paths = HostPaths(str(HOST / "proc"), str(tmp_path))
    reading = source_with(paths, fixture_owners(host_paths())).read()
    assert reading.data == OwnerCgroupData({}) and reading.errors == ()


def test_an_owner_whose_cgroup_is_gone_counts_only_while_it_is_current(tmp_path):
    sysfs = copy_sysfs(tmp_path)
    shutil.rmtree(sysfs / "fs/cgroup/system.slice/slurmstepd.scope/job_12345")
    paths = host_paths(sysfs)
    clock = Clock()
    directory = OwnerDirectory(clock=clock)
    directory.update(fixture_owners(paths))
    source = OwnerCgroupSource(paths, directory, max_age=15.0)
    reading = source.read()
    assert JOB not in reading.data.owners and POD in reading.data.owners
    assert reading.errors == (f"missing:{sysfs}/fs/cgroup/<owner>",)
    # The next attribution names the pod only: the job ended, its cgroup may be gone.
    clock.t += 5
    directory.update([read_owner(paths, 4242)])
    assert source.read().errors == ()
    # Not named for longer than max_age: no longer asked about at all.
    clock.t += 20
    directory.update([])
    assert source.read().data.owners == {}


def test_a_path_seen_from_a_private_cgroup_namespace_is_found_below_the_root(tmp_path):
    """Inside a container with its own cgroup namespace, another pod's cgroup reads
    /../../kubepods-besteffort.slice/...; the attribution drops the steps up."""
    owner = owner_from_cgroup(parse_cgroup((FIXTURES / "text/cgroup/k8s_v2_private_cgroupns.txt").read_text()))
    assert owner.cgroup == "/kubepods-besteffort.slice/kubepods-besteffort-pod6ab97f10_441d_40f8_806d_717f5b732b14.slice"
    sysfs = tmp_path / "sys"
    pod_dir = sysfs / "fs/cgroup/kubepods.slice" / owner.cgroup.lstrip("/")
    shutil.copytree(HOST / "sys/fs/cgroup" / POD_PATH.lstrip("/"), pod_dir)
    shutil.copyfile(HOST / "sys/fs/cgroup/cgroup.controllers", sysfs / "fs/cgroup/cgroup.controllers")
    reading = source_with(HostPaths(str(HOST / "proc"), str(sysfs)), [owner]).read()
    found = reading.data.owners[owner.id]
    assert found.path == "/kubepods.slice" + owner.cgroup
    assert found.cpu_quota_cores == pytest.approx(0.4) and reading.errors == ()


# -- cgroup v1 (hybrid) -------------------------------------------------------------------


def v1_owner():
    return owner_from_cgroup(parse_cgroup((FIXTURES / "text/cgroup/k8s_cgroupfs_v1_burstable.txt").read_text()))


def test_v1_hybrid_host_reads_cpu_cpuacct_blkio_and_the_unified_pressure():
    reading = source_with(host_paths(V1_SYS), [v1_owner()]).read()
    assert reading.errors == ()
    pod = reading.data.owners[POD_V1]
    assert pod.path == "/kubepods/burstable/podd48336c5-45ad-4e78-b1a0-005736bbcfd9" and pod.version == 1
    assert pod.cpu_usage_seconds == pytest.approx(1.000613526)
    assert (pod.cpu_user_seconds, pod.cpu_system_seconds) == (pytest.approx(0.89), pytest.approx(0.10))
    assert pod.cpu_quota_cores == pytest.approx(0.4) and pod.cpu_throttled_periods == 0
    (name, container), = pod.children.items()
    assert name == "d3ba3468136628bcec364146de2049d4d6395f7f0b948a824a6a254fa425f1db"
    assert container == CgroupBandwidth(pytest.approx(0.2), 54, 50, pytest.approx(3.454268271))
    # The pod's own tasks did no IO; its containers' (the _recursive files) did.
    assert pod.io == {"254:0": CgroupIo(16781312, 4194304, 257, 64, 0, 0)}
    assert pod.pressure[("cpu", "full")] == pytest.approx(2.670901)
    assert reading.data.devices == {"254:0": "vda"}


def test_v1_file_missing_where_the_hierarchy_root_has_it_counts(tmp_path):
    sysfs = tmp_path / "sys"
    shutil.copytree(V1_SYS, sysfs, symlinks=True)
    pod = "kubepods/burstable/podd48336c5-45ad-4e78-b1a0-005736bbcfd9"
    (sysfs / "fs/cgroup/cpuacct" / pod / "cpuacct.usage").unlink()
    (sysfs / "fs/cgroup/unified" / pod / "io.pressure").unlink()  # PSI files: never required
    reading = source_with(host_paths(sysfs), [v1_owner()]).read()
    assert reading.errors == (f"missing:{sysfs}/fs/cgroup/cpuacct/<owner>/cpuacct.usage",)
    found = reading.data.owners[POD_V1]
    assert found.cpu_usage_seconds is None and found.cpu_user_seconds == pytest.approx(0.89)
    assert ("io", "some") not in found.pressure and ("cpu", "some") in found.pressure


def test_v1_owner_absent_from_a_hierarchy_has_none_there(tmp_path):
    # Slurm's cgroup/v1 plugin places a job in cpuset, memory and devices, not in cpu: the job's
    # fields from cpu stay None without an error.
    sysfs = tmp_path / "sys"
    shutil.copytree(V1_SYS, sysfs, symlinks=True)
    shutil.rmtree(sysfs / "fs/cgroup/cpu/kubepods")
    reading = source_with(host_paths(sysfs), [v1_owner()]).read()
    pod = reading.data.owners[POD_V1]
    assert pod.cpu_periods is None and pod.cpu_quota_cores is None and pod.children == {}
    assert pod.cpu_usage_seconds == pytest.approx(1.000613526)
    assert reading.errors == ()


# -- the directory ---------------------------------------------------------------------------


def test_sources_of_one_host_share_one_directory_until_the_last_lets_go():
    paths = HostPaths("/nonexistent/proc", "/nonexistent/sys")
    first, second = acquire_directory(paths), acquire_directory(paths)
    assert first is second
    release_directory(paths)
    release_directory(paths)
    assert acquire_directory(paths) is not first
    release_directory(paths)


def test_the_directory_forgets_owners_after_a_while():
    clock = Clock()
    directory = OwnerDirectory(forget_after=60.0, clock=clock)
    directory.update([HOST_OWNER])
    clock.t += 61
    directory.update([])
    assert directory.current(max_age=1e9) == {}


# -- the window ----------------------------------------------------------------------------


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
    assert throttling.values == pytest.approx([0.6] * 4) and throttling.times == view.times[1:]
    assert window.quota_cores(view, "o") == 4.0
    assert window.cpu_cores(view, "o").mean == pytest.approx(2.0)
    assert window.pressure_rate(view, "o", "cpu", "some").values == pytest.approx([0.3] * 4)
    io = window.io_read_rate(view, "o")
    assert io.bytes_per_second.mean == pytest.approx(409600.0)  # the busy device; the other reads nothing
    assert io.ops_per_second.values == pytest.approx([100.0] * 4)


def test_a_counter_reset_leaves_its_interval_out():
    cgs = [cgroup(2.0 * i, 10 * i, 5 * i, 0, 0, 4096 * i, 0.1 * i) for i in range(6)]
    cgs[3] = cgroup(0.0, 0, 0, 0, 0, 0, 0.0)  # the cgroup was recreated: counters from zero
    view = view_of(cgs)
    rates = window.cpu_cores(view, "o").values
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


# -- the trace ---------------------------------------------------------------------------------


def test_a_reading_survives_the_trace_format():
    paths = host_paths()
    data = source_with(paths, [*fixture_owners(paths), HOST_OWNER]).read().data
    assert from_jsonable(OwnerCgroupData, to_jsonable(data)) == data
    assert from_jsonable(OwnerCgroupData, {"owners": {}}) == OwnerCgroupData({})
