"""/proc/net/dev: per network interface traffic counters.

Two header lines, then one line per interface: ``name:`` and 8 receive then 8 transmit
counters (bytes packets errs drop fifo frame compressed multicast | bytes packets errs drop
fifo colls carrier compressed). Interface names cannot hold ``:`` or whitespace, but may hold
dots and dashes (``eth0.100``, ``flannel.1``). Kernels before 2.6.31 printed the name as
``%6s:%8lu``, so a large first counter touches the colon (``eth0:1234567890``).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain

from gpuwait.collectors.netdev.payload import InterfaceCounters, NetDev
from gpuwait.core.errors import ParseError
from gpuwait.core.fields import DeviceTable, counter_columns, parse_devices, u64s

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
    table = interface_table(lines[2:], keep)
    if table is not None:
        return NetDev(table)
    interfaces, malformed = parse_devices(_named_lines(lines), _parse_counter_text, keep, "interface")
    return NetDev(interfaces, malformed)


def interface_table(lines: list[str], keep: Callable[[str], bool] | None = None
                    ) -> DeviceTable[InterfaceCounters] | None:
    """``parse_netdev`` of the lines after the header in the shape every kernel prints, in one
    pass over them all; None for any other, which ``parse_netdev`` then reads line by line.

    What it takes as the usual shape: every line a name, a colon and the 16 counters, each an
    unsigned 64-bit decimal, every name listed once; then the counters are laid out with a
    fixed stride and each is a slice, converted in C, where a line at a time costs a check, a
    list and an InterfaceCounters per interface."""
    if not lines:
        return None
    parts = [line.partition(":") for line in lines]
    names = [name.strip() for name, _, _ in parts]
    # Every name one word: a blank one leaves a gap that the split of the joined names closes,
    # one of several words splits apart. (A line without its colon has one of several words,
    # or nothing after it.)
    if " ".join(names).split() != names or len(set(names)) != len(names):
        return None
    rows = [rest.split() for _, _, rest in parts]
    if any(len(row) != COUNTER_FIELDS for row in rows):
        return None
    counted = counter_columns(names, list(chain.from_iterable(rows)), COUNTER_FIELDS, keep)
    if counted is None:
        return None
    return DeviceTable(*counted, InterfaceCounters)


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
