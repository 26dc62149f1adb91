"""The web configuration file (``--web.config.file``): TLS, client certificates, basic
authentication, extra response headers and a request rate limit.

The format is the one of the Prometheus exporter-toolkit, so one file can serve
node_exporter and gpuwait alike. Differences, all forced by Python's ``ssl`` module and all
erring on the strict side:

- ``RequestClientCert`` and ``RequireAnyClientCert`` ask for a certificate that Go does not
  verify. Python cannot ask without verifying, so with ``client_ca_file`` (or ``client_ca``)
  they behave like ``VerifyClientCertIfGiven`` and ``RequireAndVerifyClientCert``;
  ``RequireAnyClientCert`` without a CA is refused, and ``RequestClientCert`` without a CA
  does not ask at all (an unverified certificate could not be used for anything).
- ``curve_preferences`` is refused: Python 3.11 cannot restrict the key-exchange groups.
- ``http_server_config.http2`` is accepted and has no effect: the exporter serves HTTP/1.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from gpuwait.core.config import parse_duration
from gpuwait.core.errors import ConfigError
from gpuwait.exposition.turns import FairTurns

if TYPE_CHECKING:
    import ssl

log = logging.getLogger("gpuwait.webconfig")

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "auth_excluded_paths", "rate_limit")
_TLS_KEYS = (
    "cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca", "client_auth_type",
    "client_allowed_sans", "min_version", "max_version", "cipher_suites", "prefer_server_cipher_suites",
    "curve_preferences",
)
_HTTP_KEYS = ("http2", "headers")
_RATE_KEYS = ("burst", "interval")

#: The web config's TLS versions, as ``ssl.TLSVersion`` names them. ``ssl`` (with OpenSSL, 5
#: MB resident), like ``hmac`` and ``hashlib``, is imported where TLS or users are configured
#: and not otherwise: see request.py.
_TLS_VERSIONS = {"TLS10": "TLSv1", "TLS11": "TLSv1_1", "TLS12": "TLSv1_2", "TLS13": "TLSv1_3"}

#: Go's names of the TLS 1.2 suites that crypto/tls calls secure, to OpenSSL's names.
_TLS12_CIPHERS = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
}
#: TLS 1.3 suites are not configurable in Go either; naming them is accepted and changes nothing.
_TLS13_CIPHERS = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")

_CLIENT_AUTH_TYPES = (
    "NoClientCert", "RequestClientCert", "RequireAnyClientCert", "RequireClientCert",
    "VerifyClientCertIfGiven", "RequireAndVerifyClientCert",
)

#: Headers an operator may add, and the values allowed where the header is an enumeration
#: (the same list as the exporter-toolkit, so a file valid for one is valid for the other).
_ALLOWED_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

_BCRYPT_HASH = re.compile(r"\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}")


def bcrypt_cost(hashed: bytes) -> int:
    return int(hashed[4:6])


class _Problem(Exception):
    """A bad value; carries the dotted key it was found under."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class WebConfig:
    path: str
    ssl_context: ssl.SSLContext | None = None
    #: A verified client certificate must carry one of these SAN values (None: any).
    client_allowed_sans: frozenset[str] | None = None
    #: user -> bcrypt hash; empty means no authentication.
    users: Mapping[str, bytes] = field(default_factory=dict)
    #: Checked against when the user is unknown. It has the highest cost among the users'
    #: hashes, so a wrong user name costs as much time as a wrong password (a fixed
    #: cheaper decoy would tell user names apart by timing).
    decoy_hash: bytes = b""
    auth_excluded_paths: frozenset[str] = frozenset()
    headers: tuple[tuple[str, str], ...] = ()
    #: (burst, interval seconds) of a token bucket over all requests, or None.
    rate_limit: tuple[int, float] | None = None
    #: Files whose change makes the configuration reload (the file itself first).
    watched: tuple[str, ...] = ()
    tls_summary: str = ""

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    def describe(self) -> str:
        parts = [f"TLS {self.tls_summary}" if self.tls else "TLS disabled"]
        parts.append(f"basic auth for {len(self.users)} user(s)" if self.users else "no basic auth")
        if self.rate_limit:
            parts.append(f"rate limit burst {self.rate_limit[0]} every {self.rate_limit[1]:g}s")
        return ", ".join(parts)


def plain() -> WebConfig:
    """No web configuration file: plain HTTP, no authentication."""
    return WebConfig(path="")


def load_web_config(path: str) -> WebConfig:
    """Parse and check the whole file, load certificates; ConfigError names file and key."""
    try:
        text = read_regular_file(path).decode("utf-8")
        tree = yaml.safe_load(text)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read web config file: {e.strerror or e}") from None
    except NotRegularFile as e:
        raise ConfigError(f"{path}: cannot read web config file: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: web config file is not UTF-8 text: {e.reason} at byte {e.start}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"{path}:{line} not valid YAML: {getattr(e, 'problem', e)}") from None
    try:
        return _build(path, tree)
    except _Problem as p:
        raise ConfigError(f"{path}: key {p.key!r}: {p}") from None


class NotRegularFile(Exception):
    pass


def read_regular_file(path: str) -> bytes:
    """The contents of a regular file (a symbolic link to one is fine). A FIFO, a device
    or a directory is refused: opening a FIFO for reading blocks until a writer comes,
    which would hang start-up with nothing in the log. O_NONBLOCK makes the open itself
    return at once, and fstat then judges what was opened, so no race with a swap."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{path} is {_file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def _section(tree: Any, key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if tree is None:
        return {}
    if not isinstance(tree, Mapping):
        raise _Problem(key, "must be a mapping")
    for name in tree:
        if name not in allowed:
            raise _Problem(f"{key}.{name}" if key else str(name), "unknown key")
    return dict(tree)


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise _Problem(key, f"must be a string, got {value!r}")
    return value


def _string_list(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Problem(key, "must be a list of strings")
    return [_string(v, key) for v in value]


def _build(path: str, tree: Any) -> WebConfig:
    top = _section(tree, "", _TOP_KEYS)
    base = os.path.dirname(os.path.abspath(path))
    watched = [path]

    users: dict[str, bytes] = {}
    raw_users = top.get("basic_auth_users")
    if raw_users is not None:
        if not isinstance(raw_users, Mapping):
            raise _Problem("basic_auth_users", "must be a mapping of user names to bcrypt hashes")
        for user, hashed in raw_users.items():
            key = f"basic_auth_users.{user}"
            if not isinstance(user, str) or not user or ":" in user:
                raise _Problem(key, "user names must be non-empty strings without ':'")
            m = _BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
            if m is None or not 4 <= int(m.group(1)) <= 31:
                raise _Problem(key, "not a bcrypt hash (expected $2y$<cost>$<53 characters>, e.g. from htpasswd -nBC 10)")
            users[user] = hashed.encode()
    decoy = _decoy_hash(max(bcrypt_cost(h) for h in users.values())) if users else b""

    excluded = frozenset(_string_list(top.get("auth_excluded_paths"), "auth_excluded_paths"))
    for p in excluded:
        if not p.startswith("/"):
            raise _Problem("auth_excluded_paths", f"paths must start with '/': {p!r}")

    http = _section(top.get("http_server_config"), "http_server_config", _HTTP_KEYS)
    if "http2" in http and not isinstance(http["http2"], bool):
        raise _Problem("http_server_config.http2", "must be true or false")
    headers = _headers(http.get("headers"))

    rate = _section(top.get("rate_limit"), "rate_limit", _RATE_KEYS)
    rate_limit = None
    if rate:
        rate_limit = _rate_limit(rate)

    tls = _section(top.get("tls_server_config"), "tls_server_config", _TLS_KEYS)
    context, sans, summary = _tls(tls, base, watched) if _tls_enabled(tls) else (None, None, "")

    return WebConfig(
        path=path, ssl_context=context, client_allowed_sans=sans, users=users, decoy_hash=decoy,
        auth_excluded_paths=excluded, headers=headers, rate_limit=rate_limit,
        watched=tuple(watched), tls_summary=summary,
    )


def _decoy_hash(cost: int) -> bytes:
    import bcrypt

    # A random password nobody knows, hashed once per loaded configuration.
    return bcrypt.hashpw(os.urandom(18), bcrypt.gensalt(cost))


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise _Problem("http_server_config.headers", "must be a mapping of header names to values")
    out = []
    for name, text in value.items():
        key = f"http_server_config.headers.{name}"
        allowed = _ALLOWED_HEADERS.get(name)
        if allowed is None:
            raise _Problem(key, f"this header can not be configured (allowed: {', '.join(_ALLOWED_HEADERS)})")
        text = _string(text, key)
        if allowed and text not in allowed:
            raise _Problem(key, f"must be one of {', '.join(allowed)}, got {text!r}")
        if "\r" in text or "\n" in text:
            raise _Problem(key, "must be a single line")
        out.append((name, text))
    return tuple(out)


def _rate_limit(rate: dict[str, Any]) -> tuple[int, float] | None:
    burst = rate.get("burst", 0)
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
        raise _Problem("rate_limit.burst", f"must be a non-negative integer, got {burst!r}")
    interval = rate.get("interval")
    if interval is None or interval == 0 or interval == "0s":
        return None  # an interval of zero switches rate limiting off, as in the exporter-toolkit
    try:
        seconds = parse_duration(interval)
    except ValueError as e:
        raise _Problem("rate_limit.interval", str(e)) from None
    if burst == 0:
        raise _Problem("rate_limit.burst", "must be at least 1 when rate_limit.interval is set, or no request would pass")
    return burst, seconds


def _tls_enabled(tls: dict[str, Any]) -> bool:
    return any(tls.get(k) for k in ("cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca", "client_auth_type"))


def _tls(tls: dict[str, Any], base: str, watched: list[str]) -> tuple[ssl.SSLContext, frozenset[str] | None, str]:
    cert_file = tls.get("cert_file") and os.path.join(base, _string(tls["cert_file"], "tls_server_config.cert_file"))
    key_file = tls.get("key_file") and os.path.join(base, _string(tls["key_file"], "tls_server_config.key_file"))
    cert_text = tls.get("cert") and _string(tls["cert"], "tls_server_config.cert")
    key_text = tls.get("key") and _string(tls["key"], "tls_server_config.key")
    if not cert_file and not cert_text:
        raise _Problem("tls_server_config.cert_file", "missing: TLS needs one of cert_file or cert")
    if not key_file and not key_text:
        raise _Problem("tls_server_config.key_file", "missing: TLS needs one of key_file or key")

    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = {}
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        value = tls.get(name, default)
        if value not in _TLS_VERSIONS:
            raise _Problem(f"tls_server_config.{name}", f"must be one of {', '.join(_TLS_VERSIONS)}, got {value!r}")
        versions[name] = value
    lowest, highest = (getattr(ssl.TLSVersion, _TLS_VERSIONS[versions[k]]) for k in ("min_version", "max_version"))
    if lowest > highest:
        raise _Problem("tls_server_config.min_version", f"{versions['min_version']} is above max_version {versions['max_version']}")
    try:
        context.minimum_version = lowest
        context.maximum_version = highest
    except ValueError as e:
        raise _Problem("tls_server_config.min_version", f"not supported by this OpenSSL: {e}") from None

    ciphers = _string_list(tls.get("cipher_suites"), "tls_server_config.cipher_suites")
    openssl_names = []
    for name in ciphers:
        if name in _TLS12_CIPHERS:
            openssl_names.append(_TLS12_CIPHERS[name])
        elif name not in _TLS13_CIPHERS:
            raise _Problem("tls_server_config.cipher_suites", f"unknown or insecure cipher suite {name!r}")
    if openssl_names:
        try:
            context.set_ciphers(":".join(openssl_names))
        except ssl.SSLError:
            raise _Problem("tls_server_config.cipher_suites", "none of these suites is available in this OpenSSL") from None
    prefer = tls.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise _Problem("tls_server_config.prefer_server_cipher_suites", "must be true or false")
    if prefer:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.get("curve_preferences"):
        raise _Problem("tls_server_config.curve_preferences", "not supported: Python's ssl module cannot restrict the key-exchange groups; remove it")

    _load_certificate(context, cert_file, key_file, cert_text, key_text)
    watched += [p for p in (cert_file, key_file) if p]

    auth_type = tls.get("client_auth_type") or "NoClientCert"
    if auth_type not in _CLIENT_AUTH_TYPES:
        raise _Problem("tls_server_config.client_auth_type", f"must be one of {', '.join(_CLIENT_AUTH_TYPES)}, got {auth_type!r}")
    ca_file = tls.get("client_ca_file") and os.path.join(base, _string(tls["client_ca_file"], "tls_server_config.client_ca_file"))
    ca_text = tls.get("client_ca") and _string(tls["client_ca"], "tls_server_config.client_ca")
    has_ca = bool(ca_file or ca_text)
    if has_ca and auth_type == "NoClientCert":
        raise _Problem("tls_server_config.client_auth_type", "client CAs are configured but client_auth_type is NoClientCert; set a client auth policy")
    if auth_type in ("RequireAnyClientCert", "RequireClientCert") and not has_ca:
        raise _Problem(
            "tls_server_config.client_ca_file",
            f"needed for {auth_type}: Python's TLS stack verifies every certificate it asks for",
        )
    if has_ca:
        ca_key = "tls_server_config.client_ca_file" if ca_file else "tls_server_config.client_ca"
        try:
            if ca_file:
                read_regular_file(ca_file)
                context.load_verify_locations(cafile=ca_file)
                watched.append(ca_file)
            else:
                context.load_verify_locations(cadata=ca_text)
        except FileNotFoundError:
            raise _Problem(ca_key, f"no such file: {ca_file}") from None
        except NotRegularFile as e:
            raise _Problem(ca_key, f"cannot read {e}") from None
        except (ssl.SSLError, ValueError) as e:  # before OSError: SSLError is one
            raise _Problem(ca_key, f"no PEM certificate could be loaded: {_reason(e)}") from None
        except OSError as e:
            raise _Problem(ca_key, f"cannot read {ca_file}: {e.strerror or e}") from None
        if auth_type in ("RequireAnyClientCert", "RequireClientCert", "RequireAndVerifyClientCert"):
            context.verify_mode = ssl.CERT_REQUIRED
        else:
            context.verify_mode = ssl.CERT_OPTIONAL

    sans_list = tls.get("client_allowed_sans")
    sans = None
    if sans_list is not None:
        if context.verify_mode != ssl.CERT_REQUIRED:
            raise _Problem(
                "tls_server_config.client_allowed_sans",
                "needs client_auth_type RequireAndVerifyClientCert or RequireAnyClientCert, or a client could send no certificate",
            )
        sans = frozenset(_normalize_san(s) for s in _string_list(sans_list, "tls_server_config.client_allowed_sans"))

    summary = f"{versions['min_version']}..{versions['max_version']}, client certificates: {auth_type}"
    return context, sans, summary


def _load_certificate(context: ssl.SSLContext, cert_file: str | None, key_file: str | None,
                      cert_text: str | None, key_text: str | None) -> None:
    import ssl

    for key, name in (("tls_server_config.cert_file", cert_file), ("tls_server_config.key_file", key_file)):
        if name:
            try:
                read_regular_file(name)
            except OSError as e:
                raise _Problem(key, f"cannot read {name}: {e.strerror or e}") from None
            except NotRegularFile as e:
                raise _Problem(key, f"cannot read {e}") from None
    held: list[int] = []
    try:
        # Inline PEM goes through an anonymous in-memory file: load_cert_chain only takes
        # paths, and the exporter writes nothing to disk.
        cert_path = cert_file or _memory_file(cert_text or "", held)
        key_path = key_file or _memory_file(key_text or "", held)
        # An encrypted key would make OpenSSL prompt on the terminal; an empty password
        # makes it fail instead.
        context.load_cert_chain(cert_path, key_path, password=b"")
    except (ssl.SSLError, ValueError) as e:
        raise _Problem(
            "tls_server_config.cert_file" if cert_file else "tls_server_config.cert",
            f"certificate and key do not load as a matching, unencrypted PEM pair: {_reason(e)}",
        ) from None
    finally:
        for fd in held:
            os.close(fd)


def _memory_file(text: str, held: list[int]) -> str:
    fd = os.memfd_create("gpuwait-tls", 0)
    held.append(fd)
    os.write(fd, text.encode())
    return f"/proc/self/fd/{fd}"


def _reason(e: Exception) -> str:
    return getattr(e, "reason", None) or str(e)


def _normalize_san(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value


def peer_sans(cert: Mapping[str, Any] | None) -> set[str]:
    """SAN values of a verified peer certificate as getpeercert() gives it: DNS names,
    e-mail addresses, IP addresses (normalized) and URIs."""
    values = set()
    for kind, value in (cert or {}).get("subjectAltName", ()):
        if kind == "IP Address":
            values.add(_normalize_san(value.strip()))
        elif kind in ("DNS", "email", "URI"):
            values.add(value)
    return values


class Authenticator:
    """Checks HTTP basic credentials against bcrypt hashes.

    bcrypt is slow by design. A successful check is remembered for a short while, as the
    exporter-toolkit does, so Prometheus's repeated correct password is answered without
    bcrypt and without waiting behind anyone. Only successes are remembered, one per user
    and stored hash (a hash has one password), so a flood of wrong passwords cannot push
    Prometheus's entry out; those wrong passwords take turns on at most
    ``CONCURRENT_CHECKS`` cores, shared fairly between clients (see turns.FairTurns), so
    that a check not yet remembered (the first after a start or a reload) waits for one
    turn per other client waiting, not for the whole of a flood.
    """

    #: How long a verified password is answered from memory; changing the user's hash in
    #: the web config ends it at once, as the hash is part of what is remembered.
    CACHE_SECONDS = 60.0
    CONCURRENT_CHECKS = 2
    #: Checks one client (address and user) may have waiting; past it, refused at once.
    WAITING_PER_CLIENT = 4

    def __init__(self) -> None:
        # Remembered passwords are kept as keyed digests, never as themselves.
        self._key = os.urandom(32)
        #: (user, stored hash) -> (digest of the password, expiry on the monotonic clock)
        self._verified: dict[tuple[str, bytes], tuple[bytes, float]] = {}
        self._lock = threading.Lock()
        self._bcrypt_turns = FairTurns(self.CONCURRENT_CHECKS, self.WAITING_PER_CLIENT)
        #: bcrypt checks run, for tests and debugging.
        self.bcrypt_checks = 0

    def check(self, config: WebConfig, authorization: str | None, peer: str = "",
              queued: Callable[[], None] | None = None, turn: Callable[..., bool] | None = None) -> bool:
        """``peer`` is the client's address. ``queued`` is called before waiting for a turn
        at bcrypt, ``turn`` while waiting and when the turn comes: False (the connection
        was cut meanwhile) gives up the wait, so that a cut connection lets go of its
        thread at once, not after the queue of checks ahead of it. Raises TurnsFull when
        this client already has its share of checks waiting."""
        credentials = _basic_credentials(authorization)
        if credentials is None:
            return False
        user, password = credentials
        stored = _find_user(config.users, user)
        known = stored is not None
        hashed = stored if known else config.decoy_hash
        import hashlib
        import hmac

        digest = hmac.new(self._key, b"\0".join((user.encode(), hashed, password)), hashlib.sha256).digest()
        now = time.monotonic()
        with self._lock:
            entry = self._verified.get((user, hashed))
        if entry is not None and now < entry[1] and hmac.compare_digest(entry[0], digest):
            # Sliding: Prometheus scraping more often than CACHE_SECONDS never waits for
            # bcrypt again, however many wrong passwords are queued there.
            with self._lock:
                self._verified[(user, hashed)] = (digest, now + self.CACHE_SECONDS)
            return known
        if queued is not None:
            queued()
        if not self._bcrypt_turns.acquire((peer, user), lambda: turn is None or turn(waiting=True)):
            return False
        try:
            if turn is not None and not turn(waiting=False):
                return False
            self.bcrypt_checks += 1
            try:
                import bcrypt

                ok = bcrypt.checkpw(password, hashed)
            except ValueError:
                ok = False
        finally:
            self._bcrypt_turns.release()
        if ok and known:
            with self._lock:
                self._verified[(user, hashed)] = (digest, time.monotonic() + self.CACHE_SECONDS)
                # Bounded by the users configured now: entries of users or hashes gone
                # from the file, and expired ones, are dropped.
                if len(self._verified) > len(config.users):
                    now = time.monotonic()
                    for k, (_, expiry) in list(self._verified.items()):
                        if expiry <= now or config.users.get(k[0]) != k[1]:
                            del self._verified[k]
        return ok and known


def _find_user(users: Mapping[str, bytes], user: str) -> bytes | None:
    """The user's hash; every name is compared, in constant time, so how long the search
    takes does not tell whether or where the name was found."""
    import hmac

    wanted = user.encode()
    found = None
    for name, hashed in users.items():
        if hmac.compare_digest(name.encode(), wanted):
            found = hashed
    return found


def _basic_credentials(header: str | None) -> tuple[str, bytes] | None:
    if not header:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


class RateLimiter:
    """A token bucket over all requests: ``burst`` tokens, one more every ``interval``."""

    def __init__(self, burst: int, interval: float) -> None:
        self.burst = burst
        self.interval = interval
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) / self.interval)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


class WebConfigSource:
    """The current web configuration, reloaded when the file or a file it names changes.

    Certificates are rotated in place (cert-manager, a renewal cron job), so a restart must
    not be needed. A broken new version is logged once and the last good one stays in force:
    falling back to no TLS or no authentication is never an option.
    """

    CHECK_EVERY_SECONDS = 1.0

    def __init__(self, path: str) -> None:
        self.path = path
        self._config = load_web_config(path) if path else plain()
        self._stamps = _stamps(self._config.watched)
        self._checked = time.monotonic()
        self._lock = threading.Lock()
        self._limiter: RateLimiter | None = None
        self._limiter_for: tuple[int, float] | None = None
        self.authenticator = Authenticator()

    def current(self) -> WebConfig:
        if not self.path or time.monotonic() - self._checked < self.CHECK_EVERY_SECONDS:
            return self._config
        with self._lock:
            if time.monotonic() - self._checked < self.CHECK_EVERY_SECONDS:
                return self._config
            self._checked = time.monotonic()
            stamps = _stamps(self._config.watched)
            if stamps != self._stamps:
                self._stamps = stamps
                self._reload()
            return self._config

    def _reload(self) -> None:
        try:
            fresh = load_web_config(self.path)
        except ConfigError as e:
            log.error("web config not reloaded, the previous one stays in force: %s", e)
            return
        if fresh.tls != self._config.tls:
            log.error("web config not reloaded: %s: switching TLS on or off needs a restart", self.path)
            return
        self._config = fresh
        self._stamps = _stamps(fresh.watched)
        log.info("web config reloaded from %s: %s", self.path, fresh.describe())

    def limiter(self, config: WebConfig) -> RateLimiter | None:
        if config.rate_limit != self._limiter_for:
            with self._lock:
                if config.rate_limit != self._limiter_for:
                    self._limiter = RateLimiter(*config.rate_limit) if config.rate_limit else None
                    self._limiter_for = config.rate_limit
        return self._limiter


def _stamps(paths: tuple[str, ...]) -> tuple:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)
