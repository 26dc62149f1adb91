"""A request head, parsed, and the head of a response, written.

The server answers GET and HEAD, one request per connection in HTTP/1.0, from the method,
the path and three headers (Accept, Accept-Encoding, Authorization): that is all parsed
here. ``http.server`` would do it too, but importing it brings ``http.client``, email's
parsers and ``ssl`` with OpenSSL: 8 MB resident on a host-only exporter of about 40
(bench/import_rss.py), for a server that never uses them without TLS.

What is refused, and how, follows ``http.server`` (and RFC 9112): a request line that is not
"method target HTTP/x.y" is answered 400 (HTTP/0.9's two words included: it has neither
status line nor headers, so a proxy or scanner would take a bare body for the reply), a
version from 2.0 on 505, a head beyond the pending pool's bound or with more than
MAX_HEADERS fields 431, a header line without a colon 400, another method 501.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from http import HTTPStatus

#: As http.client's limit: a real client sends a dozen.
MAX_HEADERS = 100
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


class BadRequest(Exception):
    """A head that is not answered as asked: ``status`` and ``message`` are the reply."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    target: str
    version: str
    #: Field names in lower case; where a field is repeated, its first value.
    headers: dict[str, str]

    @property
    def path(self) -> str:
        """The target without its query; leading slashes collapsed to one, so that ``//x``
        is not taken for a network path by anything that later reads it."""
        path = self.target.split("?", 1)[0]
        return "/" + path.lstrip("/") if path.startswith("//") else path

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def request_line(head: bytes) -> str:
    """The head's first line, its words joined by single spaces: what is parsed, and logged."""
    return " ".join(head.split(b"\n", 1)[0].decode("iso-8859-1").split())


def parse_head(head: bytes, too_large: bool = False) -> RequestHead:
    """The head as read by PendingConnections (``too_large``: cut at its bound). Raises
    BadRequest where it is to be refused."""
    line = request_line(head)
    words = line.split()
    lines = head.decode("iso-8859-1").split("\n")
    if len(words) == 2:
        raise BadRequest(400, "Request line has no HTTP version (HTTP/0.9 is not served)")
    if too_large:
        raise BadRequest(431, "Request header too large")
    if len(words) != 3:
        raise BadRequest(400, f"Bad request syntax ({line!r})")
    method, target, version = words
    _check_version(version)
    headers: dict[str, str] = {}
    name, kept, count = "", False, 0
    for raw in lines[1:]:
        text = raw.rstrip("\r")
        if not text:
            break
        if text[0] in " \t":
            # A folded line (obsolete, RFC 9112 5.2): its value continues the field above.
            if not name:
                raise BadRequest(400, "Bad header line (a continuation before any field)")
            if kept:
                headers[name] += " " + text.lstrip(" \t")
            continue
        field, colon, value = text.partition(":")
        # No whitespace between a field's name and its colon (RFC 9112 5.1: a MUST).
        if not colon or not field or any(c in field for c in " \t"):
            raise BadRequest(400, f"Bad header line ({text[:80]!r})")
        count += 1
        if count > MAX_HEADERS:
            raise BadRequest(431, "Too many headers")
        name = field.lower()
        kept = name not in headers
        if kept:
            headers[name] = value.lstrip(" \t")
    headers = {name: value.strip(" \t") for name, value in headers.items()}
    if method not in ("GET", "HEAD"):
        raise BadRequest(501, f"Unsupported method ({method!r})")
    return RequestHead(method, target, version, headers)


def _check_version(version: str) -> None:
    if not version.startswith("HTTP/"):
        raise BadRequest(400, f"Bad request version ({version!r})")
    parts = version[5:].split(".")
    if len(parts) != 2 or not all(p.isdigit() and p.isascii() and len(p) <= 10 for p in parts):
        raise BadRequest(400, f"Bad request version ({version!r})")
    if (int(parts[0]), int(parts[1])) >= (2, 0):
        raise BadRequest(505, f"Invalid HTTP version ({version[5:]})")


def http_date(seconds: float | None = None) -> str:
    """RFC 9110's IMF-fixdate, in English whatever the locale."""
    t = time.gmtime(seconds)
    return (f"{_WEEKDAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")


def response_head(status: int, server: str, headers: list[tuple[str, str]]) -> bytes:
    """The status line and headers of an HTTP/1.0 response, with its Server and Date."""
    lines = [f"HTTP/1.0 {status} {HTTPStatus(status).phrase}", f"Server: {server}", f"Date: {http_date()}"]
    lines += [f"{key}: {value}" for key, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
