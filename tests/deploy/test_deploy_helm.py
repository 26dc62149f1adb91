"""deploy/helm/gpuwait: the chart lints clean with Helm's own SDK (PyPI's helm-python-sdk, which
bundles Helm v4's Go SDK: no helm binary, no cluster), renders objects Kubernetes and the
Prometheus Operator accept, carries the same rules and dashboards as alerts/ and dashboards/
with its `mixin:` values substituted, refuses values it does not know, and its generated files
are fresh. The kernel facts the chart's NFS option rests on are checked on this kernel."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import helm_python
import pytest
import yaml

from gpuwait.core.registry import COLLECTOR_DEFAULTS, registry, resolve
from gpuwait.owners import kubelet
import kube_stack
from support import REPO
from test_deploy_kubernetes import validate

REPO = pathlib.Path(REPO)
CHART = REPO / "deploy" / "helm" / "gpuwait"
ALERTS = REPO / "alerts"
sys.path.insert(0, str(REPO))
import mixin  # noqa: E402

_spec = importlib.util.spec_from_file_location("gpuwait_helm_generate", REPO / "deploy" / "helm" / "generate.py")
helm_generate = sys.modules["gpuwait_helm_generate"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helm_generate)


def render(values: dict | None = None, name: str = "gpuwait", namespace: str = "gpuwait") -> list[dict]:
    manifests = helm_python.Chart.load(str(CHART)).render(values or {}, name=name, namespace=namespace)
    return [d for template, text in sorted(manifests.items()) if template.endswith(".yaml")
            for d in yaml.safe_load_all(text) if d]


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


#: The kinds without a namespace that the chart renders.
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


def rule_groups() -> list[dict]:
    return [g for p in sorted(ALERTS.glob("gpuwait-*.yml")) for g in yaml.safe_load(p.read_text())["groups"]]


def test_lint_is_clean():
    report = helm_python.lint(str(CHART), strict=True, kube_version="v1.27.0")
    assert report["errors"] == [] and report["total_charts_linted"] == 1, report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report["messages"]


def test_lint_reports_a_broken_template(tmp_path):
    """The lint above can fail: a template error is reported as one."""
    chart = tmp_path / "gpuwait"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "service.yaml").write_text("{{ .Values.service.enabled | nosuchfunction }}\n")
    report = helm_python.lint(str(chart), strict=True)
    assert report["errors"] or any(m["severity"] == 3 for m in report["messages"]), report


@pytest.mark.parametrize("values", [
    {},
    {"serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True}, "alertmanagerConfig": {"enabled": True}},
    {"hostMountstats": {"enabled": True}, "ncclInspector": {"enabled": True}, "webConfig": {"secretName": "gpuwait-web"},
     "runtimeClassName": "nvidia", "priorityClassName": "system-node-critical", "release": "",
     "podNames": {"nodesProxy": True, "insecureSkipVerify": True, "tokenExpirationSeconds": 600},
     "serviceAccount": {"name": "gpuwait-exporter", "annotations": {"example.org/owner": "monitoring"}}},
    {"hostNetwork": False, "workloadSpool": {"enabled": False}, "dashboards": {"enabled": False}, "prometheusRule": {"enabled": False},
     "podNames": {"enabled": False}},
], ids=["default", "podmonitor+alertmanagerconfig", "every-option", "minimal"])
def test_every_rendered_object_is_valid(values):
    docs = render(values)
    assert {"DaemonSet"} <= {d["kind"] for d in docs}
    for doc in docs:
        validate(doc)
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], doc["metadata"]
        else:
            assert doc["metadata"]["namespace"] == "gpuwait", doc["metadata"]
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            assert doc["metadata"]["labels"].get("release") == (values.get("release", "kube-prometheus-stack") or None)
    for collector in registry():
        COLLECTOR_DEFAULTS.setdefault(collector.name, collector.default_enabled)
    container = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    resolve(container["args"])  # raises on a flag the exporter does not have


def test_the_release_name_changes_object_names_but_not_the_job():
    docs = render(name="prod")
    assert one(docs, "DaemonSet")["metadata"]["name"] == "prod-gpuwait"
    service, monitor = one(docs, "Service"), one(docs, "ServiceMonitor")
    # The Operator takes job from the Service's label named by jobLabel: "gpuwait", which the
    # rules' job selector matches whatever the release is called.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "gpuwait"


def test_both_monitors_at_once_are_refused():
    with pytest.raises(helm_python.HelmError, match="choose one"):
        render({"podMonitor": {"enabled": True}})


@pytest.mark.parametrize("values, key", [
    ({"mixin": {"wait": {"min_ration": 0.3}}}, "min_ration"),
    ({"mixin": {"wait": {"min_ratio": "high"}}}, "min_ratio"),
    ({"mixin": {"wait": {"for": "15 minutes"}}}, "for"),
    ({"mixin": {"labels": {"cluster": "k8s-cluster"}}}, "cluster"),
    ({"serviceMonitor": {"intervall": "15s"}}, "intervall"),
    ({"hostMountstats": {"interval": "500ms"}}, "interval"),
    ({"podNames": {"nodeProxy": True}}, "nodeProxy"),
    ({"podNames": {"tokenExpirationSeconds": 300}}, "tokenExpirationSeconds"),
    ({"serviceAccount": {"create": "yes"}}, "create"),
])
def test_values_the_chart_does_not_know_are_refused_by_name(values, key):
    with pytest.raises(helm_python.HelmError, match=key):
        render(values)


@pytest.mark.parametrize("values, job", [({}, "serviceMonitor/gpuwait/gpuwait/0"),
                                          ({"serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True}},
                                           "podMonitor/gpuwait/gpuwait/0")])
def test_the_operators_scrape_job_for_the_monitor_is_valid_configuration(tmp_path, values, job):
    """The scrape job the Operator makes of the monitor (tests/support/kube_stack.py), the chart's
    relabelings in it, passes promtool; the stack test runs the ServiceMonitor's for real."""
    (monitor,) = kube_stack.selected(render(values), "PodMonitor" if "podMonitor" in values else "ServiceMonitor",
                                     {"release": "kube-prometheus-stack"})
    scrape = kube_stack.scrape_config(monitor, 0, [str(tmp_path / "targets.yml")])
    assert scrape["job_name"] == job and scrape["honor_labels"] is True
    assert {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "instance", "action": "replace"} in scrape["relabel_configs"]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump({"scrape_configs": [scrape]}))
    r = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# -- pod names from the kubelet ------------------------------------------------------------------

def pod_spec(docs: list[dict]) -> dict:
    return one(docs, "DaemonSet")["spec"]["template"]["spec"]


def exporter_settings(docs: list[dict]) -> dict:
    for collector in registry():
        COLLECTOR_DEFAULTS.setdefault(collector.name, collector.default_enabled)
    settings, _ = resolve(pod_spec(docs)["containers"][0]["args"])
    return settings


def kubelet_token_volume(spec: dict) -> dict | None:
    """The volume mounted where the exporter's token and CA flags look by default."""
    account_dir = kubelet.SERVICE_ACCOUNT_DIR
    assert kubelet.TOKEN_FILE.default == f"{account_dir}/token" and kubelet.CA_FILE.default == f"{account_dir}/ca.crt"
    mounts = [m for m in spec["containers"][0].get("volumeMounts", []) if m["mountPath"] == account_dir]
    if not mounts:
        return None
    (mount,) = mounts
    assert mount["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return volume


def test_pod_names_by_default_the_daemonsets_own_account_may_get_nodes_pods_only():
    docs = render(name="prod", namespace="monitoring")
    account, role, binding = one(docs, "ServiceAccount"), one(docs, "ClusterRole"), one(docs, "ClusterRoleBinding")
    assert account["metadata"] == {**account["metadata"], "name": "prod-gpuwait", "namespace": "monitoring"}
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes/pods"], "verbs": ["get"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prod-gpuwait", "namespace": "monitoring"}]
    spec = pod_spec(docs)
    assert spec["serviceAccountName"] == "prod-gpuwait"
    # No API server token: the one token is the projected, short-lived one for the kubelet.
    assert spec["automountServiceAccountToken"] is False and account["automountServiceAccountToken"] is False
    volume = kubelet_token_volume(spec)
    assert volume is not None, spec["containers"][0]["volumeMounts"]
    token, ca = volume["projected"]["sources"]
    assert token == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    assert ca == {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    settings = exporter_settings(docs)
    assert settings["collector.gpu.kubelet-endpoint"] == "https://127.0.0.1:10250" and spec["hostNetwork"] is True
    assert settings["collector.gpu.kubelet-tls-server-name"] == "$(NODE_NAME)"
    assert settings["collector.gpu.kubelet-tls-insecure-skip-verify"] is False


def test_pod_names_off_is_no_account_no_grant_no_token_and_no_request():
    docs = render({"podNames": {"enabled": False}})
    assert not {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} & {d["kind"] for d in docs}
    spec = pod_spec(docs)
    assert "serviceAccountName" not in spec and spec["automountServiceAccountToken"] is False
    assert kubelet_token_volume(spec) is None
    assert not [v for v in spec["volumes"] if "projected" in v]
    assert "NODE_NAME" not in {e["name"] for e in spec["containers"][0]["env"]}
    assert "--collector.gpu.kubelet-endpoint=" in spec["containers"][0]["args"]
    assert exporter_settings(docs)["collector.gpu.kubelet-endpoint"] == ""


def test_nodes_proxy_and_insecure_skip_verify_are_asked_for():
    docs = render({"podNames": {"nodesProxy": True, "insecureSkipVerify": True, "tokenExpirationSeconds": 7200}})
    assert one(docs, "ClusterRole")["rules"] == [{"apiGroups": [""], "resources": ["nodes/pods", "nodes/proxy"], "verbs": ["get"]}]
    assert exporter_settings(docs)["collector.gpu.kubelet-tls-insecure-skip-verify"] is True
    token = kubelet_token_volume(pod_spec(docs))["projected"]["sources"][0]
    assert token["serviceAccountToken"]["expirationSeconds"] == 7200


def test_without_host_network_the_node_address_names_the_kubelet():
    endpoint = "--collector.gpu.kubelet-endpoint=https://$(HOST_IP):10250"
    docs = render({"hostNetwork": False, "extraArgs": [endpoint]})
    env = {e["name"]: e for e in pod_spec(docs)["containers"][0]["env"]}
    assert env["HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert exporter_settings(docs)["collector.gpu.kubelet-endpoint"] == "https://$(HOST_IP):10250"
    assert "HOST_IP" not in {e["name"] for e in pod_spec(render())["containers"][0]["env"]}


def test_an_existing_service_account_is_granted_and_used_not_created():
    docs = render({"serviceAccount": {"create": False, "name": "monitoring-agents"}})
    assert not [d for d in docs if d["kind"] == "ServiceAccount"]
    assert one(docs, "ClusterRoleBinding")["subjects"] == [{"kind": "ServiceAccount", "name": "monitoring-agents", "namespace": "gpuwait"}]
    spec = pod_spec(docs)
    assert spec["serviceAccountName"] == "monitoring-agents" and kubelet_token_volume(spec) is not None
    # Without a name the grant would go to the namespace's default account: refused instead.
    with pytest.raises(helm_python.HelmError, match="serviceAccount.name"):
        render({"serviceAccount": {"create": False}})


# -- resources against the measured cost ------------------------------------------------------------

PERFORMANCE = REPO / "docs" / "performance.md"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def measured_cost() -> tuple[list[float], list[float]]:
    """Every figure of docs/performance.md for the exporter with its GPUs: average CPU in % of
    one core and peak RSS in MB, from its tables as they are laid out (the per-size table, the
    before/after tables, the big node's own table)."""
    cpu: list[float] = []
    rss: list[float] = []
    header: list[str] = []
    for line in PERFORMANCE.read_text().splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = _cells(line)
        if not header:
            header = cells
            continue
        if set(line) <= set("|-: "):
            continue
        row = dict(zip(header, cells))
        label = cells[0]

        def first(column: str) -> list[float]:
            return [float(NUMBER.search(row[column])[0])] if NUMBER.search(row.get(column, "")) else []

        def before_after() -> list[float]:
            return [float(n) for column in ("before", "after") for n in NUMBER.findall(row.get(column, ""))]

        if "gpuwait CPU %" in row and "RSS peak MB" in row:
            cpu += first("gpuwait CPU %")
            rss += first("RSS peak MB")
        elif label.startswith("gpuwait, CPU % of one core"):
            cpu += before_after()
        elif label.startswith("RSS peak, MB, with GPUs"):
            rss += before_after()
        elif "gpuwait" in row and label == "CPU, % of one core":
            cpu += first("gpuwait")
        elif "gpuwait" in row and label == "RSS peak, MB":
            rss += first("gpuwait")
    return cpu, rss


def cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    return float(quantity[:-2]) * units[quantity[-2:]]


def test_resources_cover_the_measured_cost_on_a_big_node():
    """The exporter's request holds what docs/performance.md measured on the big node (so the
    scheduler reserves it), the memory limit twice the worst peak, the CPU limit a whole core
    (the analysis pass runs in one thread, and throttling it would delay the 10 Hz sampling).
    A new measurement above the chart's figures, or a chart trimmed below them, fails here."""
    cpu, rss = measured_cost()
    # One figure per table the parser knows: a reshaped document must not pass by measuring nothing.
    assert len(cpu) >= 4 and len(rss) >= 4, (cpu, rss)
    spec = one(render(), "DaemonSet")["spec"]["template"]["spec"]
    (exporter,) = [c for c in spec["containers"] if c["name"] == "gpuwait"]
    requests, limits = exporter["resources"]["requests"], exporter["resources"]["limits"]
    # MB as measured (VmHWM) read as MiB: the larger of the two.
    assert cores(requests["cpu"]) >= max(cpu) / 100, (requests, max(cpu))
    assert mebibytes(requests["memory"]) >= max(rss), (requests, max(rss))
    assert mebibytes(limits["memory"]) >= 2 * max(rss), (limits, max(rss))
    assert cores(limits["cpu"]) >= 1, limits


# -- the same rules and dashboards ------------------------------------------------------------------

def test_the_prometheusrule_is_alerts_rules():
    assert one(render(), "PrometheusRule")["spec"]["groups"] == rule_groups()


def test_mixin_values_reach_rules_and_dashboards_and_promtool_accepts_them(tmp_path):
    site = {"selectors": {"job": 'job=~"monitoring/gpuwait-.+"'}, "wait": {"min_ratio": 0.35, "for": "20m"},
            "labels": {"cluster": "k8s_cluster"}, "rdma": {"ib_xmit_wait_ticks_per_second": 2500000},
            "impact": {"workload_throughput": "sum by (workload) (rate(train_samples_total[5m]))"}}
    docs = render({"mixin": site})
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    alerts = mixin.load_module("gpuwait_alerts_generate", ALERTS / "generate.py")
    values = mixin.merge(mixin.load(), site, "test")
    per_file = alerts.groups(values)
    assert groups == [g for name in sorted(per_file) for g in per_file[name]]
    text = "\n".join(r["expr"] for g in groups for r in g["rules"])
    assert 'cause="storage"} >= 0.35' in text and "ratio_to_baseline" in text and "2500000" in text
    assert 'up{job=~"monitoring/gpuwait-.+"}' in text and "by (k8s_cluster, instance, job)" in text
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    r = subprocess.run(["promtool", "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    dashboards = mixin.load_module("gpuwait_dashboards_generate", REPO / "dashboards" / "generate.py")
    expected = {n: json.loads(t) for n, t in dashboards.build_all(values).items()}
    for configmap in (d for d in docs if d["kind"] == "ConfigMap"):
        (name, body), = configmap["data"].items()
        assert json.loads(body) == expected[name], name
    dashboards.configure(mixin.load())


def test_dashboard_configmaps_are_the_dashboards_for_the_sidecar():
    docs = [d for d in render() if d["kind"] == "ConfigMap"]
    committed = {p.name: json.loads(p.read_text()) for p in (REPO / "dashboards" / "json").glob("*.json")}
    assert {name for d in docs for name in d["data"]} == set(committed) and len(committed) == 6
    for doc in docs:
        assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert doc["metadata"]["annotations"] == {"grafana_folder": "gpuwait"}
        (name, body), = doc["data"].items()
        assert json.loads(body) == committed[name]


def test_values_yaml_carries_the_mixin_config_and_the_generated_files_are_fresh():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["mixin"] == mixin.load()
    r = subprocess.run([sys.executable, str(REPO / "deploy" / "helm" / "generate.py"), "--check"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert helm_generate.stale(helm_generate.render(), helm_generate.on_disk()) == []


# -- the AlertmanagerConfig ----------------------------------------------------------------------

def test_alertmanagerconfig_is_alerts_alertmanager_yml_and_amtool_accepts_it(tmp_path):
    """Merged into kube-prometheus-stack's default configuration the way the Operator does it:
    the same routing by severity and the same inhibitions as alerts/alertmanager.yml, confined
    to the release's namespace, and the stack's own routes (Watchdog) untouched."""
    amconfig = one(render({"alertmanagerConfig": {"enabled": True}}), "AlertmanagerConfig")
    spec = amconfig["spec"]
    receivers = {r["name"] for r in spec["receivers"]}

    def names(r):
        yield r["receiver"]
        for child in r.get("routes", []):
            yield from names(child)

    assert set(names(spec["route"])) <= receivers
    source = yaml.safe_load((ALERTS / "alertmanager.yml").read_text())
    base = kube_stack.stack_alertmanager()
    config = kube_stack.alertmanager_configuration(base, amconfig)
    ours = config["inhibit_rules"][len(base["inhibit_rules"]):]
    assert all(m[0] == 'namespace="gpuwait"' for rule in ours for m in (rule["source_matchers"], rule["target_matchers"]))
    assert [{k: v[1:] if k.endswith("matchers") else v for k, v in rule.items()} for rule in ours] == source["inhibit_rules"]
    assert config["route"]["routes"][0]["group_by"] == source["route"]["group_by"]
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    r = subprocess.run(["amtool", "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    for labels, receiver in ((["namespace=gpuwait", "severity=critical"], "gpuwait/gpuwait/pager"),
                             (["namespace=gpuwait", "severity=warning"], "gpuwait/gpuwait/tickets"),
                             (["namespace=gpuwait", "severity=info"], "gpuwait/gpuwait/context-only"),
                             (["alertname=Watchdog", "severity=none"], "null")):
        r = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={path}", *labels],
                           capture_output=True, text=True, timeout=60)
        assert r.stdout.strip() == receiver, (labels, r.stdout, r.stderr)


# -- the host's NFS mounts -------------------------------------------------------------------------

def read_as(uid: int, capability: str | None) -> subprocess.CompletedProcess:
    """cat /proc/1/mountstats as ``uid`` with only ``capability`` (none: no capability at all).
    Changing user and capabilities needs root, as the systemd tests do (CI runs as root)."""
    caps = ["--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"]
    if capability:
        caps = [f"--inh-caps=-all,+{capability}", f"--ambient-caps=-all,+{capability}", f"--bounding-set=-all,+{capability}"]
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *caps, "cat", "/proc/1/mountstats"],
                          capture_output=True, text=True, timeout=30)


def test_reading_the_hosts_mountstats_needs_its_owner_or_dac_read_search_not_ptrace():
    """The kernel's rule the chart follows: /proc/<pid>/mountstats is mode 0400, owned by the
    process's user (fs/proc/base.c: REG("mountstats", S_IRUSR, ...)), and opening it checks no
    ptrace access (fs/proc_namespace.c: mountstats_open), only the file's permission bits. So
    CAP_SYS_PTRACE does not help a non-root reader, CAP_DAC_READ_SEARCH (bypass read permission
    checks, capabilities(7)) does, and root, the owner, needs no capability at all, which is
    what the chart's mountstats-reader runs as."""
    assert (os.stat("/proc/1/mountstats").st_mode & 0o777) == 0o400
    assert read_as(65534, None).returncode != 0
    assert read_as(65534, "sys_ptrace").returncode != 0
    assert read_as(65534, "dac_read_search").returncode == 0
    assert read_as(0, None).returncode == 0


def test_the_nfs_option_runs_only_the_copy_as_root():
    spec = one(render({"hostMountstats": {"enabled": True, "interval": "5s"}}), "DaemonSet")["spec"]["template"]["spec"]
    exporter, reader = spec["containers"]
    assert spec["securityContext"]["runAsUser"] == 65534 and "runAsUser" not in exporter["securityContext"]
    assert reader["securityContext"]["runAsUser"] == 0 and reader["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "sleep 5;" in reader["command"][-1]
    assert "--collector.nfs.mountstats-path=/run/gpuwait/mountstats/mountstats" in exporter["args"]



def notes(values: dict | None = None) -> str:
    manifests = helm_python.Chart.load(str(CHART)).render(values or {}, name="gpuwait", namespace="gpuwait")
    (text,) = [t for template, t in manifests.items() if template.endswith("NOTES.txt")]
    return text


@pytest.mark.parametrize("values, nfs, network", [
    ({}, True, False),
    ({"hostMountstats": {"enabled": True}}, False, False),
    ({"hostNetwork": False}, True, True),
], ids=["defaults", "host-mountstats", "pod-network"])
def test_the_install_notes_say_which_host_evidence_the_pod_cannot_see(values, nfs, network):
    """Without the copier the NFS source reads the pod's own mounts and reports no data, which
    from the metrics alone reads like a node without NFS; without hostNetwork the NICs are the
    pod's veth. The notes after `helm install` say so, instead of the evidence going missing
    silently."""
    text = notes(values)
    assert ("hostMountstats.enabled=true" in text) is nfs, text
    assert ("hostNetwork=false" in text) is network, text

def test_the_readers_script_copies_the_file_whole(tmp_path):
    """The sidecar's own command, run for real against a stand-in /host/proc."""
    spec = one(render({"hostMountstats": {"enabled": True}}), "DaemonSet")["spec"]["template"]["spec"]
    script = spec["containers"][1]["command"][-1]
    source = "/proc/self/mountstats"
    shared = tmp_path / "mountstats"
    shared.mkdir()
    local = script.replace("/host/proc/1/mountstats", source).replace("/run/gpuwait/mountstats", str(shared))
    proc = subprocess.Popen(["sh", "-c", local])
    try:
        for _ in range(50):
            if (shared / "mountstats").exists():
                break
            subprocess.run(["sleep", "0.1"])
        text = (shared / "mountstats").read_text()
        assert text.startswith("device ") and " mounted on " in text
    finally:
        proc.kill()
        proc.wait()
