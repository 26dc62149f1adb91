"""The directory of the owners holding a GPU: shared by the sources of one host, bounded in time."""

from __future__ import annotations

from cgroup_owners import Clock
from gpuwait.core.source import HostPaths
from gpuwait.owners.cgroup import HOST as HOST_OWNER
from gpuwait.owners.directory import OwnerDirectory, acquire_directory, release_directory


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
