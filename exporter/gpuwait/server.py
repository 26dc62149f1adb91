"""The HTTP endpoint: landing page, metrics, and health for liveness/readiness probes."""

from __future__ import annotations

import gzip
import html
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from gpuwait import __version__
from gpuwait.errors import ConfigError

log = logging.getLogger("gpuwait.server")

#: A client that sends nothing for this long is cut off, so it cannot hold a worker thread.
REQUEST_TIMEOUT_SECONDS = 10.0


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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler, family: int) -> None:
        self.address_family = family
        super().__init__(address, handler)


def make_server(
    address: str,
    telemetry_path: str,
    registry: CollectorRegistry,
    healthy: Callable[[], bool],
    ready: Callable[[], bool],
) -> ThreadingHTTPServer:
    host, port = parse_listen_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    landing = _landing_page(telemetry_path).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = f"gpuwait/{__version__}"
        timeout = REQUEST_TIMEOUT_SECONDS

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if path == telemetry_path:
                self._metrics()
            elif path == "/":
                self._reply(200, "text/html; charset=utf-8", landing)
            elif path == "/-/healthy":
                ok = healthy()
                self._reply(200 if ok else 503, "text/plain; charset=utf-8", b"OK\n" if ok else b"sampler stopped\n")
            elif path == "/-/ready":
                ok = ready()
                self._reply(200 if ok else 503, "text/plain; charset=utf-8", b"OK\n" if ok else b"not ready\n")
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
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
            log.debug("%s %s", self.address_string(), format % args)

    return _Server((host, port), Handler, family)


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
