"""The host's view from the exporter's pod, for real: the exporter process runs as the
DaemonSet runs it (tests/support/pod_exec.py), in a mount namespace of its own made with
``unshare --mount``, with this host's /proc bound read-only at /host/proc and passed as
--path.procfs, as user 65534 with only the capabilities named, no_new_privs.

- NICs. /proc/net is a link to self/net, so <procfs>/net/dev lists the network namespace of
  the process that reads it, whichever procfs mount it goes through. With hostNetwork the
  exporter shares the host's namespace and sees the host's NICs (here a veth end made for
  the test); in a namespace of its own it sees that namespace's interfaces only.
- Mounts. <procfs>/self/mountstats lists the reader's own mount namespace, which in a pod is
  not the host's; with hostPID, <procfs>/1/mountstats lists init's, the host's: where the
  kubelet mounts NFS volumes. The NFS collector keeps only nfs/nfs4 blocks; the kernel this
  was written on has no NFS at all (built without CONFIG_NETWORK_FILESYSTEMS), so the host's
  table is shown by a mount made on the host after the exporter started (a tmpfs): it is in
  the file the exporter reads and not in the exporter's own.
- Permission. /proc/<pid>/mountstats is mode 0400, owned by the task's user
  (fs/proc/base.c: REG("mountstats", S_IRUSR, ...)); opening it checks file permissions only
  (fs/proc_namespace.c mounts_open_common has no ptrace check). So user 65534 reads init's
  file with CAP_DAC_READ_SEARCH (or CAP_DAC_OVERRIDE), not with CAP_SYS_PTRACE, and user 0
  reads it with no capability at all, as its owner.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

import pytest

from gpuwait.collectors.nfs.parse import parse_mountstats, split_devices, unescape
from pod_support import PodExporter, only_collectors
from support import value

pytestmark = pytest.mark.integration

HOST_ADDRESS, POD_ADDRESS, PREFIX = "10.254.214.1", "10.254.214.2", 30
QUIET = only_collectors("netdev", "nfs")
FAST = ["--sample.slow-interval=500ms"]


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=check)


@pytest.fixture
def network():
    """A pod's network: namespace gwpv-<tag> holding gwp<tag>, whose veth peer gwh<tag> stays
    in the host's namespace, as a CNI plugin wires a pod. Names avoid netdev's default
    exclusion of veth*."""
    tag = str(os.getpid() % 100000)
    names = {"netns": f"gwpv-{tag}", "host": f"gwh{tag}", "pod": f"gwp{tag}"}
    taken = sh("ip", "-o", "addr").stdout
    assert HOST_ADDRESS not in taken and POD_ADDRESS not in taken, f"{HOST_ADDRESS}/{PREFIX} is in use here"
    try:
        sh("ip", "netns", "add", names["netns"])
        sh("ip", "link", "add", names["host"], "type", "veth", "peer", "name", names["pod"], "netns", names["netns"])
        sh("ip", "addr", "add", f"{HOST_ADDRESS}/{PREFIX}", "dev", names["host"])
        sh("ip", "link", "set", names["host"], "up")
        sh("ip", "-n", names["netns"], "addr", "add", f"{POD_ADDRESS}/{PREFIX}", "dev", names["pod"])
        sh("ip", "-n", names["netns"], "link", "set", names["pod"], "up")
        sh("ip", "-n", names["netns"], "link", "set", "lo", "up")
        yield names
    finally:
        sh("ip", "netns", "del", names["netns"], check=False)  # takes the pod end, and so the pair
        sh("ip", "link", "del", names["host"], check=False)


@pytest.fixture
def host_mount():
    """A mount made in the host's (this test's) mount namespace, by a call: after the
    exporter's namespace was made, so that only the host has it."""
    made: list[str] = []

    def mount() -> str:
        point = tempfile.mkdtemp(prefix="gpuwait-host-only-", dir="/tmp")
        sh("mount", "-t", "tmpfs", "-o", "size=1m", f"gpuwait-host-marker-{os.getpid()}", point)
        made.append(point)
        return point

    yield mount
    for point in made:
        sh("umount", point, check=False)
        os.rmdir(point)


def interfaces(samples) -> set[str]:
    return {labels["interface"] for labels, _ in samples.get("gpuwait_network_receive_bytes_total", [])}


def nfs_read(exp: PodExporter) -> tuple[float, float]:
    """(gpuwait_source_up, gpuwait_source_errors_total) of the nfs source after its first read."""
    def read(samples):
        if (value(samples, "gpuwait_source_reads_total", source="nfs") or 0) >= 1:
            return (value(samples, "gpuwait_source_up", source="nfs"),
                    value(samples, "gpuwait_source_errors_total", source="nfs"))
        return None
    return exp.wait_for(read)


def namespace_of(pid: int | str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def mount_points(text: str) -> set[str]:
    return {unescape(block.mountpoint) for block in split_devices(text)}


def test_with_the_hosts_network_the_host_nics_show_and_with_its_own_only_its_own(network):
    with PodExporter([*QUIET, *FAST]) as shared:
        seen = shared.wait_for(lambda s: interfaces(s) if network["host"] in interfaces(s) else None)
        assert namespace_of(shared.proc.pid, "net") == namespace_of("self", "net")
        assert namespace_of(shared.proc.pid, "mnt") != namespace_of("self", "mnt")
    assert network["pod"] not in seen

    with PodExporter([*QUIET, *FAST], netns=network["netns"], address=POD_ADDRESS) as isolated:
        seen = isolated.wait_for(lambda s: interfaces(s) if network["pod"] in interfaces(s) else None)
        assert namespace_of(isolated.proc.pid, "net") != namespace_of("self", "net")
    # Only the pod's end of the pair: no host NIC, loopback left out by netdev's default.
    assert seen == {network["pod"]}


def test_pid_1_mountstats_is_the_hosts_mount_table_while_the_exporters_own_differs(host_mount):
    args = [*QUIET, *FAST, "--collector.nfs.mountstats-path=1/mountstats"]
    with PodExporter(args, caps=["dac_read_search"]) as exp:
        assert nfs_read(exp) == (1.0, 0.0), exp.log()
        marker = host_mount()
        # What the exporter's open() of its --collector.nfs.mountstats-path returns, read from
        # inside its mount namespace with its user and capabilities.
        host_view = exp.run_inside(["cat", "{view}/host/proc/1/mountstats"])
        own_view = exp.run_inside(["cat", "{view}/host/proc/self/mountstats"])
        assert host_view.returncode == 0 and own_view.returncode == 0, (host_view.stderr, own_view.stderr)
        assert nfs_read(exp) == (1.0, 0.0)
        log = exp.log()
    host_points, own_points = mount_points(host_view.stdout), mount_points(own_view.stdout)
    assert marker in host_points and marker not in own_points
    assert exp.view + "/host/proc" in own_points and exp.view + "/host/proc" not in host_points
    # The exporter's parser takes both tables whole and keeps their NFS blocks only: none here.
    marker_block = next(b for b in split_devices(host_view.stdout) if unescape(b.mountpoint) == marker)
    assert marker_block.fstype == "tmpfs"
    parsed = parse_mountstats(host_view.stdout)
    assert not parsed.mounts and not parsed.rejected
    assert "permission" not in log


@pytest.mark.parametrize(("user", "caps", "readable"), [
    (65534, (), False),
    (65534, ("sys_ptrace",), False),
    (65534, ("dac_read_search",), True),
    (65534, ("dac_override",), True),
    (0, (), True),
], ids=["nobody", "nobody+sys_ptrace", "nobody+dac_read_search", "nobody+dac_override", "root-no-caps"])
def test_what_reading_the_hosts_mountstats_takes(user, caps, readable):
    args = [*QUIET, *FAST, "--collector.nfs.mountstats-path=1/mountstats"]
    with PodExporter(args, user=user, caps=caps) as exp:
        up, errors = nfs_read(exp)
        log = exp.log()
    if readable:
        assert (up, errors) == (1.0, 0.0), log
    else:
        assert up == 0.0 and errors >= 1, log
        assert f"permission:{exp.view}/host/proc/1/mountstats" in log


def test_its_own_mountstats_needs_no_capability():
    with PodExporter([*QUIET, *FAST]) as exp:
        assert nfs_read(exp) == (1.0, 0.0), exp.log()

