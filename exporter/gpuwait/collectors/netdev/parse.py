"""/proc/net/dev: per network interface traffic counters.

Two header lines, then one line per interface: ``name:`` and 8 receive then 8 transmit
counters (bytes packets errs drop fifo frame compressed multicast | bytes packets errs drop
fifo colls carrier compressed). Interface names cannot hold ``:`` or whitespace, but may hold
dots and dashes (``eth0.100``, ``flannel.1``). Kernels before 2.6.31 printed the name as
``%6s:%8lu``, so a large first counter touches the colon (``eth0:1234567890``).
"""

from __future__ import annotations

from collections.abc import Callable

from gpuwait.collectors.netdev.payload import InterfaceCounters, NetDev
from gpuwait.core.errors import ParseError
from gpuwait.core.fields import parse_devices, u64s

COUNTER_FIELDS = 16


def parse_interface_counters(fields: list[str]) -> InterfaceCounters:
    """The counters after ``name:``, already split on whitespace."""
    if len(fields) < COUNTER_FIELDS:
        raise ParseError(f"{len(fields)} counters; expected {COUNTER_FIELDS}")
    # Any fields a later kernel appends come after the known ones.
    return InterfaceCounters(*u64s(fields[:COUNTER_FIELDS]))


def parse_netdev(text: str, keep: Callable[[str], bool] | None = None) -> NetDev:
    """Every interface whose name ``keep`` accepts (all without ``keep``).

    A line that does not parse is listed in ``malformed`` and costs only that interface; the
    whole text is rejected (ParseError) when its header is not /proc/net/dev's, or when it
    has malformed lines and no good one.
    """
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("Inter-") or not lines[1].lstrip().startswith("face"):
        raise ParseError("no /proc/net/dev header")
    interfaces, malformed = parse_devices(_named_lines(lines), _parse_counter_text, keep, "interface")
    return NetDev(interfaces, malformed)


def _parse_counter_text(rest: str) -> InterfaceCounters:
    return parse_interface_counters(rest.split())


def _named_lines(lines: list[str]):
    for lineno, line in enumerate(lines[2:], 3):
        name, colon, rest = line.partition(":")
        name = name.strip()
        if colon and name and len(name.split()) == 1:
            yield name, rest
        elif line.strip():
            yield f"line {lineno}", None
