"""``gpuwait diagnose``: golden outputs for every simulated scenario, the same diagnosis from
a running exporter and from a real Prometheus scraping it, exit codes, JSON, and the errors
for unreachable endpoints and missing metrics.

Regenerate the golden files with ``python3 tools/update_diagnose_golden.py``.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from support import ExporterProcess, free_port

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "tools"))
import update_diagnose_golden as golden  # noqa: E402

from gpuwait import diagnose as dg  # noqa: E402
from gpuwait.tool import main  # noqa: E402

GOLDEN = golden.GOLDEN
CASES = golden.cases()
#: The live runs analyse a 10 s window so the tests stay short.
LIVE_ARGS = ["--simulate", "data_pipeline", "--analysis.window=10s", "--sample.slow-interval=1s"]


def gpuwait(*argv: str) -> tuple[str, str, int]:
    proc = subprocess.run([sys.executable, "-m", "gpuwait.tool", *argv], capture_output=True, text=True, timeout=60, cwd=REPO)
    return proc.stdout, proc.stderr, proc.returncode


@pytest.mark.parametrize("stem,argv", CASES, ids=[c[0] for c in CASES])
def test_golden_output(stem, argv):
    text, code = golden.render(argv)
    assert text == (GOLDEN / f"{stem}.txt").read_text(), f"run python3 tools/update_diagnose_golden.py if {stem} changed on purpose"
    severity = re.search(r"severity: (\w+)", text).group(1)
    assert dg.SEVERITY_NAMES[code] == severity


def test_every_scenario_has_a_golden_file_and_no_file_is_orphaned():
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(stem for stem, _ in CASES)


def _shape(text: str) -> list[str]:
    """The diagnosis with its numbers blanked: live runs measure slightly different shares,
    the steps, causes, evidence and checks must be the same."""
    lines = text.splitlines()[1:]  # the first line names the source
    return [re.sub(r"-?\d+(\.\d+)?", "#", line) for line in lines]


def _all_gpus_say(samples, cause: str) -> bool:
    verdicts = [(l["gpu"], v) for l, v in samples.get("gpuwait_gpu_verdict", []) if l["cause"] == cause]
    return len(verdicts) == 8 and all(v == 1 for _, v in verdicts)


@pytest.mark.integration
def test_diagnosis_of_a_running_exporter_matches_the_golden_one():
    with ExporterProcess(LIVE_ARGS) as exporter:
        exporter.wait_for(lambda s: _all_gpus_say(s, "data_pipeline"), timeout=40)
        out, err, code = gpuwait("diagnose", "--exporter", exporter.url)
        assert err == ""
        assert out.splitlines()[0] == f"gpuwait diagnose: exporter {exporter.url}"
        assert _shape(out) == _shape((GOLDEN / "data_pipeline.txt").read_text())
        assert code == dg.WARNING
        out, _, code = gpuwait("diagnose", "--exporter", exporter.url.removeprefix("http://"), "--json")
        report = json.loads(out)
        assert report["verdict"] == "data_pipeline" and report["severity_name"] == "warning" and code == 1
        assert [g["gpu"] for g in report["gpus"]] == [str(i) for i in range(8)]
        assert [s["question"] for s in report["gpus"][0]["steps"]] == [
            "Impact or demand?", "Computing or waiting?", "Waiting on what?", "Scope and next checks"]


@pytest.mark.integration
def test_diagnosis_from_a_real_prometheus_matches_the_golden_one(tmp_path):
    prometheus = shutil.which("prometheus")
    assert prometheus, "the prometheus binary is a test dependency (Debian: apt-get install prometheus)"
    with ExporterProcess(LIVE_ARGS) as exporter:
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: gpuwait\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{exporter.port}']\n")
        log = open(tmp_path / "prometheus.log", "w")
        proc = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            _until(lambda: _query(base, 'count(gpuwait_gpu_verdict{cause="data_pipeline"} == 1)') == 8.0, 45,
                   lambda: (tmp_path / "prometheus.log").read_text()[-3000:])
            out, err, code = gpuwait("diagnose", "--prometheus", base)
            assert err == "" and code == dg.WARNING, err
            assert _shape(out) == _shape((GOLDEN / "data_pipeline.txt").read_text())
            out, err, code = gpuwait("diagnose", "--prometheus", base, "--instance", "elsewhere:9975")
            assert code == dg.UNKNOWN and "no gpuwait_ series for instance 'elsewhere:9975'" in err
        finally:
            proc.terminate()
            proc.wait(10)
            log.close()


def _query(base: str, query: str) -> float | None:
    try:
        with urllib.request.urlopen(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query}), timeout=2) as r:
            result = json.load(r)["data"]["result"]
    except OSError:
        return None
    return float(result[0]["value"][1]) if result else None


def _until(predicate, timeout: float, log) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"not reached in {timeout}s:\n{log()}")


# -- errors and exit codes ------------------------------------------------------------------------


def test_an_unreachable_exporter_is_a_clear_error():
    out, err, code = gpuwait("diagnose", "--exporter", f"http://127.0.0.1:{free_port()}", "--timeout", "2")
    assert code == dg.UNKNOWN and out == ""
    assert err.startswith("gpuwait diagnose: exporter at http://127.0.0.1:") and "is unreachable" in err


def test_an_unreachable_prometheus_is_a_clear_error():
    out, err, code = gpuwait("diagnose", "--prometheus", f"http://127.0.0.1:{free_port()}", "--timeout", "2")
    assert code == dg.UNKNOWN and "Prometheus at" in err and "is unreachable" in err


def test_missing_verdict_metrics_are_named_with_their_meaning():
    with pytest.raises(dg.DiagnoseError, match="gpuwait_gpu_verdict is missing: the verdict collector is disabled"):
        dg.diagnose({"gpuwait_gpu_up": [({"gpu": "0", "uuid": "GPU-x"}, 1.0)]}, "test")
    with pytest.raises(dg.DiagnoseError, match="gpuwait_gpu_backend_up is 0: the exporter cannot talk to the NVIDIA driver"):
        dg.diagnose({"gpuwait_gpu_backend_up": [({}, 0.0)]}, "test")
    with pytest.raises(dg.DiagnoseError, match="the gpu collector is disabled"):
        dg.diagnose({}, "test")


def test_no_gpm_and_no_instrumented_loop_are_explained():
    metrics = dg.from_simulation("healthy")
    del metrics["gpuwait_gpu_window_sm_active_mean_ratio"]
    text = dg.render_text(dg.diagnose(metrics, "test"))
    assert "no GPM metrics (GPUs before Hopper" in text
    assert "no instrumented loop reports its data wait" in text


def test_a_throughput_drop_makes_a_wait_critical():
    metrics = dg.from_simulation("data_pipeline", "workload=1")
    owner = metrics["gpuwait_workload_window_throughput_drop_ratio"][0][0]
    metrics["gpuwait_workload_window_throughput_drop_ratio"] = [(owner, 0.4)]
    report = dg.diagnose(metrics, "test")
    assert report.severity == dg.CRITICAL
    assert report.gpus[0].steps[0].answer == "impact: the owner's throughput dropped"
    assert "throughput 40% below the owner's own baseline" in report.gpus[0].steps[0].evidence


def test_a_stalled_collective_is_said_before_the_verdict():
    metrics = dg.from_simulation("healthy")
    gpus = [labels for labels, _ in metrics["gpuwait_gpu_up"]]
    metrics["gpuwait_gpu_collective_stalled"] = [(labels, 1.0 if labels["gpu"] == "2" else 0.0) for labels in gpus]
    report = dg.diagnose(metrics, "test")
    second = {d.gpu: d.steps[1] for d in report.gpus}
    assert second["2"].answer == "waiting in a collective that does not end: a peer has not joined"
    assert any("runbook GpuCollectiveStalled" in e for e in second["2"].evidence)
    assert second["0"].answer == "computing"


def test_owner_filter_and_unknown_owner():
    metrics = dg.from_simulation("healthy")
    owner = metrics["gpuwait_gpu_owner_info"][0][0]["owner"]
    assert len(dg.diagnose(metrics, "test", owner).gpus) == 8
    with pytest.raises(dg.DiagnoseError, match=f"no GPU of owner 'slurm:1'.*owners seen: {owner}"):
        dg.diagnose(metrics, "test", "slurm:1")


def test_a_recorded_trace_is_diagnosed_through_the_analysis(tmp_path):
    trace = tmp_path / "node.trace"
    with ExporterProcess(LIVE_ARGS[:2] + ["--analysis.window=5s", f"--record.file={trace}"]) as exporter:
        exporter.wait_for(lambda s: _all_gpus_say(s, "data_pipeline"), timeout=40)
    out, err, code = gpuwait("diagnose", "--trace", str(trace))
    assert err == "", err
    assert out.startswith(f"gpuwait diagnose: trace {trace}\nnode verdict: data_pipeline; severity: warning")


def test_usage_errors_exit_unknown(capsys):
    with pytest.raises(SystemExit) as e:
        main(["diagnose"])
    assert e.value.code == dg.UNKNOWN
