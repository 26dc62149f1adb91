"""Command lines that run the real exporter against the shared fixture host with every
registered collector switched on, so cross-cutting tests cover collectors added later.

The fixture host is the procfs/sysfs tree under tests/fixtures/host plus, for the GPUs, the
NVML test double (tests/support/nvml_double) describing an 8-GPU HGX machine.
"""

from __future__ import annotations

import os
import pathlib

from conftest import HOST_TREE
from gpuwait.core.registry import registry

#: Fast enough that window statistics appear within a second or two of start.
QUICK_TIMING = ("--sample.interval=50ms", "--sample.slow-interval=500ms", "--analysis.interval=200ms", "--analysis.window=10s")
NVML_DOUBLE = pathlib.Path(__file__).parent / "nvml_double"
GPU_MACHINE = NVML_DOUBLE / "hgx_h100.yaml"


def collector_names() -> list[str]:
    return [c.name for c in registry()]


def source_names() -> list[str]:
    return [s.name for c in registry() for s in c.sources]


def all_collectors_flags() -> list[str]:
    return [f"--collector.{name}" for name in collector_names()]


def only_collectors_flags(names) -> list[str]:
    return [f"--{'' if c in names else 'no-'}collector.{c}" for c in collector_names()]


def host_args(tree: pathlib.Path = HOST_TREE) -> list[str]:
    return [f"--path.procfs={tree / 'proc'}", f"--path.sysfs={tree / 'sys'}", *QUICK_TIMING, *all_collectors_flags(),
            f"--collector.workload.spool-dir={workload_spool()}"]


def workload_spool() -> str:
    """A spool directory holding the record an instrumented loop in the fixture host's GPU
    process (pid 4242) would write; written now, since records older than
    collector.workload.stale-after are dropped."""
    import tempfile
    import time

    from gpuwait.client import format_record

    spool = tempfile.mkdtemp(prefix="gpuwait-workload-")
    record = format_record({
        "pid": 4242, "starttime": 1234567, "instance": 0, "kind": "training", "rank": 0, "job": "-",
        "at": time.monotonic(), "interval": 1.0, "data_seconds": 12.5, "compute_seconds": 37.5, "comm_seconds": 2.0,
        "steps": 100, "samples": 3200, "requests": 0,
    })
    pathlib.Path(spool, "4242-0.rec").write_text(record)
    return spool


def host_env(gpu_machine: pathlib.Path | None = GPU_MACHINE) -> dict[str, str]:
    """The NVML double first on the path, whatever this machine has; without a machine file
    it answers as a host with no NVIDIA driver."""
    path = os.pathsep.join(p for p in (str(NVML_DOUBLE), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path}
    if gpu_machine is not None:
        env["GPUWAIT_NVML_DOUBLE"] = str(gpu_machine)
    return env
