"""The committed dashboard JSON is what dashboards/generate.py builds, and every dashboard
keeps the conventions: stable uids, the chained variables, $__rate_interval in every rate,
a unit and claim ids on every panel, alerts as annotations, and only metrics the exporter's
catalog declares (or Prometheus itself provides)."""

import importlib.util
import json
import pathlib
import re
import sys

import pytest
import yaml

from gpuwait.core.facts import CAUSES
from gpuwait.catalog import CATALOG

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
DASHBOARDS = REPO / "dashboards"


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


def test_uids_are_stable_and_links_carry_variables():
    uids = {b["uid"] for b in boards().values()}
    assert uids == set(generator.UIDS.values())
    for board in boards().values():
        targets = {link["url"] for link in board["links"]}
        assert targets == {f"/d/{u}" for u in uids - {board['uid']}}
        assert all(link["includeVars"] and link["keepTime"] for link in board["links"])


def test_variables_are_chained():
    for board in boards().values():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert list(variables) == ["datasource", "instance", "gpu", "owner"]
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        assert "$instance" in variables["gpu"]["query"]
        assert "$instance" in variables["owner"]["query"] and "$gpu" in variables["owner"]["query"]


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
                assert 'instance=~"$instance"' in expr, f"{name}: {panel['title']}: {expr}"


def test_alerts_are_annotations():
    for board in boards().values():
        (annotation,) = board["annotations"]["list"]
        assert "ALERTS{" in annotation["expr"] and annotation["enable"]


def test_verdict_timeline_encodes_every_cause():
    assert sorted(generator.CAUSES) == sorted(CAUSES)
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
