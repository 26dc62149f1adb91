"""The nccl collector in the real exporter process: a process writing its dump the way NCCL
Inspector does, a Prometheus-mode file beside it, the series on /metrics (valid for promtool),
and the rank's series gone once its file is."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import text_fixture
from fixture_host import only_collectors_flags
from support import ExporterProcess, value

#: 50 AllReduces a second of 2 ms each at 120 GB/s bus bandwidth, and 50 sends of 0.5 ms,
#: written in dumps every 100 ms through a stdio stream opened with "w", as the plugin does.
WRITER = textwrap.dedent("""
    import json, os, socket, sys, time
    path = os.path.join(sys.argv[1], f"{socket.gethostname()}-pid{os.getpid()}.log")
    out = open(path, "w")
    header = {"id": "0x7f8c496ae9f661", "comm_name": "default_pg", "rank": 3, "n_ranks": 8, "nnodes": 1}
    pp = {"id": "0x1c93f0b22d7e05", "comm_name": "pp_group_1", "rank": 0, "n_ranks": 2, "nnodes": 1}
    seq = 0
    while True:
        time.sleep(0.1)
        meta = {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "nccl_profiler_interface",
                "dump_timestamp_us": int(time.time() * 1e6), "hostname": socket.gethostname(), "pid": os.getpid()}
        for _ in range(5):
            coll = {"coll": "AllReduce", "coll_sn": seq, "coll_msg_size_bytes": 137142857, "coll_exec_time_us": 2000,
                    "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": 68.571428, "coll_busbw_gbs": 120.0}
            p2p = {"p2p": "Send", "p2p_sn": seq, "p2p_peer": 1, "p2p_msg_size_bytes": 8388608, "p2p_exec_time_us": 500,
                   "p2p_timing_source": "kernel_gpu", "p2p_algobw_gbs": 16.777216, "p2p_busbw_gbs": 16.777216}
            out.write(json.dumps({"header": header, "metadata": meta, "coll_perf": coll}) + "\\n")
            out.write(json.dumps({"header": pp, "metadata": meta, "p2p_perf": p2p}) + "\\n")
            seq += 1
        out.flush()
""")
UUID = "2b1e8f4c-3d9a-4e6b-8c1d-5a7f9e2b6c3d"


@pytest.mark.integration
def test_a_jobs_dump_reaches_the_metrics(tmp_path):
    dump = tmp_path / "nccl"
    dump.mkdir()
    (dump / f"nccl_inspector_metrics_{UUID}.prom").write_text(text_fixture("nccl", "prom-2.30.prom"))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(dump)])
    args = [*only_collectors_flags(["nccl"]), f"--collector.nccl.dump-dir={dump}", "--collector.nccl.interval=250ms",
            "--analysis.window=4s", "--analysis.interval=250ms"]
    pid = str(writer.pid)
    try:
        with ExporterProcess(args) as exporter:
            def settled(samples):
                ops = value(samples, "gpuwait_nccl_operations_total", pid=pid, kind="collective")
                ratio = value(samples, "gpuwait_nccl_window_exec_ratio", pid=pid, kind="collective")
                return ops and ops >= 150 and ratio is not None and samples
            samples = exporter.wait_for(settled, timeout=20)
            # 50 AllReduces of 2 ms a second: 10 % of the time in NCCL kernels, at 120 GB/s
            assert value(samples, "gpuwait_nccl_window_exec_ratio", pid=pid, kind="collective") == pytest.approx(0.1, rel=0.35)
            assert value(samples, "gpuwait_nccl_window_bus_bandwidth_bytes_per_second", pid=pid,
                         kind="collective") == pytest.approx(120e9, rel=1e-6)
            assert value(samples, "gpuwait_nccl_window_exec_ratio", pid=pid, kind="p2p") == pytest.approx(0.025, rel=0.35)
            ops = value(samples, "gpuwait_nccl_operations_total", pid=pid, kind="collective")
            assert value(samples, "gpuwait_nccl_exec_seconds_total", pid=pid, kind="collective") == pytest.approx(ops * 0.002)
            assert value(samples, "gpuwait_nccl_message_bytes_total", pid=pid, kind="collective") == ops * 137142857
            assert value(samples, "gpuwait_nccl_last_operation_age_seconds", pid=pid, kind="collective") < 2.0
            labels = next(lbl for lbl, _ in samples["gpuwait_nccl_operations_total"] if lbl["pid"] == pid and lbl["kind"] == "collective")
            assert labels == {"comm": "0x7f8c496ae9f661", "rank": "3", "pid": pid, "device": "", "uuid": "", "kind": "collective"}
            # the Prometheus-mode file: its GPU named, bandwidth gauges, no counts
            gauge = {"comm": "DP Group 0", "uuid": f"GPU-{UUID}", "kind": "collective"}
            assert value(samples, "gpuwait_nccl_window_bus_bandwidth_bytes_per_second", **gauge) == pytest.approx(
                (678.263 * 9498.47 + 512.04 * 98.7) / (9498.47 + 98.7) * 1e9)
            assert value(samples, "gpuwait_nccl_operations_total", **gauge) is None
            assert value(samples, "gpuwait_nccl_dump_files") == 2
            assert value(samples, "gpuwait_nccl_read_bytes_total") > 0
            assert value(samples, "gpuwait_nccl_malformed_lines_total") == 0
            assert value(samples, "gpuwait_source_up", source="nccl") == 1
            assert value(samples, "gpuwait_source_interval_seconds", source="nccl") == 0.25
            promtool = shutil.which("promtool")
            assert promtool, "promtool not found: install Debian's prometheus package (.ci/run does)"
            check = subprocess.run([promtool, "check", "metrics"], input=exporter.scrape_text(), capture_output=True, text=True)
            assert check.returncode == 0 and check.stdout == "" and check.stderr == "", check.stdout + check.stderr

            # the job stops: its last operation ages; its dump file removed, its series go
            writer.kill()
            writer.wait()
            stopped = time.monotonic()
            exporter.wait_for(lambda s: (value(s, "gpuwait_nccl_last_operation_age_seconds", pid=pid, kind="collective")
                                         or 0) >= 1.5, timeout=10)
            assert time.monotonic() - stopped >= 1.5 - 0.1 - 0.25  # one dump interval, one read interval
            for f in dump.glob("*.log"):
                f.unlink()
            exporter.wait_for(lambda s: value(s, "gpuwait_nccl_operations_total", pid=pid, kind="collective") is None
                              and value(s, "gpuwait_nccl_ranks") == 2, timeout=10)
            assert "Traceback" not in exporter.log()
    finally:
        writer.kill()
        writer.wait()
