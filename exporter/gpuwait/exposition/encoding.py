"""The bytes of a scrape, in the Prometheus text format or OpenMetrics 1.0.0, written here
rather than by prometheus-client's encoders for the formats Prometheus asks for.

prometheus-client's encoders check, escape and sort every label of every sample, one call
each: on a 192-core node (3,700 series without the GPUs) that took 15 ms of a scrape's CPU in
the text format and 31 ms in OpenMetrics. Here a family's label order and line pattern are
worked out once, and each line is one %-format of its escaped label values and its number,
each value escaped and each number formatted once per encoding (bench/scrape_cost.py).

The output is prometheus-client's to the byte (tests/exposition compares the two on whole
expositions and on generated label values, help texts and numbers) for what gpuwait makes
(``family.Family``: counters and gauges without timestamps, exemplars or units, whose metric
and label names the catalog keeps to Prometheus's legacy names), in a format whose name
escaping leaves those names as they are. Any other format is left to prometheus-client
(``encoder_for`` answers None).

The format itself is chosen here too (``negotiate``), as prometheus-client's ``choose_encoder``
chooses it, so that the library is imported only for a format it alone writes: importing it
loads the standard library's HTTP client and server and ``ssl`` (8 to 11 MB resident,
bench/import_rss.py), which the exporter otherwise has no use for."""

from __future__ import annotations

import math
from collections.abc import Iterable
from operator import itemgetter

from gpuwait.exposition.family import Family

#: Name escapings under which a legacy name is written as it is (prometheus-client's
#: ``escape_metric_name``/``escape_label_name``): the default, and UTF-8 allowed.
_PLAIN_ESCAPINGS = ("underscores", "allow-utf-8")
#: The content types ``negotiate`` answers, as prometheus-client spells them.
TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
TEXT_1_0_0 = "text/plain; version=1.0.0; charset=utf-8"
OPENMETRICS_1_0_0 = "application/openmetrics-text; version=1.0.0; charset=utf-8"
#: The name escapings a client may ask for; any other value means the default, underscores.
_ESCAPINGS = ("allow-utf-8", "underscores", "dots", "values")
#: Backslash, newline and double quote escaped in one pass: what prometheus-client's chain of
#: replacements gives, since each character is mapped once either way.
_ESCAPES = str.maketrans({"\\": r"\\", "\n": r"\n", '"': r'\"'})


def go_float(number: float) -> str:
    """A number as Go's strconv writes it in the exposition, as prometheus-client's
    ``floatToGoString`` does: Go takes to exponents from 1e21 on where Python waits for 1e16."""
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if math.isnan(number):
        return "NaN"
    text = repr(number)
    dot = text.find(".")
    if number > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _parameter(params: list[str], key: str) -> str | None:
    """The first ``key=value`` of a media range's parameters, the value as written: how
    ``choose_encoder`` reads them (``_content_type_params`` reads a content type this module
    wrote, where every key is once and stripped)."""
    for param in params:
        name, sep, value = param.strip().partition("=")
        if sep and name == key:
            return value
    return None


def _version_at_least_1(version: str) -> bool | None:
    """Whether a version such as ``1.0.0`` is 1.0.0 or later; None where it does not compare
    (a part neither a number nor equal to 1.0.0's)."""
    parts: list[int | str] = []
    for part in version.split("."):
        try:
            parts.append(int(part))
        except ValueError:
            parts.append(part)
    try:
        return tuple(parts) >= (1, 0, 0)
    except TypeError:
        return None


def negotiate(accept: str | None) -> str:
    """The content type of the answer to an Accept header: the first OpenMetrics range
    without a version or with one from 1.0.0 on, or the first Prometheus text range with a
    version from 1.0.0 on, each with the name escaping it asks for; otherwise the text
    format 0.0.4. prometheus-client's ``choose_encoder`` answers the same (the tests compare
    the two), except that a version that does not compare skips its range instead of failing
    the request."""
    for accepted in (accept or "").split(","):
        kind, *params = accepted.split(";")
        kind = kind.strip()
        if kind not in ("application/openmetrics-text", "text/plain"):
            continue
        version = _parameter(params, "version") or ""
        escaping = _parameter(params, "escaping")
        escaping = escaping if escaping in _ESCAPINGS else "underscores"
        if kind == "application/openmetrics-text" and not version:
            return OPENMETRICS_1_0_0
        if version and _version_at_least_1(version):
            if kind == "text/plain":
                return f"{TEXT_1_0_0}; escaping={escaping}"
            return f"application/openmetrics-text; version={version}; charset=utf-8; escaping={escaping}"
    return TEXT_0_0_4


def fallback_encoder(accept: str | None):
    """prometheus-client's encoder for the same Accept header, imported only when called:
    what writes a format ``encoder_for`` leaves to the library."""

    def encode(collector) -> bytes:
        from prometheus_client.exposition import choose_encoder

        return choose_encoder(accept)[0](collector)

    return encode


def _escape_value(value: str) -> str:
    return value.translate(_ESCAPES)


def _content_type_params(content_type: str) -> tuple[str, dict[str, str]]:
    kind, *params = content_type.split(";")
    pairs = (p.strip().partition("=") for p in params)
    return kind.strip(), {k.strip(): v.strip() for k, _, v in pairs}


class _Escaped(dict):
    """Label values escaped, each once per encoding: a node's values repeat from series to
    series (a GPU's index and UUID, a pod's name, a mode)."""

    def __missing__(self, value: str) -> str:
        escaped = self[value] = value.translate(_ESCAPES)
        return escaped


class _Formatted(dict):
    """Numbers as Go writes them, each once per encoding: most are 0 and 1. (A Family holds no
    -0.0, which would share 0.0's entry.)"""

    def __missing__(self, number: float) -> str:
        text = self[number] = go_float(number)
        return text


def _lines(family: Family, out: list[str], escaped: _Escaped, formatted: _Formatted) -> None:
    """The family's sample lines, labels sorted by name as prometheus-client writes them."""
    names = family.labels
    order = sorted(range(len(names)), key=names.__getitem__)
    labels = "{" + ",".join(f'{names[i]}="%s"' for i in order) + "}" if names else ""
    pattern = family.sample_name + labels + " %s\n"
    escape, number_text = escaped.__getitem__, formatted.__getitem__
    if order == list(range(len(names))):
        out += [pattern % (*map(escape, values), number_text(number)) for values, number in family.rows]
    else:
        sort = itemgetter(*order)  # two labels or more: a tuple
        out += [pattern % (*map(escape, sort(values)), number_text(number)) for values, number in family.rows]


def encode_text(families: Iterable[Family]) -> bytes:
    """The Prometheus text format (0.0.4, and 1.0.0 with legacy names)."""
    out: list[str] = []
    escaped, formatted = _Escaped(), _Formatted()
    for family in families:
        name = family.sample_name
        help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        _lines(family, out, escaped, formatted)
    return "".join(out).encode("utf-8")


def encode_openmetrics(families: Iterable[Family]) -> bytes:
    """OpenMetrics 1.0.0, without its ``# EOF`` (the caller ends the whole body with it)."""
    out: list[str] = []
    escaped, formatted = _Escaped(), _Formatted()
    for family in families:
        out.append(f"# HELP {family.name} {_escape_value(family.documentation)}\n# TYPE {family.name} {family.type}\n")
        _lines(family, out, escaped, formatted)
    return "".join(out).encode("utf-8")


def encoder_for(content_type: str):
    """``encode_text`` or ``encode_openmetrics`` for a content type ``negotiate`` gave,
    or None where prometheus-client's own encoder must write it (another version of
    OpenMetrics, a name escaping that rewrites legacy names)."""
    kind, params = _content_type_params(content_type)
    if params.get("escaping", "underscores") not in _PLAIN_ESCAPINGS:
        return None
    if kind == "text/plain":
        return encode_text
    if kind == "application/openmetrics-text" and params.get("version") == "1.0.0":
        return encode_openmetrics
    return None
