"""The whole exposition of the real exporter on the fixture host, against a committed golden
file, as node_exporter's end-to-end test does: every family with its HELP and TYPE, every
series with its labels, and the value of every series that the fixture fixes.

The fixture host is tests/fixtures/host (procfs, sysfs, an NFS mount, two RDMA HCAs) and the
NVML test double's 8-GPU machine (tests/support/nvml_double/hgx_h100.yaml), with the
workload record of the GPU process, the NCCL Inspector dump it wrote and the cgroup v2 tree of
its owners (a pod and a Slurm job). Values that move with time rather than with the fixture
are written as ``<varies>``: the exporter's own timings and read counts, the GPU values the
double drives on its clock (utilization, activity, power, counters) and what is computed
from them (GPU window statistics, the verdict); build info is left out. The series set is
compared for those too: a family, a label or a series that appears or goes fails the test.

Regenerate the golden file after an intended change with::

    UPDATE_GOLDEN=1 python3 -m pytest tests/integration/test_golden_scrape.py

and review its diff like code.
"""

from __future__ import annotations

import difflib
import os
import pathlib
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fixture_host import QUICK_TIMING, host_args, host_env
from gpuwait.catalog import CATALOG
from support import ExporterProcess, value

pytestmark = pytest.mark.integration

GOLDEN = pathlib.Path(__file__).resolve().parent.parent / "golden" / "scrape" / "fixture_host.prom"
VARIES = "<varies>"

#: Left out whole: its labels name the Python that runs the exporter.
LEFT_OUT = {"gpuwait_build_info"}
#: The exporter's own cost and progress: durations, lags, how many reads and passes so far.
SELF_TIMINGS = {
    "gpuwait_source_reads_total", "gpuwait_source_read_seconds_total", "gpuwait_source_read_duration_seconds",
    "gpuwait_sampler_lag_seconds", "gpuwait_sampler_overruns_total", "gpuwait_window_samples",
    "gpuwait_source_reading_age_seconds",
    "gpuwait_analysis_duration_seconds", "gpuwait_analysis_runs_total",
}
#: GPU values the NVML double moves on its own clock (a duty cycle, counters that grow,
#: a hanging call counted each time it is tried).
GPU_LIVE = {
    "gpuwait_gpu_utilization_ratio", "gpuwait_gpu_memory_busy_ratio", "gpuwait_gpu_sm_active_ratio",
    "gpuwait_gpu_sm_occupancy_ratio", "gpuwait_gpu_tensor_active_ratio", "gpuwait_gpu_dram_active_ratio",
    "gpuwait_gpu_pcie_bytes_total", "gpuwait_gpu_pcie_throughput_bytes_per_second", "gpuwait_gpu_nvlink_bytes_total",
    "gpuwait_gpu_nvlink_throughput_bytes_per_second", "gpuwait_gpu_clock_hertz", "gpuwait_gpu_power_watts",
    "gpuwait_gpu_temperature_celsius", "gpuwait_gpu_energy_joules_total", "gpuwait_gpu_clocks_violation_seconds_total",
    "gpuwait_gpu_clocks_event_reason_active", "gpuwait_gpu_nvml_errors_total",
}
#: Values that move with the wall clock: how long ago the dump's latest operation completed.
WALL_CLOCK = {"gpuwait_nccl_last_operation_age_seconds"}
#: Errors of the GPU sources are counted per read of the double's faulty GPUs.
GPU_SOURCES = {"gpu", "gpu_device"}


def varies(family: str, labels: dict[str, str]) -> bool:
    spec = CATALOG.get(family)
    if family in SELF_TIMINGS or family in GPU_LIVE or family in WALL_CLOCK:
        return True
    if family == "gpuwait_source_errors_total" and labels.get("source") in GPU_SOURCES:
        return True
    # GPU window statistics and the verdict are computed from the double's moving values.
    return spec is not None and (spec.source == "verdict" or (spec.source == "gpu" and spec.window))


def canonical(exposition: str) -> str:
    """Families and series sorted (Prometheus gives their order no meaning), labels sorted,
    values written as the parser reads them or masked."""
    lines = []
    for family in sorted(text_string_to_metric_families(exposition), key=lambda f: f.name):
        name = family.name if family.type != "counter" else family.name + "_total"
        if name in LEFT_OUT:
            continue
        lines += [f"# HELP {name} {family.documentation}", f"# TYPE {name} {family.type}"]
        series = []
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            shown = VARIES if varies(name, s.labels) else repr(float(s.value))
            series.append(f"{s.name}{{{labels}}} {shown}")
        lines += sorted(series)
    return "\n".join(lines) + "\n"


#: The analysis window the quick timing sets, in seconds.
WINDOW = float(next(a for a in QUICK_TIMING if a.startswith("--analysis.window=")).split("=")[1].rstrip("s"))


def steady_scrape(exp: ExporterProcess) -> str:
    """A scrape once the double's timeline has settled: GPU 3 has fallen off the bus and come
    back, its processes have been read again (a lost GPU has none to read, and the verdict
    publishes link and dip series only for a GPU whose processes are unknown or running), its
    absence has left the analysis window (whether the dips of a window with a hole in it still
    repeat depends on how much of the hole is left), and every window statistic and the verdict
    are there."""
    seen_lost = False
    back_at = None

    def settled(samples):
        nonlocal seen_lost, back_at
        up = value(samples, "gpuwait_gpu_up", gpu=3)
        seen_lost = seen_lost or up == 0.0
        if seen_lost and up == 1.0 and back_at is None:
            back_at = time.monotonic()
        return (back_at is not None and time.monotonic() - back_at > WINDOW + 0.5
                and value(samples, "gpuwait_gpu_processes", gpu=3) is not None
                and samples.get("gpuwait_gpu_verdict") and samples.get("gpuwait_gpu_window_utilization_mean_ratio")
                and samples.get("gpuwait_rdma_port_window_transmit_mean_bytes_per_second")
                and samples.get("gpuwait_nfs_window_operations_per_second")
                and samples.get("gpuwait_nccl_window_exec_ratio")
                and samples.get("gpuwait_owner_cpu_window_usage_cores"))

    exp.wait_for(settled, timeout=90.0, interval=0.2)
    time.sleep(1.0)  # more than one analysis pass, and with it a verdict, over the settled state
    return exp.scrape_text()


def test_whole_scrape_matches_the_golden_file():
    # Lost GPUs are probed every second at most, so GPU 3 is back soon after the double says.
    # The verdict is recomputed on every analysis pass, so that the scrape shows the settled
    # state rather than one up to a verdict interval older.
    args = [*host_args(), "--collector.gpu.retry-max-interval=1s", "--verdict.interval=200ms"]
    with ExporterProcess(args, env=host_env(), ready_timeout=30.0) as exp:
        got = canonical(steady_scrape(exp))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(got)
    want = GOLDEN.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden", "scrape", n=1))
        pytest.fail(f"the scrape differs from {GOLDEN.name} (UPDATE_GOLDEN=1 regenerates it):\n{diff[:20000]}")
