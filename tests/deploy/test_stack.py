"""The whole stack for real: simulated exporters -> Prometheus -> rules -> Alertmanager -> a
webhook, on loopback, started through deploy/local/stack.py with the configs of deploy/local
and alerts/.

A fleet of exporters, one per scenario, plus three exporters posing as the nodes of one
multi-node job (one worker pod per node, all of one workload) of which one node computes
longer. Then:

1. every target is up, and every variable query and every panel query of every dashboard
   returns data (the panels listed in EMPTY_IN_SIMULATION return none, for the reason given);
   panels meant for one scenario show that scenario's node;
2. the expected alerts fire, reach the webhook with the right labels, grouped and inhibited as
   alerts/alertmanager.yml says, and resolve once the node's scenario changes;
3. the cross-node recording rules name the slow node of the job.

Scrapes and rule evaluations run every second and the exporters analyse a 20 s window, so
the module takes a few minutes; it polls Prometheus rather than sleeping.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
import yaml

from kube_stack import inhibited_by_config, matching_route

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parent.parent.parent


def _load(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


stack_module = _load("gpuwait_local_stack", REPO / "deploy" / "local" / "stack.py")

SCRAPE = 1.0
INTERVAL = "1s"
#: What Grafana makes of $__rate_interval with a 1s datasource timeInterval: four scrapes.
RATE_INTERVAL = "4s"
WINDOW = "20s"
EXPORTER_ARGS = ("--analysis.window", WINDOW)

#: node name -> (scenario, scenario parameters). Distinct seeds give each node its own GPU UUIDs.
#: The job's nodes run one worker pod each (replica) and report their loops' timing as
#: gpuwait.workload does (workload=1), so the workload panels have data.
FLEET = {
    "storage": ("storage", "seed=2"),
    "data_pipeline": ("data_pipeline", "seed=3"),
    "nfs_metadata": ("nfs_metadata", "seed=4"),
    "infiniband": ("network_allreduce", "seed=5"),
    "roce": ("network_allreduce_roce", "seed=6"),
    "straggler": ("straggler", "seed=7"),
    "throttled": ("throttled", "seed=8"),
    "pcie_downtrained": ("pcie_downtrained", "seed=9"),
    "job_node_1": ("node_straggler", "seed=11,replica=0,workload=1"),
    "job_node_2": ("node_straggler", "seed=12,replica=1,workload=1"),
    "job_node_3": ("node_straggler", "seed=13,replica=2,workload=1,node_slowdown=0.4"),  # the slow node of the job
}
JOB_NODES = ("job_node_1", "job_node_2", "job_node_3")
SLOW_NODE = "job_node_3"

#: Panel queries that return nothing against simulated nodes, and why. Their metric names
#: are still checked against the catalog (tests/test_dashboards.py) and the queries are run
#: here, so a syntax or label error still fails.
EMPTY_IN_SIMULATION = {
    ("interconnect.json", "NVLink throughput per link"):
        "the simulated GPUs expose no NVLink field values",
    ("interconnect.json", "NVLink links up"): "the simulated GPUs expose no NVLink links",
    ("interconnect.json", "GPU–NIC PCIe relation"):
        "PCIe relations come from sysfs topology, which the simulator does not build",
    ("gpu-detail.json", "XID errors"): "no simulated scenario raises XID events",
    ("exporter-health.json", "NVML call errors"): "the simulator answers every NVML call",
}

#: Panels that must show a given node of the fleet (the scenario they are meant for).
MEANT_FOR = {
    ("data-pipeline.json", "Utilization vs disk queue depth", "B"): "storage",
    ("data-pipeline.json", "Read IOPS", "A"): "storage",
    ("data-pipeline.json", "Read request size", "A"): "storage",
    ("data-pipeline.json", "Saturated cores next to the mean", "A"): "data_pipeline",
    ("data-pipeline.json", "NFS operation latency", "A"): "nfs_metadata",
    ("data-pipeline.json", "NFS metadata share", "A"): "nfs_metadata",
    ("interconnect.json", "ECN marks and CNPs", "A"): "roce",
    ("interconnect.json", "RoCE retransmissions", "A"): "roce",
    ("interconnect.json", "Transmit wait (credit starvation)", "A"): "infiniband",
    ("interconnect.json", "Dip period", "A"): "infiniband",
    ("interconnect.json", "Current vs maximum link", "B"): "pcie_downtrained",
    ("sync.json", "Straggler GPU", "A"): "straggler",
    ("sync.json", "Mean utilization per node of the owner", "A"): SLOW_NODE,
    ("gpu-detail.json", "Clock-event reasons", "A"): "throttled",
}


# -- the stack ---------------------------------------------------------------------------------

class Webhook:
    """Alertmanager's webhook receiver: keeps every notification it is sent."""

    def __init__(self) -> None:
        self.notifications: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.notifications.append({"path": self.path, **json.loads(body)})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def received(self) -> list[dict]:
        with self.lock:
            return list(self.notifications)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = requests.Session()

    def _get(self, path: str, **params) -> dict:
        r = self.http.get(self.url + path, params=params, timeout=10)
        body = r.json()
        assert body.get("status") == "success", (path, params, body)
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self._get("/api/v1/query", query=expr)["result"]

    def query_range(self, expr: str, seconds: float = 15.0) -> list[dict]:
        end = time.time()
        return self._get("/api/v1/query_range", query=expr, start=end - seconds, end=end, step="1s")["result"]

    def series(self, match: str, seconds: float = 60.0) -> list[dict]:
        end = time.time()
        return self._get("/api/v1/series", **{"match[]": match, "start": end - seconds, "end": end})

    def alerts(self) -> list[dict]:
        return self._get("/api/v1/alerts")["alerts"]

    def wait_for(self, expr: str, timeout: float = 90.0, what: str = "") -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"no result within {timeout:.0f}s for {what or expr}; targets not up: {self.unhealthy()}")
            time.sleep(SCRAPE)

    def unhealthy(self) -> list[tuple[str, str, str]]:
        """(instance, health, last error) of each scrape target not up."""
        targets = self._get("/api/v1/targets")["activeTargets"]
        return [(t["labels"].get("instance", ""), t["health"], t.get("lastError", "")) for t in targets if t["health"] != "up"]


class Stack:
    def __init__(self, workdir: pathlib.Path, rules: pathlib.Path, alertmanager_config: pathlib.Path | None) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.exporters: dict[str, stack_module.Process] = {}
        self.ports = dict(zip(FLEET, stack_module.free_ports(len(FLEET))))
        self.instances = {name: f"127.0.0.1:{port}" for name, port in self.ports.items()}
        self.node_of = {v: k for k, v in self.instances.items()}
        self.processes: list[stack_module.Process] = []
        with ThreadPoolExecutor(len(FLEET)) as pool:
            started = pool.map(lambda item: self._exporter(item[0], *item[1]), FLEET.items())
            for name, process in zip(FLEET, started):
                self.exporters[name] = process
        self.alertmanager = None
        if alertmanager_config is not None:
            self.alertmanager = stack_module.start_alertmanager(
                alertmanager_config, stack_module.free_port(), workdir / "alertmanager", self.logs)
            self.processes.append(self.alertmanager)
        config = stack_module.prometheus_workdir(
            workdir / "prometheus", list(self.instances.values()),
            [self.alertmanager.url.removeprefix("http://")] if self.alertmanager else [], rules=rules, interval=INTERVAL)
        self.prometheus_process = stack_module.start_prometheus(
            config, stack_module.free_port(), workdir / "prometheus" / "data", self.logs)
        self.processes.append(self.prometheus_process)
        self.prometheus = Prometheus(self.prometheus_process.url)

    def _exporter(self, name: str, scenario: str, params: str) -> stack_module.Process:
        return stack_module.start_exporter(name, self.ports[name], scenario, self.logs, params=params, extra=EXPORTER_ARGS)

    def change_scenario(self, name: str, scenario: str, params: str) -> None:
        """The node starts doing something else: same address, so the same instance label."""
        self.exporters[name].stop()
        self.exporters[name] = self._exporter(name, scenario, params)

    def scrape_only(self, names) -> None:
        """Prometheus scrapes only these nodes from now on (file_sd picks the change up)."""
        stack_module.write_targets(self.workdir / "prometheus" / "targets" / "exporters.yml",
                                   [self.instances[n] for n in names])

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()
        for p in self.exporters.values():
            p.stop()

    def diagnostics(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log_tail(15)}" for p in [*self.processes, *self.exporters.values()])


# -- the dashboards' queries -------------------------------------------------------------------

generator = _load("gpuwait_dashboards_for_stack", REPO / "dashboards" / "generate.py")
BOARDS = {name: json.loads(text) for name, text in generator.build_all().items()}
LABEL_VALUES = re.compile(r"^label_values\((?P<match>.+),\s*(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\)$")


#: What Grafana sends for the job variable at All: it has no allValue, so its values as an
#: alternation (one job here), never ".*", which would let in alerts without a job label.
JOB_AT_ALL = "(gpuwait)"


def substitute(expr: str, chosen: dict[str, str] | None = None, job_at_all: str = JOB_AT_ALL) -> str:
    """What Grafana sends for ``expr``: variables at All (allValue .*, the job's values) unless
    chosen."""
    chosen = {"job": job_at_all, **(chosen or {})}
    for name in ("cluster", "job", "instance", "gpu", "owner"):
        expr = expr.replace(f"${name}", chosen.get(name, ".*"))
    return expr.replace("$__rate_interval", RATE_INTERVAL)


def panel_targets() -> list[tuple[str, str, str, dict]]:
    out = []
    for board_name, board in BOARDS.items():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append((board_name, panel["title"], target["refId"], target))
    return out


PANEL_TARGETS = panel_targets()


# -- fixtures ----------------------------------------------------------------------------------

def short_durations(values: dict) -> dict:
    """The override of mixin/config.yml the test renders its rules with: the same rules, with
    every `for` and every look-back window cut to seconds."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            nested = short_durations(value)
            if nested:
                out[key] = nested
        elif isinstance(value, str) and DURATION.fullmatch(value):
            out[key] = FOR if key == "for" or key.endswith("_for") else LOOKBACK
    return out


DURATION = re.compile(r"[0-9]+[smhdwy]")
FOR = "3s"
#: Long enough for several scrapes, shorter than a scenario: the impact window and rate windows.
LOOKBACK = "15s"
#: A few scrapes timing out on a busy test machine are not a node gone: several scrapes' worth
#: before GpuwaitExporterDown, as the real setting is several intervals' worth.
EXPORTER_DOWN_FOR = "10s"


def stack_durations(values: dict) -> dict:
    """short_durations of mixin/config.yml for a stack on this machine."""
    out = short_durations(values)
    out["health"]["exporter_down_for"] = EXPORTER_DOWN_FOR
    return out


def render_rules(workdir: pathlib.Path) -> pathlib.Path:
    defaults = yaml.safe_load((REPO / "mixin" / "config.yml").read_text())
    override = workdir / "test-values.yml"
    override.write_text(yaml.safe_dump(stack_durations(defaults)))
    out = workdir / "rules"
    subprocess.run([sys.executable, str(REPO / "alerts" / "generate.py"), "--config", str(override), "--out", str(out)],
                   check=True, capture_output=True, text=True)
    return out


def alertmanager_config(workdir: pathlib.Path, webhook: Webhook) -> pathlib.Path:
    """alerts/alertmanager.yml with its routes, grouping and inhibitions as they are, every
    receiver delivering to the test's webhook (path = receiver name) and the waits in seconds."""
    config = yaml.safe_load(ALERTMANAGER_YML.read_text())
    config["global"] = {k: v for k, v in (config.get("global") or {}).items() if not k.endswith(("_file", "_url"))}
    for receiver in config.get("receivers", []):
        for key in [k for k in receiver if k.endswith("_configs")]:
            del receiver[key]
        receiver["webhook_configs"] = [{"url": f"{webhook.url}/{receiver['name']}", "send_resolved": True}]

    def fast(route: dict, root: bool) -> None:
        for key, value in (("group_wait", "1s"), ("group_interval", "2s"), ("repeat_interval", "1h")):
            if root or key in route:
                route[key] = value
        for child in route.get("routes", []):
            fast(child, False)

    fast(config["route"], True)
    config["templates"] = [str((ALERTMANAGER_YML.parent / t).resolve()) for t in config.get("templates", [])]
    path = workdir / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


ALERTMANAGER_YML = REPO / "alerts" / "alertmanager.yml"


@pytest.fixture(scope="module")
def webhook():
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, webhook):
    workdir = tmp_path_factory.mktemp("stack")
    rules = render_rules(workdir)
    s = Stack(workdir, rules=rules, alertmanager_config=alertmanager_config(workdir, webhook))
    try:
        yield s
    except Exception:
        print(s.diagnostics())
        raise
    finally:
        s.stop()


@pytest.fixture(scope="module")
def warm(stack):
    """Wait until every node has a full analysis and the signals the panels need are in."""
    p = stack.prometheus
    i = stack.instances
    p.wait_for(f'count(up{{job="gpuwait"}} == 1) == {len(FLEET)}', what="all targets up")
    # The verdict needs a window's worth of samples; these are the last things to settle.
    p.wait_for(f'gpuwait_gpu_verdict{{instance="{i["storage"]}", cause="storage"}} == 1', what="storage verdict")
    p.wait_for(f'gpuwait_gpu_straggler{{instance="{i["straggler"]}"}} == 1', what="the straggler GPU")
    p.wait_for(f'gpuwait_gpu_dip_period_seconds{{instance="{i["infiniband"]}"}}', what="dip period")
    p.wait_for(f'count(gpuwait_gpu_verdict_samples > 0) == {8 * len(FLEET)}', what="verdicts everywhere")
    # The exporters analysed before Prometheus came up, so the gauges above arrive with the
    # first scrape; rates and the panels' 15 s ranges need that much history on every node.
    p.wait_for(f'count(count_over_time(up[20s]) >= 16) == {len(FLEET)}', what="16 s of history everywhere")
    return stack


# -- 1. targets, variables and panels -----------------------------------------------------------

def test_every_target_is_up(warm):
    targets = warm.prometheus._get("/api/v1/targets")["activeTargets"]
    assert {t["labels"]["instance"] for t in targets} == set(warm.instances.values())
    assert all(t["health"] == "up" for t in targets), [(t["labels"]["instance"], t["lastError"]) for t in targets]


@pytest.mark.parametrize("board_name", sorted(BOARDS))
def test_variable_queries_chain(warm, board_name):
    variables = [v for v in BOARDS[board_name]["templating"]["list"] if v["type"] == "query"]
    for chosen in ({}, {"instance": warm.instances["job_node_3"]}):
        picked = dict(chosen)
        for variable in variables:
            m = LABEL_VALUES.match(substitute(variable["query"], picked))
            assert m, variable["query"]
            values = {s[m["label"]] for s in warm.prometheus.series(m["match"]) if m["label"] in s}
            if variable["name"] == "cluster" and not values:
                continue  # one Prometheus, no cluster label: All (.*) is what Grafana sends
            assert values, f"{board_name}: variable {variable['name']} with {picked} is empty"
            if variable["name"] == "instance" and chosen:
                assert chosen["instance"] in values
                continue
            if chosen:
                picked[variable["name"]] = sorted(values)[0]
        if chosen:
            # The chain narrowed to one node's GPU and its owner: the simulated job.
            assert picked["owner"].startswith("kubernetes:")


@pytest.mark.parametrize("board_name,title,ref,target", PANEL_TARGETS,
                         ids=[f"{b}:{t}:{r}" for b, t, r, _ in PANEL_TARGETS])
def test_panel_query_returns_series(warm, board_name, title, ref, target):
    expr = substitute(target["expr"])
    if target.get("instant"):
        result = warm.prometheus.query(expr)
    else:
        result = warm.prometheus.query_range(expr)
    if (board_name, title) in EMPTY_IN_SIMULATION:
        assert result == [], f"now returns data: drop it from EMPTY_IN_SIMULATION ({expr})"
        return
    assert result, f"{board_name}: {title} ({ref}) returned nothing: {expr}"
    meant = MEANT_FOR.get((board_name, title, ref))
    if meant:
        shown = {warm.node_of.get(s["metric"].get("instance")) for s in result}
        assert meant in shown, f"{title} should show the {meant} node, shows {shown} ({len(result)} series: {expr})"


def test_panel_queries_for_one_chosen_node_and_gpu(warm):
    """The same queries narrowed to one node and GPU, as a user picking them would run them."""
    chosen = {"instance": warm.instances["straggler"], "gpu": "3"}
    empty = set()
    for board_name, title, ref, target in PANEL_TARGETS:
        if (board_name, title) in EMPTY_IN_SIMULATION:
            continue
        result = warm.prometheus.query_range(substitute(target["expr"], chosen))
        if not result:
            empty.add((board_name, title, ref))
            continue
        instances = {s["metric"].get("instance") for s in result} - {None}
        assert instances <= {chosen["instance"]}, (board_name, title, ref, instances)
    assert empty == set(EMPTY_ON_STRAGGLER_GPU), empty


#: What one node and GPU of the straggler scenario legitimately lacks.
EMPTY_ON_STRAGGLER_GPU = {
    ("interconnect.json", "Dip period", "A"): "the straggler computes nearly the whole step: no repeating dips",
    ("interconnect.json", "Dip periodicity", "A"): "no dips, so no periodicity either",
    ("interconnect.json", "ECN marks and CNPs", "A"): "its RDMA ports are InfiniBand, not RoCE",
    ("interconnect.json", "RoCE retransmissions", "A"): "its RDMA ports are InfiniBand, not RoCE",
    ("gpu-detail.json", "Clock-event reasons", "A"): "no clock-event reason holds on an unthrottled GPU",
    ("data-pipeline.json", "Data wait vs compute per step", "A"): "only the multi-node job's loops report their timing",
    ("data-pipeline.json", "Data wait vs compute per step", "B"): "only the multi-node job's loops report their timing",
    ("triage.json", "Workload throughput", "A"): "only the multi-node job's loops report their timing",
    ("triage.json", "Workload throughput", "B"): "only the multi-node job's loops report their timing",
}


def test_verdict_timeline_names_each_scenario(warm):
    """The timeline shows each scenario's cause over most of the panel's range: the codes, the
    causes and the nodes are wired right. Each cell is a scrape of the published verdict.
    (That every pass is right is the evaluations' to measure, on traces replayed at their own
    pace: here a node's samples come when a shared 2-core machine's scheduler lets them.)"""
    (timeline,) = [t for b, title, _, t in PANEL_TARGETS if b == "triage.json" and title == "Verdict per GPU"]
    shown = {(warm.node_of[s["metric"]["instance"]], s["metric"]["gpu"]): [generator.CAUSES[int(float(v))] for _, v in s["values"]]
             for s in warm.prometheus.query_range(substitute(timeline["expr"]))}
    for node, cause in (("storage", "storage"), ("data_pipeline", "data_pipeline"), ("roce", "network"),
                        ("throttled", "throttled"), ("straggler", "sync")):
        cells = shown[node, "0"]
        assert cells.count(cause) > len(cells) / 2, f"{node} GPU 0 shows {cells}; its waits:\n{_waits(warm, node)}"


def _waits(warm, node: str) -> str:
    """A node's GPU 0 waits, idle share and demand over the last minute, one line a series."""
    instance = warm.instances[node]
    lines = []
    for expr in (f'gpuwait_gpu_wait_ratio{{instance="{instance}", gpu="0"}} > 0',
                 f'gpuwait_gpu_window_idle_ratio{{instance="{instance}", gpu="0"}}',
                 f'gpuwait_gpu_demand{{instance="{instance}", gpu="0"}}'):
        for s in warm.prometheus.query_range(expr, seconds=60.0):
            label = s["metric"].get("cause") or s["metric"].get("__name__", expr)
            lines.append(f"  {label}: {[round(float(v), 3) for _, v in s['values']]}")
    return "\n".join(lines)


def test_pcie_panel_capacity_matches_the_downtrained_link(warm):
    (capacity,) = [t for b, title, ref, t in PANEL_TARGETS
                   if b == "interconnect.json" and title == "PCIe throughput vs link capacity" and ref == "B"]
    chosen = {"instance": warm.instances["pcie_downtrained"]}
    by_gpu = {s["metric"]["gpu"]: float(s["value"][1]) for s in warm.prometheus.query(substitute(capacity["expr"], chosen))}
    # 16 and 32 GT/s per lane less 128b/130b encoding (PCIe Base Specification).
    assert by_gpu["3"] == pytest.approx(8 * 16e9 / 8 * 128 / 130, rel=1e-3)  # Gen4 x8
    assert by_gpu["0"] == pytest.approx(16 * 32e9 / 8 * 128 / 130, rel=1e-3)  # Gen5 x16


# -- 2. alerts through Alertmanager to the webhook ----------------------------------------------

#: (alert, node) pairs the fleet must deliver, as `warning` (each scenario has demand and impact).
#: GpuWaitingOnNetwork is not among them: every simulated node runs a worker pod of the same
#: job (ml/trainer-worker-<replica>), so the whole fleet is one workload, and the straggler of
#: that workload inhibits its network waits
#: (alerts/alertmanager.yml); test_network_wait_is_inhibited_by_the_straggler checks that.
EXPECTED_ALERTS = {
    ("GpuWaitingOnStorage", "storage"), ("GpuWaitingOnStorage", "nfs_metadata"),
    ("GpuWaitingOnDataPipeline", "data_pipeline"),
    ("GpuWaitingOnHostTransfer", "pcie_downtrained"), ("GpuPcieLinkDegraded", "pcie_downtrained"),
    ("GpuThrottled", "throttled"), ("GpuSyncStraggler", "straggler"),
    ("RdmaRoceCongestion", "roce"), ("RdmaRoceRetransmits", "roce"), ("RdmaInfinibandCongestion", "infiniband"),
}
#: Alerts that name one cause: they must not fire on a node whose scenario shows another.
CAUSE_ALERTS = {"GpuWaitingOnStorage", "GpuWaitingOnDataPipeline", "GpuWaitingOnHostTransfer", "GpuThrottled",
                "GpuPcieLinkDegraded", "RdmaRoceCongestion", "RdmaRoceRetransmits", "RdmaInfinibandCongestion"}


def delivered(webhook: Webhook, stack: Stack, status: str = "firing") -> list[tuple[str, dict, dict]]:
    """(receiver path, alert labels, notification) of every alert the webhook got in that status."""
    out = []
    for n in webhook.received():
        for a in n["alerts"]:
            if a["status"] == status:
                out.append((n["path"].lstrip("/"), a["labels"], n))
    return out


def wait_until(predicate, timeout: float, what: str, stack: Stack):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{stack.diagnostics()}")
        time.sleep(SCRAPE)


@pytest.fixture(scope="module")
def fired(warm, webhook):
    """Every expected alert delivered to the webhook at least once."""
    def seen():
        got = {(labels["alertname"], warm.node_of.get(labels.get("instance"))) for _, labels, _ in delivered(webhook, warm)}
        return got if EXPECTED_ALERTS <= got else None

    wait_until(seen, 240, f"alerts {sorted(EXPECTED_ALERTS)} at the webhook", warm)
    return delivered(webhook, warm)


def test_expected_alerts_reach_the_webhook_with_their_labels(warm, fired):
    for name, node in EXPECTED_ALERTS:
        matching = [labels for _, labels, _ in fired
                    if labels["alertname"] == name and labels.get("instance") == warm.instances[node]]
        assert any(l.get("severity") == "warning" for l in matching), (name, node, matching)
        for labels in matching:
            assert labels.get("job") == "gpuwait" and labels.get("severity") in {"warning", "info"}, labels
    by_name = {}
    for _, labels, _ in fired:
        by_name.setdefault(labels["alertname"], []).append(labels)
    # The one-GPU scenarios name their GPU; the RDMA alerts name the port and its link layer.
    assert {l["gpu"] for l in by_name["GpuPcieLinkDegraded"]} == {"3"}
    assert {l["gpu"] for l in by_name["GpuSyncStraggler"] if l.get("scope") == "node"} == {"3"}
    assert {l["link_layer"] for l in by_name["RdmaRoceCongestion"]} == {"Ethernet"}
    assert {l["link_layer"] for l in by_name["RdmaInfinibandCongestion"]} == {"InfiniBand"}


@pytest.mark.parametrize("board_name", sorted(BOARDS))
def test_alert_annotations_show_firing_alerts(warm, fired, board_name):
    (annotation,) = BOARDS[board_name]["annotations"]["list"]
    shown = warm.prometheus.query_range(substitute(annotation["expr"]), seconds=600)
    assert {s["metric"]["alertname"] for s in shown} >= {name for name, _ in EXPECTED_ALERTS}


def test_cause_alerts_fire_only_where_the_cause_is(warm, fired):
    expected_nodes = {}
    for name, node in EXPECTED_ALERTS:
        expected_nodes.setdefault(name, set()).add(node)
    for _, labels, _ in fired:
        if labels["alertname"] in CAUSE_ALERTS:
            node = warm.node_of.get(labels.get("instance"))
            assert node in expected_nodes[labels["alertname"]], (labels["alertname"], node)
    assert not [labels for _, labels, _ in fired if labels["alertname"] in {"GpuLost", "GpuwaitExporterDown"}]


def test_notifications_are_grouped_as_configured(warm, fired):
    config = yaml.safe_load(ALERTMANAGER_YML.read_text())
    for receiver, labels, notification in fired:
        route = matching_route(config["route"], labels)
        assert route["receiver"] == receiver == notification["receiver"], (labels, route.get("receiver"), receiver)
        group_by = route.get("group_by", [])
        if "..." in group_by:
            continue
        # Alertmanager groups by the listed labels the alert has.
        assert set(notification["groupLabels"]) == {k for k in group_by if labels.get(k)}, (notification["groupLabels"], group_by)
        for alert in notification["alerts"]:
            for key in group_by:
                assert alert["labels"].get(key, "") == notification["groupLabels"].get(key, ""), (key, alert["labels"])


def alertmanager_alerts(stack: Stack) -> list[dict]:
    alerts = requests.get(stack.alertmanager.url + "/api/v2/alerts", timeout=10).json()
    return [a for a in alerts if a["status"]["state"] in ("active", "suppressed")]


def test_inhibitions_hold(warm, fired):
    """Alertmanager's own view agrees with the configured inhibit rules, alert by alert."""
    rules = yaml.safe_load(ALERTMANAGER_YML.read_text()).get("inhibit_rules", [])
    active = alertmanager_alerts(warm)
    assert active
    for alert in active:
        expected = inhibited_by_config(alert, active, rules)
        assert bool(alert["status"]["inhibitedBy"]) == expected, (alert["labels"], alert["status"])


def test_network_wait_is_inhibited_by_the_straggler(warm, webhook, fired):
    infiniband = warm.instances["infiniband"]
    warm.prometheus.wait_for(f'ALERTS{{alertname="GpuWaitingOnNetwork", alertstate="firing", instance="{infiniband}"}}',
                             timeout=120, what="the network wait alert in Prometheus")

    def inhibited():
        active = alertmanager_alerts(warm)
        names = {a["fingerprint"]: a["labels"]["alertname"] for a in active}
        network = [a for a in active if a["labels"]["alertname"] == "GpuWaitingOnNetwork"
                   and a["labels"].get("instance") == infiniband]
        return network and all(a["status"]["inhibitedBy"] and
                               {names.get(f) for f in a["status"]["inhibitedBy"]} == {"GpuSyncStraggler"}
                               for a in network)

    wait_until(inhibited, 60, "GpuWaitingOnNetwork inhibited by GpuSyncStraggler", warm)


def test_the_gpus_of_one_node_make_one_notification(warm, fired):
    storage = warm.instances["storage"]
    notifications = [n for _, labels, n in fired
                     if labels["alertname"] == "GpuWaitingOnStorage" and labels.get("instance") == storage]
    assert max(len({a["labels"]["gpu"] for a in n["alerts"]}) for n in notifications) == 8
    assert all(n["groupLabels"]["instance"] == storage for n in notifications)


def test_alert_resolves_when_the_scenario_changes(warm, webhook, fired):
    storage = warm.instances["storage"]
    warm.change_scenario("storage", "healthy", "seed=2")

    def resolved():
        return [labels for _, labels, _ in delivered(webhook, warm, "resolved")
                if labels["alertname"] == "GpuWaitingOnStorage" and labels.get("instance") == storage]

    wait_until(resolved, 180, "GpuWaitingOnStorage on the storage node to resolve", warm)
    firing = [a for a in warm.prometheus.alerts()
              if a["labels"]["alertname"] == "GpuWaitingOnStorage" and a["labels"].get("instance") == storage]
    assert not [a for a in firing if a["state"] == "firing"], firing


# -- 3. the cross-node straggler ----------------------------------------------------------------

def test_cross_node_rules_name_the_slow_node(warm, webhook, fired):
    """Only the job's nodes scraped (every simulated node runs a worker of the same job, so
    the rest of the fleet would join the workload): the recording rules single out the slow
    node, the cross-node alert names it, and it resolves once the node catches up."""
    p = warm.prometheus
    warm.scrape_only(JOB_NODES)
    slow = warm.instances[SLOW_NODE]
    p.wait_for("count(workload_instance:gpuwait_gpu_window_utilization_mean_ratio:avg) == 3", what="the job's three nodes")
    gap = ("workload_instance:gpuwait_gpu_window_utilization_mean_ratio:avg"
           " - workload_instance:gpuwait_gpu_window_utilization_mean_ratio:avg_other_instances")
    (top,) = p.wait_for(f"topk(1, {gap}) > 0.2", what="a node busier than the others")
    assert top["metric"]["instance"] == slow
    (panel,) = [t for b, title, ref, t in PANEL_TARGETS
                if b == "sync.json" and title == "The straggling node (recorded)" and ref == "A"]
    shown = {s["metric"]["instance"]: float(s["value"][1]) for s in p.query(substitute(panel["expr"]))}
    assert max(shown, key=shown.get) == slow, shown
    others = p.query("workload_instance:gpuwait_gpu_barrier_wait_ratio:avg")
    waiting = {s["metric"]["instance"]: float(s["value"][1]) for s in others}
    assert waiting[slow] < min(v for i, v in waiting.items() if i != slow), waiting

    def cross_node(status):
        return [labels for _, labels, _ in delivered(webhook, warm, status)
                if labels["alertname"] == "GpuSyncStraggler" and labels.get("scope") == "cross_node"
                and labels.get("instance") == slow]

    wait_until(lambda: cross_node("firing"), 120, "the cross-node straggler alert on the slow node", warm)
    warm.change_scenario(SLOW_NODE, "node_straggler", "seed=13,replica=2,workload=1")
    wait_until(lambda: cross_node("resolved"), 180, "the cross-node straggler alert to resolve", warm)
