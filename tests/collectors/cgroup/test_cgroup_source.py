"""The owner cgroup source on fixture trees (the fixture host's cgroup v2 tree, and a hybrid v1
host), with owners supplied the way the gpu collector supplies them."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from cgroup_owners import GPU_CONTAINER, JOB, POD, POD_PATH, POD_V1, Clock, fixture_owners, host_paths, source_with, v1_owner
from conftest import CGROUP_V1_TREE, HOST_TREE, text_fixture
from gpuwait.collectors.cgroup.payload import CgroupBandwidth, CgroupIo
from gpuwait.collectors.cgroup.source import OWNER_READS_KEPT, OwnerCgroupSource
from gpuwait.core.errors import NoData
from gpuwait.core.registry import resolve
from gpuwait.core.source import HostPaths
from gpuwait.owners.cgroup import HOST as HOST_OWNER, owner_from_cgroup, parse_cgroup
from gpuwait.owners.directory import OwnerDirectory, acquire_directory, release_directory
from gpuwait.owners.tracker import read_owner

V1_SYS = CGROUP_V1_TREE / "sys"
SIDECAR = "cri-containerd-8c1f04a2b3e5d6978a0b1c2d3e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f607.scope"


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
        GPU_CONTAINER: CgroupBandwidth(pytest.approx(0.2), 54, 50, pytest.approx(3.454268)),
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
    shutil.copytree(HOST_TREE / "sys" / "fs", sysfs / "fs")
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
    assert pod.cpu_periods == 53 and pod.children[GPU_CONTAINER].throttled_periods == 50
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
    paths = HostPaths(str(HOST_TREE / "proc"), str(tmp_path))
    with pytest.raises(NoData) as raised:
        source_with(paths, fixture_owners(host_paths())).read()
    assert raised.value.cause == f"unavailable:{tmp_path}/fs/cgroup"


def test_no_owner_holding_a_gpu_is_an_empty_reading():
    reading = source_with(host_paths(), []).read()
    assert reading.data.owners == {} and reading.errors == ()


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
    owner = owner_from_cgroup(parse_cgroup(text_fixture("cgroup", "k8s_v2_private_cgroupns.txt")))
    assert owner.cgroup == "/kubepods-besteffort.slice/kubepods-besteffort-pod6ab97f10_441d_40f8_806d_717f5b732b14.slice"
    sysfs = tmp_path / "sys"
    pod_dir = sysfs / "fs/cgroup/kubepods.slice" / owner.cgroup.lstrip("/")
    shutil.copytree(HOST_TREE / "sys/fs/cgroup" / POD_PATH.lstrip("/"), pod_dir)
    shutil.copyfile(HOST_TREE / "sys/fs/cgroup/cgroup.controllers", sysfs / "fs/cgroup/cgroup.controllers")
    reading = source_with(HostPaths(str(HOST_TREE / "proc"), str(sysfs)), [owner]).read()
    found = reading.data.owners[owner.id]
    assert found.path == "/kubepods.slice" + owner.cgroup
    assert found.cpu_quota_cores == pytest.approx(0.4) and reading.errors == ()


# -- cgroup v1 (hybrid) -------------------------------------------------------------------


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


# -- from the settings --------------------------------------------------------------------


def test_the_collector_reads_the_owners_the_gpu_collector_attributes_on_its_host():
    settings, _ = resolve([f"--path.procfs={HOST_TREE / 'proc'}", f"--path.sysfs={HOST_TREE / 'sys'}",
                           "--sample.slow-interval=2s"])
    paths = host_paths()
    directory = acquire_directory(paths)  # as the gpu collector's source of that host does
    try:
        source = OwnerCgroupSource.from_settings(settings)
        assert source.directory is directory and source.max_age == OWNER_READS_KEPT * 2.0
        directory.update(fixture_owners(paths))
        assert set(source.read().data.owners) == {POD, JOB}
        source.close()
        source.close()  # lets go of the directory once
        assert acquire_directory(paths) is directory  # the gpu source's hold remains
        release_directory(paths)
    finally:
        release_directory(paths)
    assert acquire_directory(paths) is not directory
    release_directory(paths)
