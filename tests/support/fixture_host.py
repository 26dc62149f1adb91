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
            f"--collector.workload.spool-dir={workload_spool()}", f"--collector.nccl.dump-dir={nccl_dump_dir()}"]


def _remove_at_exit(directory: str) -> None:
    """Every exporter started on it has stopped by then; a directory per call would otherwise
    pile up in /tmp, run after run."""
    import atexit
    import shutil

    atexit.register(shutil.rmtree, directory, ignore_errors=True)


def workload_spool() -> str:
    """A spool directory holding the record an instrumented loop in the fixture host's GPU
    process (pid 4242) would write; written now, since records older than
    collector.workload.stale-after are dropped."""
    import tempfile
    import time

    from gpuwait.client import format_record

    spool = tempfile.mkdtemp(prefix="gpuwait-workload-")
    _remove_at_exit(spool)
    record = format_record({
        "pid": 4242, "starttime": 1234567, "instance": 0, "kind": "training", "rank": 0, "job": "-",
        "at": time.monotonic(), "interval": 1.0, "data_seconds": 12.5, "compute_seconds": 37.5, "comm_seconds": 2.0,
        "steps": 100, "samples": 3200, "requests": 0,
    })
    pathlib.Path(spool, "4242-0.rec").write_text(record)
    return spool


def inspector_line(seq: int, at: float, *, comm: str = "0x7f8c496ae9f661", rank: int = 0, n_ranks: int = 8,
                   n_nodes: int = 1, pid: int = 4242, hostname: str = "hgx-a17", op: str = "AllReduce",
                   msg_bytes: int = 1 << 28, exec_us: int = 1200, busbw_gbs: float = 391.5) -> str:
    """One line as NCCL Inspector's JSON mode writes it for a completed collective."""
    import json

    record = {
        "header": {"id": comm, "comm_name": "default_pg", "rank": rank, "n_ranks": n_ranks, "nnodes": n_nodes},
        "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "3e1a5b07c",
                     "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": int(at * 1e6),
                     "hostname": hostname, "pid": pid},
        "coll_perf": {"coll": op, "coll_sn": seq, "coll_msg_size_bytes": msg_bytes, "coll_exec_time_us": exec_us,
                      "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": round(busbw_gbs / 1.75, 6),
                      "coll_busbw_gbs": busbw_gbs},
    }
    return json.dumps(record, separators=(",", ":")) + "\n"


def nccl_dump_dir() -> str:
    """A dump directory as NCCL Inspector leaves it for the fixture host's GPU process (pid
    4242, rank 0 of an 8-rank communicator): collectives written now, since records older
    than the analysis window are not counted."""
    import tempfile
    import time

    dump = tempfile.mkdtemp(prefix="gpuwait-nccl-")
    _remove_at_exit(dump)
    now = time.time()
    lines = "".join(inspector_line(seq, now - 2 + seq * 0.01) for seq in range(100, 200))
    pathlib.Path(dump, "hgx-a17-pid4242.log").write_text(lines)
    return dump


def host_env(gpu_machine: pathlib.Path | None = GPU_MACHINE) -> dict[str, str]:
    """The NVML double first on the path, whatever this machine has; without a machine file
    it answers as a host with no NVIDIA driver."""
    path = os.pathsep.join(p for p in (str(NVML_DOUBLE), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path}
    if gpu_machine is not None:
        env["GPUWAIT_NVML_DOUBLE"] = str(gpu_machine)
    return env
