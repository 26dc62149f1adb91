"""The committed dashboard JSON is what dashboards/generate.py builds from mixin/config.yml, and
every dashboard keeps the conventions: stable uids, the chained variables (cluster, job, node,
GPU, owner), $__rate_interval in every rate, a unit and claim ids on every panel and row,
threshold lines at the alerts' own settings, runbook links on the panels that mirror an alert,
alerts of gpuwait's own jobs and nodes as annotations, and only metrics the exporter's catalog
declares (or Prometheus itself provides)."""

import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from gpuwait.core.facts import CAUSES
from gpuwait.catalog import CATALOG

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
DASHBOARDS = REPO / "dashboards"
sys.path.insert(0, str(REPO))
import mixin  # noqa: E402


def load_generator():
    spec = importlib.util.spec_from_file_location("gpuwait_dashboards", DASHBOARDS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


generator = load_generator()
BUILT = generator.build_all()
#: Series Prometheus makes itself, not the exporter.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "ALERTS"}
#: Series the recording rules of alerts/ make.
RECORDED = {rule["record"] for path in (REPO / "alerts").glob("gpuwait-*.yml")
            for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"] if "record" in rule}
CLAIM = re.compile(r"\bA(?:[1-9]|1[0-4])\b")


def panels(board: dict) -> list[dict]:
    return [p for p in board["panels"] if p["type"] != "row"]


def boards() -> dict[str, dict]:
    return {name: json.loads(text) for name, text in BUILT.items()}


def test_committed_json_is_a_fresh_build():
    committed = {p.name: p.read_text() for p in (DASHBOARDS / "json").glob("*.json")}
    assert set(committed) == set(BUILT), "run: python3 dashboards/generate.py"
    for name, text in BUILT.items():
        assert committed[name] == text, f"{name} differs from a fresh build; run: python3 dashboards/generate.py"


def test_build_is_deterministic():
    assert generator.build_all() == BUILT


def test_check_fails_on_stale_missing_or_extra_json(tmp_path):
    out = tmp_path / "json"
    script = str(DASHBOARDS / "generate.py")

    def check() -> int:
        return subprocess.run([sys.executable, script, "--out", str(out), "--check"], capture_output=True, timeout=120).returncode

    assert check() == 1  # nothing there yet
    assert subprocess.run([sys.executable, script, "--out", str(out)], timeout=120).returncode == 0
    assert check() == 0
    (out / "triage.json").write_text((out / "triage.json").read_text().replace("Triage", "Triage!"))
    assert check() == 1
    (out / "triage.json").unlink()
    assert check() == 1
    subprocess.run([sys.executable, script, "--out", str(out)], timeout=120, check=True)
    (out / "old.json").write_text("{}")
    assert check() == 1


def test_uids_are_stable_and_links_carry_variables():
    uids = {b["uid"] for b in boards().values()}
    assert uids == set(generator.UIDS.values())
    for board in boards().values():
        targets = {link["url"] for link in board["links"]}
        assert targets == {f"/d/{u}" for u in uids - {board['uid']}}
        assert all(link["includeVars"] and link["keepTime"] for link in board["links"])


def test_variables_are_chained():
    cluster = mixin.load()["labels"]["cluster"]
    for board in boards().values():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert list(variables) == ["datasource", "cluster", "job", "instance", "gpu", "owner"]
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        assert variables["cluster"]["query"] == f"label_values(gpuwait_build_info, {cluster})"
        chain = ["cluster", "job", "instance", "gpu", "owner"]
        for i, name in enumerate(chain[1:], 1):
            assert all(f"${above}" in variables[name]["query"] for above in chain[:i][-3:]), name
        # "All" of job is the listed gpuwait jobs, never a catch-all that matches no job at all.
        assert "allValue" not in variables["job"] and variables["instance"]["allValue"] == ".*"


def test_every_panel_has_a_unit_claims_a_datasource_and_ref_ids():
    for name, board in boards().items():
        for panel in panels(board):
            where = f"{name}: {panel['title']}"
            assert panel["fieldConfig"]["defaults"].get("unit"), where
            assert CLAIM.search(panel.get("description", "")), where
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            refs = [t["refId"] for t in panel["targets"]]
            assert refs and len(set(refs)) == len(refs), where
            for target in panel["targets"]:
                assert target["datasource"] == panel["datasource"], where


def test_every_rate_uses_the_rate_interval():
    for name, board in boards().items():
        for panel in panels(board):
            for target in panel["targets"]:
                for window in re.findall(r"\b(?:rate|irate|increase)\([^\[]*\[([^\]]+)\]", target["expr"]):
                    assert window == "$__rate_interval", f"{name}: {panel['title']}: {target['expr']}"


def test_queries_use_only_known_metrics_and_filter_by_instance():
    for name, board in boards().items():
        for panel in panels(board):
            for target in panel["targets"]:
                expr = target["expr"]
                for metric in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr):
                    assert metric in CATALOG or metric in PROMETHEUS_SERIES or metric in RECORDED, \
                        f"{name}: {panel['title']}: {metric}"
                for selector in ('instance=~"$instance"', 'job=~"$job"', f'{CLUSTER}=~"$cluster"'):
                    assert selector in expr, f"{name}: {panel['title']}: {expr}"


CLUSTER = mixin.load()["labels"]["cluster"]


def test_alerts_of_the_chosen_gpuwait_jobs_and_nodes_are_annotations():
    for board in boards().values():
        (annotation,) = board["annotations"]["list"]
        assert annotation["enable"] and annotation["titleFormat"] == "{{alertname}}"
        assert annotation["expr"] == f'ALERTS{{alertstate="firing", {CLUSTER}=~"$cluster", job=~"$job", instance=~"$instance"}}'


def test_every_row_cites_its_claims():
    for name, board in boards().items():
        for row in (p for p in board["panels"] if p["type"] == "row"):
            assert CLAIM.search(row["title"]), f"{name}: {row['title']}"


def test_panels_that_mirror_an_alert_link_its_runbook_and_every_alert_has_one():
    titles = {p["title"] for board in boards().values() for p in panels(board)}
    assert set(generator.MIRRORS) <= titles and set(generator.LINES) <= titles
    rules = [r for path in (REPO / "alerts").glob("gpuwait-*.yml") for g in yaml.safe_load(path.read_text())["groups"]
             for r in g["rules"] if "alert" in r]
    alerts = {r["alert"].removesuffix("NoImpact") for r in rules}
    linked = set()
    base = mixin.load()["runbook_url_base"]
    for board in boards().values():
        for panel in panels(board):
            expected = generator.MIRRORS.get(panel["title"], ())
            urls = [link["url"] for link in panel.get("links", [])]
            assert urls == [f"{base}/{a}.md" for a in expected], panel["title"]
            for alert in expected:
                assert (REPO / "docs" / "runbooks" / f"{alert}.md").is_file(), alert
            linked |= set(expected)
    assert linked == alerts


def test_threshold_lines_sit_at_the_alerts_settings():
    config = mixin.load()
    flat = mixin.leaves(config)
    for name, board in boards().items():
        for panel in panels(board):
            wanted = generator.LINES.get(panel["title"])
            if not wanted:
                continue
            found = {}
            defaults = panel["fieldConfig"]["defaults"]
            if "thresholds" in defaults:
                assert defaults["custom"]["thresholdsStyle"]["mode"] == "dashed", panel["title"]
                found[""] = defaults["thresholds"]["steps"]
            for override in panel["fieldConfig"]["overrides"]:
                for prop in override["properties"]:
                    if prop["id"] == "thresholds":
                        found[override["matcher"]["options"]] = prop["value"]["steps"]
            assert set(found) == set(wanted), panel["title"]
            for ref, lines in wanted.items():
                assert [s["value"] for s in found[ref]] == [None, *(flat[path] for _, path in lines)], (panel["title"], ref)


def test_the_charts_templated_copy_is_the_same_once_substituted():
    config = mixin.load()
    site = mixin.merge(config, {"labels": {"cluster": "k8s_cluster"}, "wait": {"min_ratio": 0.35},
                                "rdma": {"ib_xmit_wait_ticks_per_second": 2500000}}, "test")
    templated = generator.templated(config)
    for values in (config, site):
        direct = generator.build_all(values)
        assert {n: json.loads(mixin.substitute(text, values)) for n, text in templated.items()} == {
            n: json.loads(text) for n, text in direct.items()}
    generator.configure(config)


def test_verdict_timeline_encodes_every_cause():
    assert generator.CAUSES == CAUSES and set(generator.CAUSE_COLORS) == set(CAUSES)
    triage = boards()["triage.json"]
    (timeline,) = [p for p in panels(triage) if p["title"] == "Verdict per GPU"]
    (mapping,) = timeline["fieldConfig"]["defaults"]["mappings"]
    assert {m["text"] for m in mapping["options"].values()} == set(CAUSES)
    for cause in CAUSES:
        assert f'cause="{cause}"' in timeline["targets"][0]["expr"]


@pytest.mark.parametrize("title", ["Verdict per GPU", "Wait attribution, per node", "Utilization next to SM activity",
                                   "Top causes across the fleet"])
def test_triage_answers_the_questions_of_a14(title):
    assert title in {p["title"] for p in panels(boards()["triage.json"])}
