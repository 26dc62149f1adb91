"""Absent kernel features, through the real exporter process: a kernel without PSI, a host
without RDMA devices, a mount table without NFS, no cgroup filesystem, and no NCCL Inspector
dump yet. Each source stays up with gpuwait_source_no_data 1, counts no error, says so once in
the log, and picks the feature up when it appears."""

from __future__ import annotations

import shutil
import time

import pytest

from conftest import HOST_TREE
from fixture_host import inspector_line, only_collectors_flags
from host_collectors import copy_procfs, promtool_problems
from support import ExporterProcess, value

pytestmark = pytest.mark.integration

ABSENT = ("pressure", "nfs", "rdma", "rdma_traffic", "owner_cgroup", "nccl")


def test_absent_features_are_no_data_not_failures_and_are_picked_up_later(tmp_path):
    procfs = copy_procfs(tmp_path)
    saved_psi = tmp_path / "pressure.saved"
    (procfs / "pressure").rename(saved_psi)
    (procfs / "self" / "mountstats").write_text("device /dev/nvme0n1p2 mounted on / with fstype ext4\n")
    sysfs = tmp_path / "sys"
    sysfs.mkdir()  # no class/infiniband: ib_core not loaded; no fs/cgroup mounted
    dump = tmp_path / "nccl"  # no job has dumped here yet
    args = [f"--path.procfs={procfs}", f"--path.sysfs={sysfs}", "--sample.interval=50ms",
            "--sample.slow-interval=200ms", "--analysis.interval=100ms", "--analysis.window=3s",
            f"--collector.nccl.dump-dir={dump}", "--collector.nccl.interval=200ms",
            "--collector.cgroup.interval=200ms",
            *only_collectors_flags({"cpu", "pressure", "nfs", "rdma", "cgroup", "nccl"})]
    with ExporterProcess(args) as exp:
        samples = exp.wait_for(lambda s: s if all(value(s, "gpuwait_source_reads_total", source=n) for n in ABSENT) else None)
        for name in ABSENT:
            assert value(samples, "gpuwait_source_up", source=name) == 1.0, name
            assert value(samples, "gpuwait_source_no_data", source=name) == 1.0, name
            assert value(samples, "gpuwait_source_errors_total", source=name) == 0.0, name
        assert value(samples, "gpuwait_source_no_data", source="cpu") == 0.0
        assert samples.get("gpuwait_cpu_seconds_total")
        assert "gpuwait_pressure_stalled_seconds_total" not in samples
        assert promtool_problems(exp.scrape_text()) == ""
        for name in ABSENT:
            assert exp.log().count(f"source {name} has no data") == 1, exp.log()
        assert "level=warn" not in exp.log() and "level=error" not in exp.log(), exp.log()

        # The features appear (a module loaded, a mount made): read again on schedule, found.
        staging = tmp_path / "sys.staging"
        shutil.copytree(HOST_TREE / "sys", staging, symlinks=True)
        # The devices first, the class directory that names them last: as the kernel does it,
        # a reader never sees a class entry whose device is not there yet.
        for entry in sorted(staging.iterdir(), key=lambda e: e.name == "class"):
            entry.rename(sysfs / entry.name)
        saved_psi.rename(procfs / "pressure")
        shutil.copy(HOST_TREE / "proc" / "self" / "mountstats", procfs / "self" / "mountstats")
        dump.mkdir()
        (dump / "hgx-a17-pid4242.log").write_text(inspector_line(0, time.time()))
        samples = exp.wait_for(lambda s: s if all(value(s, "gpuwait_source_no_data", source=n) == 0.0 for n in ABSENT) else None)
        assert value(samples, "gpuwait_pressure_stalled_seconds_total", resource="io", scope="some") == 28419.033871
        assert value(samples, "gpuwait_nfs_mount_info", mount="/mnt/datasets", export="10.40.0.10:/datasets",
                     fstype="nfs4", version="4.2", protocol="tcp") == 1.0
        assert value(samples, "gpuwait_rdma_port_active", device="mlx5_0", port="1", link_layer="InfiniBand") == 1.0
        assert value(samples, "gpuwait_nccl_operations_total", comm="0x7f8c496ae9f661", pid="4242",
                     kind="collective") == 1.0
        for name in ABSENT:
            assert value(samples, "gpuwait_source_errors_total", source=name) == 0.0, name
            assert f"source {name} has data again" in exp.log()
