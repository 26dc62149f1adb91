"""What the cpu source's Reading holds."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from operator import add


@dataclass(frozen=True, slots=True)
class CpuData:
    #: core id ("0", "1", ...) -> mode -> seconds since boot; a live reading holds a CoreTable
    cores: Mapping[str, Mapping[str, float]]
    procs_running: int | None
    procs_blocked: int | None


class CoreTable(Mapping[str, Mapping[str, float]]):
    """Each core's modes in seconds, kept as the single pass of /proc/stat reads them: one
    column per mode, ``columns[k][i]`` the seconds of ``names[i]`` in ``modes[k]``.

    Ten times a second the window needs only each core's busy and total time, which are sums
    of columns; the per-core mappings are made the first time something reads them (a scrape,
    a trace line), once per reading whatever reads them."""

    __slots__ = ("names", "modes", "columns", "_cores")

    def __init__(self, names: list[str], modes: tuple[str, ...], columns: list[list[float]]) -> None:
        self.names = names
        self.modes = modes
        self.columns = columns
        self._cores: dict[str, dict[str, float]] | None = None

    def _table(self) -> dict[str, dict[str, float]]:
        cores = self._cores
        if cores is None:
            cores = dict(zip(self.names, map(dict, map(zip, repeat(self.modes), zip(*self.columns)))))
            self._cores = cores
        return cores

    def __getitem__(self, core: str) -> Mapping[str, float]:
        return self._table()[core]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, core: object) -> bool:
        return core in self._table()

    def keys(self):  # the table's own views: no lookup per core
        return self._table().keys()

    def items(self):
        return self._table().items()

    def values(self):
        return self._table().values()

    def __repr__(self) -> str:
        return f"CoreTable({self._table()!r})"

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
