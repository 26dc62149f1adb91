"""The workload collector in the real exporter: a real instrumented loop in another process,
its record in a spool directory, the metrics on /metrics (valid for promtool), and the
series gone once the loop's process is."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from support import ExporterProcess, value

LOOP = textwrap.dedent("""
    import sys, time
    from gpuwait.client import Workload

    def loader():
        while True:
            time.sleep(0.03)   # waiting for the next batch
            yield list(range(8))

    workload = Workload(spool=sys.argv[1])
    for batch in workload.batches(loader(), batch_size=len):
        time.sleep(0.01)       # computing
""")


@pytest.mark.integration
def test_a_loops_timing_reaches_the_metrics(tmp_path):
    spool = tmp_path / "workload"
    loop = subprocess.Popen([sys.executable, "-c", LOOP, str(spool)])
    args = [f"--collector.workload.spool-dir={spool}", "--sample.slow-interval=1s", "--analysis.window=6s",
            "--collector.workload.recent=2s"]
    try:
        with ExporterProcess(args) as exporter:
            def measured(samples):
                ratio = [v for _, v in samples.get("gpuwait_workload_window_data_wait_ratio", [])]
                return ratio and samples
            samples = exporter.wait_for(measured, timeout=20)
            ((labels, _),) = samples["gpuwait_workload_window_data_wait_ratio"]
            owner = labels["owner"]
            assert labels["kind"] == "training" and owner
            assert value(samples, "gpuwait_workload_processes", owner=owner) == 1
            # 30 ms waiting and 10 ms computing per step
            assert 0.6 <= value(samples, "gpuwait_workload_window_data_wait_ratio", owner=owner) <= 0.9
            assert 0.1 <= value(samples, "gpuwait_workload_window_compute_ratio", owner=owner) <= 0.4
            assert 0.035 <= value(samples, "gpuwait_workload_window_step_seconds", owner=owner) <= 0.08
            steps = value(samples, "gpuwait_workload_window_steps_per_second", owner=owner)
            assert 10 <= steps <= 26
            assert value(samples, "gpuwait_workload_window_samples_per_second", owner=owner) == pytest.approx(8 * steps)
            check = subprocess.run(["promtool", "check", "metrics"], input=exporter.scrape_text(), capture_output=True, text=True)
            assert check.returncode == 0, check.stdout + check.stderr

            loop.kill()
            loop.wait()
            exporter.wait_for(lambda s: not s.get("gpuwait_workload_processes"), timeout=10)
            assert os.listdir(spool) == []  # the dead process's record was removed
    finally:
        loop.kill()
        loop.wait()
