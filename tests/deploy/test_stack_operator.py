"""gpuwait on a kube-prometheus-stack cluster, without the cluster: the Helm chart rendered
with Helm's own SDK, its ServiceMonitor, PrometheusRule and AlertmanagerConfig turned into
Prometheus and Alertmanager configuration the way the Prometheus Operator does it
(tests/support/kube_stack.py), then a real Prometheus scraping three simulated GPU nodes through
targets that carry the labels Kubernetes service discovery gives the DaemonSet's pods, a
stand-in kube-state-metrics publishing the pods' controlling owner, and a real Alertmanager
with kube-prometheus-stack's default configuration and the chart's routes merged in.

One training job, a PyTorchJob with one worker pod per node, runs on the three nodes; the
third computes longer, so the other two wait for it in the collective. The checks: the
targets carry the Operator's labels (job "gpuwait" from the Service's jobLabel, the target's
namespace and pod) and the exporter's owner labels survive them; the verdict; the cross-node
recording rules group the three pods into one workload named after their owner and single
out the slow node; the alerts reach the receivers of the release's namespace, inhibited as the
chart's routes say and by nothing of the stack's own (its InfoInhibitor could mute gpuwait's info
alerts only, checked rule by rule); the health alerts follow the Operator's job label. The kustomize overlay gives Prometheus the same scrape job and rules as the chart.

The ServiceMonitor scrapes every 2 s and the rules are evaluated every second, the exporters
analyse a 20 s window and the rules' durations are cut to seconds (mixin values), so the module
takes a minute or two.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import helm_python
import pytest
import requests
import yaml

import kube_stack
from test_stack import BOARDS, LABEL_VALUES, Prometheus, Webhook, alertmanager_alerts, stack_durations, stack_module, substitute, wait_until
from test_stack import webhook  # noqa: F401  (the fixture: Alertmanager's receiver for this module too)

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpuwait"
OVERLAY = REPO / "deploy" / "kubernetes" / "overlays" / "kube-prometheus-stack"
sys.path.insert(0, str(REPO))
import mixin  # noqa: E402
from gpuwait.simulate.node import job_owner  # noqa: E402

RELEASE = NAMESPACE = "gpuwait"
#: kube-prometheus-stack's Prometheus selects monitors and rules by its own release name.
STACK_SELECTOR = {"release": "kube-prometheus-stack"}
WINDOW = "20s"
#: node -> (DaemonSet pod on it, simulated job worker on it, scenario parameters).
NODES = {
    "gpu-node-a": ("gpuwait-4xq7n", 0, "seed=11,replica=0,workload=1"),
    "gpu-node-b": ("gpuwait-b9t2k", 1, "seed=12,replica=1,workload=1"),
    "gpu-node-c": ("gpuwait-m3zfw", 2, "seed=13,replica=2,workload=1,node_slowdown=0.4"),
}
SLOW_NODE = "gpu-node-c"
FAST_NODES = ("gpu-node-a", "gpu-node-b")
#: The pods' controlling owner as kube-state-metrics reports it (kube_pod_owner): not what the
#: pod names would suggest, so a workload named after it proves the rules used it.
JOB_KIND, JOB_NAME = "PyTorchJob", "resnet50-pretrain"
WORKLOAD = f"ml/{JOB_NAME}"
RECEIVERS = ("pager", "tickets", "context-only")


def chart_values(webhook_url: str) -> dict:
    return {
        "mixin": stack_durations(mixin.load()),
        "serviceMonitor": {"interval": "2s", "scrapeTimeout": "2s"},
        "alertmanagerConfig": {"enabled": True, "receivers": [
            {"name": n, "webhookConfigs": [{"url": f"{webhook_url}/{n}", "sendResolved": True}]} for n in RECEIVERS]},
    }


def render(values: dict) -> list[dict]:
    manifests = helm_python.Chart.load(str(CHART)).render(values, name=RELEASE, namespace=NAMESPACE)
    return [d for template, text in sorted(manifests.items()) if template.endswith(".yaml")
            for d in yaml.safe_load_all(text) if d]


def one(docs: list[dict], kind: str) -> dict:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def kube_state_metrics_exposition() -> str:
    """kube_pod_owner of the job's three worker pods, as kube-state-metrics publishes it."""
    lines = ["# HELP kube_pod_owner Information about the Pod's owner.", "# TYPE kube_pod_owner gauge"]
    for _, replica, _ in NODES.values():
        _, labels = job_owner(replica)
        lines.append(f'kube_pod_owner{{namespace="{labels["owner_namespace"]}",pod="{labels["owner_pod"]}",'
                     f'uid="{labels["pod_uid"]}",owner_kind="{JOB_KIND}",owner_name="{JOB_NAME}",'
                     f'owner_is_controller="true"}} 1')
    return "\n".join(lines) + "\n"


class StaticExposition:
    """An HTTP server answering /metrics with a fixed text exposition."""

    def __init__(self, text: str) -> None:
        body = text.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fast_waits(route: dict, root: bool = True) -> None:
    """Grouping waits in seconds, wherever a route sets them (and at the root)."""
    for key, value in (("group_wait", "1s"), ("group_interval", "2s"), ("repeat_interval", "1h")):
        if root or key in route:
            route[key] = value
    for child in route.get("routes", []):
        fast_waits(child, False)


class OperatorStack:
    def __init__(self, workdir: pathlib.Path, webhook: Webhook) -> None:
        self.workdir, self.logs, self.webhook = workdir, workdir / "logs", webhook
        self.warm_at = None
        self.docs = render(chart_values(webhook.url))
        (self.monitor,) = kube_stack.selected(self.docs, "ServiceMonitor", STACK_SELECTOR)
        (self.rule,) = kube_stack.selected(self.docs, "PrometheusRule", STACK_SELECTOR)
        self.amconfig = one(self.docs, "AlertmanagerConfig")
        self.processes: list[stack_module.Process] = []
        self.exporters: dict[str, stack_module.Process] = {}
        self.ksm = StaticExposition(kube_state_metrics_exposition())
        try:
            self._start()
        except Exception:
            self.stop()
            raise

    def _start(self) -> None:
        for node, (pod, _, params) in NODES.items():
            self.exporters[node] = stack_module.start_exporter(
                node, stack_module.free_port(), "node_straggler", self.logs, params=params, extra=("--analysis.window", WINDOW))
        config = kube_stack.alertmanager_configuration(kube_stack.stack_alertmanager(), self.amconfig)
        fast_waits(config["route"])
        am_config = self.workdir / "alertmanager.yml"
        am_config.write_text(yaml.safe_dump(config, sort_keys=False))
        self.alertmanager_config = config
        self.alertmanager = stack_module.start_alertmanager(am_config, stack_module.free_port(), self.workdir / "am", self.logs)
        self.processes.append(self.alertmanager)

        daemonset, service = one(self.docs, "DaemonSet"), one(self.docs, "Service")
        template = daemonset["spec"]["template"]
        pods = [{"name": pod, "node": node, "ip": "127.0.0.1", "controller": daemonset["metadata"]["name"],
                 "address": self.exporters[node].url.removeprefix("http://")} for node, (pod, _, _) in NODES.items()]
        targets = self.workdir / "prometheus" / "targets" / "gpuwait.yml"
        targets.parent.mkdir(parents=True)
        targets.write_text(yaml.safe_dump(kube_stack.endpoint_targets(
            service, template["metadata"]["labels"], template["spec"]["containers"][0], pods)))
        rules = self.workdir / "prometheus" / "rules" / f"{NAMESPACE}-{self.rule['metadata']['name']}.yaml"
        rules.parent.mkdir(parents=True)
        rules.write_text(yaml.safe_dump(self.rule["spec"], sort_keys=False))
        self.scrape_job = kube_stack.scrape_config(self.monitor, 0, [str(targets)])
        prometheus_config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [self.alertmanager.url.removeprefix("http://")]}]}]},
            "scrape_configs": [
                self.scrape_job,
                # kube-prometheus-stack's kube-state-metrics job: honorLabels, so the pods'
                # namespace and pod are the series' own, not those of kube-state-metrics.
                {"job_name": "serviceMonitor/monitoring/kube-prometheus-stack-kube-state-metrics/0", "honor_labels": True,
                 "static_configs": [{"targets": [self.ksm.address], "labels": {
                     "job": "kube-state-metrics", "namespace": "monitoring", "pod": "kube-state-metrics-6d5f8c9b7-qx2lp",
                     "service": "kube-prometheus-stack-kube-state-metrics", "endpoint": "http"}}]},
            ],
        }
        path = self.workdir / "prometheus" / "prometheus.yml"
        path.write_text(yaml.safe_dump(prometheus_config, sort_keys=False))
        check = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
        process = stack_module.start_prometheus(path, stack_module.free_port(), self.workdir / "prometheus" / "data", self.logs)
        self.processes.append(process)
        self.prometheus = Prometheus(process.url)

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()
        for p in self.exporters.values():
            p.stop()
        self.ksm.close()

    def diagnostics(self) -> str:
        """The processes' logs, the alerts in Prometheus and Alertmanager, what the webhook got."""
        lines = [f"--- {p.name}\n{p.log_tail(15)}" for p in [*self.processes, *self.exporters.values()]]
        try:
            lines.append("--- ALERTS: " + ", ".join(sorted(
                f"{a['labels']['alertname']}{{{a['labels'].get('instance', '')}}} {a['state']}" for a in self.prometheus.alerts())))
            lines.append("--- Alertmanager: " + ", ".join(sorted(
                f"{a['labels']['alertname']}{{{a['labels'].get('instance', '')}}} {a['status']['state']}"
                f"{' inhibited' if a['status']['inhibitedBy'] else ''}" for a in self.alertmanager_alerts())))
            lines.append("--- webhook: " + ", ".join(sorted({n["receiver"] for n in self.webhook.received()})))
        except (requests.RequestException, AssertionError, KeyError) as e:
            lines.append(f"--- no alert state: {e}")
        return "\n".join(lines)

    def alertmanager_alerts(self) -> list[dict]:
        return alertmanager_alerts(self)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, webhook):
    # A test that times out waiting (wait_until) reports the stack's diagnostics itself.
    s = OperatorStack(tmp_path_factory.mktemp("operator-stack"), webhook)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def warm(stack):
    p = stack.prometheus
    p.wait_for('count(up{job="gpuwait"} == 1) == 3', what="the three nodes up")
    p.wait_for('count(kube_pod_owner{job="kube-state-metrics"}) == 3', what="kube-state-metrics")
    p.wait_for('count(gpuwait_gpu_verdict_samples > 0) == 24', what="verdicts on every GPU")
    stack.warm_at = time.time()
    return stack


# -- what the Operator attaches -------------------------------------------------------------------

def test_targets_carry_the_labels_the_operator_attaches(warm):
    targets = [t for t in warm.prometheus._get("/api/v1/targets")["activeTargets"]
               if t["scrapePool"] == f"serviceMonitor/{NAMESPACE}/{warm.monitor['metadata']['name']}/0"]
    assert sorted(t["labels"]["instance"] for t in targets) == sorted(NODES)
    for t in targets:
        node = t["labels"]["instance"]
        assert t["health"] == "up", t["lastError"]
        assert t["labels"] == {"instance": node, "node": node, "job": "gpuwait", "namespace": NAMESPACE,
                               "service": warm.monitor["metadata"]["name"], "pod": NODES[node][0],
                               "container": "gpuwait", "endpoint": "metrics"}, t["labels"]


def test_owners_keep_their_own_pod_names_next_to_the_targets(warm):
    owners = warm.prometheus.query("gpuwait_gpu_owner_info")
    assert len(owners) == 24
    for s in owners:
        m = s["metric"]
        replica = NODES[m["instance"]][1]
        _, expected = job_owner(replica)
        assert (m["owner_namespace"], m["owner_pod"], m["pod_uid"]) == (
            expected["owner_namespace"], expected["owner_pod"], expected["pod_uid"]), m
        assert (m["namespace"], m["pod"]) == (NAMESPACE, NODES[m["instance"]][0]), m


def test_the_overlay_gives_prometheus_the_same_job_and_rules(tmp_path, warm):
    """What kubectl kustomize renders of the kube-prometheus-stack overlay makes the same scrape
    job (its own interval aside) and the same rules as the chart at its defaults."""
    r = subprocess.run(["kubectl", "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    overlay = [d for d in yaml.safe_load_all(r.stdout) if d]
    defaults = render({})
    (monitor,) = kube_stack.selected(overlay, "ServiceMonitor", STACK_SELECTOR)
    (chart_monitor,) = kube_stack.selected(defaults, "ServiceMonitor", STACK_SELECTOR)
    assert kube_stack.scrape_config(monitor, 0, ["t.yml"]) == kube_stack.scrape_config(chart_monitor, 0, ["t.yml"])
    live = {k: v for k, v in warm.scrape_job.items() if k not in ("scrape_interval", "scrape_timeout", "file_sd_configs")}
    assert {k: v for k, v in kube_stack.scrape_config(monitor, 0, ["t.yml"]).items() if k in live} == live
    (rule,) = kube_stack.selected(overlay, "PrometheusRule", STACK_SELECTOR)
    assert rule["spec"] == one(defaults, "PrometheusRule")["spec"]


# -- verdict and cross-node rules ----------------------------------------------------------------

def test_the_nodes_waiting_for_the_slow_one_see_the_network(warm):
    p = warm.prometheus
    for node in FAST_NODES:
        p.wait_for(f'count(gpuwait_gpu_verdict{{instance="{node}", cause="network"}} == 1) == 8', what=f"network on {node}")
    busy = {s["metric"]["instance"]: float(s["value"][1])
            for s in p.query("avg by (instance) (gpuwait_gpu_window_utilization_mean_ratio)")}
    assert busy[SLOW_NODE] > max(busy[n] for n in FAST_NODES), busy


def test_the_three_pods_are_one_workload_named_after_their_owner(warm):
    p = warm.prometheus
    p.wait_for(f'workload:gpuwait_instances:count{{workload="{WORKLOAD}"}} == 3', what="one workload on three nodes")
    owners = p.query("gpu:gpuwait_gpu_owner:info")
    assert {s["metric"]["workload"] for s in owners} == {WORKLOAD}
    assert {(s["metric"]["instance"], s["metric"]["owner_pod"]) for s in owners} == {
        (node, job_owner(replica)[1]["owner_pod"]) for node, (_, replica, _) in NODES.items()}
    gap = ("workload_instance:gpuwait_gpu_window_utilization_mean_ratio:avg"
           " - workload_instance:gpuwait_gpu_window_utilization_mean_ratio:avg_other_instances")
    (top,) = p.wait_for(f"topk(1, {gap}) > 0.2", what="a node busier than the others")
    assert top["metric"]["instance"] == SLOW_NODE
    assert (top["metric"]["job"], top["metric"]["namespace"], top["metric"]["workload"]) == ("gpuwait", NAMESPACE, WORKLOAD)


def test_the_dashboards_find_the_job_and_the_slow_node(warm):
    (job,) = [v for v in BOARDS["sync.json"]["templating"]["list"] if v["name"] == "job"]
    m = LABEL_VALUES.match(substitute(job["query"]))
    assert {s["job"] for s in warm.prometheus.series(m["match"])} == {"gpuwait"}
    (panel,) = [t for p in BOARDS["sync.json"]["panels"] if p["title"] == "The straggling node (recorded)"
                for t in p["targets"] if t["refId"] == "A"]
    shown = {s["metric"]["instance"]: float(s["value"][1]) for s in warm.prometheus.query(substitute(panel["expr"]))}
    assert max(shown, key=shown.get) == SLOW_NODE, shown


# -- alerts through the merged Alertmanager configuration ----------------------------------------

def delivered(webhook: Webhook, status: str = "firing") -> list[tuple[dict, dict]]:
    return [(a["labels"], n) for n in webhook.received() for a in n["alerts"] if a["status"] == status]


@pytest.fixture(scope="module")
def straggler_alert(warm, webhook):
    def seen():
        return [(labels, n) for labels, n in delivered(webhook)
                if labels["alertname"] == "GpuSyncStraggler" and labels.get("scope") == "cross_node"]

    return wait_until(seen, 180, "the cross-node straggler alert at the webhook", warm)


def test_the_straggler_alert_reaches_the_release_namespaces_receiver(warm, straggler_alert):
    for labels, notification in straggler_alert:
        assert labels["instance"] == SLOW_NODE and labels["workload"] == WORKLOAD, labels
        assert labels["namespace"] == NAMESPACE and labels["job"] == "gpuwait", labels
        route = kube_stack.matching_route(warm.alertmanager_config["route"], labels)
        assert notification["receiver"] == route["receiver"] == f"{NAMESPACE}/{warm.amconfig['metadata']['name']}/tickets"
        assert labels["severity"] == "warning"


def test_network_waits_are_inhibited_by_the_straggler(warm, straggler_alert):
    warm.prometheus.wait_for('count(count by (instance) (ALERTS{alertname="GpuWaitingOnNetwork", alertstate="firing"})) == 2',
                             timeout=120, what="network waits on both fast nodes")

    def inhibited():
        active = warm.alertmanager_alerts()
        names = {a["fingerprint"]: a["labels"]["alertname"] for a in active}
        network = [a for a in active if a["labels"]["alertname"] == "GpuWaitingOnNetwork"]
        return network and {a["labels"]["instance"] for a in network} == set(FAST_NODES) and all(
            {names.get(f) for f in a["status"]["inhibitedBy"]} == {"GpuSyncStraggler"} for a in network)

    wait_until(inhibited, 60, "GpuWaitingOnNetwork inhibited by GpuSyncStraggler", warm)


def test_the_stacks_own_inhibitions_mute_none_of_gpuwaits_alerts(warm, straggler_alert):
    """kube-prometheus-stack mutes an info alert behind a warning of the same name and namespace;
    gpuwait's alerts are all in one namespace, so a gated alert without impact has a name of its
    own. Alertmanager's view agrees alert by alert with the chart's inhibitions alone."""
    config = warm.alertmanager_config
    stack_rules = kube_stack.stack_alertmanager()["inhibit_rules"]
    ours = config["inhibit_rules"][len(stack_rules):]
    active = warm.alertmanager_alerts()
    assert active
    for alert in active:
        assert not kube_stack.inhibited_by_config(alert, active, stack_rules), alert["labels"]
        assert bool(alert["status"]["inhibitedBy"]) == kube_stack.inhibited_by_config(alert, active, ours), alert
    names = {r["alert"] for g in warm.rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    severities = {}
    for g in warm.rule["spec"]["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                severities.setdefault(r["alert"], set()).add(r["labels"]["severity"])
    assert all(len(s) == 1 for s in severities.values()), {n: s for n, s in severities.items() if len(s) > 1}
    assert {f"{n}NoImpact" for n in ("GpuSyncStraggler", "GpuWaitingOnNetwork")} <= names



def test_the_stacks_info_inhibitor_mutes_only_gpuwaits_info_alerts(warm):
    """kube-prometheus-stack's InfoInhibitor (general.rules) fires, with severity none, for each
    info alert of a namespace while no warning or critical fires there, and mutes that
    namespace's info alerts. gpuwait's alerts share the release's namespace, so this is what
    docs/deploy.md tells: the context alerts (info) are muted in Alertmanager while nothing of
    gpuwait's warns, and no warning or critical of gpuwait ever is."""
    stack_rules = kube_stack.stack_alertmanager()["inhibit_rules"]
    inhibitor = {"fingerprint": "info-inhibitor", "labels": {
        "alertname": "InfoInhibitor", "severity": "none", "namespace": NAMESPACE}}
    severities = {r["alert"]: r["labels"]["severity"] for g in warm.rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert {"info", "warning", "critical"} <= set(severities.values())
    for name, severity in severities.items():
        alert = {"fingerprint": name, "labels": {"alertname": name, "severity": severity, "namespace": NAMESPACE}}
        assert kube_stack.inhibited_by_config(alert, [inhibitor], stack_rules) == (severity == "info"), (name, severity)
        elsewhere = {**inhibitor, "labels": {**inhibitor["labels"], "namespace": "monitoring"}}
        assert not kube_stack.inhibited_by_config(alert, [elsewhere], stack_rules), name

# -- health alerts under the Operator's job label -------------------------------------------------

def test_a_node_whose_exporter_stops_is_down_and_never_absent(warm):
    """Last: it stops a node's exporter."""
    p = warm.prometheus
    node = FAST_NODES[0]
    warm.exporters[node].stop()
    p.wait_for(f'ALERTS{{alertname="GpuwaitExporterDown", alertstate="firing", instance="{node}", namespace="{NAMESPACE}"}}',
               timeout=60, what="GpuwaitExporterDown for the stopped node")
    # Before discovery hands Prometheus its first targets (a few seconds after its start) there is
    # no up series at all, and with the test's 3 s `for` absent() fires then; from the first
    # scrapes on, with the Operator's job label, it must never fire.
    since = int(time.time() - warm.warm_at)
    assert p.query(f'count_over_time(ALERTS{{alertname="GpuwaitExporterAbsent", alertstate="firing"}}[{since}s])') == []
