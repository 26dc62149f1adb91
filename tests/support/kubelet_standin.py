"""A stand-in for the kubelet's HTTPS endpoint: GET /pods answers a v1 PodList, checking the
bearer token, and misbehaves on request (hangs, drips, forbids, answers garbage).

It is a real TLS server on 127.0.0.1 with a certificate from its own test CA, so the client
under test goes through the whole connection, handshake and HTTP exchange.
"""

from __future__ import annotations

import ipaddress
import json
import pathlib
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography import x509

from certs import issue, write_pem

#: What a kubelet answers when the service account lacks the RBAC grant (its wording).
FORBIDDEN_TEXT = ("Forbidden (user=system:serviceaccount:gpuwait:gpuwait, verb=get, resource=nodes, "
                  "subresource(s)=[pods])")


def pod(uid: str, namespace: str, name: str, containers: dict[str, str] | None = None,
        init_containers: dict[str, str] | None = None) -> dict:
    """A v1 Pod as the kubelet lists it, trimmed to what such an object always carries;
    ``containers`` maps container name -> runtime id ("" for one not yet created)."""

    def statuses(named: dict[str, str]) -> list[dict]:
        out = []
        for cname, cid in named.items():
            status = {"name": cname, "ready": bool(cid), "restartCount": 0, "image": "registry.example/train:1",
                      "imageID": "", "started": bool(cid), "state": {"running": {}} if cid else {"waiting": {}}}
            if cid:
                status["containerID"] = f"containerd://{cid}"
            out.append(status)
        return out

    containers = containers or {}
    return {
        "metadata": {
            "name": name, "namespace": namespace, "uid": uid, "resourceVersion": "4711",
            "creationTimestamp": "2026-01-05T10:00:00Z",
            "labels": {"app": name.rsplit("-", 1)[0]},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name.rsplit("-", 1)[0],
                                 "uid": "0b1c2d3e-0000-4000-8000-000000000001", "controller": True}],
        },
        "spec": {"containers": [{"name": c, "image": "registry.example/train:1",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}} for c in containers],
                 "nodeName": "gpu-node-1", "restartPolicy": "Never"},
        "status": {"phase": "Running", "qosClass": "Guaranteed", "podIP": "10.244.1.7",
                   "containerStatuses": statuses(containers),
                   **({"initContainerStatuses": statuses(init_containers)} if init_containers else {})},
    }


def pod_list(pods: list[dict] | None) -> dict:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods}


class Pki:
    """A CA that issues the stand-in's certificate, and another CA nobody trusts."""

    def __init__(self, root: pathlib.Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        ca, ca_key = issue("kubelet test CA", None, None, [], ca=True)
        rogue, rogue_key = issue("another CA", None, None, [], ca=True)
        self.ca = root / "ca.crt"
        write_pem(self.ca, ca)
        # The kubelet's serving certificate names the node, not the loopback address.
        node = [x509.DNSName("gpu-node-1"), x509.IPAddress(ipaddress.ip_address("10.0.0.17"))]
        self.node_cert = root / "node.pem"
        write_pem(self.node_cert, *issue("system:node:gpu-node-1", ca, ca_key, node, server=True))
        local = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        self.local_cert = root / "local.pem"
        write_pem(self.local_cert, *issue("system:node:gpu-node-1", ca, ca_key, local, server=True))
        self.rogue_cert = root / "rogue.pem"
        write_pem(self.rogue_cert, *issue("system:node:gpu-node-1", rogue, rogue_key, local, server=True))


class KubeletStandIn:
    """``with KubeletStandIn(cert, token=...) as k: k.url``; set ``mode`` to misbehave.

    Modes: "ok", "forbidden", "hang" (reads the request, never answers), "drip" (headers,
    then a byte of body at a time, never done), "not_http" (bytes that are no HTTP answer),
    "not_json" (200 with a body that is not JSON), "plain" (no TLS at all: answers HTTP in
    the clear).
    """

    def __init__(self, cert: pathlib.Path | None, *, token: str | None = None, pods: list[dict] | None = None,
                 mode: str = "ok") -> None:
        self.cert = cert
        self.token = token
        self.pods = list(pods or [])
        self.mode = mode
        #: requests received, as (path, Authorization header)
        self.requests: list[tuple[str, str | None]] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                with standin._lock:
                    standin.requests.append((self.path, self.headers.get("Authorization")))
                mode = standin.mode
                if mode == "hang":
                    standin.release.wait(60)
                    self.close_connection = True  # released: hang up without an answer
                    return
                if mode == "not_http":
                    self.wfile.write(b"\x15\x03\x01\x00\x02garbage that is no HTTP status line\r\n\r\n")
                    return
                if mode == "drip":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                    while not standin.release.wait(0.05):
                        try:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                if standin.token is not None and self.headers.get("Authorization") != f"Bearer {standin.token}":
                    return self._answer(401, b"Unauthorized", "text/plain")
                if mode == "forbidden":
                    return self._answer(403, FORBIDDEN_TEXT.encode(), "text/plain")
                if self.path != "/pods":
                    return self._answer(404, b"404 page not found", "text/plain")
                if mode == "not_json":
                    return self._answer(200, b"<html>this is not the kubelet</html>", "text/html")
                return self._answer(200, json.dumps(pod_list(standin.pods)).encode(), "application/json")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def finish_request(self, request, client_address) -> None:
                # The handshake runs in the request's own thread, so a client that never
                # completes one holds up no other.
                if standin.cert is not None and standin.mode != "plain":
                    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                    context.load_cert_chain(str(standin.cert), str(standin.cert.with_suffix(".key")))
                    try:
                        request = context.wrap_socket(request, server_side=True)
                    except (ssl.SSLError, OSError):
                        return
                super().finish_request(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="kubelet-standin", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.request_count() >= count:
                break
            time.sleep(0.01)
        return self.request_count()

    def __enter__(self) -> "KubeletStandIn":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
