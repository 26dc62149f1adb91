"""Pieces shared by the parsers of line-per-device pseudo-files.

``int()`` alone accepts what no kernel prints ("1_000", " 7", "-3", Unicode digits) and
turns a 5000-digit token into a ValueError with a different message, so counters are checked
as what they are: unsigned decimal integers that fit the kernel's widest type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from gpuwait.core.errors import ParseError

U64_MAX = (1 << 64) - 1

T = TypeVar("T")
P = TypeVar("P")


def u64s(tokens: list[str]) -> list[int]:
    """Unsigned 64-bit decimal counters, or ParseError. The checks run over all tokens at
    once, in C loops: per-device lines are read ten times a second."""
    digits = "".join(tokens)
    if not (digits.isascii() and digits.isdigit()) or max(map(len, tokens), default=0) > 20:
        raise ParseError(f"not unsigned 64-bit integers: {' '.join(tokens)[:80]!r}")
    try:
        values = list(map(int, tokens))
    except ValueError:  # an empty token hides in the joined digits
        raise ParseError(f"empty field among {len(tokens)}") from None
    if values and max(values) > U64_MAX:
        raise ParseError("counter larger than 64 bits")
    return values


def u64(token: str) -> int:
    """One unsigned 64-bit decimal counter, or ParseError."""
    return u64s([token])[0]


def parse_devices(
    lines: Iterable[tuple[str, P | None]],
    parse: Callable[[P], T],
    keep: Callable[[str], bool] | None,
    what: str,
) -> tuple[dict[str, T], tuple[str, ...]]:
    """({name: parsed}, malformed names) from (name, payload) per line.

    A line whose payload is None had no recognisable name: ``name`` then says where it was
    ("line 7") and the line counts as malformed, whatever ``keep`` says. A device listed
    twice is dropped whole: which line is the device is unknowable, and two series with one
    label set would make the whole exposition invalid. Raises ParseError only when nothing
    parsed and something was malformed: then the text is not the format at all.
    """
    devices: dict[str, T] = {}
    malformed: list[str] = []
    seen: set[str] = set()
    duplicated: set[str] = set()
    for name, payload in lines:
        if payload is None:
            malformed.append(name)
            continue
        if keep is not None and not keep(name):
            continue
        if name in seen:
            if name not in duplicated:
                duplicated.add(name)
                if devices.pop(name, None) is not None:
                    malformed.append(name)
            continue
        seen.add(name)
        try:
            devices[name] = parse(payload)
        except ParseError:
            malformed.append(name)
    if malformed and not devices:
        raise ParseError(f"no {what} line parsed; malformed: {', '.join(malformed[:5])}")
    return devices, tuple(malformed)
