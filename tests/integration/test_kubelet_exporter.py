"""The exporter process naming the pods of GPU processes through a real HTTPS kubelet
stand-in: the HGX double's GPU 0 runs pid 4242 of the fixture host, whose cgroup names pod
4312ade9-... and container 5599b970...; and what it serves when the kubelet forbids, when
the token is unreadable to the exporter's user, and where there is no token at all."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import HOST_TREE
from gpuwait.owners.cgroup import Owner
from kubelet_standin import KubeletStandIn, Pki, pod
from nvml_support import HGX_MACHINE, double_env
from pod_support import PodExporter, only_collectors
from support import ExporterProcess, value

pytestmark = pytest.mark.integration

POD_UID = "4312ade9-202f-48f0-beb7-fe4764012968"
CONTAINER_ID = "5599b9703f1a53fd260fdd2966bce88dcf9e74e63894eec94a1379e18e17765a"
OWNER = f"kubernetes:{POD_UID}"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.gpuwait"
PODS = [pod(POD_UID, "research", "llama-train-0", {"trainer": CONTAINER_ID, "metrics": "cd" * 32})]
HOST = [f"--path.procfs={HOST_TREE / 'proc'}", f"--path.sysfs={HOST_TREE / 'sys'}"]
TIMING = ["--sample.interval=100ms", "--sample.slow-interval=500ms", "--analysis.interval=200ms",
          "--analysis.window=10s", "--collector.gpu.kubelet-interval=1s"]


def owner_label(field: str) -> str:
    """The owner_info label that carries an Owner's ``field`` (namespace or pod)."""
    labels = Owner(kind="kubernetes", id="k", **{field: "<probe>"}).labels()
    return next(name for name, v in labels.items() if v == "<probe>")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("kubelet-pki"))


@pytest.fixture
def secrets(tmp_path):
    """A service account volume: token and CA certificate."""
    (tmp_path / "token").write_text(TOKEN)
    return tmp_path


def kubelet_args(standin: KubeletStandIn, pki: Pki, secrets) -> list[str]:
    return [f"--collector.gpu.kubelet-endpoint={standin.url}", f"--collector.gpu.kubelet-token-file={secrets / 'token'}",
            f"--collector.gpu.kubelet-ca-file={pki.ca}", "--collector.gpu.kubelet-tls-server-name=gpu-node-1"]


def kubelet_log_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "logger=gpuwait.kubelet" in line]


def test_owners_of_gpu_processes_are_named_by_the_kubelet(pki, secrets):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin, \
            ExporterProcess([*HOST, *TIMING, *kubelet_args(standin, pki, secrets)],
                            env=double_env(str(HGX_MACHINE))) as exp:
        samples = exp.wait_for(lambda s: value(s, "gpuwait_gpu_owner_info", gpu=0, owner=OWNER,
                                               **{owner_label("pod"): "llama-train-0"}) and s)
        text = exp.scrape_text()
        log = exp.log()
    assert value(samples, "gpuwait_gpu_owner_info", gpu=0, owner=OWNER, pod_uid=POD_UID,
                 **{owner_label("namespace"): "research", owner_label("pod"): "llama-train-0"}) == 1
    assert value(samples, "gpuwait_gpu_owner_container_info", gpu=0, owner=OWNER, container_id=CONTAINER_ID,
                 owner_container="trainer") == 1
    # The Slurm job on GPU 1 is no pod and is left as it was.
    assert value(samples, "gpuwait_gpu_owner_info", gpu=1, owner="slurm:12345", **{owner_label("pod"): ""}) == 1
    assert value(samples, "gpuwait_gpu_owner_container_info", gpu=1) is None
    assert value(samples, "gpuwait_kubelet_up") == 1
    assert value(samples, "gpuwait_kubelet_pods") == 1
    assert value(samples, "gpuwait_kubelet_errors_total", cause="forbidden") == 0
    assert standin.requests[0] == ("/pods", f"Bearer {TOKEN}")
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    assert len(kubelet_log_lines(log)) == 1 and "1 pods" in kubelet_log_lines(log)[0], log


def test_a_forbidding_kubelet_costs_the_names_only_and_is_logged_once(pki, secrets):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS, mode="forbidden") as standin, \
            ExporterProcess([*HOST, *TIMING, *kubelet_args(standin, pki, secrets)],
                            env=double_env(str(HGX_MACHINE))) as exp:
        samples = exp.wait_for(lambda s: (value(s, "gpuwait_kubelet_errors_total", cause="forbidden") or 0) >= 3 and s)
        log = exp.log()
    assert value(samples, "gpuwait_kubelet_up") == 0
    assert value(samples, "gpuwait_kubelet_pods") == 0
    assert value(samples, "gpuwait_gpu_owner_info", gpu=0, owner=OWNER, pod_uid=POD_UID,
                 **{owner_label("namespace"): "", owner_label("pod"): ""}) == 1
    # Without names the container is still told by its id.
    assert value(samples, "gpuwait_gpu_owner_container_info", gpu=0, container_id=CONTAINER_ID, owner_container="") == 1
    assert value(samples, "gpuwait_gpu_owner_memory_used_bytes", gpu=0, owner=OWNER) == 60129542144
    warnings = kubelet_log_lines(log)
    assert len(warnings) == 1 and "forbidden" in warnings[0] and "level=warn" in warnings[0], log


def test_without_a_token_pod_names_are_off_with_one_line():
    absent = "/nonexistent/serviceaccount/token"
    with ExporterProcess([*HOST, *TIMING, f"--collector.gpu.kubelet-token-file={absent}"],
                         env=double_env(str(HGX_MACHINE))) as exp:
        samples = exp.wait_for(lambda s: value(s, "gpuwait_gpu_owner_info", gpu=0, owner=OWNER) and s)
        log = exp.log()
    assert not [name for name in samples if name.startswith("gpuwait_kubelet_")]
    lines = kubelet_log_lines(log)
    assert len(lines) == 1 and "level=info" in lines[0] and absent in lines[0], log


def test_a_token_the_exporters_user_cannot_read_is_counted(pki, secrets):
    # The exporter runs as user 65534 in its own mount namespace, the volume bound read-only;
    # the token file is root's, mode 0600.
    os.chmod(secrets / "token", 0o600)
    os.chmod(secrets, 0o755)
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin:
        args = [*only_collectors("gpu"), *TIMING, f"--collector.gpu.kubelet-endpoint={standin.url}",
                "--collector.gpu.kubelet-token-file={view}/stage/sa/token",
                f"--collector.gpu.kubelet-ca-file={{view}}/stage/sa/{pki.ca.name}"]
        shutil.copy(pki.ca, secrets / pki.ca.name)
        with PodExporter(args, stages={"sa": str(secrets)}) as exp:
            samples = exp.wait_for(lambda s: (value(s, "gpuwait_kubelet_errors_total", cause="token") or 0) >= 1 and s)
            log = exp.log()
    assert value(samples, "gpuwait_kubelet_up") == 0
    assert standin.requests == []
    assert "Permission denied" in kubelet_log_lines(log)[0], log
