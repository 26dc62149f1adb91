"""The owners of the fixture hosts' cgroups, as the gpu collector attributes them, and a cgroup
source fed with them: the fixture host's pod and Slurm job (cgroup v2), and the pod of the
hybrid v1 host (tests/fixtures/host_cgroup_v1)."""

from __future__ import annotations

import pathlib

from conftest import HOST_TREE, text_fixture
from gpuwait.collectors.cgroup.source import OwnerCgroupSource
from gpuwait.core.source import HostPaths
from gpuwait.owners.cgroup import Owner, owner_from_cgroup, parse_cgroup
from gpuwait.owners.directory import OwnerDirectory
from gpuwait.owners.tracker import read_owner

POD = "kubernetes:4312ade9-202f-48f0-beb7-fe4764012968"
POD_PATH = "/kubepods.slice/kubepods-pod4312ade9_202f_48f0_beb7_fe4764012968.slice"
#: the pod's GPU container, whose own CPU quota (0.2 of the pod's 0.4) is the one that throttles
GPU_CONTAINER = "cri-containerd-5599b9703f1a53fd260fdd2966bce88dcf9e74e63894eec94a1379e18e17765a.scope"
JOB = "slurm:12345"
POD_V1 = "kubernetes:d48336c5-45ad-4e78-b1a0-005736bbcfd9"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def host_paths(sysfs: pathlib.Path = HOST_TREE / "sys") -> HostPaths:
    return HostPaths(str(HOST_TREE / "proc"), str(sysfs))


def fixture_owners(paths: HostPaths) -> list[Owner]:
    """What the gpu collector attributes on the fixture host: its GPU processes' own
    /proc/<pid>/cgroup (4242 in the pod, 5151 in the Slurm job)."""
    return [read_owner(paths, 4242), read_owner(paths, 5151)]


def v1_owner() -> Owner:
    return owner_from_cgroup(parse_cgroup(text_fixture("cgroup", "k8s_cgroupfs_v1_burstable.txt")))


def source_with(paths: HostPaths, owners, clock=None) -> OwnerCgroupSource:
    directory = OwnerDirectory(clock=clock or Clock())
    directory.update(owners)
    return OwnerCgroupSource(paths, directory, max_age=15.0, ticks_per_second=100)
