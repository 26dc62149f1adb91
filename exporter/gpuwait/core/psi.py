"""The pressure stall information (PSI) format: /proc/pressure/<resource> (kernel 4.20+) and
every cgroup v2 <resource>.pressure file (Documentation/accounting/psi.rst, "Cgroup2 interface").

Each line is ``<scope> avg10=N.NN avg60=N.NN avg300=N.NN total=<microseconds>``. ``some`` is the
time at least one task was stalled on the resource, ``full`` the time all non-idle tasks were
stalled at once. cpu has no ``full`` line before 5.13; irq (6.1+) has only ``full``. Shared by
the pressure collector (the system's) and the cgroup collector (each owner's cgroup).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwait.core.errors import ParseError
from gpuwait.core.fields import u64

SCOPES = ("some", "full")
_AVERAGES = ("avg10", "avg60", "avg300")


@dataclass(frozen=True, slots=True)
class PressureLine:
    #: Kernel's own running averages, in percent of wall time (0-100).
    avg10: float
    avg60: float
    avg300: float
    #: Cumulative stalled time since boot, seconds.
    total_seconds: float


def _percent(text: str) -> float:
    # The kernel prints "%lu.%02lu"; float() alone would also take "nan", "1e3" or "1_0".
    whole, dot, frac = text.partition(".")
    if not (whole.isascii() and whole.isdigit() and len(whole) <= 3 and (not dot or (frac.isascii() and frac.isdigit()))):
        raise ParseError(f"not a percentage: {text!r}")
    value = float(text)
    if value > 100.0:
        raise ParseError(f"percentage above 100: {text!r}")
    return value


def parse_pressure(text: str) -> dict[str, PressureLine]:
    """{"some": PressureLine, "full": PressureLine} for the scopes present (at least one)."""
    lines: dict[str, PressureLine] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        scope = parts[0]
        if scope not in SCOPES:
            raise ParseError(f"line {lineno}: unknown scope {scope!r}")
        if scope in lines:
            raise ParseError(f"line {lineno}: scope {scope} listed twice")
        fields: dict[str, str] = {}
        for item in parts[1:]:
            key, eq, value = item.partition("=")
            if not eq or not key or key in fields:
                raise ParseError(f"line {lineno}: bad field {item!r}")
            fields[key] = value
        missing = [k for k in (*_AVERAGES, "total") if k not in fields]
        if missing:
            raise ParseError(f"line {lineno}: missing {', '.join(missing)}")
        try:
            avg10, avg60, avg300 = (_percent(fields[k]) for k in _AVERAGES)
            total_us = u64(fields["total"])
        except ParseError as e:
            raise ParseError(f"line {lineno}: {e}") from None
        lines[scope] = PressureLine(avg10, avg60, avg300, total_us / 1e6)
    if not lines:
        raise ParseError("no some or full line")
    return lines
