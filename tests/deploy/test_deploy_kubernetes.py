"""deploy/kubernetes: every variant renders with kustomize, every object is valid (built-in
kinds against Kubernetes' own schemas, shipped offline by kubernetes-validate; Prometheus
Operator kinds against tests/fixtures/kubernetes/monitoring.coreos.com-v1.schema.yaml),
the pieces refer to each other correctly, and the generated rules and dashboards are
fresh."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpuwait.core.registry import registry
from gpuwait.core.registry import COLLECTOR_DEFAULTS, resolve
from support import REPO

KUBE = pathlib.Path(REPO) / "deploy" / "kubernetes"
sys.path.insert(0, str(KUBE))
import generate  # noqa: E402

CRD_SCHEMAS = yaml.safe_load((pathlib.Path(__file__).parent.parent / "fixtures" / "kubernetes" / "monitoring.coreos.com-v1.schema.yaml").read_text())
#: The oldest Kubernetes the manifests are meant for, and the newest schemas at hand.
KUBERNETES_VERSIONS = ("1.27", kubernetes_validate.latest_version())
COMPONENTS = sorted(p.name for p in (KUBE / "components").iterdir() if (p / "kustomization.yaml").is_file())


def kustomize(path: pathlib.Path) -> list[dict]:
    r = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def with_components(tmp_path: pathlib.Path, *components: str) -> list[dict]:
    """The base plus the given components, as an overlay of one's own would have it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir(exist_ok=True)
    shutil.copytree(KUBE, overlay / "kubernetes", dirs_exist_ok=True)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "gpuwait",
        "resources": ["kubernetes/base"],
        "components": [f"kubernetes/components/{c}" for c in components],
    }))
    return kustomize(overlay)


def validate(doc: dict) -> None:
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        schema = {"$defs": CRD_SCHEMAS["$defs"], **CRD_SCHEMAS[doc["kind"]]}
        jsonschema.Draft202012Validator(schema).validate(doc)
        return
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str) -> dict:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


# -- validity -------------------------------------------------------------------------------

def test_every_manifest_file_is_valid():
    files = [p for p in KUBE.rglob("*.yaml") if p.name != "kustomization.yaml"]
    assert {p.name for p in files} >= {"daemonset.yaml", "service.yaml", "namespace.yaml", "servicemonitor.yaml", "podmonitor.yaml"}
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                validate(doc)


@pytest.mark.parametrize("variant", ["default", "kube-prometheus-stack", *COMPONENTS])
def test_every_variant_renders_and_is_valid(tmp_path, variant):
    if variant == "default":
        docs = kustomize(KUBE)
    elif variant == "kube-prometheus-stack":
        docs = kustomize(KUBE / "overlays" / variant)
    else:
        docs = with_components(tmp_path, variant)
    assert {"Namespace", "DaemonSet", "Service"} <= {d["kind"] for d in docs}
    for doc in docs:
        validate(doc)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "gpuwait", doc["metadata"]


def test_crd_schemas_reject_what_the_api_would_drop_or_refuse():
    """The hand-written schemas must catch a misspelt field and a bad enum, or validating
    against them would prove nothing."""
    monitor = yaml.safe_load((KUBE / "components/servicemonitor/servicemonitor.yaml").read_text())
    validate(monitor)
    misspelt = json.loads(json.dumps(monitor))
    misspelt["spec"]["endpoints"][0]["relabelings"][0]["sourceLabel"] = ["__meta_kubernetes_pod_node_name"]
    bad_action = json.loads(json.dumps(monitor))
    bad_action["spec"]["endpoints"][0]["relabelings"][0]["action"] = "rename"
    bad_interval = json.loads(json.dumps(monitor))
    bad_interval["spec"]["endpoints"][0]["interval"] = "15 seconds"
    for broken in (misspelt, bad_action, bad_interval):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "x"},
            "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "record": "b", "expr": "1"}]}]}}
    with pytest.raises(jsonschema.ValidationError):
        validate(rule)


# -- what the objects say ---------------------------------------------------------------------

def pod_spec(docs: list[dict]) -> dict:
    return one(docs, "DaemonSet")["spec"]["template"]["spec"]


def test_daemonset_runs_unprivileged_on_gpu_nodes_and_sees_the_host():
    docs = kustomize(KUBE)
    spec = pod_spec(docs)
    container = one([{"kind": "c", **c} for c in spec["containers"]], "c")
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["hostPID"] is True and not spec.get("hostNetwork")
    assert "runtimeClassName" not in spec  # an optional component
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 65534
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and not sc.get("privileged")
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
    # No GPU of its own: it would be taken from the workloads being watched.
    for section in container["resources"].values():
        assert set(section) == {"cpu", "memory"}
    assert container["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}
    assert container["livenessProbe"]["httpGet"]["path"] == "/-/healthy"
    assert container["readinessProbe"]["httpGet"]["path"] == "/-/ready"

    # The host's /proc and /sys, read-only, exactly where the flags point.
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    flags = dict(a.lstrip("-").split("=", 1) for a in container["args"])
    for flag, host_path in (("path.procfs", "/proc"), ("path.sysfs", "/sys")):
        mount = next(m for m in mounts.values() if m["mountPath"] == flags[flag])
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["hostPath"]["path"] == host_path
    port = flags["web.listen-address"].rsplit(":", 1)[1]
    assert {"name": "metrics", "containerPort": int(port), "protocol": "TCP"} in container["ports"]

    # The workload spool: the host directory training pods mount too, where the flag points,
    # and opened to every user's jobs before the exporter starts.
    spool = "/run/gpuwait/workload"
    assert flags["collector.workload.spool-dir"] == spool
    mount = next(m for m in mounts.values() if m["mountPath"] == spool)
    assert volumes[mount["name"]]["hostPath"] == {"path": spool, "type": "DirectoryOrCreate"}
    (init,) = spec["initContainers"]
    assert [m["mountPath"] for m in init["volumeMounts"]] == [spool] and init["volumeMounts"][0]["name"] == mount["name"]
    assert spool in " ".join(init["command"]) and "0o1777" in " ".join(init["command"])
    isc = init["securityContext"]
    assert isc["capabilities"] == {"drop": ["ALL"]} and isc["allowPrivilegeEscalation"] is False
    assert isc["readOnlyRootFilesystem"] is True and not isc.get("privileged")


@pytest.mark.parametrize("components", [(), ("web-config",)])
def test_container_arguments_are_exporter_flags(tmp_path, components):
    for collector in registry():
        COLLECTOR_DEFAULTS.setdefault(collector.name, collector.default_enabled)
    docs = with_components(tmp_path, *components)
    args = pod_spec(docs)["containers"][0]["args"]
    settings, _ = resolve(args)  # raises on a flag the exporter does not have
    assert settings["path.procfs"] == "/host/proc" and settings["path.sysfs"] == "/host/sys"
    if components:
        assert settings["web.config.file"] == "/etc/gpuwait/web/web-config.yml"


def test_service_and_monitors_select_the_exporter_pods(tmp_path):
    docs = kustomize(KUBE / "overlays" / "kube-prometheus-stack") + by_kind(with_components(tmp_path, "podmonitor"), "PodMonitor")
    daemonset, service = one(docs, "DaemonSet"), one(docs, "Service")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9975, "targetPort": "metrics", "protocol": "TCP"}]

    monitor = one(docs, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    podmonitor = one(docs, "PodMonitor")
    assert podmonitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    container_ports = {p["name"] for p in daemonset["spec"]["template"]["spec"]["containers"][0]["ports"]}
    for endpoint in (*monitor["spec"]["endpoints"], *podmonitor["spec"]["podMetricsEndpoints"]):
        assert endpoint["port"] == "metrics" and endpoint["port"] in container_ports
        node_name = {r["targetLabel"] for r in endpoint["relabelings"]
                     if r.get("sourceLabels") == ["__meta_kubernetes_pod_node_name"] and r.get("action", "replace") == "replace"}
        assert node_name == {"instance", "node"}


def test_kube_prometheus_stack_overlay_sets_the_release_label():
    docs = kustomize(KUBE / "overlays" / "kube-prometheus-stack")
    monitoring = [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert monitoring, "the overlay has no Prometheus Operator objects"
    for doc in monitoring:
        assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert not by_kind(docs, "PodMonitor")  # one way of scraping, not two
    for doc in by_kind(docs, "ConfigMap"):
        assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_optional_components_do_what_they_say(tmp_path):
    spec = pod_spec(with_components(tmp_path, "runtimeclass-nvidia"))
    assert spec["runtimeClassName"] == "nvidia"
    spec = pod_spec(with_components(tmp_path, "web-config"))
    container = spec["containers"][0]
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS" == container["readinessProbe"]["httpGet"]["scheme"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "web-config")
    assert mount["readOnly"] is True and mount["mountPath"] == "/etc/gpuwait/web"
    volume = next(v for v in spec["volumes"] if v["name"] == "web-config")
    assert volume["secret"]["secretName"] == "gpuwait-web-config"
    # The Secret's files are mode 0440: readable by the pod's user only through fsGroup.
    assert volume["secret"]["defaultMode"] & 0o004 == 0 and spec["securityContext"]["fsGroup"] == 65534


# -- generated rules and dashboards -------------------------------------------------------------

def test_generated_files_equal_a_fresh_render():
    fresh = generate.render(pathlib.Path(REPO) / "alerts", pathlib.Path(REPO) / "dashboards")
    assert generate.on_disk(KUBE / "components") == fresh, "run: python3 deploy/kubernetes/generate.py"
    r = subprocess.run([sys.executable, str(KUBE / "generate.py"), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


RULES = """groups:
  - name: gpuwait.example
    rules:
      - record: instance:gpuwait_example:ratio
        expr: |
          sum by (instance) (
            rate(gpuwait_example_seconds_total[5m])
          )
      - alert: GpuwaitExampleHigh
        expr: instance:gpuwait_example:ratio > 0.5
        for: 10m
        labels:
          severity: warning
        annotations:
          summary: "GPU waits on {{ $labels.instance }}."
          description: |
            Two lines,
            to be kept as they are.
"""
MORE_RULES = """groups:
  - name: gpuwait.more
    interval: 30s
    rules:
      - record: instance:gpuwait_more:sum
        expr: sum by (instance) (gpuwait_more)
"""
PROMTOOL_TEST = """rule_files: [rules.yml]
tests: []
"""
DASHBOARD = {"title": "GPU waits", "uid": "gpuwait-overview", "panels": [{"type": "timeseries", "title": "Idle — why"}], "schemaVersion": 39}


def test_generator_renders_rules_and_dashboards(tmp_path):
    alerts, dashboards, out = tmp_path / "alerts", tmp_path / "dashboards", tmp_path / "components"
    alerts.mkdir()
    dashboards.mkdir()
    (alerts / "rules.yml").write_text(RULES)
    (alerts / "more.yaml").write_text(MORE_RULES)
    (alerts / "rules_test.yml").write_text(PROMTOOL_TEST)
    (dashboards / "GPU Overview.json").write_text(json.dumps(DASHBOARD))
    argv = ["--alerts", str(alerts), "--dashboards", str(dashboards), "--out", str(out)]
    assert generate.main(argv) == 0
    assert generate.main([*argv, "--check"]) == 0

    rule_docs = list(yaml.safe_load_all((out / "prometheus-rules/prometheusrule.yaml").read_text()))
    assert len(rule_docs) == 1
    validate(rule_docs[0])
    expected = yaml.safe_load(MORE_RULES)["groups"] + yaml.safe_load(RULES)["groups"]  # files in name order
    assert rule_docs[0]["spec"]["groups"] == expected
    # Prometheus itself must load the groups as rendered.
    (tmp_path / "extracted.yml").write_text(yaml.safe_dump({"groups": rule_docs[0]["spec"]["groups"]}))
    r = subprocess.run(["promtool", "check", "rules", str(tmp_path / "extracted.yml")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr

    cm_path = out / "grafana-dashboards/gpuwait-dashboard-gpu-overview.yaml"
    configmap = yaml.safe_load(cm_path.read_text())
    validate(configmap)
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["GPU Overview.json"]) == DASHBOARD

    # The components render with kustomize and carry exactly these objects.
    shutil.copytree(KUBE / "base", tmp_path / "base")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["base"],
        "components": ["components/prometheus-rules", "components/grafana-dashboards"]}))
    kinds = sorted(d["kind"] for d in kustomize(tmp_path))
    assert kinds == ["ConfigMap", "DaemonSet", "Namespace", "PrometheusRule", "Service"]

    # Stale output is detected, and output of removed sources is removed.
    (dashboards / "GPU Overview.json").unlink()
    assert generate.main([*argv, "--check"]) == 1
    assert generate.main(argv) == 0
    assert not cm_path.exists()
    assert "resources: []" in (out / "grafana-dashboards/kustomization.yaml").read_text()


def test_generator_without_sources_emits_no_objects(tmp_path):
    out = tmp_path / "components"
    (tmp_path / "alerts").mkdir()
    (tmp_path / "dashboards").mkdir()
    assert generate.main(["--alerts", str(tmp_path / "alerts"), "--dashboards", str(tmp_path / "dashboards"), "--out", str(out)]) == 0
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml")) == [
        "grafana-dashboards/kustomization.yaml", "prometheus-rules/kustomization.yaml"]


@pytest.mark.parametrize("files,message", [
    ({"a.yml": MORE_RULES, "b.yml": MORE_RULES}, "names must be unique"),
    ({"a.yml": "rules: []\n"}, "top-level 'groups'"),
    ({"a.yml": "groups: [\n"}, "not valid YAML"),
])
def test_generator_refuses_broken_rule_files(tmp_path, capsys, files, message):
    alerts = tmp_path / "alerts"
    alerts.mkdir()
    for name, text in files.items():
        (alerts / name).write_text(text)
    assert generate.main(["--alerts", str(alerts), "--dashboards", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
