"""One-value files of /sys/class/infiniband/<device>/ports/<n>/ (drivers/infiniband/core/sysfs.c).

``state`` and ``phys_state`` print ``"%d: %s"`` (``4: ACTIVE``, ``5: LinkUp``, ``7: Phy Test``).
``rate`` prints ``"%d%s Gb/sec (%dX%s)"``: the data rate in Gb/s with an optional ``.5``, the
lane count and the lane speed (``400 Gb/sec (4X NDR)``, ``2.5 Gb/sec (1X SDR)``); kernels before
the speed names covered SDR printed no name for it (``10 Gb/sec (4X)``). Ethernet (RoCE) ports
report their Ethernet speed in the same form (``100 Gb/sec (4X EDR)`` for 100GbE). Counter files
hold one unsigned decimal, or ``N/A (no PMA)`` when the driver has no performance-management
agent to ask.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwait.core.errors import ParseError
from gpuwait.core.fields import u64

#: Data counters count 4-octet words (IBTA PortXmitData/PortRcvData).
DATA_WORD_BYTES = 4
#: What a counter file holds when the driver cannot query the port's performance counters.
NOT_AVAILABLE_PREFIX = "N/A"

#: IB PortState values (IBTA 14.2.5.6); 5 is the kernel's ACTIVE_DEFER.
PORT_STATE_ACTIVE = 4
PORT_STATE_ACTIVE_DEFER = 5


@dataclass(frozen=True, slots=True)
class NumberedState:
    """A ``state`` or ``phys_state`` line: the number the port reported and the kernel's name."""

    value: int
    name: str


@dataclass(frozen=True, slots=True)
class LinkRate:
    gigabits_per_second: float
    #: Lanes: 1, 2, 4, 8 or 12.
    width: int
    #: Lane speed name (SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR); "" from old kernels for SDR.
    speed: str

    @property
    def bytes_per_second(self) -> float:
        return self.gigabits_per_second * 1e9 / 8


def _one_line(text: str, what: str) -> str:
    line = text.strip()
    if not line:
        raise ParseError(f"empty {what}")
    if "\n" in line:
        raise ParseError(f"{what} has more than one line: {line[:60]!r}")
    return line


def parse_numbered_state(text: str) -> NumberedState:
    """``"4: ACTIVE"`` -> NumberedState(4, "ACTIVE")."""
    line = _one_line(text, "state")
    number, sep, name = line.partition(":")
    if not sep:
        raise ParseError(f"state without 'N: NAME' form: {line[:60]!r}")
    number = number.strip()
    if not (number.isascii() and number.isdigit()) or len(number) > 3:
        raise ParseError(f"state number is not a small unsigned integer: {number[:20]!r}")
    name = name.strip()
    if not name:
        raise ParseError(f"state {number} has no name")
    return NumberedState(int(number), name)


def is_active(state: int) -> bool:
    """Whether a logical port state can carry traffic (ACTIVE, or ACTIVE_DEFER)."""
    return state in (PORT_STATE_ACTIVE, PORT_STATE_ACTIVE_DEFER)


def parse_rate(text: str) -> LinkRate:
    """``"400 Gb/sec (4X NDR)"`` -> LinkRate(400.0, 4, "NDR")."""
    line = _one_line(text, "rate")
    head, sep, tail = line.partition(" Gb/sec (")
    if not sep or not tail.endswith(")"):
        raise ParseError(f"rate not in 'N Gb/sec (WX SPEED)' form: {line[:60]!r}")
    whole, dot, half = head.partition(".")
    if not (whole.isascii() and whole.isdigit()) or len(whole) > 6 or (dot and half != "5"):
        raise ParseError(f"rate value is not N or N.5: {head[:20]!r}")
    gigabits = int(whole) + (0.5 if dot else 0.0)
    lanes, _, speed = tail[:-1].partition(" ")
    if not lanes.endswith("X") or not (lanes[:-1].isascii() and lanes[:-1].isdigit()) or len(lanes) > 3:
        raise ParseError(f"link width is not 'NX': {lanes[:20]!r}")
    width = int(lanes[:-1])
    if width == 0:
        raise ParseError("link width 0X")
    if speed and not (speed.isascii() and speed.isalnum()):
        raise ParseError(f"lane speed name is not a word: {speed[:20]!r}")
    return LinkRate(gigabits, width, speed)


def parse_counter(text: str) -> int | None:
    """A port or hardware counter; None when the driver says it is not available."""
    value = text.strip()
    if value.startswith(NOT_AVAILABLE_PREFIX):
        return None
    return u64(value)


def parse_name(text: str, what: str) -> str:
    """A one-line attribute (link_layer, node_guid, fw_ver, hca_type, board_id)."""
    line = _one_line(text, what)
    if len(line) > 256 or not line.isprintable():
        raise ParseError(f"{what} is not a printable line of at most 256 characters")
    return line


def parse_netdev_name(text: str) -> str:
    """A network interface name as the kernel allows it: 1-15 bytes, no '/', ':' or whitespace."""
    name = _one_line(text, "netdev name")
    if len(name.encode()) > 15 or any(c in name for c in "/:") or any(c.isspace() for c in name) or name in (".", ".."):
        raise ParseError(f"not a network interface name: {name[:40]!r}")
    return name
