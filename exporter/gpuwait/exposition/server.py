"""The HTTP endpoint: landing page, metrics, and health for liveness/readiness probes.

Prometheus's scrape must get through whatever else connects, so every connection is bounded:
the TLS handshake, the request header and the response each have a deadline, enforced by a
reaper that shuts the socket down (a per-read timeout alone lets a client trickle one byte
at a time forever); connections still sending their request form a large pool, read by one
thread for all of them (see pending.py), whose oldest member is cut when it is full; a
connection gets a thread once its request has arrived; at most ``--web.max-connections`` requests are answered at
once, and past that a new one is answered 503; at most ``--web.max-requests`` of them may be
metrics requests, beyond which they get 503 too, as with node_exporter. The accept loop
never waits (see ConnectionGuard). TLS and basic authentication come from ``--web.config.file``
(see webconfig.py); the web.* options are declared with the exporter's own, in
gpuwait.core.config. The server is a socketserver.TCPServer answering from request.py, not an
http.server, and ``ssl`` is imported only where TLS is configured: see request.py for why.
"""

from __future__ import annotations

import gzip
import html
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from gpuwait import __version__
from gpuwait.core.errors import ConfigError
from gpuwait.exposition.encoding import fallback_encoder, negotiate
from gpuwait.exposition.pending import PendingConnection, PendingConnections
from gpuwait.exposition.request import BadRequest, RequestHead, parse_head, request_line, response_head
from gpuwait.exposition.turns import TurnsFull
from gpuwait.exposition.webconfig import WebConfig, WebConfigSource

if TYPE_CHECKING:
    import ssl

    from prometheus_client.registry import Collector

log = logging.getLogger("gpuwait.server")

#: Deadline for the whole request header to have arrived, counted from accept (from the end
#: of the handshake, with TLS); Prometheus sends its GET in one write.
REQUEST_TIMEOUT_SECONDS = 5.0
#: Deadline, counted from accept, for the TLS handshake.
HANDSHAKE_TIMEOUT_SECONDS = 5.0
#: Deadline for sending the response once the request has arrived; far above any sane
#: scrape timeout, it only stops a client that reads the response a byte at a time.
RESPONSE_TIMEOUT_SECONDS = 60.0
#: How often open connections are looked at for a deadline they overran.
REAP_SECONDS = 0.25
#: A connection answered for longer than this may be cut to make room for a new request.
STALE_AFTER_SECONDS = 15.0
#: Connections still handshaking or sending their request, per --web.max-connections: a
#: slow client costs a descriptor and its bytes so far (pending.MAX_REQUEST_HEAD_BYTES at
#: most), no thread and no CPU, so there is room for many more of them than of requests
#: being answered. The larger this pool, the more slow clients it takes to push out a real
#: one in the milliseconds its GET takes to arrive.
PENDING_PER_CONNECTION = 8


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

    __slots__ = ("fd", "family", "accepted", "deadline", "phase", "cut", "config", "tls", "head", "head_too_large")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.fd = sock.fileno()
        self.family = sock.family
        self.accepted = now
        self.deadline = now + REQUEST_TIMEOUT_SECONDS
        #: "handshake", "request" (pending), then "auth" (waiting for a bcrypt check) and
        #: "response" (served)
        self.phase = "request"
        self.cut = False
        self.config: WebConfig | None = None
        #: The TLS wrapper, which owns the descriptor once made: kept here so that it is
        #: closed only after the guard has let go of the connection, even on an error.
        self.tls: ssl.SSLSocket | None = None
        #: The request head as read by PendingConnections, and whether it was cut short.
        self.head = b""
        self.head_too_large = False

    @property
    def pending(self) -> bool:
        return self.phase in ("handshake", "request")


class ConnectionGuard:
    """Counts connections, enforces their deadlines and makes room for new ones.

    Two pools. Connections still handshaking or sending their request (pending) may be
    many; when they are all taken the oldest is cut: a real client leaves the pool within
    milliseconds, so the oldest is a slow one. Requests being answered are at most
    ``max_connections``; past it a new request cuts one waiting for a bcrypt check (a
    correct password is answered from a cache, without that wait) or one answered for
    over STALE_AFTER_SECONDS, and where there is none it is answered 503. Nothing here
    waits: admission runs on the accept loop, and a wait there would hold every
    connection queued behind in the kernel, a scrape among them.

    A connection's socket stays open until its worker has released it here, under the lock;
    so while it is registered its file descriptor is its own, and the guard may shut it down
    (which wakes up a worker blocked in a read or write) without racing a close. A cut
    connection keeps its entry until then, but no longer counts against either pool.
    """

    def __init__(self, max_connections: int, max_pending: int | None = None) -> None:
        self.max_connections = max_connections
        self.max_pending = max_pending or PENDING_PER_CONNECTION * max_connections
        #: Entries, cut ones included: bounds the threads and descriptors in use.
        self.max_open = 2 * (self.max_pending + max_connections)
        self._open: dict[int, _Connection] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._reaper = threading.Thread(target=self._reap, name="http-reaper", daemon=True)
        self._reaper.start()

    def admit(self, sock: socket.socket) -> _Connection | None:
        """Register a fresh connection, cutting the oldest pending one if the pool is full;
        None: not even that makes room (the server is stopping, or cut connections have
        not let go yet), close it."""
        with self._cond:
            if self._stopped or len(self._open) >= self.max_open:
                return None
            pending = [c for c in self._open.values() if c.pending and not c.cut]
            if len(pending) >= self.max_pending:
                self._cut(pending[0])  # oldest first: dicts keep insertion order
            if not self._open:
                self._cond.notify_all()  # the reaper sleeps while no connection is open
            conn = _Connection(sock, time.monotonic())
            self._open[id(conn)] = conn
            return conn

    def handshake(self, conn: _Connection) -> None:
        conn.phase = "handshake"
        conn.deadline = min(conn.deadline, conn.accepted + HANDSHAKE_TIMEOUT_SECONDS)

    def request(self, conn: _Connection) -> None:
        conn.phase = "request"
        conn.deadline = time.monotonic() + REQUEST_TIMEOUT_SECONDS

    def serve(self, conn: _Connection) -> bool:
        """The request has arrived: take a place among those answered; False: none is
        free, answer 503."""
        with self._cond:
            now = time.monotonic()
            served = [c for c in self._open.values() if not c.pending and not c.cut]
            if len(served) >= self.max_connections:
                victim = next((c for c in served if c.phase == "auth"), None) or next(
                    (c for c in served if now - c.accepted >= STALE_AFTER_SECONDS), None)
                if victim is None:
                    return False
                self._cut(victim)
            conn.phase = "response"
            conn.deadline = now + RESPONSE_TIMEOUT_SECONDS
            return True

    def refused(self, conn: _Connection) -> None:
        """Answering a 503 or 400: counts as served, without taking a place from anyone
        (a short reply, which the response deadline bounds)."""
        conn.phase = "response"
        conn.deadline = time.monotonic() + RESPONSE_TIMEOUT_SECONDS

    def auth_queue(self, conn: _Connection) -> None:
        """Waiting for a turn at bcrypt: the first to be cut for a new request, so that a
        flood of wrong passwords queued there cannot hold every place."""
        conn.phase = "auth"
        conn.deadline = time.monotonic() + REQUEST_TIMEOUT_SECONDS

    def auth_turn(self, conn: _Connection, waiting: bool = False) -> bool:
        """Still waiting for bcrypt, or the turn has come; False: the connection was cut
        meanwhile, give up."""
        with self._cond:
            if conn.cut or waiting:
                return not conn.cut
            conn.phase = "response"
            conn.deadline = time.monotonic() + RESPONSE_TIMEOUT_SECONDS
            return True

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
                # Between scrapes no connection is open: nothing to look at until one is.
                self._cond.wait(REAP_SECONDS if self._open else None)


class _Server(socketserver.TCPServer):
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], endpoint: _Endpoint, family: int, web: WebConfigSource,
                 max_connections: int, max_requests: int) -> None:
        self.address_family = family
        self.guard = ConnectionGuard(max_connections, _pending_within_descriptors(max_connections))
        # A burst of connections (a hundred clients, or many Prometheus replicas at once)
        # must queue in the kernel rather than see refused connections.
        self.request_queue_size = max(128, 2 * max_connections)
        self.web = web
        self.max_requests = max_requests
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        self.pending = PendingConnections(self.guard, self._dispatch, self._let_go)
        self.endpoint = endpoint
        # Requests are answered by _answer on threads of their own, never by a handler class.
        super().__init__(address, None)

    def start_request(self) -> bool:
        """Take one of the --web.max-requests places; False: all are taken, answer 503."""
        with self._in_flight_lock:
            if self.max_requests and self._in_flight >= self.max_requests:
                return False
            self._in_flight += 1
            return True

    def end_request(self) -> None:
        with self._in_flight_lock:
            self._in_flight -= 1

    def process_request(self, request: socket.socket, client_address) -> None:
        conn = self.guard.admit(request)
        if conn is None:
            log.debug("no room for a new connection; closing it (%s)", client_address[0])
            self.shutdown_request(request)
            return
        config = conn.config = self.web.current()
        if config.ssl_context is not None:
            self.guard.handshake(conn)
        self.pending.add(request, client_address, conn, config)

    def _dispatch(self, pending: PendingConnection, work: str) -> None:
        """The request head has arrived (or a plain HTTP client knocked on a TLS port):
        from here on the connection has a thread of its own."""
        target = self._answer if work == "request" else self._refuse_plain_http
        try:
            threading.Thread(target=target, args=(pending,), daemon=True).start()
        except RuntimeError:  # no thread to be had: the client will retry
            self._let_go(pending)

    def _answer(self, pending: PendingConnection) -> None:
        try:
            pending.sock.settimeout(REQUEST_TIMEOUT_SECONDS)
            self.endpoint.answer(_Reply(pending), self)
        except Exception as e:  # a client hanging up must not spam the log
            log.debug("connection from %s ended: %s", pending.address[0], e)
        finally:
            self._let_go(pending)

    def _refuse_plain_http(self, pending: PendingConnection) -> None:
        try:
            pending.raw.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
            _refuse_plain_http(pending.raw)
        finally:
            self._let_go(pending)

    def _let_go(self, pending: PendingConnection) -> None:
        """Release from the guard first, then close: while registered, the descriptor is
        the connection's own (see ConnectionGuard)."""
        self.guard.release(pending.conn)
        for s in (pending.conn.tls, pending.raw):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass

    def server_close(self) -> None:
        self.guard.stop()
        self.pending.stop()
        super().server_close()


def _pending_within_descriptors(max_connections: int) -> int:
    """The pending pool, shrunk to leave descriptors for everything else: running out makes
    accept fail, and then every client, Prometheus first, is turned away. The soft limit is
    raised to the hard one first, as Go programs (node_exporter among them) do at start."""
    wanted = PENDING_PER_CONNECTION * max_connections
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
                soft = hard
            except (OSError, ValueError):
                pass
    except (ImportError, OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    # Every entry may be held twice over (cut ones linger briefly), and the sampler and
    # collectors keep their own files open.
    room = (soft - 256) // 2 - max_connections
    return max(max_connections, min(wanted, room))


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


Encoder = Callable[["Collector"], bytes]


class Exposition(Protocol):
    def serve(self, encoder: Encoder, content_type: str, gzipped: bool) -> tuple[bytes, dict[str, str]]:
        """One scrape in the format ``encoding.negotiate`` picked (``encoder``: prometheus-client's
        for it, where ``encoding`` does not write it): (body, extra headers)."""


class RenderEachScrape:
    """Serves any prometheus-client collector (or registry), rendered afresh for every scrape."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def serve(self, encoder: Encoder, content_type: str, gzipped: bool) -> tuple[bytes, dict[str, str]]:
        body = encoder(self.collector)
        if gzipped:
            return gzip.compress(body, compresslevel=1), {"Content-Encoding": "gzip"}
        return body, {}


class _Reply:
    """The answer to one connection's request, head and body in one sendall: written apart,
    the body's last partial segment could wait on the client's delayed ACK of the head
    (Nagle's algorithm), up to 40 ms on Linux."""

    __slots__ = ("sock", "conn", "peer", "head_only", "requestline")

    def __init__(self, pending: PendingConnection) -> None:
        self.sock = pending.sock
        self.conn: _Connection = pending.conn
        self.peer = pending.address[0]
        #: A HEAD request: the headers of the GET answer, without its body.
        self.head_only = False
        self.requestline = ""

    def send(self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        fields = [("Content-Type", content_type), ("Content-Length", str(len(body))), ("Connection", "close")]
        fields += (headers or {}).items()
        fields += self.conn.config.headers
        head = response_head(status, SERVER_VERSION, fields)
        self.sock.sendall(head if self.head_only else head + body)
        log.debug('%s "%s" %d %d', self.peer, self.requestline, status, len(body))

    def text(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self.send(status, "text/plain; charset=utf-8", message.encode(), headers)


#: The Server header: no Python version for a scanner to match on.
SERVER_VERSION = f"gpuwait/{__version__}"


class _Endpoint:
    """What each path answers, behind the server's admission and the web config's checks."""

    def __init__(self, telemetry_path: str, exposition: Exposition, healthy: Callable[[], bool],
                 ready: Callable[[], list[str]], web: WebConfigSource) -> None:
        self.telemetry_path = telemetry_path
        self.exposition = exposition
        self.healthy = healthy
        self.ready = ready
        self.web = web
        self.landing = _landing_page(telemetry_path).encode()

    def answer(self, reply: _Reply, server: _Server) -> None:
        guard, conn = server.guard, reply.conn
        reply.requestline = request_line(conn.head)[:200]
        # A HEAD request gets no body, its refusals included (RFC 9110 9.3.2).
        reply.head_only = reply.requestline.startswith("HEAD ")
        try:
            request = parse_head(conn.head, conn.head_too_large)
        except BadRequest as refused:
            guard.refused(conn)
            reply.text(refused.status, refused.message + "\n")
            return
        if not guard.serve(conn):
            guard.refused(conn)
            reply.text(503, "too many connections, try again later\n", {"Retry-After": "1"})
            return
        self._get(reply, request, server)

    def _get(self, reply: _Reply, request: RequestHead, server: _Server) -> None:
        config, web = reply.conn.config, self.web
        path = request.path
        limiter = web.limiter(config)
        if limiter is not None and not limiter.allow():
            reply.text(429, "too many requests\n")
            return
        if config.users and path not in config.auth_excluded_paths:
            guard, conn = server.guard, reply.conn
            try:
                allowed = web.authenticator.check(config, request.header("Authorization"), reply.peer,
                                                  queued=lambda: guard.auth_queue(conn),
                                                  turn=lambda waiting: guard.auth_turn(conn, waiting))
            except TurnsFull:
                reply.text(429, "too many authentication attempts waiting\n", {"Retry-After": "1"})
                return
            if not allowed:
                reply.text(401, "Unauthorized\n", {"WWW-Authenticate": 'Basic realm="gpuwait", charset="UTF-8"'})
                return
        if path == self.telemetry_path:
            self._metrics(reply, request, server)
        elif path == "/":
            reply.send(200, "text/html; charset=utf-8", self.landing)
        elif path == "/-/healthy":
            ok = self.healthy()
            reply.text(200 if ok else 503, "OK\n" if ok else "sampler stopped\n")
        elif path == "/-/ready":
            # Each reason names what is not ready (a source never read, one whose read has
            # hung), so a failing probe says where to look.
            reasons = self.ready()
            reply.text(503 if reasons else 200, "OK\n" if not reasons else "not ready: " + "; ".join(reasons) + "\n")
        else:
            reply.text(404, "not found\n")

    def _metrics(self, reply: _Reply, request: RequestHead, server: _Server) -> None:
        if not server.start_request():
            reply.text(503, f"limit of concurrent requests reached ({server.max_requests}), try again later\n",
                       {"Retry-After": "1"})
            return
        # The place is held until the body is sent: writing a large exposition to many
        # clients at once is what costs.
        try:
            accept = request.header("Accept")
            content_type = negotiate(accept)
            gzipped = "gzip" in (request.header("Accept-Encoding") or "")
            try:
                body, headers = self.exposition.serve(fallback_encoder(accept), content_type, gzipped)
            except Exception:
                log.exception("rendering metrics failed")
                reply.text(500, "internal error\n")
                return
            reply.send(200, content_type, body, headers)
        finally:
            server.end_request()


def make_server(
    address: str,
    telemetry_path: str,
    exposition: Exposition | Collector,
    healthy: Callable[[], bool],
    ready: Callable[[], list[str]],
    web_config_file: str = "",
    max_connections: int = 64,
    max_requests: int = 40,
) -> socketserver.TCPServer:
    """``exposition`` serves the scrapes; a plain prometheus-client collector or registry is
    rendered at each one."""
    if not hasattr(exposition, "serve"):
        exposition = RenderEachScrape(exposition)
    host, port = parse_listen_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    web = WebConfigSource(web_config_file)
    if web_config_file:
        log.info("web config %s: %s", web_config_file, web.current().describe())
    endpoint = _Endpoint(telemetry_path, exposition, healthy, ready, web)
    return _Server((host, port), endpoint, family, web, max_connections, max_requests)


def serve_in_thread(server: socketserver.TCPServer) -> threading.Thread:
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
