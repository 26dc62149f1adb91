"""Connections still handshaking or sending their request, all served by one thread.

A slow client (slowloris, a TLS handshake that never ends) must cost a descriptor and a
small buffer, not a thread: with a thread each, five hundred of them are five hundred
threads contending for the interpreter with the one answering Prometheus. So the TLS
handshake and the reading of the request head are done here without blocking, for every
pending connection at once, on one selector; a connection gets a thread of its own only
once its request head has arrived whole, to be answered. The server speaks HTTP/1.0, one
request per connection, and serves only GET and HEAD, so the head is all a request is.

Deadlines stay the guard's (see server.ConnectionGuard): it shuts a connection down, which
makes it readable here, and the read that follows finds it closed.
"""

from __future__ import annotations

import logging
import re
import selectors
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from gpuwait.exposition.webconfig import peer_sans

log = logging.getLogger("gpuwait.server")

#: A request head longer than this is answered 431: Prometheus's is a few hundred bytes, a
#: browser's a few kilobytes, and every pending connection may hold this much.
MAX_REQUEST_HEAD_BYTES = 32 * 1024
_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")
_TLS_HANDSHAKE_RECORD = 0x16


def _tls_waits() -> tuple[tuple[type[OSError], ...], type[OSError]]:
    """What a non-blocking TLS socket raises for "wait until readable" and "until writable".
    ``ssl`` is imported here, on a TLS connection, and never on a server without TLS: with
    OpenSSL it is 5 MB resident (see request.py)."""
    import ssl

    return (BlockingIOError, ssl.SSLWantReadError), ssl.SSLWantWriteError


#: A plain socket's: it never asks to wait for writing while reading.
_PLAIN_WAITS: tuple[tuple[type[OSError], ...], tuple[()]] = ((BlockingIOError,), ())


class PendingConnection:
    __slots__ = ("raw", "sock", "address", "conn", "config", "step", "head", "scanned", "events")

    def __init__(self, raw: socket.socket, address: Any, conn: Any, config: Any) -> None:
        self.raw = raw
        #: What the request is read from: the raw socket, or its TLS wrapper once made.
        self.sock: socket.socket = raw
        self.address = address
        self.conn = conn
        self.config = config
        self.step = "tls" if config.ssl_context is not None else "request"
        self.head = b""
        #: How far the head has been searched for its end: a head trickled a byte at a time
        #: must not be searched from the start at every byte.
        self.scanned = 0
        self.events = selectors.EVENT_READ


class PendingConnections:
    """Advances every pending connection as far as its bytes allow, on one thread.

    ``guard`` is the server's ConnectionGuard. ``dispatch(pending, work)`` runs ``work``
    (``"request"``: answer it; ``"plain-http"``: a plain HTTP client on a TLS port) on a
    thread of its own and from then on owns the connection; ``drop(pending)`` lets go of a
    connection that went nowhere (hung up, failed its handshake, was cut)."""

    def __init__(self, guard: Any, dispatch: Callable[[PendingConnection, str], None], drop: Callable[[PendingConnection], None]) -> None:
        self._guard = guard
        self._dispatch = dispatch
        self._drop = drop
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._arrived: deque[PendingConnection] = deque()
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="http-pending", daemon=True)
        self._thread.start()

    def add(self, raw: socket.socket, address: Any, conn: Any, config: Any) -> None:
        """Called from the accept loop; the connection is taken up by the selector thread."""
        raw.setblocking(False)
        with self._lock:
            self._arrived.append(PendingConnection(raw, address, conn, config))
        self._wake()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._wake()
        self._thread.join(2.0)

    def _wake(self) -> None:
        try:
            self._wake_write.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already woken (the buffer is full of wake-ups) or stopping

    def _run(self) -> None:
        registered: dict[int, PendingConnection] = {}
        try:
            while True:
                for key, _ in self._selector.select(0.5):
                    if key.data is None:
                        self._drain_wakeups()
                    elif key.fd in registered:
                        self._advance(key.data, registered)
                with self._lock:
                    arrived, self._arrived = self._arrived, deque()
                    stopped = self._stopped
                for p in arrived:
                    try:
                        self._selector.register(p.conn.fd, p.events, p)
                    except (OSError, ValueError) as e:
                        log.debug("connection from %s not taken up: %s", p.address[0], e)
                        self._drop(p)
                    else:
                        registered[p.conn.fd] = p
                if stopped:
                    return
        finally:
            for p in list(registered.values()):
                self._let_go(p, registered)
            with self._lock:
                for p in self._arrived:
                    self._drop(p)
            self._selector.close()
            self._wake_read.close()
            self._wake_write.close()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_read.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _advance(self, p: PendingConnection, registered: dict[int, PendingConnection]) -> None:
        try:
            outcome = self._step(p)
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            log.debug("connection from %s ended before its request: %s", p.address[0], e)
            outcome = "drop"
        if outcome == "wait":
            return
        del registered[p.conn.fd]
        self._selector.unregister(p.conn.fd)
        if outcome == "drop":
            self._drop(p)
        else:
            p.sock.setblocking(True)
            self._dispatch(p, outcome)

    def _let_go(self, p: PendingConnection, registered: dict[int, PendingConnection]) -> None:
        del registered[p.conn.fd]
        try:
            self._selector.unregister(p.conn.fd)
        except (KeyError, ValueError):
            pass
        self._drop(p)

    def _step(self, p: PendingConnection) -> str:
        """One advance: "wait" for more bytes, "drop", or what to dispatch."""
        if p.step == "tls":
            try:
                first = p.raw.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                return "wait"
            if not first:
                return "drop"
            if first[0] != _TLS_HANDSHAKE_RECORD:  # most likely plain HTTP
                return "plain-http"
            p.sock = p.conn.tls = p.config.ssl_context.wrap_socket(p.raw, server_side=True, do_handshake_on_connect=False)
            p.step = "handshake"
        if p.step == "handshake":
            want_read, want_write = _tls_waits()
            try:
                p.sock.do_handshake()
            except want_read:
                return self._want(p, selectors.EVENT_READ)
            except want_write:
                return self._want(p, selectors.EVENT_WRITE)
            allowed = p.config.client_allowed_sans
            if allowed is not None and not (peer_sans(p.sock.getpeercert()) & allowed):
                log.debug("client certificate has none of the allowed SANs")
                return "drop"
            self._guard.request(p.conn)
            p.step = "request"
        return self._read_head(p)

    def _read_head(self, p: PendingConnection) -> str:
        want_read, want_write = _PLAIN_WAITS if p.conn.tls is None else _tls_waits()
        while True:
            try:
                chunk = p.sock.recv(16384)
            except want_read:
                return self._want(p, selectors.EVENT_READ)
            except want_write:
                return self._want(p, selectors.EVENT_WRITE)
            if not chunk:
                return "drop"
            p.head += chunk
            end = _end_of_head(p)
            if 0 <= end <= MAX_REQUEST_HEAD_BYTES:
                p.conn.head = p.head[:end]
                return "request"
            if len(p.head) > MAX_REQUEST_HEAD_BYTES:
                p.conn.head, p.conn.head_too_large = p.head[:MAX_REQUEST_HEAD_BYTES], True
                return "request"

    def _want(self, p: PendingConnection, events: int) -> str:
        if p.events != events:
            p.events = events
            self._selector.modify(p.conn.fd, events, p)
        return "wait"


def _end_of_head(p: PendingConnection) -> int:
    """Where the head ends (past the blank line that closes the headers, or past a first
    line after which none will be read: one that is not "method target version" is
    refused on the spot); -1 while it has not arrived."""
    head = p.head
    line_end = head.find(b"\n")
    if line_end < 0:
        return -1
    if len(head[:line_end].split()) != 3:
        return line_end + 1
    found = _END_OF_HEAD.search(head, max(0, p.scanned - 3))
    p.scanned = len(head)
    return found.end() if found else -1
