"""NCCL Inspector's dump files, parsed: the JSON lines of its default mode and the text files
of its Prometheus mode (NCCL_INSPECTOR_PROM_DUMP=1). Pure functions of the text; the reader
(source.py) tails the files and hands over complete lines or whole files.

The formats, as NVIDIA/nccl writes them (plugins/profiler/inspector/, ext-profiler/inspector/
before NCCL 2.29.7):

* JSON: one object per completed operation and line, ``{"header": {"id", "comm_name", "rank",
  "n_ranks", "nnodes"}, "metadata": {"inspector_output_format_version", "git_rev",
  "rec_mechanism", "dump_timestamp_us", "hostname", "pid"}, "coll_perf": {"coll", "coll_sn",
  "coll_msg_size_bytes", "coll_exec_time_us", "coll_timing_source", "coll_algobw_gbs",
  "coll_busbw_gbs", ...}}``; point-to-point operations (NCCL 2.30) carry ``p2p_perf`` with
  ``p2p_``-prefixed keys instead. Every release so far writes format version "v4.0". A bus
  bandwidth without a value is written as the string "nan".
* Prometheus text, two generations. Up to NCCL 2.29 one sample set per communicator (its
  latest collective), labelled ``comm_id``, ``rank``, ``nranks``, ``n_nodes``, ``hostname``,
  ``gpu_device_id="GPU<n>"``, ``collective``, ``coll_sn``, ``timestamp``, ``message_size``
  ("2.00GB"). From NCCL 2.30 buckets per communicator name, operation, message size range and
  algorithm, labelled ``version="v<profiler API>.<format minor>"``, ``node``, ``gpu``,
  ``comm_name``, ``nranks``, ``n_nodes``, ``collective`` or ``p2p_operation``, ``message_size``
  ("4-5GB", the range's lower bound in 1024-based units), with the mean execution time and the
  geometric mean bus bandwidth of the operations completed in the last dump interval.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from gpuwait.core.errors import ParseError

#: ``metadata.inspector_output_format_version`` values whose fields are the ones read here.
JSON_FORMAT_VERSIONS = frozenset({"v4.0"})
#: The format minor of the Prometheus ``version`` label ("v5.1": profiler API 5, format 1);
#: the major is the NCCL profiler plugin API the plugin was built against, not the format.
PROM_FORMAT_MINORS = frozenset({1})
COLLECTIVE, P2P = "collective", "p2p"
#: A verbose record (NCCL_INSPECTOR_DUMP_VERBOSE=1) lists every channel's kernel events, two
#: objects of about 100 bytes per channel; NCCL's 64 channels (MAXCHANNELS) come to ~13 KB.
#: A longer "line" is not a record, and holding it would cost memory per file.
MAX_LINE_BYTES = 64 * 1024
_MAX_TEXT = 256

_SIZE = re.compile(r"(\d+(?:\.\d+)?)(?:-\d+(?:\.\d+)?)?(B|KB|MB|GB|TB)")
_SIZE_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_DEVICE = re.compile(r"GPU(\d{1,4})")
_VERSION = re.compile(r"v(\d{1,4})\.(\d{1,4})")
_PROM_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(\{.*\})?[ \t]*([^ \t]+)(?:[ \t]+(-?\d{1,20}))?")
_PROM_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,|$)')
_PROM_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
#: json.loads without its per-call detection of the text's encoding: dump files are UTF-8
_DECODE = json.JSONDecoder().decode


class UnsupportedFormat(ParseError):
    """A record of a format version this parser does not know: well-formed, but its fields
    may mean something else, so it is counted and skipped rather than read."""


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs a setattr call per field
class Operation:
    """One completed NCCL operation (JSON mode), or one bucket or latest-collective sample set
    of a Prometheus file, which stands for operations whose count the file does not give."""

    kind: str  # COLLECTIVE or P2P
    op: str  # "AllReduce", "Send", ...
    #: the communicator's hash (JSON header.id, Prometheus comm_id); the communicator's name
    #: where the file gives only that (Prometheus buckets)
    comm: str
    comm_name: str
    #: -1 when the file does not give it
    rank: int
    n_ranks: int
    n_nodes: int | None
    #: the writer's getpid() (its own pid namespace); 0 when the file does not give it
    pid: int
    hostname: str
    #: the CUDA device ordinal the process used, when given
    device: int | None
    seq: int | None
    msg_bytes: float
    exec_seconds: float
    #: GB/s (1e9 bytes per second); None when the writer had none
    bus_gbs: float | None
    timing_source: str
    #: wall time (seconds since the epoch) the record was written, when given
    unix: float | None


@dataclass(frozen=True, slots=True)
class JsonLines:
    operations: list[Operation] = field(default_factory=list)
    malformed: int = 0
    unsupported: int = 0
    #: the bytes after the last newline: a line still being written, for the next read
    rest: bytes = b""


def parse_json_lines(data: bytes) -> JsonLines:
    """Every complete line of ``data`` (a chunk of a dump file); the unfinished last line is
    returned, not parsed. Blank lines are ignored; a line that is not a record counts as
    malformed, a record of an unknown format version as unsupported."""
    *lines, rest = data.split(b"\n")
    out: list[Operation] = []
    malformed = unsupported = 0
    for line in lines:
        # A file truncated under a writer that does not append (logrotate's copytruncate)
        # gets a hole of NUL bytes before the writer's next line.
        line = line.strip(b"\0 \t\r")
        if not line:
            continue
        try:
            out.append(parse_json_record(line))
        except UnsupportedFormat:
            unsupported += 1
        except ParseError:
            malformed += 1
    return JsonLines(out, malformed, unsupported, rest)


def parse_json_record(line: bytes | str) -> Operation:
    """One JSON line. Unknown fields are ignored; the ones read must have their documented
    types and sane values."""
    if len(line) > MAX_LINE_BYTES:
        raise ParseError(f"line of {len(line)} bytes is not a record")
    try:
        obj = _DECODE(line.decode("utf-8") if isinstance(line, bytes) else line)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ParseError(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ParseError("not a JSON object")
    header, metadata = _object(obj, "header"), _object(obj, "metadata")
    version = metadata.get("inspector_output_format_version")
    if not isinstance(version, str):
        raise ParseError("metadata has no inspector_output_format_version")
    if version not in JSON_FORMAT_VERSIONS:
        raise UnsupportedFormat(f"format version {version[:20]!r}")
    if isinstance(obj.get("coll_perf"), dict):
        kind, prefix, perf = COLLECTIVE, "coll", obj["coll_perf"]
    elif isinstance(obj.get("p2p_perf"), dict):
        kind, prefix, perf = P2P, "p2p", obj["p2p_perf"]
    else:
        raise ParseError("record has neither coll_perf nor p2p_perf")
    n_ranks = _integer(header, "n_ranks", minimum=1)
    rank = _integer(header, "rank")
    if rank >= n_ranks:
        raise ParseError(f"rank {rank} of {n_ranks}")
    stamp = _integer(metadata, "dump_timestamp_us", required=False)
    return Operation(
        kind=kind,
        op=_text(perf, prefix),
        comm=_text(header, "id"),
        comm_name=_text(header, "comm_name", required=False),
        rank=rank,
        n_ranks=n_ranks,
        n_nodes=_integer(header, "nnodes", minimum=1, required=False),
        pid=_integer(metadata, "pid", minimum=1),
        hostname=_text(metadata, "hostname", required=False),
        device=_json_device(header.get("gpu_device_id", metadata.get("gpu_device_id"))),
        seq=_integer(perf, f"{prefix}_sn", required=False),
        msg_bytes=_number(perf, f"{prefix}_msg_size_bytes"),
        exec_seconds=_number(perf, f"{prefix}_exec_time_us") / 1e6,
        bus_gbs=_bandwidth(perf.get(f"{prefix}_busbw_gbs")),
        timing_source=_text(perf, f"{prefix}_timing_source", required=False),
        unix=stamp / 1e6 if stamp is not None else None,
    )


def _object(obj: dict, key: str) -> dict:
    value = obj.get(key)
    if not isinstance(value, dict):
        raise ParseError(f"record has no {key} object")
    return value


def _integer(obj: dict, key: str, minimum: int = 0, required: bool = True) -> int | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"{key} is not an integer: {str(value)[:40]!r}")
    if value < minimum or value >= 1 << 64:
        raise ParseError(f"{key} out of range: {value}")
    return value


def _number(obj: dict, key: str) -> float:
    number = _finite(obj.get(key))
    if number is None:
        raise ParseError(f"{key} is not a finite number >= 0: {str(obj.get(key))[:40]!r}")
    return number


def _finite(value) -> float | None:
    """A JSON number as a finite float >= 0, or None (an integer literal too large for a
    float, a negative one, anything that is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _text(obj: dict, key: str, required: bool = True) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ParseError(f"{key} is not a string: {str(value)[:40]!r}")
    return value[:_MAX_TEXT]


def _bandwidth(value) -> float | None:
    if value is None or value == "nan":
        return None
    number = _finite(value)
    if number is None:
        raise ParseError(f"bus bandwidth is not a number >= 0: {str(value)[:40]!r}")
    return number


def _json_device(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10_000:
        return value
    if isinstance(value, str):
        return device_ordinal(value)
    raise ParseError(f"gpu_device_id is not a device: {str(value)[:40]!r}")


def device_ordinal(text: str) -> int:
    """"GPU4" (the plugin's spelling of CUDA device ordinal 4), or a bare "4"."""
    match = _DEVICE.fullmatch(text)
    if match is not None:
        return int(match.group(1))
    if text.isascii() and text.isdigit() and len(text) <= 4:
        return int(text)
    raise ParseError(f"not a device: {text[:40]!r}")


def message_bytes(text: str) -> float:
    """"2.00GB" or the range "4-5GB" (its lower bound), in the plugin's 1024-based units."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ParseError(f"not a message size: {text[:40]!r}")
    return float(match.group(1)) * _SIZE_UNITS[match.group(2)]


# -- Prometheus mode ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PromSample:
    name: str
    labels: dict[str, str]
    value: float


def parse_prom_text(text: str) -> list[PromSample]:
    """The Prometheus text exposition format's sample lines (comments and blank lines
    skipped; a timestamp, if any, ignored)."""
    samples = []
    for number, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _PROM_LINE.fullmatch(line)
        if match is None:
            raise ParseError(f"line {number}: not a sample: {line[:60]!r}")
        name, labels, value = match.group(1), match.group(2), match.group(3)
        try:
            number_value = float(value)
        except ValueError:
            raise ParseError(f"line {number}: not a value: {value[:40]!r}") from None
        samples.append(PromSample(name, _prom_labels(labels[1:-1], number) if labels else {}, number_value))
    return samples


def _prom_labels(text: str, number: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        match = _PROM_LABEL.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip(" \t") == "":
                break
            raise ParseError(f"line {number}: bad label at {text[pos:pos + 40]!r}")
        name = match.group(1)
        if name in labels:
            raise ParseError(f"line {number}: label {name} twice")
        labels[name] = re.sub(r"\\.", lambda m: _PROM_ESCAPES.get(m.group(0), m.group(0)), match.group(2))
        pos = match.end()
    return labels


#: Inspector metric name -> (operation kind, what the value is)
PROM_METRICS = {
    "nccl_collective_exec_time_microseconds": (COLLECTIVE, "exec_us"),
    "nccl_bus_bandwidth_gbs": (COLLECTIVE, "bus_gbs"),
    "nccl_algorithm_bandwidth_gbs": (COLLECTIVE, "algo_gbs"),
    "nccl_p2p_exec_time_microseconds": (P2P, "exec_us"),
    "nccl_p2p_bus_bandwidth_gbs": (P2P, "bus_gbs"),
}


@dataclass(frozen=True, slots=True)
class PromOperations:
    operations: list[Operation] = field(default_factory=list)
    malformed: int = 0
    unsupported: int = 0


def prom_operations(samples: list[PromSample], unix: float | None = None) -> PromOperations:
    """The Inspector sample sets of one Prometheus file, one Operation per label set (a
    bucket, or a communicator's latest collective). ``unix`` is when the file was written:
    the time of the bucketed format's samples, which carry none themselves. Samples of other
    exporters' metrics (a node_exporter textfile directory holds those too) are ignored."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, float]] = {}
    for sample in samples:
        known = PROM_METRICS.get(sample.name)
        if known is not None:
            kind, what = known
            groups.setdefault((kind, tuple(sorted(sample.labels.items()))), {})[what] = sample.value
    out = []
    malformed = unsupported = 0
    for (kind, labels), values in sorted(groups.items()):
        try:
            out.append(_prom_operation(kind, dict(labels), values, unix))
        except UnsupportedFormat:
            unsupported += 1
        except ParseError:
            malformed += 1
    return PromOperations(out, malformed, unsupported)


def _prom_operation(kind: str, labels: dict[str, str], values: dict[str, float], unix: float | None) -> Operation:
    exec_us = values.get("exec_us")
    if exec_us is None or not (math.isfinite(exec_us) and exec_us >= 0):
        raise ParseError("no execution time")
    bus = values.get("bus_gbs")
    bus = bus if bus is not None and math.isfinite(bus) and bus >= 0 else None
    op = labels.get("collective" if kind == COLLECTIVE else "p2p_operation", "")
    if "version" in labels:
        version = _VERSION.fullmatch(labels["version"])
        if version is None or int(version.group(2)) not in PROM_FORMAT_MINORS:
            raise UnsupportedFormat(f"version {labels['version'][:20]!r}")
        comm_name = labels.get("comm_name", "")
        return Operation(
            kind=kind, op=op[:_MAX_TEXT], comm=comm_name[:_MAX_TEXT], comm_name=comm_name[:_MAX_TEXT], rank=-1,
            n_ranks=_label_int(labels, "nranks", 1), n_nodes=_label_int(labels, "n_nodes", 1),
            pid=0, hostname=labels.get("node", "")[:_MAX_TEXT], device=_label_device(labels, "gpu"), seq=None,
            msg_bytes=message_bytes(labels.get("message_size", "")), exec_seconds=exec_us / 1e6, bus_gbs=bus,
            timing_source="", unix=unix,
        )
    if "comm_id" in labels:
        # The README of this generation names the labels pid, n_ranks and coll_timing_source;
        # the code writes nranks and neither of the others. Both spellings are read.
        n_ranks = _label_int(labels, "nranks" if "nranks" in labels else "n_ranks", 1)
        rank = _label_int(labels, "rank", 0)
        if rank >= n_ranks:
            raise ParseError(f"rank {rank} of {n_ranks}")
        return Operation(
            kind=kind, op=op[:_MAX_TEXT], comm=labels["comm_id"][:_MAX_TEXT], comm_name="", rank=rank, n_ranks=n_ranks,
            n_nodes=_label_int(labels, "n_nodes", 1), pid=_label_int(labels, "pid", 1) if "pid" in labels else 0,
            hostname=labels.get("hostname", "")[:_MAX_TEXT], device=_label_device(labels, "gpu_device_id"),
            seq=_label_int(labels, "coll_sn", 0) if "coll_sn" in labels else None,
            msg_bytes=message_bytes(labels.get("message_size", "")), exec_seconds=exec_us / 1e6, bus_gbs=bus,
            timing_source=labels.get("coll_timing_source", "")[:_MAX_TEXT],
            unix=_label_time(labels["timestamp"]) if "timestamp" in labels else unix,
        )
    raise UnsupportedFormat("neither a version nor a comm_id label")


def _label_int(labels: dict[str, str], key: str, minimum: int) -> int:
    text = labels.get(key, "")
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) < minimum:
        raise ParseError(f"label {key} is not an integer >= {minimum}: {text[:40]!r}")
    return int(text)


def _label_device(labels: dict[str, str], key: str) -> int | None:
    text = labels.get(key)
    if text is None or text == "unknown":
        return None
    return device_ordinal(text)


def _label_time(text: str) -> float:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise ParseError(f"not a UTC time: {text[:40]!r}") from None
