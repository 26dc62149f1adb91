"""The real exporter process with the gpu collector: against the NVML double (an 8-GPU HGX
machine with faults, and a machine of older and MIG-partitioned GPUs) and against this
host's own NVML."""

from __future__ import annotations

import ctypes
import statistics
import subprocess
import time

import pytest

from conftest import HOST_TREE
from gpuwait.catalog import CATALOG
from nvml_support import HGX_MACHINE, MIXED_MACHINE, double_env
from support import ExporterProcess, value

pytestmark = pytest.mark.integration

TIMING = ["--sample.interval=100ms", "--sample.slow-interval=500ms", "--analysis.interval=200ms",
          "--analysis.window=10s", "--collector.gpu.retry-max-interval=1s", "--collector.gpu.call-timeout=500ms"]
HOST = [f"--path.procfs={HOST_TREE / 'proc'}", f"--path.sysfs={HOST_TREE / 'sys'}"]
# The gpu collector's own families; its gpuwait_kubelet_* families need a kubelet
# (tests/integration/test_kubelet_exporter.py).
GPU_FAMILIES = {spec.name for spec in CATALOG.values() if spec.source == "gpu" and spec.name.startswith("gpuwait_gpu_")}


def gpu_names(samples) -> set[str]:
    return {name for name in samples if name.startswith("gpuwait_gpu_")}


def up(samples, gpu: int) -> float | None:
    return value(samples, "gpuwait_gpu_up", gpu=gpu)


def promtool(text: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def hgx():
    """One exporter over the HGX machine for the whole module; tests read it in file order,
    which follows the machine's timeline (GPU 3 is lost from 4 s to 11 s)."""
    with ExporterProcess([*HOST, *TIMING], env=double_env(str(HGX_MACHINE))) as exp:
        exp.seen = set()
        yield exp


def scrape(exp):
    samples = exp.scrape()
    exp.seen |= gpu_names(samples)
    return samples


def test_every_gpu_answers_with_its_faults_visible(hgx):
    samples = hgx.wait_for(lambda s: value(s, "gpuwait_gpu_window_utilization_mean_ratio", gpu=0) is not None
                           and value(s, "gpuwait_gpu_xid_errors_total", gpu=0, xid=31) is not None and s)
    hgx.seen |= gpu_names(samples)
    assert value(samples, "gpuwait_gpu_backend_up") == 1.0
    for gpu in range(8):
        assert up(samples, gpu) == 1.0
        assert value(samples, "gpuwait_gpu_utilization_ratio", gpu=gpu) is not None
    info = [labels for labels, _ in samples["gpuwait_gpu_info"]]
    assert {labels["driver_version"] for labels in info} == {"550.90.07"}
    assert {labels["cuda_version"] for labels in info} == {"12.4"}
    assert {labels["architecture"] for labels in info} == {"hopper"}
    # GPU 5 sits in a downtrained Gen4 x8 link of a Gen5 x16 slot.
    assert value(samples, "gpuwait_gpu_pcie_link_generation", gpu=5) == 4
    assert value(samples, "gpuwait_gpu_pcie_link_width", gpu=5) == 8
    assert value(samples, "gpuwait_gpu_pcie_link_max_generation", gpu=5) == 5
    assert value(samples, "gpuwait_gpu_pcie_link_max_width", gpu=5) == 16
    assert value(samples, "gpuwait_gpu_pcie_replays_total", gpu=5) == 42
    assert value(samples, "gpuwait_gpu_pcie_link_width", gpu=4) == 16
    # GPU 2's driver has no sample buffer: utilization is polled, the absence counted once.
    assert value(samples, "gpuwait_gpu_nvml_errors_total", gpu=2, call="nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES)",
                 error="NOT_SUPPORTED") == 1
    # GPU 7 is power capped.
    assert value(samples, "gpuwait_gpu_clocks_event_reason_active", gpu=7, reason="sw_power_cap") == 1.0
    assert value(samples, "gpuwait_gpu_clocks_event_reason_active", gpu=0, reason="sw_power_cap") == 0.0
    assert value(samples, "gpuwait_gpu_clocks_violation_seconds_total", gpu=7, policy="power") > 0
    # NVLink link 7 of GPU 4 is down, with errors counted.
    assert value(samples, "gpuwait_gpu_nvlink_up", gpu=4, link=7) == 0.0
    assert value(samples, "gpuwait_gpu_nvlink_up", gpu=4, link=6) == 1.0
    assert value(samples, "gpuwait_gpu_nvlink_errors_total", gpu=4, link=7, counter="crc_flit") == 12
    assert value(samples, "gpuwait_gpu_xid_errors_total", gpu=0, xid=31) == 1
    assert value(samples, "gpuwait_gpu_processes", gpu=0) == 1
    assert value(samples, "gpuwait_gpu_peer_topology_info", gpu=0, peer_gpu=1, relation="PIX") == 1
    # GPU 0's process (pid 4242 in the fixture host) belongs to a pod; GPU 1's to a Slurm job.
    pod = "kubernetes:4312ade9-202f-48f0-beb7-fe4764012968"
    assert value(samples, "gpuwait_gpu_owner_info", gpu=0, owner=pod, owner_kind="kubernetes",
                 pod_uid="4312ade9-202f-48f0-beb7-fe4764012968") == 1
    assert value(samples, "gpuwait_gpu_owner_info", gpu=1, owner="slurm:12345", slurm_job="12345") == 1
    assert value(samples, "gpuwait_gpu_owner_memory_used_bytes", gpu=0, owner=pod) == 60129542144
    assert value(samples, "gpuwait_gpu_owner_utilization_ratio", gpu=0, owner=pod) == pytest.approx(0.81)
    # The pod's data loader children count with it, by thread state.
    assert value(samples, "gpuwait_gpu_owner_host_processes", owner=pod) > 1
    assert value(samples, "gpuwait_gpu_owner_threads", owner=pod, state="blocked") >= 1
    assert value(samples, "gpuwait_gpu_owner_cpu_seconds_total", owner=pod) is not None
    # GPU-NIC affinity from the fixture's PCIe tree: GPU 0 shares a switch with mlx5_0.
    assert value(samples, "gpuwait_gpu_nic_topology_info", gpu=0, device="mlx5_0", relation="PIX") == 1
    assert value(samples, "gpuwait_gpu_nic_topology_info", gpu=0, device="mlx5_1", relation="SYS") == 1
    assert value(samples, "gpuwait_gpu_nic_topology_info", gpu=4, device="mlx5_1", relation="NODE") == 1
    assert value(samples, "gpuwait_gpu_nic_topology_info", gpu=2, device="mlx5_0") is None  # not in the tree


def test_a_hanging_power_read_costs_only_that_series(hgx):
    durations = []
    for _ in range(10):
        started = time.monotonic()
        samples = scrape(hgx)
        durations.append(time.monotonic() - started)
        time.sleep(0.1)
    # Scrapes are served from the last rendering and never call NVML: one that waited for the
    # hung read would take the whole call timeout (0.5 s), each time the read is retried. The
    # median, not the longest, so that one stall of a loaded machine is not taken for that.
    assert statistics.median(durations) < 0.5
    assert up(samples, 6) == 1.0
    assert value(samples, "gpuwait_gpu_power_watts", gpu=6) is None
    assert value(samples, "gpuwait_gpu_power_watts", gpu=5) > 0
    assert value(samples, "gpuwait_gpu_memory_used_bytes", gpu=6) > 0
    assert value(samples, "gpuwait_gpu_utilization_ratio", gpu=6) is not None
    assert value(samples, "gpuwait_gpu_nvml_errors_total", gpu=6, call="nvmlDeviceGetPowerUsage", error="CALL_TIMEOUT") >= 1
    assert "gpu6:hung:nvmlDeviceGetPowerUsage" in hgx.log()


def test_a_lost_gpu_reports_down_while_the_others_report(hgx):
    samples = hgx.wait_for(lambda s: up(s, 3) == 0.0 and s, timeout=10)
    hgx.seen |= gpu_names(samples)
    assert value(samples, "gpuwait_gpu_utilization_ratio", gpu=3) is None
    assert value(samples, "gpuwait_gpu_window_utilization_mean_ratio", gpu=3) is None
    for gpu in (0, 1, 2, 4, 5, 6, 7):
        assert up(samples, gpu) == 1.0
        assert value(samples, "gpuwait_gpu_utilization_ratio", gpu=gpu) is not None
    assert value(samples, "gpuwait_gpu_backend_up") == 1.0
    # Back after the machine's 11 s: probed again and picked up.
    samples = hgx.wait_for(lambda s: up(s, 3) == 1.0 and value(s, "gpuwait_gpu_utilization_ratio", gpu=3) is not None
                           and s, timeout=15)
    hgx.seen |= gpu_names(samples)
    assert "GPU 3" in hgx.log() and "answers again" in hgx.log()


def test_the_exposition_passes_promtool(hgx):
    result = promtool(hgx.scrape_text())
    assert result.returncode == 0, result.stdout + result.stderr


def test_mixed_machine_and_every_gpu_family(hgx):
    with ExporterProcess([*HOST, *TIMING], env=double_env(str(MIXED_MACHINE))) as exp:
        samples = exp.wait_for(lambda s: value(s, "gpuwait_gpu_mig_sm_active_ratio", gpu=2, gpu_instance=1) is not None
                               and value(s, "gpuwait_gpu_window_utilization_mean_ratio", gpu=0) is not None and s)
        text = exp.scrape_text()
        log = exp.log()
    seen = hgx.seen | gpu_names(samples)
    assert GPU_FAMILIES - seen == set()
    assert promtool(text).returncode == 0, promtool(text).stdout
    # Older GPUs: said once, and what NVML has is published.
    assert log.count("offers no GPM") == 1
    assert value(samples, "gpuwait_gpu_sm_active_ratio", gpu=0) is None
    assert value(samples, "gpuwait_gpu_pcie_throughput_bytes_per_second", gpu=0, direction="rx") is not None
    assert value(samples, "gpuwait_gpu_pcie_bytes_total", gpu=0, direction="rx") is None
    assert value(samples, "gpuwait_gpu_clocks_event_reason_active", gpu=1, reason="hw_thermal_slowdown") == 1.0
    # MIG: per-instance series; no GPU-wide utilization.
    assert value(samples, "gpuwait_gpu_mig_memory_total_bytes", gpu=2, gpu_instance=1, compute_instance=0) == 42949672960
    assert value(samples, "gpuwait_gpu_utilization_ratio", gpu=2) is None
    assert value(samples, "gpuwait_gpu_info", gpu=2, mig_mode="enabled") == 1


def test_driver_going_away_and_coming_back():
    machine = HGX_MACHINE.replace("hgx_h100.yaml", "driver_reload.yaml")
    with ExporterProcess([*HOST, *TIMING], env=double_env(machine)) as exp:
        exp.wait_for(lambda s: value(s, "gpuwait_gpu_backend_up") == 1.0)
        samples = exp.wait_for(lambda s: value(s, "gpuwait_gpu_backend_up") == 0.0 and s, timeout=10)
        assert up(samples, 0) == 0.0 and up(samples, 1) == 0.0
        assert value(samples, "gpuwait_cpu_seconds_total", cpu=0, mode="user") is not None  # host metrics go on
        exp.wait_for(lambda s: value(s, "gpuwait_gpu_backend_up") == 1.0 and up(s, 1) == 1.0, timeout=15)
        log = exp.log()
    assert log.count("NVML backend lost") == 1
    assert log.count("NVML ready") == 2


def no_backend_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "no GPU backend" in line]


def test_a_host_without_nvidia_driver_serves_host_metrics_and_says_so_once():
    # The double without a machine answers like a host with no driver installed.
    with ExporterProcess([*HOST, *TIMING], env=double_env("")) as exp:
        samples = exp.wait_for(lambda s: value(s, "gpuwait_gpu_backend_up") == 0.0 and s)
        assert value(samples, "gpuwait_cpu_seconds_total", cpu=0, mode="user") is not None
        time.sleep(2.5)  # several init retries happen meanwhile
        samples = exp.scrape()
        log = exp.log()
    assert gpu_names(samples) == {"gpuwait_gpu_backend_up"}
    lines = no_backend_lines(log)
    assert len(lines) == 1 and "libnvidia-ml.so.1 not found" in lines[0]
    assert value(samples, "gpuwait_source_up", source="gpu") == 1.0
    assert value(samples, "gpuwait_source_errors_total", source="gpu") == 0


def this_host_has_nvml() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_this_host_with_the_real_pynvml():
    """Without the double: on a host without an NVIDIA driver (as where this suite is
    developed) the backend is down with one log line; on a GPU host it is up."""
    with ExporterProcess([*HOST, *TIMING]) as exp:
        samples = exp.wait_for(lambda s: value(s, "gpuwait_gpu_backend_up") is not None and s)
        time.sleep(2.5)
        samples = exp.scrape()
        log = exp.log()
    if this_host_has_nvml():
        assert value(samples, "gpuwait_gpu_backend_up") == 1.0 and not no_backend_lines(log)
    else:
        assert value(samples, "gpuwait_gpu_backend_up") == 0.0
        lines = no_backend_lines(log)
        assert len(lines) == 1 and "NVML library libnvidia-ml.so.1 not found" in lines[0]
        assert gpu_names(samples) == {"gpuwait_gpu_backend_up"}
