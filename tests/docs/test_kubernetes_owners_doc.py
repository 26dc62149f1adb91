"""The PromQL joins with kube-state-metrics in docs/kubernetes-owners.md, evaluated by promtool
on series shaped as the exporter (scraped through a ServiceMonitor, so with the exporter's own
namespace, pod and container as target labels) and kube-state-metrics (two replicas) serve
them."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess

import pytest

from support import REPO

pytestmark = pytest.mark.integration

DOC = pathlib.Path(REPO) / "docs" / "kubernetes-owners.md"
UID = "4312ade9-202f-48f0-beb7-fe4764012968"
CID = "5599b9703f1a53fd260fdd2966bce88dcf9e74e63894eec94a1379e18e17765a"
TARGET = 'job="gpuwait",instance="10.0.0.17:9975",namespace="gpuwait",pod="gpuwait-x7k2p",container="gpuwait"'
GPU = 'gpu="0",uuid="GPU-5bd6c2c3-6c42-4b5a-8d2c-3f0e5b2a9e11"'

INPUT = [
    # Empty labels are no labels in Prometheus: a pod owner whose names are not known.
    f'gpuwait_gpu_owner_info{{{GPU},owner="kubernetes:{UID}",owner_kind="kubernetes",pod_uid="{UID}",{TARGET}}}',
    f'gpuwait_gpu_owner_info{{gpu="1",uuid="GPU-2",owner="slurm:12345",owner_kind="slurm",slurm_job="12345",{TARGET}}}',
    f'gpuwait_gpu_owner_container_info{{{GPU},owner="kubernetes:{UID}",container_id="{CID}",{TARGET}}}',
    *(f'kube_pod_info{{namespace="research",pod="llama-train-0",uid="{UID}",node="gpu-node-1",'
      f'created_by_kind="Job",created_by_name="llama-train",job="kube-state-metrics",instance="{ksm}"}}'
      for ksm in ("10.1.0.4:8080", "10.1.0.5:8080")),
    *(f'kube_pod_owner{{namespace="research",pod="llama-train-0",uid="{UID}",owner_kind="Job",'
      f'owner_name="llama-train",owner_is_controller="true",job="kube-state-metrics",instance="{ksm}"}}'
      for ksm in ("10.1.0.4:8080", "10.1.0.5:8080")),
    *(f'kube_pod_container_info{{namespace="research",pod="llama-train-0",uid="{UID}",container="trainer",'
      f'container_id="containerd://{CID}",image="registry.example/train:1",job="kube-state-metrics",instance="{ksm}"}}'
      for ksm in ("10.1.0.4:8080", "10.1.0.5:8080")),
]

OWNER = f'{GPU},owner="kubernetes:{UID}",owner_kind="kubernetes",pod_uid="{UID}",job="gpuwait",instance="10.0.0.17:9975"'
EXPECTED = [
    # pod names
    f'{{{OWNER},namespace="research",pod="llama-train-0",container="gpuwait"}}',
    # the controller, the exporter's target labels kept
    f'{{{OWNER},namespace="gpuwait",pod="gpuwait-x7k2p",container="gpuwait",controller_kind="Job",controller_name="llama-train"}}',
    # container names
    f'{{{GPU},owner="kubernetes:{UID}",container_id="{CID}",job="gpuwait",instance="10.0.0.17:9975",'
    'namespace="research",pod="llama-train-0",container="trainer"}',
]


def doc_queries() -> list[str]:
    return re.findall(r"```promql\n(.*?)```", DOC.read_text(), re.S)


def test_the_documented_joins_name_the_pod_its_controller_and_the_container(tmp_path):
    queries = doc_queries()
    assert len(queries) == len(EXPECTED)
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": "1x10"} for s in INPUT],
            "promql_expr_test": [
                {"expr": query.strip(), "eval_time": "5m", "exp_samples": [{"labels": labels, "value": 1}]}
                for query, labels in zip(queries, EXPECTED)
            ],
        }],
    }
    path = tmp_path / "joins.test.yml"
    path.write_text(json.dumps(tests))  # JSON is YAML
    result = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
