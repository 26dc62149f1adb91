"""alerts/: the rule files pass promtool, every alert fires in one unit test and stays silent in a
look-alike, every metric the rules use exists, the rendered files match their generator and
mixin/config.yml, the Alertmanager example is valid and inhibits what it should, and every alert
has its runbook."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from gpuwait.catalog import CATALOG
from kube_stack import matches
from support import REPO

ALERTS = pathlib.Path(REPO) / "alerts"
RUNBOOKS = pathlib.Path(REPO) / "docs" / "runbooks"
sys.path.insert(0, str(REPO))
import mixin  # noqa: E402
# Loaded under its own name: deploy/kubernetes/generate.py is imported as `generate` elsewhere.
_spec = importlib.util.spec_from_file_location("alerts_generate", ALERTS / "generate.py")
generate = sys.modules["alerts_generate"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)

RULE_FILES = sorted(ALERTS.glob("gpuwait-*.yml"))
TEST_FILES = sorted((ALERTS / "tests").glob("*.yml"))
SEVERITIES = ("critical", "warning", "info")
SECTIONS = ("## What it means", "## How to confirm", "## Likely fixes", "## What not to conclude")


def load(path: pathlib.Path) -> dict:
    return yaml.safe_load(path.read_text())


def rules() -> list[dict]:
    return [rule for path in RULE_FILES for group in load(path)["groups"] for rule in group["rules"]]


def alert_rules() -> list[dict]:
    return [r for r in rules() if "alert" in r]


def alert_names() -> list[str]:
    return sorted({r["alert"] for r in alert_rules()})


def runbook_name(alert: str) -> str:
    """The no-impact variant of a gated alert shares the runbook of the alert."""
    return alert.removesuffix(generate.NO_IMPACT)


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)


# -- promtool ---------------------------------------------------------------------------------

def test_rule_files_pass_promtool_check():
    assert {p.name for p in RULE_FILES} == {
        "gpuwait-recording-rules.yml", "gpuwait-wait-alerts.yml", "gpuwait-hardware-alerts.yml",
        "gpuwait-rdma-alerts.yml", "gpuwait-health-alerts.yml"}
    r = run("promtool", "check", "rules", *map(str, RULE_FILES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in (r.stdout + r.stderr).upper()


def test_promtool_unit_tests_pass():
    assert TEST_FILES
    r = run("promtool", "test", "rules", *map(str, TEST_FILES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(TEST_FILES)


def unit_tests() -> list[tuple[pathlib.Path, dict, dict]]:
    """(test file, test, alert_rule_test) for every alert check in alerts/tests."""
    out = []
    for path in TEST_FILES:
        for test in load(path)["tests"]:
            for check in test.get("alert_rule_test", []):
                out.append((path, test, check))
    return out


def coverage_problems(names: list[str], checks: list[tuple[pathlib.Path, dict, dict]]) -> list[str]:
    firing = {c["alertname"] for _, _, c in checks if c.get("exp_alerts")}
    silent = {c["alertname"] for _, _, c in checks if not c.get("exp_alerts")}
    problems = [f"{n}: no test where it fires" for n in names if n not in firing]
    problems += [f"{n}: no look-alike where it stays silent" for n in names if n not in silent]
    problems += [f"{n}: tested but not defined" for n in sorted((firing | silent) - set(names))]
    return problems


def test_every_alert_fires_in_one_test_and_stays_silent_in_a_look_alike():
    checks = unit_tests()
    assert coverage_problems(alert_names(), checks) == []
    # The check itself catches a missing look-alike or a missing firing test.
    assert coverage_problems(["GpuLost", "Extra"], [(ALERTS, {}, {"alertname": "GpuLost", "exp_alerts": []})]) == [
        "GpuLost: no test where it fires", "Extra: no test where it fires", "Extra: no look-alike where it stays silent"]


def test_firing_tests_state_exact_labels_and_every_annotation():
    for path, test, check in unit_tests():
        for expected in check.get("exp_alerts") or []:
            labels, annotations = expected.get("exp_labels", {}), expected.get("exp_annotations", {})
            assert labels.get("severity") in SEVERITIES, (path.name, test.get("name"))
            assert set(annotations) == {"summary", "description", "claim", "runbook_url"}, (path.name, test.get("name"))
            assert "{{" not in annotations["description"] and "n/a" not in annotations["description"], (
                f"{path.name}: {test.get('name')}: the description should show real values")
        assert test.get("name"), f"{path.name}: every test says what it shows"


GATED = {"GpuWaitingOnStorage", "GpuWaitingOnDataPipeline", "GpuWaitingOnNetwork", "GpuSyncStraggler", "GpuWaitingOnHostTransfer"}


def test_gated_alerts_are_tested_in_both_severities():
    """A1: a low-utilization alert is warning with impact, and <name>NoImpact info without; both
    must be shown to fire. One name for both would let an Alertmanager that inhibits info by
    warning of the same alertname and namespace (kube-prometheus-stack's default) mute the
    no-impact alert of one job behind the impact alert of another."""
    severities = {}
    for r in alert_rules():
        severities.setdefault(r["alert"], set()).add(r["labels"]["severity"])
    gated = {n for n in severities if n + generate.NO_IMPACT in severities}
    assert gated == GATED
    for name in gated:
        assert severities[name] == {"warning"} and severities[name + generate.NO_IMPACT] == {"info"}, name
    assert all(len(s) == 1 for s in severities.values()), "one severity per alert name"
    fired = {(c["alertname"], e["exp_labels"]["severity"]) for _, _, c in unit_tests() for e in c.get("exp_alerts") or []}
    for name in ("GpuWaitingOnStorage", "GpuWaitingOnDataPipeline"):
        assert {(name, "warning"), (name + generate.NO_IMPACT, "info")} <= fired
    for rule in alert_rules():
        name = rule["alert"]
        if runbook_name(name) in gated:
            word = "unless" if name.endswith(generate.NO_IMPACT) else "and"
            assert re.search(rf"\n{word} on\([^)]*\) (gpu|workload):gpuwait_gpu_impact:(bool|max)\n?$", rule["expr"]), name


# -- what every alert carries -------------------------------------------------------------------

def test_every_alert_has_severity_annotations_claims_and_a_runbook():
    base = load(mixin.CONFIG)["runbook_url_base"]
    assert base == "https://github.com/gpuwait/gpuwait/blob/main/docs/runbooks"
    for rule in alert_rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "claim", "runbook_url"}, name
        assert "{{" in annotations["description"], f"{name}: the description should carry values"
        assert re.fullmatch(r"A([1-9]|1[0-4])(, A([1-9]|1[0-4]))*", annotations["claim"]), name
        assert annotations["runbook_url"] == f"{base}/{runbook_name(name)}.md"
        assert (RUNBOOKS / f"{runbook_name(name)}.md").is_file(), f"no runbook for {name}"


def test_required_alerts_exist():
    assert set(alert_names()) >= {
        "GpuWaitingOnStorage", "GpuWaitingOnDataPipeline", "GpuWaitingOnNetwork", "GpuSyncStraggler",
        "GpuWaitingOnHostTransfer", "GpuInsufficientWork", "GpuThrottled", "GpuPcieLinkDegraded",
        "GpuNicAffinityMismatch", "RdmaRoceCongestion", "RdmaRoceRetransmits", "RdmaInfinibandLinkErrors",
        "RdmaInfinibandCongestion", "RdmaPortNotActive", "GpuUnderutilized", "GpuLost", "GpuCountDropped",
        "GpuwaitExporterDown", "GpuwaitExporterAbsent", "GpuwaitSourceDown", "GpuwaitSamplerOverruns"}
    severities = {r["alert"]: r["labels"]["severity"] for r in alert_rules()}
    assert severities["GpuUnderutilized"] == "info" and severities["GpuInsufficientWork"] == "info"
    assert severities["GpuLost"] == "critical"
    scopes = {r["labels"].get("scope") for r in alert_rules() if r["alert"] == "GpuSyncStraggler"}
    assert scopes == {"node", "cross_node"}


def test_recording_rules_follow_level_metric_operations_and_cite_their_claims():
    for rule in rules():
        if "record" in rule:
            assert re.fullmatch(r"[a-z_]+:gpuwait_[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]
            first = rule["expr"].splitlines()[0]
            assert first.startswith("# Serves ") and mixin.CLAIM_ID.search(first), rule["record"]


def test_rules_keep_the_cluster_label_and_select_the_job_from_the_config():
    """Every aggregation and join keeps the cluster label (one Prometheus, Thanos or Mimir over
    several clusters), and `up` is read through the configured job selector, which matches a
    plain job, the chart's ServiceMonitor job and a PodMonitor's <namespace>/<name>."""
    cluster = load(mixin.CONFIG)["labels"]["cluster"]
    for where, expr in expressions():
        body = re.sub(r"#[^\n]*", "", expr)
        for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", body):
            names = {n.strip() for n in clause.split(",")}
            if names & {"instance", "workload", "uid"}:
                assert cluster in names, (where, clause)
        if re.search(r"\bup\b", body) and not where.endswith("annotation"):
            assert load(mixin.CONFIG)["selectors"]["job"] in body, where
    selector = re.fullmatch(r'job=~"(.*)"', load(mixin.CONFIG)["selectors"]["job"])[1]
    for job in ("gpuwait", "gpuwait/gpuwait", "monitoring/gpuwait"):
        assert re.fullmatch(selector, job), job
    for job in ("node-exporter", "monitoring/gpuwait-proxy", "gpuwaiter"):
        assert not re.fullmatch(selector, job), job


# -- every metric referenced exists --------------------------------------------------------------

_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_NAME = re.compile(r"(?<![A-Za-z0-9_:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![A-Za-z0-9_:(])")


def referenced_metrics(promql: str) -> set[str]:
    """gpuwait metrics and recorded series named in a PromQL expression (label names, label
    values, functions and keywords left out)."""
    text = re.sub(r"#[^\n]*", "", _QUOTED.sub('""', promql))
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\{[^}]*\}", "", text)
    return {n for n in _NAME.findall(text) if n.startswith("gpuwait_") or n.count(":") == 2 or n == "up"}


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) for every rule expression and every query in an annotation."""
    out = []
    for rule in rules():
        where = rule.get("alert") or rule["record"]
        out.append((where, rule["expr"]))
        for text in rule.get("annotations", {}).values():
            out += [(f"{where} annotation", q) for q in re.findall(r"printf `([^`]*)`", text)]
    return out


def unknown_metrics(exprs: list[tuple[str, str]], recorded: set[str]) -> list[str]:
    known = set(CATALOG) | recorded | {"up"}
    return sorted(f"{where}: {name}" for where, expr in exprs for name in referenced_metrics(expr) if name not in known)


def test_every_metric_in_the_rules_is_in_the_catalog_or_recorded():
    recorded = {r["record"] for r in rules() if "record" in r}
    exprs = expressions()
    assert len(exprs) > len(rules())  # annotation queries are linted too
    assert unknown_metrics(exprs, recorded) == []
    used = {n for _, e in exprs for n in referenced_metrics(e)}
    assert {"gpuwait_gpu_wait_ratio", "gpuwait_gpu_owner_info", "gpuwait_rdma_port_hw_events_total",
            "gpu:gpuwait_gpu_owner:info"} <= used
    # The lint sees through label matchers, grouping clauses and strings, and catches a typo.
    probe = [("probe", 'sum by (gpuwait_fake_label) (rate(gpuwait_disk_reads_completed_totl{device="gpuwait_x"}[5m]))'
                       ' / on(instance) group_left(gpuwait_label) instance:gpuwait_nothing:sum')]
    assert unknown_metrics(probe, recorded) == ["probe: gpuwait_disk_reads_completed_totl", "probe: instance:gpuwait_nothing:sum"]


# -- the generator -------------------------------------------------------------------------------

def test_rendered_rule_files_are_up_to_date():
    fresh = generate.render(mixin.load())
    assert {name: (ALERTS / name).read_text() for name in fresh} == fresh, "run: python3 alerts/generate.py"
    assert {p.name for p in RULE_FILES} == set(fresh)
    r = run(sys.executable, str(ALERTS / "generate.py"), "--check")
    assert r.returncode == 0, r.stderr


def test_a_values_file_overrides_thresholds(tmp_path):
    site = tmp_path / "site.yml"
    site.write_text(yaml.safe_dump({
        "runbook_url_base": "https://github.com/gpuwait/gpuwait/blob/v1.0/docs/runbooks/",
        "wait": {"min_ratio": 0.35},
        "impact": {"workload_throughput": "sum by (workload) (rate(train_samples_total[5m]))"},
    }))
    out = tmp_path / "out"
    assert generate.main(["--values", str(site), "--out", str(out)]) == 0
    waits = (out / "gpuwait-wait-alerts.yml").read_text()
    assert 'cause="storage"} >= 0.35' in waits and 'cause="storage"} >= 0.2' not in waits
    assert "blob/v1.0/docs/runbooks/GpuWaitingOnStorage.md" in waits
    recording = (out / "gpuwait-recording-rules.yml").read_text()
    assert "workload:gpuwait_workload_throughput:ratio_to_baseline" in recording
    r = run("promtool", "check", "rules", *map(str, sorted(out.glob("*.yml"))))
    assert r.returncode == 0, r.stdout + r.stderr
    assert generate.main(["--values", str(site), "--out", str(out), "--check"]) == 0
    assert generate.main(["--out", str(out), "--check"]) == 1


@pytest.mark.parametrize("text, message", [
    ("wait:\n  min_ration: 0.3\n", "unknown setting wait.min_ration"),
    ("wait: 0.3\n", "wait is a section"),
    ("wait:\n  min_ratio: high\n", "wait.min_ratio must be a number"),
    ("labels:\n  cluster: k8s-cluster\n", "labels.cluster must be a label name"),
    ("wait:\n  min_ratio: [0.3\n", "not valid YAML"),
])
def test_a_config_file_with_a_bad_setting_is_refused_naming_the_key_and_the_file(tmp_path, capsys, text, message):
    site = tmp_path / "site.yml"
    site.write_text(text)
    assert generate.main(["--config", str(site), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and str(site) in err, err
    assert not (tmp_path / "out").exists()


def test_placeholders_render_the_same_rules_once_substituted():
    """The chart's PrometheusRule is the placeholder render with its values substituted: with
    the defaults it must be the committed rules exactly, for any setting a literal block keeps
    the YAML intact, and every setting the rules use is one of mixin/config.yml."""
    config = mixin.load()

    def substituted(values: dict) -> dict:
        templated = generate.templated_groups(config, bool(values["impact"]["workload_throughput"]))
        return {name: yaml.safe_load(mixin.substitute(generate.dump(g), values)) for name, g in templated.items()}

    throughput = {"impact": {"workload_throughput": "sum by (workload) (rate(train_samples_total[5m]))"}}
    odd = {"selectors": {"job": 'job=~"a: b #c|\'d\'"'}, "runbook_url_base": "https://x.example/a: b#c",
           "workload": {"kubernetes_pod_regex": '(.+)-\\d+ #"x"'}}
    for override in ({}, throughput, odd):
        values = mixin.merge(config, override, "test")
        assert substituted(values) == generate.groups(values), override
    used = {m for g in generate.templated_groups(config, True).values() for m in mixin.PLACEHOLDER.findall(generate.dump(g))}
    assert used <= set(mixin.leaves(config)) and "selectors.job" in used and "labels.cluster" in used


# -- Alertmanager --------------------------------------------------------------------------------

AM = ALERTS / "alertmanager.yml"


def test_alertmanager_config_is_accepted_by_amtool():
    r = run("amtool", "check-config", str(AM))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("severity, receiver", [("critical", "pager"), ("warning", "tickets"), ("info", "context-only")])
def test_alertmanager_routes_by_severity(severity, receiver):
    r = run("amtool", "config", "routes", "test", f"--config.file={AM}", f"severity={severity}", "alertname=GpuWaitingOnStorage")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == receiver


def inhibited_by(source: dict[str, str], target: dict[str, str]) -> bool:
    """Whether the example configuration's inhibit rules mute ``target`` while ``source`` fires."""
    for rule in load(AM)["inhibit_rules"]:
        if (matches(rule["source_matchers"], source) and matches(rule["target_matchers"], target)
                and all(source.get(label, "") == target.get(label, "") for label in rule.get("equal", []))):
            return True
    return False


def test_alertmanager_inhibits_what_a_more_specific_alert_explains():
    config = load(AM)
    assert config["route"]["group_by"] == ["alertname", "instance", "owner", "workload"]
    gpu3 = {"instance": "gpu-node-1", "gpu": "3", "owner": "slurm:48213", "workload": "slurm/48213"}
    specific = [n for n in alert_names() if n.startswith("GpuWaitingOn")] + [
        "GpuInsufficientWork", "GpuThrottled", "GpuPcieLinkDegraded", "GpuNicAffinityMismatch"]
    for name in specific:
        assert inhibited_by({"alertname": name, **gpu3}, {"alertname": "GpuUnderutilized", **gpu3}), name
        assert not inhibited_by({"alertname": name, **gpu3}, {"alertname": "GpuUnderutilized", **gpu3, "gpu": "4"}), name
    per_gpu_waits = [n for n in alert_names() if n.startswith("GpuWaitingOn")] + ["GpuSyncStraggler", "GpuUnderutilized"]
    for source in ("GpuLost", "GpuwaitExporterDown"):
        for target in per_gpu_waits:
            assert inhibited_by({"alertname": source, "instance": "gpu-node-1"}, {"alertname": target, **gpu3}), (source, target)
            assert not inhibited_by({"alertname": source, "instance": "gpu-node-2"}, {"alertname": target, **gpu3})
    port_down = {"alertname": "RdmaPortNotActive", "instance": "gpu-node-1", "device": "mlx5_0", "port": "1"}
    assert inhibited_by(port_down, {"alertname": "GpuWaitingOnNetwork", **gpu3})
    assert not inhibited_by(port_down, {"alertname": "GpuWaitingOnStorage", **gpu3})
    straggler = {"alertname": "GpuSyncStraggler", "scope": "cross_node", "instance": "gpu-node-2", "workload": "slurm/48213"}
    assert inhibited_by(straggler, {"alertname": "GpuWaitingOnNetwork", **gpu3})
    assert inhibited_by(straggler, {"alertname": "GpuUnderutilized", **gpu3})
    # Hardware and RDMA alerts are never muted by a wait alert.
    for target in ("GpuLost", "RdmaPortNotActive", "RdmaRoceCongestion", "GpuThrottled"):
        assert not inhibited_by({"alertname": "GpuWaitingOnNetwork", **gpu3}, {"alertname": target, **gpu3})


# -- runbooks ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted({runbook_name(n) for n in alert_names()}))
def test_runbook_follows_the_method(name):
    text = (RUNBOOKS / f"{name}.md").read_text()
    assert text.startswith(f"# {name}\n")
    positions = [text.find(section) for section in SECTIONS]
    assert -1 not in positions and positions == sorted(positions), f"{name}: sections {SECTIONS} in this order"
    confirm = text[positions[1]:positions[2]]
    assert "```promql" in confirm and "```sh" in confirm, f"{name}: exact PromQL and shell commands to confirm"
    for block in re.findall(r"```promql\n(.*?)```", text, re.S):
        assert unknown_metrics([(name, block)], {r["record"] for r in rules() if "record" in r}) == []
    assert re.search(r"\bA([1-9]|1[0-4])\b", text), f"{name}: cites the claims it encodes"


def test_runbook_index_lists_every_alert_and_its_look_alikes():
    index = (RUNBOOKS / "README.md").read_text()
    names = {runbook_name(n) for n in alert_names()}
    for name in names:
        assert f"[{name}]({name}.md)" in index, name
    assert {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"} == names
    # A gated alert's runbook says what its no-impact variant is.
    for name in GATED:
        assert f"{name}{generate.NO_IMPACT}" in (RUNBOOKS / f"{name}.md").read_text(), name


# -- the rules against the exporter's own series -------------------------------------------------

SIM_INSTANCE = "sim-node-1"
#: What the rules must conclude from each simulated scenario's exposition (docs/verdicts.md),
#: as (alert, GPU, the label that says which kind); GpuUnderutilized, the generic symptom that
#: Alertmanager mutes behind these, is checked separately.
SCENARIOS = {
    "storage": {("GpuWaitingOnStorage", g, "many small requests") for g in range(8)},
    "storage_sequential": {("GpuWaitingOnStorage", g, "sequential throughput") for g in range(8)},
    "nfs_metadata": {("GpuWaitingOnStorage", g, "NFS metadata (many small files)") for g in range(8)},
    "data_pipeline": {("GpuWaitingOnDataPipeline", g, "") for g in range(8)},
    "host_transfer": {("GpuWaitingOnHostTransfer", g, "") for g in range(8)},
    "network_allreduce": {("GpuWaitingOnNetwork", g, "InfiniBand") for g in range(8)},
    "network_allreduce_roce": {("GpuWaitingOnNetwork", g, "Ethernet") for g in range(8)},
    # A plain Ethernet NIC carries no link layer; the job sleeps in socket reads, still a wait.
    "network_tcp_sleeping": {("GpuWaitingOnNetwork", g, "") for g in range(8)},
    "straggler": {("GpuSyncStraggler", 3, "node")},
    "insufficient_work": {("GpuInsufficientWork", g, "") for g in range(8)},
    "throttled": {("GpuThrottled", g, r) for g in range(8) for r in ("sw_power_cap", "hw_thermal_slowdown")},
    "pcie_downtrained": {("GpuPcieLinkDegraded", 3, ""), ("GpuWaitingOnHostTransfer", 3, "")},
    "gpu_lost": {("GpuLost", 3, "")},
    "unrelated_nic": {("GpuWaitingOnDataPipeline", g, "") for g in range(8)},
    # Look-alikes: nothing at all, not even the generic symptom.
    "healthy": set(), "checkpoint": set(), "busy_high_cpu": set(), "memory_full": set(), "low_load_inference": set(),
}


def simulated_exposition(name: str) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuwait.core.registry import registry
    from gpuwait.core.registry import resolve
    from gpuwait.exposition.prometheus import GpuwaitCollector
    from gpuwait.simulate.model import get
    from gpuwait.simulate.run import run_virtual

    collectors = list(registry())
    sampler = run_virtual(get(name), resolve(["--analysis.window=10s"])[0], 20.0, collectors)
    prom = CollectorRegistry()
    prom.register(GpuwaitCollector(sampler, collectors))
    return generate_latest(prom).decode()


def alerts_on(exposition: str, tmp_path: pathlib.Path, minutes: int = 50) -> list[dict[str, str]]:
    """Every alert firing after the exposition's values held for ``minutes`` (longer than any
    alert's duration), as promtool's unit test runner reports them when told to expect none.
    Only the series the rules read are loaded, which keeps promtool quick."""
    from prometheus_client.parser import text_string_to_metric_families

    used = {n for _, e in expressions() for n in referenced_metrics(e)}

    series = [{"series": f'up{{instance="{SIM_INSTANCE}",job="gpuwait"}}', "values": f"1x{minutes}"}]
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name not in used:
                continue
            labels = {**sample.labels, "instance": SIM_INSTANCE, "job": "gpuwait"}
            selector = ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items())
            series.append({"series": f"{sample.name}{{{selector}}}", "values": f"{sample.value!r}x{minutes}"})
    test = {"rule_files": [str(p) for p in RULE_FILES], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [{"eval_time": f"{minutes - 10}m", "alertname": a, "exp_alerts": []} for a in alert_names()]}]}
    return firing(test, tmp_path)


def firing(test: dict, tmp_path: pathlib.Path) -> list[dict[str, str]]:
    """Labels of every alert a promtool unit test file reports where it expected none."""
    path = tmp_path / "firing.test.yml"
    path.write_text(yaml.safe_dump(test))
    r = run("promtool", "test", "rules", str(path))
    out = r.stdout + r.stderr
    assert "got:[" in out or r.returncode == 0, out[-2000:]
    got = []
    for block in out.split("got:[")[1:]:
        for labels in re.findall(r"Labels:\{(.*?)\}\n", block.split("\n    alertname:")[0]):
            got.append(dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)))
    return got


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_simulated_scenarios_fire_the_alert_the_verdict_names(scenario, tmp_path):
    got = alerts_on(simulated_exposition(scenario), tmp_path)
    kind = ("regime", "link_layer", "scope", "reason")
    specific = {(a["alertname"], int(a["gpu"]), next((a[k] for k in kind if k in a), "")) for a in got
                if a["alertname"] != "GpuUnderutilized"}
    assert specific == SCENARIOS[scenario]
    underutilized = {int(a["gpu"]) for a in got if a["alertname"] == "GpuUnderutilized"}
    if not SCENARIOS[scenario]:
        assert underutilized == set()
    assert all(a["instance"] == SIM_INSTANCE and a["severity"] in SEVERITIES for a in got)


def test_workload_throughput_below_its_baseline_is_impact(tmp_path):
    """A1 where the workload reports its throughput: a job whose GPUs were busy until its
    throughput fell is `warning` as soon as the drop shows, without waiting the impact window."""
    site = tmp_path / "site.yml"
    site.write_text(yaml.safe_dump({"impact": {"workload_throughput": "sum by (workload) (rate(train_samples_total[5m]))"}}))
    out = tmp_path / "rules"
    assert generate.main(["--values", str(site), "--out", str(out)]) == 0
    minutes = 26 * 60
    gpu = 'instance="gpu-node-1",job="gpuwait",gpu="0",uuid="GPU-5e4a1c90-0001-4a8e-9c3f-000000000000"'

    def case(samples: str) -> list[dict[str, str]]:
        busy, slow = minutes - 60, 60
        series = [
            {"series": f"gpuwait_gpu_owner_info{{{gpu},owner=\"slurm:48213\",owner_kind=\"slurm\",owner_namespace=\"\",owner_pod=\"\","
                       f"pod_uid=\"\",container_id=\"\",slurm_job=\"48213\",slurm_uid=\"1001\",unit=\"\"}}", "values": f"1x{minutes}"},
            {"series": f"gpuwait_gpu_demand{{{gpu}}}", "values": f"1x{minutes}"},
            {"series": f"gpuwait_gpu_window_utilization_mean_ratio{{{gpu}}}", "values": f"0.95x{busy} 0.48x{slow}"},
            {"series": f'gpuwait_gpu_wait_ratio{{{gpu},cause="data_pipeline"}}', "values": f"0x{busy} 0.5x{slow}"},
            {"series": f'gpuwait_gpu_verdict{{{gpu},cause="data_pipeline"}}', "values": f"0x{busy} 1x{slow}"},
            {"series": 'gpuwait_cpu_window_saturated_cores{instance="gpu-node-1",job="gpuwait"}', "values": f"2x{minutes}"},
            {"series": 'train_samples_total{workload="slurm/48213"}', "values": samples},
        ]
        test = {"rule_files": [str(p) for p in sorted(out.glob("*.yml"))], "evaluation_interval": "1m", "tests": [{
            "interval": "1m", "input_series": series,
            "alert_rule_test": [{"eval_time": f"{minutes - 5}m", "alertname": name, "exp_alerts": []}
                                for name in ("GpuWaitingOnDataPipeline", "GpuWaitingOnDataPipelineNoImpact")]}]}
        return firing(test, tmp_path)

    steady = f"0+60000x{minutes}"
    dropped = f"0+60000x{minutes - 60} {60000 * (minutes - 60) + 30000}+30000x59"
    assert [(a["alertname"], a["severity"]) for a in case(steady)] == [("GpuWaitingOnDataPipelineNoImpact", "info")]
    assert [(a["alertname"], a["severity"]) for a in case(dropped)] == [("GpuWaitingOnDataPipeline", "warning")]
