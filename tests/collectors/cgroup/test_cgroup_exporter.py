"""The real exporter process serving the owner cgroup series: the GPU collector, through the NVML
double, attributes the fixture host's GPU processes to a pod and a Slurm job; the cgroup
collector reads their cgroups from the fixture host's cgroup v2 tree."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from cgroup_owners import GPU_CONTAINER, JOB, POD, POD_PATH
from conftest import HOST_TREE
from fixture_host import only_collectors_flags
from host_collectors import exposed, promtool_problems, rewrite
from nvml_support import HGX_MACHINE, double_env
from support import ExporterProcess, value

pytestmark = pytest.mark.integration

GPU_CTR = f"{POD_PATH}/{GPU_CONTAINER}"
ARGS = [f"--path.procfs={HOST_TREE / 'proc'}", f"--path.sysfs={HOST_TREE / 'sys'}",
        "--sample.interval=100ms", "--sample.slow-interval=300ms", "--collector.cgroup.interval=200ms",
        "--analysis.interval=200ms", "--analysis.window=5s", *only_collectors_flags({"gpu", "cgroup"})]


def test_owner_cgroup_series_of_the_gpu_owners_pass_promtool():
    with ExporterProcess(ARGS, env=double_env(str(HGX_MACHINE))) as exp:
        samples = exp.wait_for(lambda s: s if value(s, "gpuwait_owner_cpu_window_usage_cores", owner=JOB) is not None
                               and value(s, "gpuwait_owner_cgroup_info", owner=POD) else None)
        text = exp.scrape_text()
    # The owners are those gpuwait_gpu_owner_info names, under the same key.
    gpu_owners = {lbl["owner"] for lbl, _ in samples["gpuwait_gpu_owner_info"]}
    cgroup_owners = {lbl["owner"] for lbl, _ in samples["gpuwait_owner_cgroup_info"]}
    assert cgroup_owners == gpu_owners == {POD, JOB}
    assert exposed(samples, "gpuwait_owner_cgroup_info", owner=POD, cgroup=POD_PATH, version="2") == 1.0
    assert exposed(samples, "gpuwait_owner_cpu_quota_cores", owner=POD, cgroup=POD_PATH) == pytest.approx(0.4)
    assert exposed(samples, "gpuwait_owner_cpu_quota_cores", owner=POD, cgroup=GPU_CTR) == pytest.approx(0.2)
    assert exposed(samples, "gpuwait_owner_cpu_throttled_periods_total", owner=POD, cgroup=GPU_CTR) == 50
    assert exposed(samples, "gpuwait_owner_cpu_periods_total", owner=POD, cgroup=GPU_CTR) == 54
    assert exposed(samples, "gpuwait_owner_cpu_throttled_seconds_total", owner=POD, cgroup=GPU_CTR) == pytest.approx(3.454268)
    assert exposed(samples, "gpuwait_owner_cpu_seconds_total", owner=POD) == pytest.approx(1.000613)
    assert exposed(samples, "gpuwait_owner_io_read_bytes_total", owner=POD, device="nvme1n1") == 16781312
    assert exposed(samples, "gpuwait_owner_pressure_stalled_seconds_total", owner=POD, resource="cpu", scope="full") == pytest.approx(2.670901)
    # A Slurm job without a quota or the io controller: no quota series, no IO series, no error.
    assert value(samples, "gpuwait_owner_cpu_quota_cores", owner=JOB) is None
    assert not [lbl for lbl, _ in samples.get("gpuwait_owner_io_read_bytes_total", []) if lbl["owner"] == JOB]
    # Unchanging fixture counters: no CPU used over the window, and no period elapsed, so no
    # share of periods throttled to tell (absent, not 0).
    assert exposed(samples, "gpuwait_owner_cpu_window_usage_cores", owner=JOB) == 0.0
    assert value(samples, "gpuwait_owner_cpu_window_throttled_ratio", owner=POD) is None
    assert exposed(samples, "gpuwait_owner_pressure_window_stalled_ratio", owner=POD, resource="io", scope="some") == 0.0
    assert value(samples, "gpuwait_source_up", source="owner_cgroup") == 1.0
    assert value(samples, "gpuwait_source_errors_total", source="owner_cgroup") == 0.0
    assert value(samples, "gpuwait_source_interval_seconds", source="owner_cgroup") == pytest.approx(0.2)
    assert promtool_problems(text) == ""


def test_window_throttling_follows_the_container_whose_quota_binds(tmp_path):
    """The GPU container's cpu.stat rewritten as the kernel would advance it: 10 periods a second,
    6 of them throttled, while the pod's own quota never runs out."""
    sysfs = tmp_path / "sys"
    shutil.copytree(HOST_TREE / "sys", sysfs, symlinks=True)
    stat = sysfs / "fs/cgroup" / GPU_CTR.lstrip("/") / "cpu.stat"
    args = [a if not a.startswith("--path.sysfs=") else f"--path.sysfs={sysfs}" for a in ARGS]
    stop = threading.Event()

    def advance() -> None:
        started = time.monotonic()
        while not stop.wait(0.05):
            periods = int((time.monotonic() - started) * 10)
            rewrite(stat, f"usage_usec {periods * 20000}\nuser_usec {periods * 20000}\nsystem_usec 0\n"
                          f"nr_periods {periods}\nnr_throttled {periods * 6 // 10}\nthrottled_usec {periods * 6 * 8000}\n")

    writer = threading.Thread(target=advance, daemon=True)
    writer.start()
    try:
        with ExporterProcess(args, env=double_env(str(HGX_MACHINE))) as exp:
            samples = exp.wait_for(lambda s: s if (r := value(s, "gpuwait_owner_cpu_window_throttled_ratio", owner=POD)) is not None
                                   and abs(r - 0.6) < 0.1 else None, timeout=20)
            text = exp.scrape_text()
    finally:
        stop.set()
        writer.join()
    assert value(samples, "gpuwait_source_errors_total", source="owner_cgroup") == 0.0
    assert promtool_problems(text) == ""
