"""deploy/kubernetes: every variant renders with kustomize, every object is valid (built-in
kinds against Kubernetes' own schemas, shipped offline by kubernetes-validate; Prometheus
Operator kinds against tests/fixtures/kubernetes/monitoring.coreos.com-v1.schema.yaml),
the pieces refer to each other correctly, and the tree is what the Helm chart
deploy/helm/gpuwait renders (deploy/kubernetes/generate.py), fresh, with every dashboard, the
rules and the monitor: `--check` fails on stale or missing output."""

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
#: The kinds without a namespace in the tree.
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
COMPONENTS = sorted(p.name for p in (KUBE / "components").iterdir() if (p / "kustomization.yaml").is_file())


class Yaml12Loader(yaml.SafeLoader):
    """kustomize writes YAML 1.2, where a bare `=` (an AlertmanagerConfig matchType) is a
    string; PyYAML's YAML 1.1 resolver would read it as the `value` tag."""


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def kustomize(path: pathlib.Path) -> list[dict]:
    r = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.load_all(r.stdout, Loader=Yaml12Loader) if d]


def with_components(tmp_path: pathlib.Path, *components: str, namespace: str = "gpuwait") -> list[dict]:
    """The base plus the given components, as an overlay of one's own would have it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir(exist_ok=True)
    shutil.copytree(KUBE, overlay / "kubernetes", dirs_exist_ok=True)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": namespace,
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
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], doc["metadata"]
        else:
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


def test_daemonset_runs_unprivileged_on_gpu_nodes_and_sees_the_host(tmp_path):
    docs = kustomize(KUBE)
    spec = pod_spec(docs)
    container = one([{"kind": "c", **c} for c in spec["containers"]], "c")
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    # The host's PID namespace for owner attribution, its network namespace for the node's NICs
    # (/proc/net/dev of a pod's own namespace lists only its veth), and cluster DNS from there.
    assert spec["hostPID"] is True and spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "runtimeClassName" not in spec  # an optional component
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 65534
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and not sc.get("privileged")
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility",
                   "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    # No GPU of its own: it would be taken from the workloads being watched.
    for section in container["resources"].values():
        assert set(section) == {"cpu", "memory"}
    # The chart's figures, which test_deploy_helm.py holds to docs/performance.md's measurements.
    assert container["resources"] == {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
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
    # NCCL Inspector's dumps: read-only where the flag points, opened to the jobs likewise.
    dumps = flags["collector.nccl.dump-dir"]
    dump_mount = next(m for m in mounts.values() if m["mountPath"] == dumps)
    assert dump_mount["readOnly"] is True
    assert volumes[dump_mount["name"]]["hostPath"] == {"path": "/var/lib/gpuwait/nccl", "type": "DirectoryOrCreate"}
    (init,) = spec["initContainers"]
    assert {(m["name"], m["mountPath"]) for m in init["volumeMounts"]} == {(mount["name"], spool), (dump_mount["name"], dumps)}
    # The command, run: it opens exactly the directories it is given.
    assert init["command"][:2] == ["python", "-c"] and set(init["command"][3:]) == {spool, dumps}
    opened = [tmp_path / "a", tmp_path / "b"]
    for d in opened:
        d.mkdir(mode=0o755)
    subprocess.run([sys.executable, "-c", init["command"][2], *map(str, opened)], check=True)
    assert all(d.stat().st_mode & 0o7777 == 0o1777 for d in opened)
    isc = init["securityContext"]
    assert isc["capabilities"] == {"drop": ["ALL"]} and isc["allowPrivilegeEscalation"] is False
    assert isc["readOnlyRootFilesystem"] is True and not isc.get("privileged")


def test_host_nfs_mountstats_component_reads_the_one_file_as_root_without_capabilities(tmp_path):
    spec = pod_spec(with_components(tmp_path, "host-nfs-mountstats"))
    exporter, reader = spec["containers"]
    flags = dict(a.lstrip("-").split("=", 1) for a in exporter["args"])
    copy = flags["collector.nfs.mountstats-path"]
    assert exporter["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "runAsUser" not in exporter["securityContext"]  # the pod's non-root user
    assert reader["securityContext"]["runAsUser"] == 0 and reader["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert reader["securityContext"]["allowPrivilegeEscalation"] is False and reader["securityContext"]["readOnlyRootFilesystem"]
    script = reader["command"][-1]
    assert "/host/proc/1/mountstats" in script and copy in script and "mv -f" in script
    shared = {m["name"] for m in exporter["volumeMounts"] if copy.startswith(m["mountPath"] + "/")}
    assert shared and shared <= {m["name"] for m in reader["volumeMounts"]}
    (volume,) = [v for v in spec["volumes"] if v["name"] in shared]
    assert volume["emptyDir"]["medium"] == "Memory"


@pytest.mark.parametrize("components", [(), ("web-config",), ("host-nfs-mountstats",)])
def test_container_arguments_are_exporter_flags(tmp_path, components):
    for collector in registry():
        COLLECTOR_DEFAULTS.setdefault(collector.name, collector.default_enabled)
    docs = with_components(tmp_path, *components)
    args = pod_spec(docs)["containers"][0]["args"]
    settings, _ = resolve(args)  # raises on a flag the exporter does not have
    assert settings["path.procfs"] == "/host/proc" and settings["path.sysfs"] == "/host/sys"
    if components == ("web-config",):
        assert settings["web.config.file"] == "/etc/gpuwait/web/web-config.yml"
    if components == ("host-nfs-mountstats",):
        assert settings["collector.nfs.mountstats-path"].startswith("/run/gpuwait/")


def test_the_daemonsets_account_may_get_nodes_pods_in_the_overlays_namespace(tmp_path):
    """The kubelet's pod list: the base's ServiceAccount is the DaemonSet's, the ClusterRole
    grants exactly `get` on nodes/pods, and the binding names the account in whatever
    namespace an overlay puts it (here not the base's)."""
    from gpuwait.owners import kubelet

    docs = with_components(tmp_path, namespace="monitoring")
    account, role, binding = one(docs, "ServiceAccount"), one(docs, "ClusterRole"), one(docs, "ClusterRoleBinding")
    assert account["metadata"]["namespace"] == "monitoring"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes/pods"], "verbs": ["get"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "monitoring"}]
    spec = pod_spec(docs)
    assert spec["serviceAccountName"] == account["metadata"]["name"] and spec["automountServiceAccountToken"] is False
    container = spec["containers"][0]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == kubelet.SERVICE_ACCOUNT_DIR]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    token, ca = volume["projected"]["sources"]
    assert token["serviceAccountToken"]["path"] == "token" and token["serviceAccountToken"]["expirationSeconds"] <= 3600
    assert ca["configMap"] == {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    assert kubelet.TOKEN_FILE.default == f"{mount['mountPath']}/token" and kubelet.CA_FILE.default == f"{mount['mountPath']}/ca.crt"
    assert "--collector.gpu.kubelet-tls-server-name=$(NODE_NAME)" in container["args"]

    role = one(with_components(tmp_path, "kubelet-nodes-proxy"), "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes/pods", "nodes/proxy"], "verbs": ["get"]}]


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
    # job "gpuwait" whatever the release is named (the rules' job selector matches it).
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name" and service["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuwait"
    for endpoint in (*monitor["spec"]["endpoints"], *podmonitor["spec"]["podMetricsEndpoints"]):
        assert endpoint["port"] == "metrics" and endpoint["port"] in container_ports
        assert endpoint["honorLabels"] is True
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


# -- generated from the chart -------------------------------------------------------------------

def test_generated_files_are_fresh_and_check_says_so():
    r = subprocess.run([sys.executable, str(KUBE / "generate.py"), "--check"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert generate.on_disk(KUBE) == generate.render()


def test_overlay_carries_every_dashboard_the_rules_and_the_monitor():
    """What a kube-prometheus-stack user gets from `kubectl kustomize`: one ConfigMap per
    dashboard, the rules of alerts/*.yml, the ServiceMonitor."""
    docs = kustomize(KUBE / "overlays" / "kube-prometheus-stack")
    dashboards = sorted(p.name for p in (pathlib.Path(REPO) / "dashboards" / "json").glob("*.json"))
    assert len(dashboards) == 6
    configmaps = by_kind(docs, "ConfigMap")
    assert sorted(name for d in configmaps for name in d["data"]) == dashboards
    for doc in configmaps:
        (name, text), = doc["data"].items()
        assert json.loads(text) == json.loads((pathlib.Path(REPO) / "dashboards" / "json" / name).read_text())
    rules = one(docs, "PrometheusRule")["spec"]["groups"]
    files = sorted((pathlib.Path(REPO) / "alerts").glob("gpuwait-*.yml"))
    assert rules == [g for p in files for g in yaml.safe_load(p.read_text())["groups"]]
    one(docs, "ServiceMonitor")
    for doc in docs:
        assert not {"helm.sh/chart", "app.kubernetes.io/managed-by"} & set(doc["metadata"].get("labels", {}))


def copy_tree(tmp_path: pathlib.Path) -> pathlib.Path:
    out = tmp_path / "kubernetes"
    shutil.copytree(KUBE, out)
    return out


def check(out: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(KUBE / "generate.py"), "--check", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("damage", ["no dashboards listed", "a dashboard missing", "an edited rule", "an extra file"])
def test_check_fails_on_stale_or_empty_output(tmp_path, damage):
    out = copy_tree(tmp_path)
    assert check(out).returncode == 0
    dashboards = out / "components" / "grafana-dashboards"
    if damage == "no dashboards listed":
        # What the tree once held: a component that renders no dashboard at all.
        text = (dashboards / "kustomization.yaml").read_text()
        (dashboards / "kustomization.yaml").write_text(text.split("resources:")[0] + "resources: []\n")
    elif damage == "a dashboard missing":
        next(dashboards.glob("gpuwait-dashboard-*.yaml")).unlink()
    elif damage == "an edited rule":
        rule = out / "components" / "prometheus-rules" / "prometheusrule.yaml"
        rule.write_text(rule.read_text().replace("for: 15m", "for: 1m", 1))
    else:
        (dashboards / "gpuwait-dashboard-old.yaml").write_text("kind: ConfigMap\n")
    r = check(out)
    assert r.returncode == 1 and "stale" in r.stderr, r.stderr


def test_a_chart_that_renders_no_dashboards_is_an_error(tmp_path):
    chart = tmp_path / "gpuwait"
    shutil.copytree(generate.CHART, chart)
    for path in (chart / "files" / "dashboards").glob("*.json"):
        path.unlink()
    with pytest.raises(generate.GenerateError, match="0 dashboard ConfigMaps for 6 dashboards"):
        generate.render(chart)
    shutil.rmtree(chart / "templates")
    (chart / "templates").mkdir()
    with pytest.raises(generate.GenerateError, match="renders nothing for"):
        generate.render(chart)


def test_json_patch_only_adds():
    base = {"a": [1, 2], "b": {"c": 1}}
    assert generate.json_patch(base, {"a": [1, 2, 3], "b": {"c": 1, "d/e": 2}}) == [
        {"op": "add", "path": "/a/-", "value": 3}, {"op": "add", "path": "/b/d~1e", "value": 2}]
    for changed in ({"a": [1], "b": {"c": 1}}, {"a": [1, 2], "b": {"c": 2}}, {"a": [1, 2], "b": {}}):
        with pytest.raises(generate.GenerateError):
            generate.json_patch(base, changed)


@pytest.mark.parametrize("component", sorted(generate.PATCHES))
def test_patch_components_do_what_the_chart_value_does(tmp_path, component):
    """One truth: base + component is the chart's base objects rendered with the component's value."""
    values, _ = generate.PATCHES[component]
    expected = {key: obj for key, (_, obj) in generate.base_objects({**generate.VALUES["default"], **values}).items()}
    rendered = {(d["kind"], d["metadata"]["name"]): d for d in with_components(tmp_path, component) if d["kind"] != "Namespace"}
    assert rendered.keys() == expected.keys()
    for doc in (*expected.values(), *rendered.values()):
        doc["metadata"].pop("namespace", None)
        for label in generate.HELM_LABELS:
            doc["metadata"]["labels"].pop(label, None)
        for subject in doc.get("subjects", []):
            subject.pop("namespace", None)
    assert rendered == expected
