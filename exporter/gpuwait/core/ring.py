"""Bounded, columnar storage of a source's samples over the analysis window.

One timestamp row per sample and one float column per series key, in flat ``array('d')``
buffers: a 60 s window at 10 Hz for 192 cores is ~230k floats, which as Python objects in
per-sample dicts would cost tens of megabytes. Missing values are NaN, so a series that
appears or vanishes mid-window stays aligned with the others.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

NAN = math.nan


class Column(NamedTuple):
    """One series of a window, as a collector's accessor hands it to the analysis: the
    sample times, the values (NaN where a sample has none), and for a counter that wraps,
    its width (``modulus``)."""

    times: list[float]
    values: list[float]
    modulus: float | None = None


@dataclass(frozen=True)
class WindowView:
    """A chronological copy of the ring, safe to analyse while sampling goes on."""

    times: list[float]
    columns: dict[Hashable, list[float]]

    def __len__(self) -> int:
        return len(self.times)

    def column(self, key: Hashable) -> list[float]:
        return self.columns.get(key, [NAN] * len(self.times))

    def series(self, key: Hashable, modulus: float | None = None) -> Column:
        return Column(self.times, self.column(key), modulus)


class ColumnRing:
    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("a window needs at least two samples")
        self.capacity = capacity
        self._times = array("d", [NAN]) * capacity
        self._columns: dict[Hashable, array] = {}
        self._head = 0  # next row to write
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, t: float, values: Mapping[Hashable, float]) -> None:
        row = self._head
        self._times[row] = t
        for key, column in self._columns.items():
            column[row] = values.get(key, NAN)
        for key in values.keys() - self._columns.keys():
            column = array("d", [NAN]) * self.capacity
            column[row] = values[key]
            self._columns[key] = column
        self._head = (row + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)
        if self._head == 0:
            self._drop_empty_columns()

    def _drop_empty_columns(self) -> None:
        # Once per lap: a device that vanished a full window ago no longer costs memory.
        for key in [k for k, c in self._columns.items() if all(v != v for v in c)]:
            del self._columns[key]

    def view(self, since: float | None = None) -> WindowView:
        # Rows older than ``since`` are cut before anything is copied: each column is copied
        # once, straight from its buffer, in at most two slices.
        count, head, capacity = self._count, self._head, self.capacity
        first = head if count == capacity else 0  # buffer position of the oldest row
        times = self._chronological(self._times, first, 0)
        start = 0
        if since is not None:
            start = next((i for i, t in enumerate(times) if t >= since), len(times))
            if start:
                times = times[start:]
        columns = {key: self._chronological(column, first, start) for key, column in self._columns.items()}
        return WindowView(times, columns)

    def _chronological(self, buffer: array, first: int, skip: int) -> list[float]:
        """Rows ``skip`` onwards, oldest first, as a list."""
        count = self._count - skip
        begin = (first + skip) % self.capacity
        end = begin + count
        if end <= self.capacity:
            return buffer[begin:end].tolist()
        return buffer[begin:].tolist() + buffer[: end - self.capacity].tolist()
