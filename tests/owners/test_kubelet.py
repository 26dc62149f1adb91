"""Pod names from the kubelet's pod list: the client and the table against a real HTTPS
server standing in for the kubelet (tests/support/kubelet_standin.py), then the exporter process."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from gpuwait.core.errors import ParseError
from gpuwait.owners.kubelet import FAILURE_CAUSES, KubeletClient, KubeletError, KubeletPods, PodNames, parse_endpoint, parse_pod_list
from gpuwait.owners.cgroup import Owner, resolve_owner
from kubelet_standin import FORBIDDEN_TEXT, KubeletStandIn, Pki, pod, pod_list
from support import free_port

TRAINER_UID = "4312ade9-202f-48f0-beb7-fe4764012968"
TRAINER_CONTAINER = "5599b9703f1a53fd260fdd2966bce88dcf9e74e63894eec94a1379e18e17765a"
LOADER_CONTAINER = "9d4e1f6a0b2c3d4e5f60718293a4b5c6d7e8f90112233445566778899aabbcc"
STATIC_UID = "8f14e45fceea167a5a36dedd4bea2543"  # a static pod's UID: the hash of its manifest
TOKEN = "eyJhbGciOiJSUzI1NiJ9.service-account"

PODS = [
    pod(TRAINER_UID, "research", "llama-train-0", {"trainer": TRAINER_CONTAINER, "sidecar": ""},
        init_containers={"fetch-data": LOADER_CONTAINER}),
    pod(STATIC_UID, "kube-system", "etcd-gpu-node-1", {"etcd": "ab" * 32}),
]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("kubelet-pki"))


@pytest.fixture
def token_file(tmp_path) -> str:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


def client(standin: KubeletStandIn, pki: Pki, token_file: str, **kw) -> KubeletClient:
    kw.setdefault("ca_file", str(pki.ca))
    kw.setdefault("server_name", "gpu-node-1")
    kw.setdefault("timeout", 2.0)
    return KubeletClient(kw.pop("endpoint", standin.url), token_file=token_file, **kw)


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met")


def cause_of(fetch) -> str:
    with pytest.raises(KubeletError) as e:
        fetch()
    assert e.value.cause in FAILURE_CAUSES
    return e.value.cause


# -- the pod list -------------------------------------------------------------------------


def test_a_pod_list_gives_names_and_container_names_by_runtime_id():
    pods, rejected = parse_pod_list(json.dumps(pod_list(PODS)).encode())
    assert rejected == 0
    assert pods[TRAINER_UID] == PodNames("research", "llama-train-0",
                                         {TRAINER_CONTAINER: "trainer", LOADER_CONTAINER: "fetch-data"})
    # A container not yet created has no id and so no entry.
    assert "sidecar" not in pods[TRAINER_UID].containers.values()
    assert pods[STATIC_UID].namespace == "kube-system"


def test_an_empty_pod_list_is_null_items_and_bad_items_are_counted_not_fatal():
    assert parse_pod_list(json.dumps(pod_list(None)).encode()) == ({}, 0)
    broken = [{"metadata": {"name": "no-uid", "namespace": "x"}}, "not an object", {"status": {}}]
    pods, rejected = parse_pod_list(json.dumps(pod_list([*broken, PODS[0]])).encode())
    assert list(pods) == [TRAINER_UID] and rejected == 3


@pytest.mark.parametrize("body", [b"", b"<html>", b'{"kind": "Status"}', b'{"items": {}}', b"\xff\xfe", b"[]"])
def test_what_is_not_a_pod_list_is_a_parse_error(body):
    with pytest.raises(ParseError):
        parse_pod_list(body)


@pytest.mark.parametrize("text", ["127.0.0.1:10250", "ftp://node:21", "https://", "https://u:p@node:10250",
                                  "https://node:10250/?x=1", "https://node:notaport"])
def test_a_bad_endpoint_is_refused_with_its_text(text):
    with pytest.raises(ValueError, match="endpoint|https|port"):
        parse_endpoint(text)


# -- one request against the stand-in --------------------------------------------------------


def test_the_list_comes_with_the_token_verified_against_the_nodes_name(pki, token_file):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin:
        pods, _ = parse_pod_list(client(standin, pki, token_file).fetch())
    assert set(pods) == {TRAINER_UID, STATIC_UID}
    assert standin.requests == [("/pods", f"Bearer {TOKEN}")]


def test_through_the_api_servers_node_proxy_the_path_is_kept(pki, token_file):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin:
        proxy = f"{standin.url}/api/v1/nodes/gpu-node-1/proxy/"
        with pytest.raises(KubeletError, match="404"):
            client(standin, pki, token_file, endpoint=proxy).fetch()
    assert standin.requests[0][0] == "/api/v1/nodes/gpu-node-1/proxy/pods"


def test_the_plain_read_only_port_gets_no_token(pki, token_file):
    with KubeletStandIn(None, pods=PODS) as standin:
        body = client(standin, pki, token_file, endpoint=f"http://127.0.0.1:{standin.port}").fetch()
    assert TRAINER_UID in parse_pod_list(body)[0]
    assert standin.requests == [("/pods", None)]


def test_a_wrong_token_is_unauthorized_and_a_missing_grant_forbidden(pki, tmp_path, token_file):
    wrong = tmp_path / "other-token"
    wrong.write_text("someone-else")
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin:
        assert cause_of(client(standin, pki, str(wrong)).fetch) == "unauthorized"
        standin.mode = "forbidden"
        with pytest.raises(KubeletError) as e:
            client(standin, pki, token_file).fetch()
    assert e.value.cause == "forbidden" and FORBIDDEN_TEXT in e.value.detail


def test_a_missing_or_empty_token_file_fails_before_connecting(pki, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin:
        assert cause_of(client(standin, pki, str(tmp_path / "absent")).fetch) == "token"
        assert cause_of(client(standin, pki, str(empty)).fetch) == "token"
    assert standin.requests == []


def test_nothing_listening_is_connect(pki, token_file):
    endpoint = f"https://127.0.0.1:{free_port()}"
    assert cause_of(KubeletClient(endpoint, token_file=token_file, timeout=2.0).fetch) == "connect"


def test_certificates_are_verified(pki, token_file):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin:
        # The node's certificate does not name 127.0.0.1.
        assert cause_of(client(standin, pki, token_file, server_name="").fetch) == "tls"
        assert client(standin, pki, token_file, server_name="", insecure_skip_verify=True).fetch()
    with KubeletStandIn(pki.rogue_cert, token=TOKEN, pods=PODS) as standin:
        assert cause_of(client(standin, pki, token_file, server_name="localhost").fetch) == "tls"
        assert standin.requests == []  # the token never left
    with KubeletStandIn(pki.local_cert, token=TOKEN, pods=PODS) as standin:
        assert client(standin, pki, token_file, server_name="").fetch()


def test_plain_http_at_an_https_endpoint_is_tls(pki, token_file):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS, mode="plain") as standin:
        assert cause_of(client(standin, pki, token_file).fetch) == "tls"


@pytest.mark.parametrize("mode", ["hang", "drip"])
def test_a_kubelet_that_never_finishes_answering_costs_the_deadline(pki, token_file, mode):
    # "drip" sends a byte every 50 ms: no single read waits long, only the deadline ends it.
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS, mode=mode) as standin:
        assert cause_of(client(standin, pki, token_file, timeout=0.5).fetch) == "timeout"
        assert standin.request_count() == 1


def test_garbage_answers(pki, token_file):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS, mode="not_http") as standin:
        assert cause_of(client(standin, pki, token_file).fetch) == "protocol"
        standin.mode = "ok"
        assert cause_of(client(standin, pki, token_file, max_body_bytes=1000).fetch) == "too_large"


# -- the table ----------------------------------------------------------------------------


def test_a_miss_fetches_once_and_lookups_never_wait(pki, token_file):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS, mode="hang") as standin:
        pods = KubeletPods(client(standin, pki, token_file, timeout=30.0), interval=3600.0)
        try:
            assert standin.wait_for_requests(1) == 1  # the first fetch, at start, now hangs
            done = threading.Event()
            threading.Thread(target=lambda: (pods(TRAINER_UID), done.set()), daemon=True).start()
            assert done.wait(5.0), "a lookup waited for the kubelet"
            assert pods(TRAINER_UID) is None and pods.status().up is None
            standin.mode = "ok"
            standin.release.set()  # the hung request ends unanswered; the miss began after it
            assert standin.wait_for_requests(2) == 2
            wait_until(lambda: pods(TRAINER_UID) == ("research", "llama-train-0"))
            assert pods.container_name(TRAINER_UID, TRAINER_CONTAINER) == "trainer"
            # A UID the list does not have costs one more fetch, and only one.
            assert pods("0badc0de-0000-4000-8000-000000000000") is None
            assert standin.wait_for_requests(3) == 3
            for _ in range(20):
                pods("0badc0de-0000-4000-8000-000000000000")
            assert standin.wait_for_requests(4, timeout=0.5) == 3
            status = pods.status()
            assert (status.up, status.pods, status.requests) == (True, 2, 3)
            assert status.errors["protocol"] + status.errors["timeout"] == 1  # the hung one
        finally:
            pods.close()


def test_pods_looked_up_outlive_the_list_and_the_others_are_dropped(pki, token_file):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin:
        pods = KubeletPods(client(standin, pki, token_file), start=False)
        pods.refresh()
        assert pods(TRAINER_UID) == ("research", "llama-train-0")
        standin.pods = []  # both deleted from the API; the trainer's processes linger
        pods.refresh()
        assert pods.status().pods == 1
        assert pods(TRAINER_UID) == ("research", "llama-train-0")
        assert pods(STATIC_UID) is None
        pods.refresh()  # looked up since: kept
        assert pods.status().pods == 1
        pods.refresh()
        pods.refresh()  # not looked up for a whole fetch: gone
        assert pods.status().pods == 0


def test_failures_count_by_cause_and_recover(pki, token_file):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS, mode="forbidden") as standin:
        pods = KubeletPods(client(standin, pki, token_file), start=False)
        pods.refresh()
        pods.refresh()
        status = pods.status()
        assert status.up is False and status.errors["forbidden"] == 2 and status.requests == 2
        assert set(status.errors) == set(FAILURE_CAUSES)
        standin.mode = "not_json"
        pods.refresh()
        assert pods.status().errors["parse"] == 1
        standin.mode = "ok"
        pods.refresh()
        assert pods.status().up is True and pods(TRAINER_UID) is not None


def test_owners_get_their_pod_names_through_the_resolver(pki, token_file):
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin:
        pods = KubeletPods(client(standin, pki, token_file), start=False)
        pods.refresh()
    owner = Owner(kind="kubernetes", id=f"kubernetes:{TRAINER_UID}", pod_uid=TRAINER_UID,
                  container_id=TRAINER_CONTAINER)
    named = resolve_owner(owner, pods)
    assert (named.namespace, named.pod) == ("research", "llama-train-0")


def test_the_token_file_is_read_for_every_request(pki, tmp_path):
    path = tmp_path / "token"
    path.write_text("old")
    with KubeletStandIn(pki.node_cert, token=TOKEN, pods=PODS) as standin:
        c = client(standin, pki, str(path))
        assert cause_of(c.fetch) == "unauthorized"
        # The kubelet rotates a projected token by replacing the file.
        (tmp_path / "new").write_text(TOKEN)
        os.replace(tmp_path / "new", path)
        assert c.fetch()
