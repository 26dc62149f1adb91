"""What the cpu source's Reading holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import repeat
from operator import add

from gpuwait.core.fields import ColumnTable


@dataclass(frozen=True, slots=True)
class CpuData:
    #: core id ("0", "1", ...) -> mode -> seconds since boot; a live reading holds a CoreTable
    cores: Mapping[str, Mapping[str, float]]
    procs_running: int | None
    procs_blocked: int | None


class CoreTable(ColumnTable[Mapping[str, float]]):
    """Each core's modes in seconds, kept as the single pass of /proc/stat reads them: one
    column per mode, ``columns[k][i]`` the seconds of ``names[i]`` in ``modes[k]``.

    Ten times a second the window needs only each core's busy and total time, which are sums
    of columns; the per-core mappings are made the first time something reads them."""

    __slots__ = ("modes",)

    def __init__(self, names: list[str], modes: tuple[str, ...], columns: list[list[float]]) -> None:
        super().__init__(names, columns)
        self.modes = modes

    def _records(self) -> Iterable[dict[str, float]]:
        return map(dict, map(zip, repeat(self.modes), zip(*self.columns)))

    def sums(self, modes: Iterable[str], start: list[float] | None = None) -> list[float]:
        """Per core, ``start`` (if given) plus those of ``modes`` the table holds, added one at
        a time in the order of ``modes``: the same float, to the last bit, as adding each
        core's values in that order."""
        held = dict(zip(self.modes, self.columns))
        total = start
        for mode in modes:
            column = held.get(mode)
            if column is not None:
                total = list(column) if total is None else list(map(add, total, column))
        return total if total is not None else [0.0] * len(self.names)
