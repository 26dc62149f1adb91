"""The HTTP endpoint: landing page, metrics, and health for liveness/readiness probes.

Prometheus's scrape must get through whatever else connects, so every connection is bounded:
at most ``--web.max-connections`` at once; the TLS handshake, the request and the response
each have a deadline, enforced by a reaper that shuts the socket down (a per-read timeout
alone lets a client trickle one byte at a time forever); and when all slots are taken, the
oldest connection still sending its request is cut to make room, so idle or slow clients
cannot keep a scrape out. TLS and basic authentication come from ``--web.config.file``
(see webconfig.py); the web.* options are declared with the exporter's own, in
gpuwait.core.config.
"""

from __future__ import annotations

import gzip
import html
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from gpuwait import __version__
from gpuwait.core.errors import ConfigError
from gpuwait.exposition.webconfig import WebConfig, WebConfigSource, peer_sans

log = logging.getLogger("gpuwait.server")

#: A client that sends nothing for this long is cut off, so it cannot hold a worker thread;
#: it is also the deadline, counted from accept, for the whole request to have arrived.
REQUEST_TIMEOUT_SECONDS = 10.0
#: Deadline, counted from accept, for the TLS handshake.
HANDSHAKE_TIMEOUT_SECONDS = 5.0
#: Deadline for sending the response once the request has arrived; far above any sane
#: scrape timeout, it only stops a client that reads the response a byte at a time.
RESPONSE_TIMEOUT_SECONDS = 60.0
#: When every slot is taken, a connection still sending its request after this long may be
#: cut to make room: no real client, Prometheus included, takes that long to send a GET.
EVICT_AFTER_SECONDS = 0.5
#: A connection past this age may be cut to make room even while it is being answered.
STALE_AFTER_SECONDS = 15.0
#: How long a new connection may wait for a free slot before it is closed.
ADMIT_WAIT_SECONDS = 5.0


def parse_listen_address(address: str) -> tuple[str, int]:
    """':9975', '0.0.0.0:9975', '[::1]:9975' -> (host, port); host '' means all interfaces."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ConfigError(f"web.listen-address must be [host]:port, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"web.listen-address: port is not a number in {address!r}") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"web.listen-address: port out of range in {address!r}")
    return host, number


class _Connection:
    """One accepted connection as the guard sees it."""

    __slots__ = ("fd", "family", "accepted", "deadline", "phase", "cut", "config", "tls")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.fd = sock.fileno()
        self.family = sock.family
        self.accepted = now
        self.deadline = now + REQUEST_TIMEOUT_SECONDS
        self.phase = "request"  # "handshake", "request", then "response"
        self.cut = False
        self.config: WebConfig | None = None
        #: The TLS wrapper, which owns the descriptor once made: kept here so that it is
        #: closed only after the guard has let go of the connection, even on an error.
        self.tls: ssl.SSLSocket | None = None


class ConnectionGuard:
    """Counts connections, enforces their deadlines and makes room when all slots are taken.

    A connection's socket stays open until its worker has released it here, under the lock;
    so while it is registered its file descriptor is its own, and the guard may shut it down
    (which wakes up a worker blocked in a read or write) without racing a close.
    """

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self._open: dict[int, _Connection] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._reaper = threading.Thread(target=self._reap, name="http-reaper", daemon=True)
        self._reaper.start()

    def admit(self, sock: socket.socket) -> _Connection | None:
        """Register a fresh connection, waiting briefly for a slot; None: no room, close it."""
        give_up = time.monotonic() + ADMIT_WAIT_SECONDS
        with self._cond:
            while len(self._open) >= self.max_connections:
                now = time.monotonic()
                if now >= give_up or self._stopped:
                    return None
                victim = self._victim(now)
                if victim is not None:
                    self._cut(victim)
                self._cond.wait(min(0.1, give_up - now))
            conn = _Connection(sock, time.monotonic())
            self._open[id(conn)] = conn
            return conn

    def _victim(self, now: float) -> _Connection | None:
        for conn in self._open.values():  # oldest first: dicts keep insertion order
            if not conn.cut and conn.phase != "response" and now - conn.accepted >= EVICT_AFTER_SECONDS:
                return conn
        for conn in self._open.values():
            if not conn.cut and now - conn.accepted >= STALE_AFTER_SECONDS:
                return conn
        return None

    def handshake(self, conn: _Connection) -> None:
        conn.phase = "handshake"
        conn.deadline = min(conn.deadline, conn.accepted + HANDSHAKE_TIMEOUT_SECONDS)

    def request(self, conn: _Connection) -> None:
        conn.phase = "request"
        conn.deadline = conn.accepted + REQUEST_TIMEOUT_SECONDS

    def response(self, conn: _Connection) -> None:
        conn.phase = "response"
        conn.deadline = time.monotonic() + RESPONSE_TIMEOUT_SECONDS

    def release(self, conn: _Connection) -> None:
        with self._cond:
            self._open.pop(id(conn), None)
            self._cond.notify_all()

    def active(self) -> int:
        with self._cond:
            return len(self._open)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _cut(self, conn: _Connection) -> None:
        """Shut the socket down under the lock (its fd cannot be closed meanwhile). A
        duplicate descriptor is used so that the worker's socket object, possibly wrapped
        in TLS, is left alone; shutdown acts on the connection, not on the descriptor."""
        conn.cut = True
        try:
            with socket.fromfd(conn.fd, conn.family, socket.SOCK_STREAM) as dup:
                dup.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _reap(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                for conn in list(self._open.values()):
                    if not conn.cut and now >= conn.deadline:
                        log.debug("cutting a connection that overran its %s deadline", conn.phase)
                        self._cut(conn)
                self._cond.wait(0.25)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler, family: int, web: WebConfigSource, max_connections: int) -> None:
        self.address_family = family
        # A burst of connections (a hundred clients, or many Prometheus replicas at once)
        # must queue in the kernel rather than see refused connections.
        self.request_queue_size = max(128, 2 * max_connections)
        self.web = web
        self.guard = ConnectionGuard(max_connections)
        super().__init__(address, handler)

    def process_request(self, request: socket.socket, client_address) -> None:
        conn = self.guard.admit(request)
        if conn is None:
            log.debug("no free connection slot; closing a new connection from %s", client_address[0])
            self.shutdown_request(request)
            return
        t = threading.Thread(target=self._serve_connection, args=(request, client_address, conn), daemon=True)
        t.start()

    def _serve_connection(self, request: socket.socket, client_address, conn: _Connection) -> None:
        try:
            config = self.web.current()
            conn.config = config
            sock = request
            if config.ssl_context is not None:
                sock = self._start_tls(request, config, conn)
            if sock is not None:
                self.guard.request(conn)
                self.RequestHandlerClass(sock, client_address, self, conn)
        except Exception as e:  # a client hanging up or failing TLS must not spam the log
            log.debug("connection from %s ended: %s", client_address[0], e)
        finally:
            self.guard.release(conn)
            for s in (conn.tls, request):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    def _start_tls(self, raw: socket.socket, config: WebConfig, conn: _Connection) -> ssl.SSLSocket | None:
        self.guard.handshake(conn)
        raw.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        head = raw.recv(1, socket.MSG_PEEK)
        if not head:
            return None
        if head[0] != 0x16:  # not a TLS handshake record: most likely plain HTTP
            _refuse_plain_http(raw)
            return None
        tls = conn.tls = config.ssl_context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        tls.do_handshake()
        if config.client_allowed_sans is not None and not (peer_sans(tls.getpeercert()) & config.client_allowed_sans):
            log.debug("client certificate has none of the allowed SANs")
            return None
        return tls

    def server_close(self) -> None:
        self.guard.stop()
        super().server_close()


def _refuse_plain_http(raw: socket.socket) -> None:
    """Tell a plain-HTTP client what went wrong, as Go's servers do, instead of a TLS alert
    that curl or a browser would show as garbage."""
    try:
        raw.recv(65536)
        raw.sendall(
            b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
            b"Client sent an HTTP request to an HTTPS server.\n"
        )
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def make_server(
    address: str,
    telemetry_path: str,
    registry: CollectorRegistry,
    healthy: Callable[[], bool],
    ready: Callable[[], list[str]],
    web_config_file: str = "",
    max_connections: int = 64,
) -> ThreadingHTTPServer:
    host, port = parse_listen_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    landing = _landing_page(telemetry_path).encode()
    web = WebConfigSource(web_config_file)
    if web_config_file:
        log.info("web config %s: %s", web_config_file, web.current().describe())

    class Handler(BaseHTTPRequestHandler):
        server_version = f"gpuwait/{__version__}"
        timeout = REQUEST_TIMEOUT_SECONDS

        def __init__(self, request, client_address, server, conn: _Connection) -> None:
            self.conn = conn
            super().__init__(request, client_address, server)

        def version_string(self) -> str:  # no Python version for a scanner to match on
            return self.server_version

        def parse_request(self) -> bool:
            ok = super().parse_request()
            self.server.guard.response(self.conn)
            return ok

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            config = self.conn.config
            path = self.path.split("?", 1)[0]
            limiter = web.limiter(config)
            if limiter is not None and not limiter.allow():
                self._reply(429, "text/plain; charset=utf-8", b"too many requests\n")
                return
            if config.users and path not in config.auth_excluded_paths:
                if not web.authenticator.check(config.users, self.headers.get("Authorization")):
                    self._reply(401, "text/plain; charset=utf-8", b"Unauthorized\n",
                                {"WWW-Authenticate": 'Basic realm="gpuwait", charset="UTF-8"'})
                    return
            if path == telemetry_path:
                self._metrics()
            elif path == "/":
                self._reply(200, "text/html; charset=utf-8", landing)
            elif path == "/-/healthy":
                ok = healthy()
                self._reply(200 if ok else 503, "text/plain; charset=utf-8", b"OK\n" if ok else b"sampler stopped\n")
            elif path == "/-/ready":
                # Each reason names what is not ready (a source never read, one whose read has
                # hung), so a failing probe says where to look.
                reasons = ready()
                body = b"OK\n" if not reasons else ("not ready: " + "; ".join(reasons) + "\n").encode()
                self._reply(503 if reasons else 200, "text/plain; charset=utf-8", body)
            else:
                self._reply(404, "text/plain; charset=utf-8", b"not found\n")

        def _metrics(self) -> None:
            encoder, content_type = choose_encoder(self.headers.get("Accept"))
            try:
                body = encoder(registry)
            except Exception:
                log.exception("rendering metrics failed")
                self._reply(500, "text/plain; charset=utf-8", b"internal error\n")
                return
            headers = {}
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                body = gzip.compress(body, compresslevel=1)
                headers["Content-Encoding"] = "gzip"
            self._reply(200, content_type, body, headers)

        def _reply(self, code: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            for key, value in self.conn.config.headers:
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
            log.debug("%s %s", self.address_string(), format % args)

    return _Server((host, port), Handler, family, web, max_connections)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    return thread


def _landing_page(telemetry_path: str) -> str:
    path = html.escape(telemetry_path)
    return (
        "<!doctype html><html><head><title>gpuwait</title></head><body>"
        "<h1>gpuwait</h1><p>What is the GPU waiting for?</p>"
        f'<ul><li><a href="{path}">Metrics</a></li>'
        '<li><a href="/-/healthy">Health</a></li><li><a href="/-/ready">Readiness</a></li></ul>'
        f"<p>version {html.escape(__version__)}</p></body></html>\n"
    )
