"""Pod names for the pod UIDs that cgroup paths carry, from the kubelet's list of its pods.

A Kubernetes owner is recognised from its cgroup path (owners/cgroup.py), which names the pod
by UID only. The node's kubelet answers ``GET /pods`` on its HTTPS port (10250) with a v1
PodList: every pod it runs, static pods included, with ``metadata.uid``, ``namespace`` and
``name``, and per container ``status.containerStatuses[].containerID`` as
``<runtime>://<id>``, the id the cgroup path carries, next to the container's name.

Why this interface and not the kubelet's pod-resources socket
(/var/lib/kubelet/pod-resources/kubelet.sock, gRPC, what dcgm-exporter reads):

- its v1 ``PodResources`` message holds name, namespace and containers with their device ids,
  but no pod UID and no container id, so nothing in it matches what a cgroup path says. Only
  the device ids could be joined, through the GPU a process runs on, and that join is
  ambiguous wherever pods share a GPU (time-slicing and MPS hand one device id to several
  pods) and blind to pods that reach GPUs without the device plugin (NVIDIA_VISIBLE_DEVICES=all).
- the kubelet creates /var/lib/kubelet/pod-resources with mode 0750, owned by root, so a
  non-root exporter cannot reach the socket without CAP_DAC_OVERRIDE, which overrides every
  file permission check;
- speaking gRPC takes grpcio (a C extension of several MB) and protobuf, or an HTTP/2 client
  with HPACK written and kept here. ``GET /pods`` needs only http.client, ssl and json.

Access: the kubelet authenticates the pod's service account token (webhook token
authentication) and authorizes ``GET /pods`` as ``get`` on ``nodes/pods`` where the
KubeletFineGrainedAuthz feature is on (beta, on by default, since Kubernetes 1.33; GA in
1.36), and as ``get`` on ``nodes/proxy`` otherwise (docs/kubernetes-owners.md).

Nothing here runs on the sampler's path: a lookup reads an in-memory table, a miss asks a
background thread to fetch the list again, and the list is refreshed every interval. One fetch
is bounded by a deadline: a watchdog shuts the connection down when it passes, so a kubelet
that accepts and then never answers holds that one thread for at most the deadline.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gpuwait import __version__
from gpuwait.core.config import MIN_INTERVAL, Option, Settings, parse_bool, parse_duration
from gpuwait.core.errors import ParseError

if TYPE_CHECKING:
    import http.client
    import ssl

log = logging.getLogger("gpuwait.kubelet")

#: Where the kubelet mounts a pod's service account token and the cluster's CA certificate.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

#: Failure causes of one request, the label values of gpuwait_kubelet_errors_total.
FAILURE_CAUSES = (
    "token",         # the token file is missing, unreadable or empty
    "connect",       # no connection: refused, unreachable, name not resolved
    "timeout",       # no complete answer within the deadline
    "tls",           # handshake failed: certificate not verified, not TLS
    "unauthorized",  # 401: the kubelet did not accept the token
    "forbidden",     # 403: the service account may not get nodes/pods (or nodes/proxy)
    "status",        # any other HTTP status than 200
    "protocol",      # not an HTTP answer, or the connection broke mid-answer
    "too_large",     # the body exceeds MAX_BODY_BYTES
    "parse",         # the body is not a PodList
)

#: A bound on the answer, not an expectation of it: a pod's JSON is some kilobytes, and a node
#: runs at most its kubelet's maxPods (110 by default). The bound keeps a kubelet (or whatever
#: answers in its place) from growing the exporter's memory without limit.
MAX_BODY_BYTES = 32 * 2**20


def parse_endpoint(value: Any) -> str:
    """``https://HOST:PORT`` (or ``http://`` for the read-only port), optionally with a path
    prefix that /pods is appended to (the API server's ``/api/v1/nodes/NAME/proxy``); empty
    turns pod names off."""
    text = str(value).strip()
    if not text:
        return ""
    parts = urlsplit(text)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"expected https://HOST:PORT (or http://HOST:PORT), got {value!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"no query, fragment or credentials in the endpoint: {value!r}")
    try:
        parts.port
    except ValueError as e:
        raise ValueError(f"bad port in {value!r}: {e}") from None
    return text.rstrip("/")


ENDPOINT = Option(
    "collector.gpu.kubelet-endpoint", parse_endpoint, "https://127.0.0.1:10250",
    "The kubelet whose pod list (GET /pods) names the pods of GPU processes (their cgroups carry only the "
    "pod UID). Needs the host's network (hostNetwork) for 127.0.0.1; empty turns the lookup off. Off by "
    "itself, with one log line, when an https endpoint is set and there is no token file.", "URL")
TOKEN_FILE = Option(
    "collector.gpu.kubelet-token-file", str, f"{SERVICE_ACCOUNT_DIR}/token",
    "Bearer token sent to an https kubelet endpoint, re-read for every request (projected tokens rotate); "
    "empty sends none.", "FILE")
CA_FILE = Option(
    "collector.gpu.kubelet-ca-file", str, f"{SERVICE_ACCOUNT_DIR}/ca.crt",
    "CA certificates that verify the kubelet's serving certificate; the system's when the file does not "
    "exist.", "FILE")
TLS_SERVER_NAME = Option(
    "collector.gpu.kubelet-tls-server-name", str, "",
    "Name the kubelet's certificate is verified against (and sent as SNI), e.g. the node name when the "
    "endpoint is an address; empty: the endpoint's host.", "NAME")
TLS_INSECURE_SKIP_VERIFY = Option(
    "collector.gpu.kubelet-tls-insecure-skip-verify", parse_bool, False,
    "Accept any certificate from the kubelet (a self-signed one no CA file verifies). The token is then "
    "sent to whatever answers at the endpoint.", "BOOL")
INTERVAL = Option(
    "collector.gpu.kubelet-interval", parse_duration, 60.0,
    "How often the pod list is fetched again; a pod UID not in the list fetches it at once, so this "
    "only bounds how long deleted pods are remembered and how soon a failed fetch is retried.", "DURATION",
    minimum=MIN_INTERVAL)
TIMEOUT = Option(
    "collector.gpu.kubelet-timeout", parse_duration, 5.0,
    "Deadline of one request for the pod list, connection and TLS handshake included.", "DURATION")

#: The pod list's options, in --help order; the gpu collector, whose owners they name, lists
#: them among its own.
OPTIONS = (ENDPOINT, TOKEN_FILE, CA_FILE, TLS_SERVER_NAME, TLS_INSECURE_SKIP_VERIFY, INTERVAL, TIMEOUT)


class KubeletError(Exception):
    def __init__(self, cause: str, detail: str = "") -> None:
        super().__init__(f"{cause}: {detail}" if detail else cause)
        self.cause = cause
        self.detail = detail


# -- the pod list -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodNames:
    namespace: str
    name: str
    #: the runtime's container id, as the cgroup path carries it -> container name
    containers: Mapping[str, str] = field(default_factory=dict)


def _container_ids(statuses: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    if not isinstance(statuses, list):
        return found
    for status in statuses:
        if not isinstance(status, dict):
            continue
        name, cid = status.get("name"), status.get("containerID")
        # A container not yet created has no containerID; "<runtime>://<id>" otherwise.
        if isinstance(name, str) and isinstance(cid, str) and "://" in cid:
            found[cid.split("://", 1)[1]] = name
    return found


def parse_pod_list(body: bytes) -> tuple[dict[str, PodNames], int]:
    """({pod uid: names}, items left out) from a v1 PodList; ParseError if it is not one.

    An item without a string uid, namespace and name is left out and counted, the others
    kept.
    """
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ParseError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or "items" not in doc:
        raise ParseError("not a PodList: no 'items'")
    items = doc["items"]
    if items is None:  # Go encodes an empty list of pods as null
        return {}, 0
    if not isinstance(items, list):
        raise ParseError("not a PodList: 'items' is not an array")
    pods: dict[str, PodNames] = {}
    rejected = 0
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            rejected += 1
            continue
        uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
        if not all(isinstance(v, str) and v for v in (uid, namespace, name)):
            rejected += 1
            continue
        status = item.get("status")
        containers: dict[str, str] = {}
        if isinstance(status, dict):
            for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
                containers.update(_container_ids(status.get(key)))
        pods[uid] = PodNames(namespace, name, containers)
    return pods, rejected


# -- one request --------------------------------------------------------------------------


class KubeletClient:
    """GET <endpoint>/pods, within a deadline; returns the body or raises KubeletError."""

    def __init__(
        self,
        endpoint: str,
        *,
        token_file: str = "",
        ca_file: str = "",
        server_name: str = "",
        insecure_skip_verify: bool = False,
        timeout: float = 5.0,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        parts = urlsplit(parse_endpoint(endpoint))
        self.endpoint = endpoint
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        self.path = parts.path.rstrip("/") + "/pods"
        self.token_file = token_file
        self.ca_file = ca_file
        self.server_name = server_name or self.host
        self.insecure_skip_verify = insecure_skip_verify
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes

    def _token(self) -> str:
        try:
            with open(self.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            raise KubeletError("token", f"{self.token_file}: {e.strerror or e}") from None
        if not token:
            raise KubeletError("token", f"{self.token_file} is empty")
        return token

    def _context(self) -> ssl.SSLContext:
        # Built per request: the CA file of a service account volume is replaced when the
        # cluster's CA rotates.
        import ssl

        if self.insecure_skip_verify:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        cafile = self.ca_file if self.ca_file and os.path.exists(self.ca_file) else None
        try:
            return ssl.create_default_context(cafile=cafile)
        except (OSError, ssl.SSLError) as e:
            raise KubeletError("tls", f"CA file {self.ca_file}: {e}") from None

    def fetch(self) -> bytes:
        # Imported on the first request: with OpenSSL they are 8 MB resident, which an
        # exporter that never asks a kubelet does without.
        import http.client
        import ssl

        headers = {"Accept": "application/json", "User-Agent": f"gpuwait/{__version__}"}
        if self.tls and self.token_file:
            headers["Authorization"] = "Bearer " + self._token()
        context = self._context() if self.tls else None
        deadline = time.monotonic() + self.timeout
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except TimeoutError as e:
            raise KubeletError("timeout", f"connecting to {self.host}:{self.port}: {e}") from None
        except OSError as e:
            raise KubeletError("connect", f"{self.host}:{self.port}: {e.strerror or e}") from None
        # The watchdog shuts the connection down through a duplicate of the socket: the TLS
        # layer takes the original over, and a shutdown wakes any read blocked on it.
        guard = sock.dup()
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            try:
                guard.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
        watchdog.daemon = True
        watchdog.start()
        conn = http.client.HTTPConnection(self.host, self.port)
        try:
            if context is not None:
                try:
                    sock = context.wrap_socket(sock, server_hostname=self.server_name)
                except ssl.SSLError as e:
                    raise KubeletError("timeout" if expired.is_set() else "tls", str(e)) from None
            conn.sock = sock
            conn.request("GET", self.path, headers=headers)
            response = conn.getresponse()
            body = self._read(response)
            if expired.is_set():
                raise KubeletError("protocol", "closed")
        except KubeletError as e:
            # A read the watchdog cut short ends like a connection the kubelet closed.
            if expired.is_set() and e.cause == "protocol":
                raise KubeletError("timeout", f"no complete answer within {self.timeout:g}s") from None
            raise
        except (TimeoutError, socket.timeout) as e:
            raise KubeletError("timeout", str(e) or "no answer") from None
        except (http.client.HTTPException, ssl.SSLError, OSError) as e:
            if expired.is_set():
                raise KubeletError("timeout", f"no complete answer within {self.timeout:g}s") from None
            raise KubeletError("protocol", f"{type(e).__name__}: {e}") from None
        finally:
            watchdog.cancel()
            guard.close()
            conn.close()
            sock.close()
        if response.status != 200:
            cause = {401: "unauthorized", 403: "forbidden"}.get(response.status, "status")
            text = body[:300].decode("utf-8", errors="replace").strip()
            raise KubeletError(cause, f"HTTP {response.status} {response.reason}: {text}")
        return body

    def _read(self, response: http.client.HTTPResponse) -> bytes:
        declared = response.getheader("Content-Length")
        if declared and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise KubeletError("too_large", f"Content-Length {declared} over {self.max_body_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        while chunk := response.read(65536):
            size += len(chunk)
            if size > self.max_body_bytes:
                raise KubeletError("too_large", f"body over {self.max_body_bytes} bytes")
            chunks.append(chunk)
        # http.client's read(amt) ends quietly where the connection closed early.
        if declared and declared.isdigit() and size < int(declared):
            raise KubeletError("protocol", f"connection closed after {size} of {declared} bytes")
        return b"".join(chunks)


# -- the table the owners read ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KubeletStatus:
    """How the pod list is faring, for the self-metrics (and a recorded trace)."""

    #: the latest request answered with a pod list; None until the first one has ended
    up: bool | None
    #: pods whose names are known
    pods: int
    requests: int
    #: cause (FAILURE_CAUSES) -> failed requests since start
    errors: dict[str, int] = field(default_factory=dict)


class KubeletPods:
    """A PodResolver (owners.cgroup) backed by the kubelet's pod list.

    ``pods(uid)`` answers from memory at once. A UID not in the table asks for a fetch; one
    fetch that started after the miss settles it, so each unknown UID costs at most one
    request beyond the periodic ones. Pod names never change for a UID, so an entry is kept
    as long as it is looked up, even after the pod left the list (its processes can outlive
    the API object); entries neither listed nor looked up since the previous fetch are
    dropped, which bounds the table by the pods on the node and the owners of live processes.
    """

    def __init__(
        self,
        client: KubeletClient,
        *,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        start: bool = True,
    ) -> None:
        self.client = client
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._pods: dict[str, PodNames] = {}
        #: uids resolved since the previous successful fetch
        self._used: set[str] = set()
        #: uid not in the table -> (time of the first miss, time of the latest miss)
        self._missing: dict[str, tuple[float, float]] = {}
        self._up: bool | None = None
        self._requests = 0
        self._errors = {cause: 0 for cause in FAILURE_CAUSES}
        self._last_cause: str | None = None
        self._last_fetch_started: float | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="gpuwait-kubelet", daemon=True)
            self._thread.start()

    # PodResolver
    def __call__(self, pod_uid: str) -> tuple[str, str] | None:
        pod = self.pod(pod_uid)
        return None if pod is None else (pod.namespace, pod.name)

    def pod(self, pod_uid: str) -> PodNames | None:
        with self._lock:
            pod = self._pods.get(pod_uid)
            if pod is not None:
                self._used.add(pod_uid)
                return pod
            now = self.clock()
            seen = self._missing.get(pod_uid)
            self._missing[pod_uid] = (seen[0] if seen else now, now)
        if seen is None:
            self._wake.set()
        return None

    def container_name(self, pod_uid: str, container_id: str) -> str | None:
        pod = self.pod(pod_uid)
        return None if pod is None else pod.containers.get(container_id)

    def status(self) -> KubeletStatus:
        with self._lock:
            errors = {cause: n for cause, n in self._errors.items()}
            return KubeletStatus(self._up, len(self._pods), self._requests, errors)

    def refresh(self) -> None:
        """Fetch the list now, in the calling thread (the background thread's one step)."""
        started = self.clock()
        try:
            pods, rejected = parse_pod_list(self.client.fetch())
        except ParseError as e:
            self._failed(started, KubeletError("parse", str(e)))
            return
        except KubeletError as e:
            self._failed(started, e)
            return
        with self._lock:
            used, self._used = self._used, set()
            kept = {uid: p for uid, p in self._pods.items() if uid in used and uid not in pods}
            self._pods = {**kept, **pods}
            self._settle_missing(started)
            self._requests += 1
            recovered = self._up is not True
            self._up = True
            self._last_cause = None
            self._last_fetch_started = started
        if recovered:
            log.info("pod names from the kubelet at %s: %d pods", self.client.endpoint, len(pods))
        if rejected:
            log.debug("kubelet pod list: %d items without uid, namespace or name left out", rejected)

    def _failed(self, started: float, error: KubeletError) -> None:
        with self._lock:
            self._requests += 1
            self._errors[error.cause] = self._errors.get(error.cause, 0) + 1
            self._settle_missing(started)
            first = self._last_cause != error.cause
            self._up = False
            self._last_cause = error.cause
            self._last_fetch_started = started
        if first:
            log.warning("pod list from the kubelet at %s failed (%s: %s); owners in pods keep their pod UID only, "
                        "retried every %gs (gpuwait_kubelet_up 0)", self.client.endpoint, error.cause,
                        error.detail, self.interval)

    def _settle_missing(self, started: float) -> None:
        """After a fetch that began at ``started``: forget misses now resolved or no longer
        asked about, and ask again for those that began after it did."""
        previous = self._last_fetch_started
        again = False
        for uid, (first, latest) in list(self._missing.items()):
            if uid in self._pods or (previous is not None and latest < previous):
                del self._missing[uid]
            elif first >= started:
                again = True
        if again:
            self._wake.set()

    def _run(self) -> None:
        due = self.clock()
        while not self._stop.is_set():
            self._wake.wait(max(0.0, due - self.clock()))
            if self._stop.is_set():
                return
            self._wake.clear()
            self.refresh()
            due = self.clock() + self.interval

    def close(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            # A fetch in flight ends by its own deadline; the thread is a daemon.
            self._thread.join(timeout)


def from_settings(settings: Settings) -> KubeletPods | None:
    """The resolver the settings ask for, or None (logged once) where pod names are off."""
    endpoint = settings[ENDPOINT]
    if not endpoint:
        log.info("pod names of GPU owners are not looked up: collector.gpu.kubelet-endpoint is empty")
        return None
    token_file = settings[TOKEN_FILE]
    if endpoint.startswith("https:") and token_file and not os.path.exists(token_file):
        log.info("pod names of GPU owners are not looked up: no service account token at %s (not in a "
                 "Kubernetes pod, or automountServiceAccountToken is false); pod owners carry their UID only",
                 token_file)
        return None
    client = KubeletClient(
        endpoint,
        token_file=token_file,
        ca_file=settings[CA_FILE],
        server_name=settings[TLS_SERVER_NAME],
        insecure_skip_verify=settings[TLS_INSECURE_SKIP_VERIFY],
        timeout=settings[TIMEOUT],
    )
    return KubeletPods(client, interval=settings[INTERVAL])
