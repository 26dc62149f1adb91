"""The real exporter process: its endpoints, encodings, shutdown, and how it degrades."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from conftest import HOST_TREE
from gpuwait.catalog import CATALOG
from gpuwait.core.registry import registry
from fixture_host import host_args, host_env, source_names
from support import REPO, ExporterProcess, parse_exposition, value

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def exporter():
    with ExporterProcess(host_args(), env=host_env()) as exp:
        exp.wait_for(lambda s: (value(s, "gpuwait_analysis_runs_total") or 0) >= 1)
        yield exp


def request(exp: ExporterProcess, path: str, method: str = "GET", **headers: str):
    req = urllib.request.Request(exp.url + path, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_landing_page_links_everything(exporter):
    status, headers, body = request(exporter, "/")
    page = body.decode()
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert "What is the GPU waiting for?" in page
    for link in ("/metrics", "/-/healthy", "/-/ready"):
        assert f'href="{link}"' in page


def test_metrics_text_format(exporter):
    status, headers, body = request(exporter, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "Content-Encoding" not in headers
    samples = parse_exposition(body.decode())
    assert value(samples, "gpuwait_build_info") == 1.0
    read = {lbl["source"] for lbl, v in samples.get("gpuwait_source_reads_total", []) if v > 0}
    assert set(source_names()) <= read


@pytest.mark.parametrize("path", ["/-/healthy", "/-/ready"])
def test_health_endpoints(exporter, path):
    status, headers, body = request(exporter, path)
    assert (status, body) == (200, b"OK\n")
    assert headers["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize("path", ["/nope", "/metrics/extra", "/-/", "/favicon.ico"])
def test_unknown_path_404(exporter, path):
    status, _, _ = request(exporter, path)
    assert status == 404


def test_query_string_ignored(exporter):
    status, _, body = request(exporter, "/metrics?collect[]=cpu")
    assert status == 200 and b"gpuwait_build_info" in body


def test_head_has_no_body(exporter):
    status, headers, body = request(exporter, "/metrics", method="HEAD")
    assert status == 200
    assert body == b""
    assert int(headers["Content-Length"]) > 0


def test_gzip_when_accepted(exporter):
    status, headers, body = request(exporter, "/metrics", **{"Accept-Encoding": "gzip"})
    assert status == 200
    assert headers["Content-Encoding"] == "gzip"
    text = gzip.decompress(body).decode()
    assert value(parse_exposition(text), "gpuwait_build_info") == 1.0


def test_openmetrics_when_asked(exporter):
    status, headers, body = request(exporter, "/metrics", Accept="application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in parse_openmetrics(text)}
    # OpenMetrics names the counter family without _total and its samples with it.
    reads = families["gpuwait_source_reads"]
    assert reads.type == "counter"
    assert all(s.name == "gpuwait_source_reads_total" for s in reads.samples)


def test_custom_telemetry_path():
    with ExporterProcess([*host_args(), "--web.telemetry-path=/probe"], env=host_env()) as exp:
        status, _, body = request(exp, "/probe")
        assert status == 200 and b"gpuwait_build_info" in body
        assert request(exp, "/metrics")[0] == 404
        assert 'href="/probe"' in request(exp, "/")[2].decode()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(sig):
    exp = ExporterProcess(host_args(), env=host_env())
    with exp:
        exp.scrape()
        exp.proc.send_signal(sig)
        code = exp.proc.wait(10)
    log = exp.log()
    assert code == 0, log
    assert "Traceback" not in log
    assert 'msg="stopped"' in log


def broken_stat_tree(tmp_path):
    tree = tmp_path / "host"
    shutil.copytree(HOST_TREE, tree, symlinks=True)
    stat = tree / "proc" / "stat"
    stat.unlink(missing_ok=True)
    stat.write_text("cpu  this is not\n\x00\x01 a kernel\n")
    return tree


def test_failing_source_is_down_counted_and_logged_once(tmp_path, exporter):
    healthy = exporter.scrape()
    up_when_healthy = {lbl["source"] for lbl, v in healthy["gpuwait_source_up"] if v == 1.0}
    assert "cpu" in up_when_healthy
    with ExporterProcess(host_args(broken_stat_tree(tmp_path)), env=host_env()) as exp:
        samples = exp.wait_for(
            lambda s: s if (value(s, "gpuwait_source_reads_total", source="cpu") or 0) >= 20 else None,
        )
        # The rest of the exporter goes on: every series of the collectors that do not read
        # the cpu source shows up as it does with a healthy /proc/stat.
        independent = {c.name for c in registry() if c.analyse is None and all(src.name != "cpu" for src in c.sources)}
        healthy_names = {n for n in healthy if CATALOG[n].source in independent | {"exporter"}}
        samples = exp.wait_for(lambda s: s if healthy_names <= set(s) else None, timeout=20)
        assert value(samples, "gpuwait_source_up", source="cpu") == 0.0
        reads = value(samples, "gpuwait_source_reads_total", source="cpu")
        errors = value(samples, "gpuwait_source_errors_total", source="cpu")
        # Each failed read counts once; the two counters are read a moment apart.
        assert reads - 1 <= errors <= reads + 1
        assert "gpuwait_cpu_seconds_total" not in samples
        assert value(samples, "gpuwait_build_info") == 1.0
        assert {labels["source"] for labels, _ in samples["gpuwait_source_up"]} == set(source_names())
        up_now = {lbl["source"] for lbl, v in samples["gpuwait_source_up"] if v == 1.0}
        assert up_now == up_when_healthy - {"cpu"}
        time.sleep(0.5)  # more failing reads, which must not log again
        log = exp.log()
    warnings = [line for line in log.splitlines() if "level=warn" in line and "source cpu:" in line]
    assert len(warnings) == 1, log
    assert "stat" in warnings[0]
    assert "Traceback" not in log


def test_without_gpu_driver_host_metrics_and_one_line():
    with ExporterProcess(host_args(), env=host_env(gpu_machine=None)) as exp:
        samples = exp.wait_for(lambda s: s if (value(s, "gpuwait_analysis_runs_total") or 0) >= 3 else None)
        time.sleep(0.5)  # many more reads, none of which may log again
        log = exp.log()
    host_sources = [s.name for c in registry() if c.name != "gpu" for s in c.sources]
    for source in host_sources:
        assert value(samples, "gpuwait_source_up", source=source) == 1.0, source
    assert samples.get("gpuwait_cpu_seconds_total")
    if "gpuwait_gpu_backend_up" in CATALOG:
        assert value(samples, "gpuwait_gpu_backend_up") == 0.0
    complaints = [line for line in log.splitlines() if "level=info" not in line and "level=debug" not in line]
    assert len(complaints) == 1, log
    assert "no gpu" in complaints[0].lower() or "nvml" in complaints[0].lower()
    assert "Traceback" not in log


def test_port_in_use_is_one_clear_line():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "gpuwait", f"--web.listen-address=127.0.0.1:{port}", *host_args()],
            capture_output=True, text=True, timeout=30, cwd=REPO, env={**os.environ, **host_env(gpu_machine=None)},
        )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("gpuwait-exporter: error:")]
    assert len(errors) == 1, result.stderr
    assert f"127.0.0.1:{port}" in errors[0]
    assert "in use" in errors[0].lower()
    others = [line for line in result.stderr.splitlines() if line not in errors]
    assert all(line.startswith("ts=") for line in others), result.stderr


#: What Prometheus 2 and 3 send (scrape.go's acceptHeader for their default protocols).
PROMETHEUS_ACCEPTS = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
)
#: Modules that an exporter without TLS, users or a kubelet has no use for: with OpenSSL and
#: the standard library's HTTP client and server they are 8 MB or more resident.
UNUSED_WITHOUT_TLS = ("ssl", "_ssl", "_hashlib", "hmac", "http.client", "http.server", "email.parser",
                      "urllib.request", "prometheus_client")


def test_serving_scrapes_without_tls_imports_neither_openssl_nor_prometheus_client():
    # -X importtime's lines go to the log, one per module as it is imported, before the
    # first scrape and during each.
    with ExporterProcess(host_args(), env={**host_env(), "PYTHONPROFILEIMPORTTIME": "1"}) as exp:
        exp.wait_for(lambda s: (value(s, "gpuwait_analysis_runs_total") or 0) >= 1)
        for accept in PROMETHEUS_ACCEPTS:
            for encoding in ("", "gzip"):
                status, headers, body = request(exp, "/metrics", Accept=accept, **{"Accept-Encoding": encoding})
                assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
                text = (gzip.decompress(body) if encoding else body).decode()
                assert text.endswith("# EOF\n") and "gpuwait_build_info" in text
        for path in ("/", "/-/healthy", "/-/ready", "/nowhere"):
            assert request(exp, path, method="HEAD")[0] in (200, 404)
        imported = {line.split("|")[-1].strip() for line in exp.log().splitlines() if line.startswith("import time:")}
        assert "gpuwait.exposition.server" in imported  # the log is the one importtime wrote
        assert not imported & set(UNUSED_WITHOUT_TLS), sorted(imported & set(UNUSED_WITHOUT_TLS))
        maps = open(f"/proc/{exp.proc.pid}/maps").read()
        assert "libssl" not in maps and "libcrypto" not in maps
