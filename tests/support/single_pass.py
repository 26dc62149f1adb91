"""Checks shared by the tests of the single passes over whole line-per-device files
(``core.fields.DeviceTable``): a single pass reads a file in the shape kernels print exactly
as the line-by-line parser does, leaves any other file to it, and gives the window the same
row as the records a trace line holds."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from hypothesis import strategies as st

from gpuwait.core.errors import ParseError
from gpuwait.core.fields import parse_devices

#: Tokens no kernel prints as a counter: each must send a file to the careful parser.
NOT_COUNTERS = ["x", "1.5", "+3", "-3", "1_0", "\u0661", str(2**64), "0" * 21]


def drawn_change(draw: Callable, lines: list[str], own: list[str]) -> tuple[str, int]:
    """One change a kernel would not make, or "none", drawn among those of every such file
    (a line a column short or long, a blank line, a line listed twice) and the caller's
    ``own``, and the line it is at: the common ones are made to ``lines`` here, the caller's
    are the caller's to make."""
    change = draw(st.sampled_from(["none", "short", "long", "blank", "twice", *own]))
    at = draw(st.integers(0, len(lines) - 1))
    if change == "short":
        lines[at] = lines[at].rsplit(" ", 1)[0]
    elif change == "long":
        lines[at] += " 7"
    elif change == "blank":
        lines.insert(at, draw(st.sampled_from(["", " ", "\t"])))
    elif change == "twice":
        lines.insert(at, lines[at])
    return change, at


def careful(named_lines: Iterable, parse: Callable, keep: Callable[[str], bool] | None, what: str) -> tuple:
    """The line-by-line parser's (records, malformed) of ``named_lines``, or ParseError and
    its message."""
    try:
        return parse_devices(named_lines, parse, keep, what)
    except ParseError as e:
        return ParseError, str(e)


def assert_same_as_careful(table: Mapping | None, careful: tuple) -> None:
    """``careful``: the line-by-line parser's (records, malformed) of the same file."""
    records, malformed = careful
    assert table is not None and malformed == ()
    assert list(table) == list(records) and list(table.values()) == list(records.values())
    assert table == records


def assert_read_alike_or_left(table: Mapping | None, careful: Callable[[], tuple], change: str) -> None:
    """A file drawn as kernels print it (``change`` "none") is the single pass's to read;
    any file it reads, it reads as the careful parser does."""
    if change == "none":
        assert table is not None
    if table is not None:
        assert_same_as_careful(table, careful())


def assert_same_window_row(columns: Callable, payload: Callable[[Mapping], object], table: Mapping | None) -> None:
    """A live reading holds the table, its trace line the records it stands for: the ring gets
    the same row, value for value and type for type, from both."""
    if table is None:
        return
    live = columns(payload(table))
    replayed = columns(payload(dict(table.items())))
    assert type(live).__name__ == "ColumnRow"
    assert list(live.keys()) == list(replayed.keys())
    assert [(type(v), v) for v in live.values()] == [(type(v), v) for v in replayed.values()]
