"""kube-prometheus-stack without a cluster: what the Prometheus Operator makes of gpuwait's
objects, so that tests can feed them to a real Prometheus and Alertmanager, and Alertmanager's
own matching rules, to check what those processes do against what their configuration says.

- ``scrape_config``: the scrape job the Operator generates for a ServiceMonitor or PodMonitor
  endpoint (prometheus-operator pkg/prometheus/promcfg.go: the selector and port kept by
  relabeling, then namespace, service, pod, container, job and endpoint target labels, then
  the object's own relabelings, then the shard filter), with file-based discovery in place of
  the Kubernetes API;
- ``endpoint_targets``: the target groups Kubernetes service discovery yields for a Service's
  endpoints (role endpoints), with the ``__meta_kubernetes_*`` labels Prometheus documents for
  it (kubernetes_sd_config), for pods described by the test;
- ``alertmanager_configuration``: an AlertmanagerConfig merged into Alertmanager's
  configuration the way the Operator does with its default matcher strategy (OnNamespace): its
  receivers named ``<namespace>/<name>/<receiver>``, its route the first child of the root,
  matching the object's namespace, with ``continue: true``, and its inhibitions confined to that
  namespace on both sides;
- ``matches``, ``matching_route``, ``inhibited_by_config``: Alertmanager's label matchers,
  routing tree and inhibition as its documentation defines them.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
from collections.abc import Iterable, Sequence

import yaml

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "kubernetes"
#: kube-prometheus-stack's default Alertmanager configuration.
STACK_ALERTMANAGER = FIXTURES / "kube-prometheus-stack-alertmanager.yaml"


def stack_alertmanager() -> dict:
    return yaml.safe_load(STACK_ALERTMANAGER.read_text())


def selected(objects: Iterable[dict], kind: str, match_labels: dict[str, str]) -> list[dict]:
    """The objects of ``kind`` a Prometheus with this selector (serviceMonitorSelector,
    ruleSelector...) picks up: kube-prometheus-stack selects by ``release: <its release>``."""
    return [o for o in objects if o["kind"] == kind
            and match_labels.items() <= (o["metadata"].get("labels") or {}).items()]


def sanitize(name: str) -> str:
    """A Kubernetes label name as a Prometheus label name suffix (invalid characters become _)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


# -- scrape configuration --------------------------------------------------------------------------

_RELABEL_KEYS = {"sourceLabels": "source_labels", "separator": "separator", "targetLabel": "target_label",
                 "regex": "regex", "modulus": "modulus", "replacement": "replacement", "action": "action"}


def relabel_config(relabeling: dict) -> dict:
    """A RelabelConfig of the Operator's API as Prometheus's relabel_config."""
    unknown = relabeling.keys() - _RELABEL_KEYS.keys()
    assert not unknown, f"relabeling fields without a Prometheus counterpart: {sorted(unknown)}"
    return {_RELABEL_KEYS[k]: v for k, v in relabeling.items()}


def scrape_config(monitor: dict, index: int, targets_files: Sequence[str]) -> dict:
    """Prometheus's scrape job for endpoint ``index`` of a ServiceMonitor or PodMonitor, its
    targets read from ``targets_files`` (file_sd) instead of the Kubernetes API."""
    kind, spec = monitor["kind"], monitor["spec"]
    namespace, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    if kind == "ServiceMonitor":
        endpoint, scope, port_label = spec["endpoints"][index], "service", "__meta_kubernetes_endpoint_port_name"
    elif kind == "PodMonitor":
        endpoint, scope, port_label = spec["podMetricsEndpoints"][index], "pod", "__meta_kubernetes_pod_container_port_name"
    else:
        raise ValueError(f"not a monitor: {kind}")
    relabel = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    for key in sorted(spec["selector"].get("matchLabels", {})):
        relabel.append({"action": "keep", "source_labels": [f"__meta_kubernetes_{scope}_label_{sanitize(key)}",
                                                            f"__meta_kubernetes_{scope}_labelpresent_{sanitize(key)}"],
                        "regex": f"({spec['selector']['matchLabels'][key]});true"})
    assert not spec["selector"].get("matchExpressions"), "matchExpressions are not modelled here"
    relabel.append({"action": "keep", "source_labels": [port_label], "regex": endpoint["port"]})
    if kind == "ServiceMonitor":
        target = ["__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"]
        relabel += [
            {"source_labels": target, "separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
            {"source_labels": target, "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
        ]
        relabel += [{"source_labels": [f"__meta_kubernetes_service_label_{sanitize(l)}"], "target_label": sanitize(l),
                     "regex": "(.+)", "replacement": "${1}"} for l in spec.get("targetLabels", [])]
        relabel.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"})
        if spec.get("jobLabel"):
            relabel.append({"source_labels": [f"__meta_kubernetes_service_label_{sanitize(spec['jobLabel'])}"],
                            "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
    else:
        relabel += [
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
        ]
        if spec.get("jobLabel"):
            relabel.append({"source_labels": [f"__meta_kubernetes_pod_label_{sanitize(spec['jobLabel'])}"],
                            "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
        else:
            relabel.append({"target_label": "job", "replacement": f"{namespace}/{name}"})
    relabel += [{"source_labels": [f"__meta_kubernetes_pod_label_{sanitize(l)}"], "target_label": sanitize(l),
                 "regex": "(.+)", "replacement": "${1}"} for l in spec.get("podTargetLabels", [])]
    relabel.append({"target_label": "endpoint", "replacement": endpoint["port"]})
    relabel += [relabel_config(r) for r in endpoint.get("relabelings", [])]
    # One shard: every target hashes to shard 0.
    relabel += [{"source_labels": ["__address__"], "target_label": "__tmp_hash", "modulus": 1, "action": "hashmod"},
                {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"}]
    job = {
        "job_name": f"{kind[0].lower() + kind[1:]}/{namespace}/{name}/{index}",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "file_sd_configs": [{"files": list(targets_files)}],
        "metrics_path": endpoint.get("path", "/metrics"),
        "scheme": endpoint.get("scheme", "http"),
        "relabel_configs": relabel,
        "metric_relabel_configs": [relabel_config(r) for r in endpoint.get("metricRelabelings", [])],
    }
    if endpoint.get("interval"):
        job["scrape_interval"] = endpoint["interval"]
    if endpoint.get("scrapeTimeout"):
        job["scrape_timeout"] = endpoint["scrapeTimeout"]
    return job


def _object_labels(prefix: str, labels: dict[str, str]) -> dict[str, str]:
    out = {}
    for key, value in labels.items():
        out[f"{prefix}_label_{sanitize(key)}"] = value
        out[f"{prefix}_labelpresent_{sanitize(key)}"] = "true"
    return out


def endpoint_targets(service: dict, pod_labels: dict[str, str], container: dict, pods: Sequence[dict]) -> list[dict]:
    """Target groups as Kubernetes service discovery (role endpoints) yields them for the
    Service's port named like ``container``'s metrics port, one per pod. Each pod is
    {"name", "node", "ip", "address"}: ``address`` is where the test's process really listens
    (its host:port), the rest what the cluster would say."""
    namespace = service["metadata"]["namespace"]
    (port,) = [p for p in container["ports"] if p["name"] == "metrics"]
    groups = []
    for pod in pods:
        labels = {
            "__meta_kubernetes_namespace": namespace,
            "__meta_kubernetes_endpoints_name": service["metadata"]["name"],
            **_object_labels("__meta_kubernetes_endpoints", service["metadata"].get("labels", {})),
            "__meta_kubernetes_endpoint_node_name": pod["node"],
            "__meta_kubernetes_endpoint_ready": "true",
            "__meta_kubernetes_endpoint_port_name": port["name"],
            "__meta_kubernetes_endpoint_port_protocol": port.get("protocol", "TCP"),
            "__meta_kubernetes_endpoint_address_target_kind": "Pod",
            "__meta_kubernetes_endpoint_address_target_name": pod["name"],
            "__meta_kubernetes_service_name": service["metadata"]["name"],
            **_object_labels("__meta_kubernetes_service", service["metadata"].get("labels", {})),
            "__meta_kubernetes_pod_name": pod["name"],
            "__meta_kubernetes_pod_ip": pod["ip"],
            **_object_labels("__meta_kubernetes_pod", pod_labels),
            "__meta_kubernetes_pod_container_name": container["name"],
            "__meta_kubernetes_pod_container_port_name": port["name"],
            "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
            "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP"),
            "__meta_kubernetes_pod_ready": "true",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_node_name": pod["node"],
            "__meta_kubernetes_pod_host_ip": pod["ip"],
            "__meta_kubernetes_pod_controller_kind": "DaemonSet",
            "__meta_kubernetes_pod_controller_name": pod["controller"],
        }
        groups.append({"targets": [pod["address"]], "labels": labels})
    return groups


# -- Alertmanager configuration --------------------------------------------------------------------

def _snake(key: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


def _snake_keys(value):
    if isinstance(value, dict):
        return {_snake(k): _snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snake_keys(v) for v in value]
    return value


def _matcher(m: dict) -> str:
    op = m.get("matchType") or ("=~" if m.get("regex") else "=")
    return f"{m['name']}{op}{json.dumps(m.get('value', ''))}"


_ROUTE_KEYS = {"groupBy": "group_by", "groupWait": "group_wait", "groupInterval": "group_interval",
               "repeatInterval": "repeat_interval", "continue": "continue",
               "muteTimeIntervals": "mute_time_intervals", "activeTimeIntervals": "active_time_intervals"}


def _route(route: dict, prefix: str) -> dict:
    out = {}
    if route.get("receiver"):
        out["receiver"] = prefix + route["receiver"]
    out.update({_ROUTE_KEYS[k]: v for k, v in route.items() if k in _ROUTE_KEYS})
    if route.get("matchers"):
        out["matchers"] = [_matcher(m) for m in route["matchers"]]
    if route.get("routes"):
        out["routes"] = [_route(child, prefix) for child in route["routes"]]
    return out


def alertmanager_configuration(base: dict, amconfig: dict) -> dict:
    """``base`` (Alertmanager's own configuration) with ``amconfig`` merged in."""
    namespace, name = amconfig["metadata"]["namespace"], amconfig["metadata"]["name"]
    prefix, confine = f"{namespace}/{name}/", f'namespace="{namespace}"'
    spec = amconfig["spec"]
    config = copy.deepcopy(base)
    top = _route(spec["route"], prefix)
    top["matchers"] = [confine, *top.get("matchers", [])]
    top["continue"] = True  # always so for the first level, whatever the object says
    config["route"]["routes"] = [top, *config["route"].get("routes", [])]
    config["receivers"] = [*config.get("receivers", []),
                           *({**_snake_keys(r), "name": prefix + r["name"]} for r in spec.get("receivers", []))]
    config["inhibit_rules"] = [*config.get("inhibit_rules", []), *(
        {"source_matchers": [confine, *map(_matcher, rule.get("sourceMatch", []))],
         "target_matchers": [confine, *map(_matcher, rule.get("targetMatch", []))],
         **({"equal": rule["equal"]} if rule.get("equal") else {})}
        for rule in spec.get("inhibitRules", []))]
    return config


# -- Alertmanager's semantics ----------------------------------------------------------------------

MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"?(.*?)"?\s*$')


def matches(matchers: Iterable[str], labels: dict) -> bool:
    """Every matcher holds for ``labels`` (a missing label is the empty string; regular
    expressions are anchored)."""
    for text in matchers:
        m = MATCHER.match(text)
        assert m, text
        name, op, value = m.groups()
        have = labels.get(name, "")
        ok = {"=": have == value, "!=": have != value,
              "=~": re.fullmatch(value, have) is not None, "!~": re.fullmatch(value, have) is None}[op]
        if not ok:
            return False
    return True


def matching_route(route: dict, labels: dict, parent: dict | None = None) -> dict:
    """The route Alertmanager picks for ``labels`` (first matching child, depth first), with
    receiver and group_by inherited from the parent as Alertmanager does."""
    merged = dict(parent or {})
    merged.update({k: v for k, v in route.items() if k != "routes"})
    for child in route.get("routes", []):
        if matches(child.get("matchers", []), labels):
            return matching_route(child, labels, merged)
    return merged


def inhibited_by_config(alert: dict, active: list[dict], rules: list[dict]) -> bool:
    """Alertmanager's inhibition: a firing source matching a rule, equal on the rule's labels,
    and, when the alert itself matches the source side too, a source that is not a target."""
    for rule in rules:
        if not matches(rule.get("target_matchers", []), alert["labels"]):
            continue
        two_sided = matches(rule.get("source_matchers", []), alert["labels"])
        for src in active:
            if src["fingerprint"] == alert["fingerprint"]:
                continue
            if not matches(rule.get("source_matchers", []), src["labels"]):
                continue
            if two_sided and matches(rule.get("target_matchers", []), src["labels"]):
                continue
            if all(src["labels"].get(k, "") == alert["labels"].get(k, "") for k in rule.get("equal", [])):
                return True
    return False
