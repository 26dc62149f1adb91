"""deploy/local holds together: Prometheus accepts its config as the runner lays it out, the
compose file mounts what the configs name, and Grafana's provisioning matches Prometheus."""

import importlib.util
import pathlib
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
LOCAL = REPO / "deploy" / "local"


def load_stack():
    spec = importlib.util.spec_from_file_location("gpuwait_local_stack_config", LOCAL / "stack.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


stack = load_stack()


def test_prometheus_accepts_the_config_with_the_rules(tmp_path):
    config = stack.prometheus_workdir(tmp_path, ["127.0.0.1:9975"], ["127.0.0.1:9093"])
    result = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    # Every rule file of alerts/ is picked up by the glob, alertmanager.yml is not.
    for path in (REPO / "alerts").glob("gpuwait-*.yml"):
        assert any(path.name in line for line in result.stdout.splitlines()), (path.name, result.stdout)
    assert "alertmanager.yml" not in result.stdout


def test_runner_keeps_the_config_and_only_shortens_intervals(tmp_path):
    original = yaml.safe_load((LOCAL / "prometheus" / "prometheus.yml").read_text())
    written = yaml.safe_load(stack.prometheus_workdir(tmp_path, ["127.0.0.1:1"], [], interval="1s").read_text())
    assert written["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert {k: v for k, v in written.items() if k != "global"} == {k: v for k, v in original.items() if k != "global"}
    assert yaml.safe_load((tmp_path / "targets" / "exporters.yml").read_text()) == [{"targets": ["127.0.0.1:1"]}]


def test_compose_mounts_what_the_configs_name():
    compose = yaml.safe_load((LOCAL / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"exporter", "prometheus", "alertmanager", "grafana"}
    assert "--simulate" in services["exporter"]["command"]
    mounts = {v.split(":")[1]: (LOCAL / v.split(":")[0]).resolve() for v in services["prometheus"]["volumes"]}
    assert mounts["/etc/prometheus/alerts"] == (REPO / "alerts").resolve()
    assert mounts["/etc/prometheus/prometheus.yml"] == (LOCAL / "prometheus" / "prometheus.yml").resolve()
    for directory in ("targets", "alertmanagers"):
        host = mounts[f"/etc/prometheus/{directory}"]
        (entry,) = yaml.safe_load(next(host.glob("*.yml")).read_text())
        assert entry["targets"][0].split(":")[0] in services
    grafana = {v.split(":")[1]: (LOCAL / v.split(":")[0]).resolve() for v in services["grafana"]["volumes"]}
    provider = yaml.safe_load((LOCAL / "grafana" / "provisioning" / "dashboards" / "gpuwait.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert grafana[path] == (REPO / "dashboards" / "json").resolve()
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{path}/triage.json" and (REPO / "dashboards" / "json" / "triage.json").is_file()


def test_datasource_time_interval_is_the_scrape_interval():
    prometheus = yaml.safe_load((LOCAL / "prometheus" / "prometheus.yml").read_text())
    datasources = yaml.safe_load((LOCAL / "grafana" / "provisioning" / "datasources" / "gpuwait.yml").read_text())
    (ds,) = datasources["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    assert ds["jsonData"]["timeInterval"] == prometheus["global"]["scrape_interval"]


def test_ports_handed_out_together_are_distinct_and_free():
    # A port let go can be handed out again by a later bind: the stack's exporters, given theirs
    # one at a time, could share one and answer as a single target.
    import socket

    ports = stack.free_ports(64)
    assert len(set(ports)) == 64
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
