"""Pieces shared by the parsers of line-per-device pseudo-files.

``int()`` alone accepts what no kernel prints ("1_000", " 7", "-3", Unicode digits) and
turns a 5000-digit token into a ValueError with a different message, so counters are checked
as what they are: unsigned decimal integers that fit the kernel's widest type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain, compress, repeat, starmap
from operator import attrgetter
from typing import Any, Generic, TypeVar

from gpuwait.core.errors import ParseError

U64_MAX = (1 << 64) - 1

T = TypeVar("T")
V = TypeVar("V")
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
    """One unsigned 64-bit decimal counter, or ParseError: ``u64s`` of the one token, checked
    without the joins and maps a list needs (one per sysfs counter, ten times a second)."""
    if 0 < len(token) <= 20 and token.isascii() and token.isdigit():
        value = int(token)
        if value <= U64_MAX:
            return value
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


#: The largest 64-bit counter as the kernel prints it: a token of as many digits fits if it
#: sorts at or before it, shorter ones always do.
_U64_MAX_TEXT = str(U64_MAX)


def counter_columns(names: list[str], tokens: list[str], stride: int, keep: Callable[[str], bool] | None = None,
                    convert: tuple[tuple[Callable[[int, Any], Any], Any] | None, ...] = ()
                    ) -> tuple[list[str], TokenColumns] | None:
    """The ``names`` that ``keep`` accepts (all without ``keep``) and the columns of their
    counters, which ``tokens`` lays out row after row, ``stride`` a row, in the order of
    ``names``, each converted the first time it is asked for (``TokenColumns``, with
    ``convert``'s operation for its column); None when any token is not an unsigned 64-bit
    decimal (as ``u64s`` has it), which the caller then leaves to a line-by-line parse. The
    checks run over all the tokens at once, in C, without converting them."""
    digits = "".join(tokens)
    if not (digits.isascii() and digits.isdigit()):
        return None
    longest = max(map(len, tokens), default=0)
    if longest > len(_U64_MAX_TEXT) or (longest == len(_U64_MAX_TEXT) and any(
            t > _U64_MAX_TEXT for t in tokens if len(t) == longest)):
        return None
    kept = None if keep is None else list(map(keep, names))
    if kept is not None and all(kept):
        kept = None
    return (names if kept is None else list(compress(names, kept))), TokenColumns(tokens, stride, kept, convert)


class TokenColumns(Sequence[list]):
    """The columns of a line-per-device file's counters, as ``counter_columns`` found them:
    ``self[k]`` is the k-th counter of every kept row, converted to ints (and by the column's
    ``convert`` operation, ``op(value, factor)``) the first time it is asked for. Ten times a
    second the window asks for a few columns, which is all the conversion a reading then
    costs; a scrape or a trace line asks for all of them, once per reading."""

    __slots__ = ("_tokens", "_stride", "_kept", "_convert", "_made")

    def __init__(self, tokens: list[str], stride: int, kept: list[bool] | None,
                 convert: tuple[tuple[Callable[[int, Any], Any], Any] | None, ...] = ()) -> None:
        self._tokens, self._stride, self._kept, self._convert = tokens, stride, kept, convert
        self._made: list[list | None] = [None] * stride

    def __len__(self) -> int:
        return self._stride

    def __getitem__(self, k: int) -> list:  # type: ignore[override]
        k = range(self._stride)[k]  # IndexError past the end, as a list's
        made = self._made[k]
        if made is None:
            column = self._tokens[k::self._stride]
            made = list(map(int, column if self._kept is None else compress(column, self._kept)))
            conversion = self._convert[k] if k < len(self._convert) else None
            if conversion is not None:
                op, factor = conversion
                made = list(map(op, made, repeat(factor)))
            # Two threads may make it at once (the window's, a scrape's): the same list either way.
            self._made[k] = made
        return made


class ColumnTable(Mapping[str, V]):
    """Records by name, kept as the columns a single pass over a whole file reads them into
    (``columns[k][i]``: the k-th value of ``names[i]``). Ten times a second the window takes a
    few columns; the records are made the first time something reads the mapping (a scrape,
    a trace line), once per reading whatever reads it. Subclasses say how (``_records``)."""

    __slots__ = ("names", "columns", "_made")

    def __init__(self, names: list[str], columns: list[list]) -> None:
        self.names = names
        self.columns = columns
        self._made: dict[str, V] | None = None

    def _records(self) -> Iterable[V]:
        """The records of ``names``, in that order."""
        raise NotImplementedError

    def _table(self) -> dict[str, V]:
        made = self._made
        if made is None:
            made = self._made = dict(zip(self.names, self._records()))
        return made

    def __getitem__(self, name: str) -> V:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._table()

    def keys(self):  # the table's own views: no lookup per name
        return self._table().keys()

    def items(self):
        return self._table().items()

    def values(self):
        return self._table().values()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._table()!r})"


class DeviceTable(ColumnTable[T], Generic[T]):
    """The devices of a line-per-device file: one column per field of the ``record``
    dataclass, in its order (fewer columns than fields: the later fields take their
    defaults)."""

    __slots__ = ("record",)

    def __init__(self, names: list[str], columns: list[list], record: Callable[..., T]) -> None:
        super().__init__(names, columns)
        self.record = record

    def _records(self) -> Iterable[T]:
        return starmap(self.record, zip(*self.columns))


def interleaved(devices: Mapping[str, Any], fields: tuple[str, ...]) -> list:
    """The values of ``fields`` of every device, device after device, in that order within
    each, from a DeviceTable's columns (without making its records) or from each record."""
    if isinstance(devices, DeviceTable):
        order = _field_order(devices.record)
        return list(chain.from_iterable(zip(*(devices.columns[order[name]] for name in fields))))
    values = map(attrgetter(*fields), devices.values())
    return list(values) if len(fields) == 1 else list(chain.from_iterable(values))


_FIELD_ORDERS: dict[type, dict[str, int]] = {}


def _field_order(record: type) -> dict[str, int]:
    order = _FIELD_ORDERS.get(record)
    if order is None:
        order = _FIELD_ORDERS[record] = {f.name: k for k, f in enumerate(dataclasses.fields(record))}
    return order
