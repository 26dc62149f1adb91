"""The bytes of a scrape, in the Prometheus text format or OpenMetrics 1.0.0, written here
rather than by prometheus-client's encoders for the formats Prometheus asks for.

prometheus-client's encoders check, escape and sort every label of every sample, one call
each: on a 192-core node (3,700 series without the GPUs) that took 15 ms of a scrape's CPU in
the text format and 31 ms in OpenMetrics, where building the families took 8 ms. Here a
family's label order and line pattern are worked out once, and each line is one %-format
of its escaped label values and its number (bench/scrape_cost.py).

The output is prometheus-client's to the byte (tests/exposition compares the two on whole
expositions and on generated label values, help texts and numbers), for the families
gpuwait makes: counters and gauges without timestamps, exemplars or units, whose metric and
label names are Prometheus's legacy names, in a format whose name escaping leaves those as
they are. Anything else is left to prometheus-client (``encoder_for`` answers None)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from operator import attrgetter

from prometheus_client.core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

#: Name escapings under which a legacy name is written as it is (prometheus-client's
#: ``escape_metric_name``/``escape_label_name``): the default, and UTF-8 allowed.
_PLAIN_ESCAPINGS = ("underscores", "allow-utf-8")
_LEGACY_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
#: Backslash, newline and double quote escaped in one pass: what prometheus-client's chain of
#: replacements gives, since each character is mapped once either way.
_ESCAPES = str.maketrans({"\\": r"\\", "\n": r"\n", '"': r'\"'})


def _escape_value(value: str) -> str:
    return value.translate(_ESCAPES)


def _content_type_params(content_type: str) -> tuple[str, dict[str, str]]:
    kind, *params = content_type.split(";")
    pairs = (p.strip().partition("=") for p in params)
    return kind.strip(), {k.strip(): v.strip() for k, _, v in pairs}


_name = attrgetter("name")
_labels = attrgetter("labels")
_unset = frozenset({None})
#: what a sample may carry that is not written here (attributes of newer prometheus-clients too)
_EXTRAS = tuple(attrgetter(field) for field in ("timestamp", "exemplar", "native_histogram") if field in Sample._fields)


def _writable(metric: Metric) -> bool:
    """A family of the shape written here; any other goes to prometheus-client's encoder."""
    if metric.type not in ("counter", "gauge") or metric.unit or not _LEGACY_NAME.match(metric.name):
        return False
    samples = metric.samples
    if not samples:
        return True
    # A _created sample, which the text format puts in a family of its own, is another name.
    if set(map(_name, samples)) != {metric.name + "_total" if metric.type == "counter" else metric.name}:
        return False
    if any(not set(map(extra, samples)) <= _unset for extra in _EXTRAS):
        return False
    return all(_LEGACY_LABEL.match(label) for names in set(map(tuple, map(_labels, samples))) for label in names)


class _Escaped(dict):
    """Label values escaped, each once per encoding: a node's values repeat from series to
    series (a GPU's index and UUID, a pod's name, a mode)."""

    def __missing__(self, value: str) -> str:
        escaped = self[value] = value.translate(_ESCAPES)
        return escaped


def _lines(metric: Metric, out: list[str], escaped: _Escaped) -> None:
    """The family's sample lines: labels sorted by name, as prometheus-client writes them. The
    order is worked out once per family (again for a sample with other labels than the last)
    and each line made by one %-format."""
    pattern, names, keys = "", (), None
    escape = escaped.__getitem__
    for sample in metric.samples:
        labels = sample[1]
        if labels.keys() != keys:
            keys = labels.keys()
            names = sorted(keys)
            pattern = sample[0] + ("{" + ",".join(f'{n}="%s"' for n in names) + "}" if names else "") + " %s\n"
        out.append(pattern % (*map(escape, map(labels.__getitem__, names)), floatToGoString(sample[2])))


def encode_text(metrics: Iterable[Metric], fallback: Callable[[list[Metric]], bytes]) -> bytes:
    """The Prometheus text format (0.0.4, and 1.0.0 with legacy names)."""
    out: list[str] = []
    escaped = _Escaped()
    for metric in metrics:
        if not _writable(metric):
            out.append(fallback([metric]).decode("utf-8"))
            continue
        name = metric.name + "_total" if metric.type == "counter" else metric.name
        help_text = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {metric.type}\n")
        _lines(metric, out, escaped)
    return "".join(out).encode("utf-8")


def encode_openmetrics(metrics: Iterable[Metric], fallback: Callable[[list[Metric]], bytes]) -> bytes:
    """OpenMetrics 1.0.0, without its ``# EOF`` (the caller ends the whole body with it)."""
    out: list[str] = []
    escaped = _Escaped()
    for metric in metrics:
        if not _writable(metric):
            block = fallback([metric]).decode("utf-8")
            out.append(block[: -len("# EOF\n")] if block.endswith("# EOF\n") else block)
            continue
        out.append(f"# HELP {metric.name} {_escape_value(metric.documentation)}\n# TYPE {metric.name} {metric.type}\n")
        _lines(metric, out, escaped)
    return "".join(out).encode("utf-8")


def encoder_for(content_type: str):
    """``encode_text`` or ``encode_openmetrics`` for a content type ``choose_encoder`` gave,
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
