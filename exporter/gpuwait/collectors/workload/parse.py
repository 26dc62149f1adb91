"""Workload records written by gpuwait.client (one file per instrumented process); the
format is the client's, so its header and kinds are the client's constants."""

from __future__ import annotations

import math

from gpuwait.client import HEADER, KINDS
from gpuwait.collectors.workload.payload import WorkloadRecord
from gpuwait.core.errors import ParseError

_INTS = ("pid", "starttime", "instance", "rank", "steps", "samples", "requests")
_FLOATS = ("at", "interval", "data_seconds", "compute_seconds", "comm_seconds")


def parse_record(text: str) -> WorkloadRecord:
    """One record file. Unknown keys are ignored (a newer client may add some); every known
    one must be present and sane."""
    lines = text.split("\n")
    if not lines or lines[0].strip() != HEADER:
        raise ParseError(f"not a workload record (first line {lines[0][:40]!r})" if lines else "empty record")
    values: dict[str, str] = {}
    for line in lines[1:]:
        key, _, value = line.strip().partition(" ")
        if key:
            values[key] = value.strip()
    out: dict[str, object] = {}
    for key in _INTS:
        try:
            out[key] = int(values[key])
        except KeyError:
            raise ParseError(f"record lacks {key}") from None
        except ValueError:
            raise ParseError(f"{key} is not an integer: {values[key][:40]!r}") from None
    for key in _FLOATS:
        try:
            number = float(values[key])
        except KeyError:
            raise ParseError(f"record lacks {key}") from None
        except ValueError:
            raise ParseError(f"{key} is not a number: {values[key][:40]!r}") from None
        if not math.isfinite(number):
            raise ParseError(f"{key} is not finite")
        out[key] = number
    for key in ("pid", "steps", "samples", "requests", "data_seconds", "compute_seconds", "comm_seconds"):
        if out[key] < 0:
            raise ParseError(f"{key} is negative")
    if out["pid"] == 0:
        raise ParseError("pid 0")
    kind = values.get("kind", "")
    if kind not in KINDS:
        raise ParseError(f"unknown kind {kind[:40]!r}")
    job = values.get("job", "-")
    return WorkloadRecord(kind=kind, job="" if job == "-" else job, **out)  # type: ignore[arg-type]
