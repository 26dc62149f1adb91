"""gpuwait.exposition.request reads a request head as the standard library's http.server does,
for what clients send, and refuses what it refuses with the same status."""

from __future__ import annotations

import io
import re
from http.server import BaseHTTPRequestHandler

import pytest
from hypothesis import given, settings, strategies as st

from gpuwait.exposition.request import MAX_HEADERS, BadRequest, http_date, parse_head, response_head


class _Offline(BaseHTTPRequestHandler):
    """http.server's parsing of one head, without a socket."""

    def __init__(self, head: bytes) -> None:  # noqa: D107 (no socket, so no super().__init__)
        self.rfile = io.BytesIO(head)
        self.wfile = io.BytesIO()
        self.client_address = ("127.0.0.1", 0)
        self.request_version = self.default_request_version = "HTTP/1.0"
        self.command = None
        self.close_connection = True
        self.raw_requestline = self.rfile.readline(65537)

    def log_message(self, *args) -> None:
        pass

    def outcome(self) -> tuple[int, object]:
        """(200, (method, path, version, headers asked for)) or (status, None)."""
        if not self.parse_request():
            return int(re.match(rb"HTTP/\S+ (\d+)", self.wfile.getvalue()).group(1)), None
        path = "/" + self.path.lstrip("/") if self.path.startswith("//") else self.path
        # email's parser keeps a folded line's line break; RFC 9112 5.2 has it read as a space.
        unfolded = lambda name: None if (v := self.headers.get(name)) is None else re.sub(r"\r?\n[ \t]+", " ", v).strip()
        return 200, (self.command, path.split("?", 1)[0], self.request_version, self._asked(unfolded))

    @staticmethod
    def _asked(get) -> tuple:
        return tuple(get(name) for name in ("Accept", "Accept-Encoding", "Authorization", "Host"))


def ours(head: bytes) -> tuple[int, object]:
    try:
        request = parse_head(head)
    except BadRequest as refused:
        return refused.status, None
    return 200, (request.method, request.path, request.version, _Offline._asked(request.header))


_token = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)
_version = st.one_of(
    st.sampled_from(["HTTP/1.0", "HTTP/1.1", "HTTP/2.0", "HTTP/3.0", "HTTP/0.9", "HTTP/1", "HTTP/1.1.1", "HTTP/a.b",
                     "HTTP/01.01", "HTTP/12345678901.0", "http/1.1", "FTP/1.0", "HTTP/"]),
    st.builds("HTTP/{}.{}".format, st.integers(0, 99), st.integers(0, 99)))
_target = st.one_of(st.sampled_from(["/metrics", "/", "//metrics", "///x?y=1", "/metrics?a=b", "*", "/-/ready"]), _token)
_field_name = st.sampled_from(["Accept", "accept", "ACCEPT-ENCODING", "Accept-Encoding", "Authorization", "Host",
                               "User-Agent", "X-Prometheus-Scrape-Timeout-Seconds", "Connection"])
_field_value = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
_newline = st.sampled_from([b"\r\n", b"\n"])


@st.composite
def heads(draw) -> bytes:
    nl = draw(_newline)
    line = b" ".join(w.encode() for w in (draw(st.sampled_from(["GET", "HEAD"])), draw(_target), draw(_version)))
    out = [line]
    for name, value in draw(st.lists(st.tuples(_field_name, _field_value), max_size=8)):
        out.append(f"{name}:{draw(st.sampled_from(['', ' ', '  ', chr(9)]))}{value}".encode())
        if draw(st.booleans()) and draw(st.booleans()):
            out.append(b" " + draw(_field_value).strip().encode() + b"x")  # a folded continuation
    return nl.join(out) + nl + nl


@settings(max_examples=400, deadline=None)
@given(heads())
def test_heads_clients_send_are_read_as_http_server_reads_them(head):
    assert ours(head) == _Offline(head).outcome(), head


@pytest.mark.parametrize("head, status", [
    (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
    (b"GET /metrics HTTP/1\r\n\r\n", 400),
    (b"GET /metrics HTTP/1.0 extra\r\n\r\n", 400),
    (b"GARBAGE\r\n", 400),
])
def test_request_lines_http_server_refuses_are_refused_alike(head, status):
    assert ours(head)[0] == _Offline(head).outcome()[0] == status


def test_what_http_server_would_let_through_is_refused():
    # HTTP/0.9 has no status line to answer with, so a bare body would be taken for the reply.
    assert ours(b"GET /metrics\r\n")[0] == 400
    # Whitespace between a field's name and its colon: RFC 9112 5.1 requires a 400.
    assert ours(b"GET / HTTP/1.1\r\nHost : x\r\n\r\n")[0] == 400
    assert ours(b"GET / HTTP/1.1\r\nno colon here\r\n\r\n")[0] == 400
    assert ours(b"GET / HTTP/1.1\r\n folded first\r\n\r\n")[0] == 400
    assert ours(b"POST /metrics HTTP/1.1\r\n\r\n")[0] == 501
    with pytest.raises(BadRequest) as cut:
        parse_head(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 100, too_large=True)
    assert cut.value.status == 431


def test_more_fields_than_the_bound_get_431_and_the_bound_itself_is_read():
    def head(fields: int) -> bytes:
        return b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(fields)) + b"\r\n"

    assert parse_head(head(MAX_HEADERS)).header("x-0") == "y"
    assert ours(head(MAX_HEADERS + 1))[0] == _Offline(head(MAX_HEADERS + 1)).outcome()[0] == 431


def test_a_repeated_field_reads_its_first_value_with_its_continuation():
    request = parse_head(b"GET / HTTP/1.1\r\nAccept: a,\r\n\tb\r\naccept: c\r\n d\r\n\r\n")
    assert request.header("ACCEPT") == "a, b"


def test_response_head_and_date_are_in_english_whatever_the_locale():
    assert http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert http_date(1_800_000_000) == "Fri, 15 Jan 2027 08:00:00 GMT"
    head = response_head(404, "gpuwait/1", [("Content-Length", "0")])
    assert head.startswith(b"HTTP/1.0 404 Not Found\r\nServer: gpuwait/1\r\nDate: ") and head.endswith(b"\r\nContent-Length: 0\r\n\r\n")
