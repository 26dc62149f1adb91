"""Bounded, columnar storage of a source's samples over the analysis window.

One timestamp per sample and one float per series key, in flat ``array('d')`` buffers, row
after row: a 60 s window at 10 Hz for 192 cores is ~230k floats, which as Python objects in
per-sample dicts would cost tens of megabytes. Missing values are NaN, so a series that
appears or vanishes mid-window stays aligned with the others. A view copies the rows it
covers in one piece; an analysis takes a column out of them, or only the rows new since the
last pass (``WindowView.tail``).

The ring also keeps, per column, how many of its consecutive pairs of rows are not a counter
moving forward (a value going back, or NaN on either side), updated on every append and
eviction. Most counters are steady over a whole window, and for those a window's increase is
last minus first: a view answers it without reading the rows between (``WindowView.increase``),
so a pass over a 192-core window costs O(columns), not O(rows × columns).

Rows never change once written, so what an analysis computes from a pair of consecutive rows
stays true while both are held: a view numbers its rows for the ring's life (``first_row``)
and lends the analyses a memo of per-interval results (``interval_memo``), so that each pass
computes only the intervals that are new since the last. A steady counter's interval rates and
their running maximum are kept the same way (``WindowView.rate_shape``): each window summary
adds the new intervals and drops those that left the window.
"""

from __future__ import annotations

import math
import operator
import weakref
from array import array
from collections import deque
from collections.abc import Hashable, Iterator, Mapping, Sequence
from itertools import compress, islice, repeat
from typing import NamedTuple

from gpuwait.core.series import Moments, burstiness, interval_rates, maximum, total_increase

NAN = math.nan


class Column(NamedTuple):
    """One series of a window, as a collector's accessor hands it to the analysis: the
    sample times, the values (NaN where a sample has none), and for a counter that wraps,
    its width (``modulus``)."""

    times: list[float]
    values: list[float]
    modulus: float | None = None


class _Columns(Mapping):
    """A view's columns, over its own copy of the ring's rows (one memcpy): a column is taken
    out of the rows as an array when an analysis asks for it, and made a list only when read
    as one, so a statistic that needs a column's ends alone costs neither."""

    __slots__ = ("_rows", "_size", "_index", "_width", "_arrays", "_lists", "__weakref__")

    def __init__(self, rows: array, size: int, index: Mapping[Hashable, int], width: int) -> None:
        self._rows = rows  # its first ``size`` values are the view's rows
        self._size = size
        self._index = index
        self._width = width
        self._arrays: dict[Hashable, array] = {}
        self._lists: dict[Hashable, list[float]] = {}

    def stored(self, key: Hashable) -> array:
        """The column as an array, without making it a list."""
        got = self._arrays.get(key)
        if got is None:
            got = self._arrays[key] = self._rows[self._index[key]:self._size:self._width]
        return got

    def tail(self, key: Hashable, start: int) -> array:
        """The column's values from row ``start`` on, taken out of the rows alone."""
        whole = self._arrays.get(key)
        if whole is not None:
            return whole[start:]
        width = self._width
        return self._rows[start * width + self._index[key]:self._size:width]

    def ends(self, key: Hashable) -> tuple[float, float]:
        """The column's first and last values, read in place."""
        rows, i = self._rows, self._index[key]
        return rows[i], rows[self._size - self._width + i]

    def __getitem__(self, key: Hashable) -> list[float]:
        got = self._lists.get(key)
        if got is None:
            got = self._lists[key] = self.stored(key).tolist()
        return got

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


class WindowView:
    """A chronological copy of the ring, safe to analyse while sampling goes on.

    ``steady`` maps the columns that are counters read throughout the view and never going
    back, over strictly increasing times, to their first and last values; a view built from
    plain lists has none and computes every statistic from the rows.
    """

    __slots__ = ("times", "columns", "first_row", "_steady", "_memo", "_intervals", "_shapes")

    def __init__(self, times: list[float], columns: Mapping[Hashable, list[float]],
                 steady: Mapping[Hashable, tuple[float, float]] | None = None,
                 first_row: int = 0, memo: dict[Hashable, dict[int, object]] | None = None,
                 shapes: dict[Hashable, RateShape] | None = None) -> None:
        self.times = times
        self.columns = columns
        #: The number of the view's first row among every row its ring was ever given.
        self.first_row = first_row
        self._steady = steady or {}
        self._memo = memo
        self._intervals: list[float] | None = None
        self._shapes = shapes

    def __len__(self) -> int:
        return len(self.times)

    def column(self, key: Hashable) -> list[float]:
        return self.columns[key] if key in self.columns else [NAN] * len(self.times)

    def series(self, key: Hashable, modulus: float | None = None) -> Column:
        return Column(self.times, self.column(key), modulus)

    def values(self, key: Hashable) -> Sequence[float]:
        """The column for reading by index or in one pass: for a view of a ring, its copy as an
        array, which costs no float object per value until one is read (a list of a 601-row
        column of floats holds 601 of them, four times the array's memory)."""
        columns = self.columns
        if isinstance(columns, _Columns) and key in columns:
            return columns.stored(key)
        return self.column(key)

    def tail(self, key: Hashable, start: int) -> Sequence[float]:
        """The column's values from row ``start`` on: what a pass reads of the rows new since
        the last, without taking the whole column out of the view's rows."""
        columns = self.columns
        if isinstance(columns, _Columns) and key in columns:
            return columns.tail(key, start)
        return self.column(key)[start:]

    def steady(self, key: Hashable) -> bool:
        """Whether the column is a counter read at every row that never went back."""
        return key in self._steady

    def steady_ends(self, key: Hashable) -> tuple[float, float] | None:
        """A steady column's first and last values; None for any other column."""
        return self._steady.get(key)

    def increase(self, key: Hashable, modulus: float | None = None) -> tuple[float, float] | None:
        """``series.total_increase`` of the column: (increase, seconds covered), or None."""
        ends = self._steady.get(key)
        if ends is not None:
            return ends[1] - ends[0], self.times[-1] - self.times[0]
        return total_increase(self.times, self.values(key), modulus)

    def interval_rates(self, key: Hashable, modulus: float | None = None) -> list[float]:
        """``series.interval_rates`` of the column: per-second rate over each interval."""
        if key not in self._steady:
            return interval_rates(self.times, self.column(key), modulus)
        # Every pair of rows is a step forward over a positive interval: the general loop's
        # arithmetic, pair by pair, without its tests.
        if self._intervals is None:
            times = self.times
            self._intervals = list(map(operator.sub, islice(times, 1, None), times))
        values = self.values(key)
        return list(map(operator.truediv, map(operator.sub, islice(values, 1, None), values), self._intervals))

    def rate_peak(self, key: Hashable, modulus: float | None = None) -> float | None:
        """``series.maximum`` of the column's interval rates (see ``rate_shape``)."""
        shape = self._account(key)
        return shape.peak() if shape is not None else maximum(self.interval_rates(key, modulus))

    def rate_shape(self, key: Hashable, modulus: float | None = None) -> tuple[float | None, float | None]:
        """(``series.maximum``, ``series.burstiness``) of the column's interval rates. For a
        steady column of a ring's view, from the ring's running account of the intervals
        (``RateShape``): each summary computes the rates of the intervals new since the last
        it made, not the window's."""
        shape = self._account(key)
        if shape is not None:
            return shape.peak(), shape.burstiness()
        rates = self.interval_rates(key, modulus)
        return maximum(rates), burstiness(rates)

    def keep_accounts(self) -> None:
        """Bring every running account of the ring (``rate_shape``) up to this view. The
        account costs a step per new interval whenever it is brought up; a view's summary
        made seconds later, by a scrape, then finds it done instead of doing a scrape
        interval's steps inside that scrape."""
        shapes = self._shapes
        if shapes:
            for key in list(shapes):
                self._account(key)

    def _account(self, key: Hashable) -> RateShape | None:
        """The ring's account of a steady column's rates, brought up to this view; None for a
        column that is not steady (its account starts again once it is) or a view of lists."""
        shapes = self._shapes
        if shapes is None:
            return None
        if key not in self._steady:
            shapes.pop(key, None)
            return None
        shape = shapes.get(key)
        if shape is None:
            shape = shapes[key] = RateShape()
        shape.follow(self, key)
        return shape

    def interval_memo(self, name: Hashable) -> dict[int, object] | None:
        """The ring's memo ``name``: results per interval, keyed by the number of the
        interval's first row (``first_row + j`` for the interval from row j to row j + 1),
        for the intervals still held; None for a view not taken from a ring. Only the analysis
        thread may use it."""
        memo = self._memo
        if memo is None:
            return None
        table = memo.get(name)
        if table is None:
            if len(memo) >= MAX_MEMOS:
                memo.clear()  # names that carry a threshold: a reload must not pile them up
            table = memo[name] = {}
        elif table and next(iter(table)) < self.first_row:
            # Keys go in in ascending order, so the first is the oldest.
            kept = {k: v for k, v in table.items() if k >= self.first_row}
            table.clear()
            table.update(kept)
        return table

    def rate(self, key: Hashable, modulus: float | None = None) -> float | None:
        """``series.window_rate`` of the column: mean per-second increase over the window."""
        covered = self.increase(key, modulus)
        return covered[0] / covered[1] if covered else None


#: Memos a ring lends its views before it forgets them all.
MAX_MEMOS = 16


class RateShape:
    """The interval rates of one steady counter over the intervals its ring still holds,
    numbered by each interval's first row, with their running maximum and their exact sums
    (``series.Moments``). Only the window summaries use it, through ``WindowView.rate_shape``,
    one at a time (they are made under the sampler's summary lock).

    A pass computes the rates of the new intervals only and drops those that left; a rate is
    the subtraction and division ``interval_rates`` makes, and the peak and the burstiness are
    what ``series.maximum`` and ``series.burstiness`` give for the same rates, to the bit."""

    __slots__ = ("_rates", "_peaks", "_moments", "_start", "_next")

    def __init__(self) -> None:
        #: the rates of intervals _start to _next - 1, in a flat buffer (8 bytes a rate, where a
        #: float object and its slot would take 32, for every rate series of the node); kept to
        #: take each out of the sums as it was put in
        self._rates = array("d")
        #: the rates that are the largest from their place on, oldest first: the first is the peak
        self._peaks: deque[tuple[int, float]] = deque()
        #: None once an infinite rate is held: the burstiness is then computed from the rates
        self._moments: Moments | None = Moments()
        self._start = self._next = -1

    def follow(self, view: WindowView, key: Hashable) -> None:
        """Bring the account to ``view``'s column ``key``."""
        times, first_row = view.times, view.first_row
        last = first_row + len(times) - 2  # the view's last interval
        if not self._start <= first_row <= self._next <= last + 1:
            # The view starts before the account (the first pass, or a view over a longer
            # span than the last), or intervals between the two were never taken in (a pause
            # in the analysis longer than the window), or the view is older than the account.
            self.__init__()
            self._start = self._next = first_row
        rates, peaks, moments = self._rates, self._peaks, self._moments
        gone = first_row - self._start
        if moments is not None:
            for rate in rates[:gone]:
                moments.remove(rate)
        del rates[:gone]
        while peaks and peaks[0][0] < first_row:
            peaks.popleft()
        new = self._next - first_row  # the view's row that starts the first new interval
        values = view.tail(key, new)
        for j in range(self._next, last + 1):
            i = j - first_row
            rate = (values[i - new + 1] - values[i - new]) / (times[i + 1] - times[i])
            rates.append(rate)
            if moments is not None:
                try:
                    moments.add(rate)
                except (OverflowError, ValueError):
                    moments = self._moments = None
            while peaks and peaks[-1][1] <= rate:
                peaks.pop()
            peaks.append((j, rate))
        self._start, self._next = first_row, last + 1

    def peak(self) -> float | None:
        return self._peaks[0][1] if self._peaks else None

    def burstiness(self) -> float | None:
        if self._moments is None:
            return burstiness(self._rates)
        return self._moments.variation()


class ColumnRow(Mapping):
    """A row of values whose keys a source hands over as the same tuple sample after sample
    (its cores, its disks): a ring works out once per tuple where each of its columns is in
    the row, where a mapping costs a lookup, and so a hash of each key, per column and row."""

    __slots__ = ("keys_in_order", "values_in_order", "_by_key")

    def __init__(self, keys_in_order: tuple[Hashable, ...], values_in_order: Sequence[float]) -> None:
        if len(keys_in_order) != len(values_in_order):
            raise ValueError(f"{len(keys_in_order)} keys for {len(values_in_order)} values")
        self.keys_in_order = keys_in_order
        self.values_in_order = values_in_order
        self._by_key: dict[Hashable, float] | None = None

    def _mapping(self) -> dict[Hashable, float]:
        if self._by_key is None:
            self._by_key = dict(zip(self.keys_in_order, self.values_in_order))
        return self._by_key

    def __getitem__(self, key: Hashable) -> float:
        return self._mapping()[key]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.keys_in_order)

    def __len__(self) -> int:
        return len(self.keys_in_order)

    def __repr__(self) -> str:
        return f"ColumnRow({self._mapping()!r})"


class RowKeys:
    """The keys of a ColumnRow of values per item (a core, a device) and kind, ``(kind, item)``
    item after item, then ``extra``: one tuple, made again only when the items change, so that
    a ring holding those columns takes each row without a lookup."""

    __slots__ = ("kinds", "_made")

    def __init__(self, kinds: tuple[Hashable, ...]) -> None:
        self.kinds = kinds
        #: what the keys were made for, and the keys, in one tuple that a reader on another
        #: thread sees whole
        self._made: tuple[tuple[Sequence[Hashable], tuple[Hashable, ...]], tuple[Hashable, ...]] = (((), ()), ())

    def __call__(self, items: Sequence[Hashable], extra: tuple[Hashable, ...] = ()) -> tuple[Hashable, ...]:
        made_for, keys = self._made
        if made_for[0] != items or made_for[1] != extra:
            keys = tuple((kind, item) for item in items for kind in self.kinds) + extra
            self._made = ((items, extra), keys)
        return keys


class ColumnRing:
    """The rows of a window, oldest overwritten first.

    The values are stored row after row in one flat buffer (``capacity`` rows of one value per
    column, in the columns' order of first appearance), so that an append writes one
    contiguous row and compares it with the previous one in C: a 192-core ring's row is 3 KB,
    where a buffer per column would have the append touch two cache lines in each of 386
    buffers ten times a second. A view copies the rows it covers in one piece and takes out
    only the columns an analysis reads."""

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("a window needs at least two samples")
        self.capacity = capacity
        self._times = array("d", [NAN]) * capacity
        #: column key -> its place in a row; replaced, never changed, when the columns change,
        #: so that a view may keep the one it was made with
        self._index: dict[Hashable, int] = {}
        self._keys: list[Hashable] = []
        #: the key tuple of the last ColumnRow and where each column of a row takes its value
        #: from in it (None: the same order, all of them; the row's length: none, NaN)
        self._row_plan: tuple[tuple[Hashable, ...], list[int] | None] | None = None
        self._rows = array("d")
        #: Per column, the consecutive pairs of held rows that are not a step forward
        #: (``not prev <= cur``, which NaN on either side fails too).
        self._breaks: list[int] = []
        #: Consecutive pairs of held rows whose times do not increase.
        self._time_breaks = 0
        self._head = 0  # next row to write
        self._count = 0
        self._appended = 0  # rows ever written
        self._memo: dict[Hashable, dict[int, object]] = {}
        self._shapes: dict[Hashable, RateShape] = {}
        #: the buffer the last view copied the rows into, and that view's columns: once those
        #: are gone the next view copies into the same buffer (see ``view``)
        self._lent: tuple[weakref.ref, array] | None = None

    def __len__(self) -> int:
        return self._count

    @property
    def width(self) -> int:
        """The number of columns held."""
        return len(self._keys)

    def append(self, t: float, values: Mapping[Hashable, float]) -> None:
        if type(values) is ColumnRow:
            plan = self._row_plan
            if plan is None or plan[0] is not values.keys_in_order:
                plan = self._row_plan = self._plan(values.keys_in_order)
            if plan[1] is None:
                new = array("d", values.values_in_order)
            else:
                new = array("d", map([*values.values_in_order, NAN].__getitem__, plan[1]))
        else:
            if not values.keys() <= self._index.keys():
                self._add_columns([key for key in values if key not in self._index])
            new = array("d", map(values.get, self._keys, repeat(NAN, len(self._keys))))
        row, count, capacity = self._head, self._count, self.capacity
        times, rows, breaks, width = self._times, self._rows, self._breaks, len(self._keys)
        at = row * width
        if count == capacity:
            # The oldest row is overwritten: the pair it forms with the next leaves the window.
            oldest_next = row + 1 if row + 1 < capacity else 0
            if not times[row] < times[oldest_next]:
                self._time_breaks -= 1
            after = oldest_next * width
            for i in _not_forward(rows[at:at + width], rows[after:after + width]):
                breaks[i] -= 1
        if count:
            prev = row - 1 if row else capacity - 1
            if not times[prev] < t:
                self._time_breaks += 1
            for i in _not_forward(rows[prev * width:(prev + 1) * width], new):
                breaks[i] += 1
        times[row] = t
        rows[at:at + width] = new
        self._head = row + 1 if row + 1 < capacity else 0
        self._count = min(count + 1, capacity)
        self._appended += 1
        if self._head == 0:
            self._drop_empty_columns()

    def _plan(self, row_keys: tuple[Hashable, ...]) -> tuple[tuple[Hashable, ...], list[int] | None]:
        """Where each column takes its value from in rows with these keys (new ones added)."""
        index = self._index
        new = [key for key in row_keys if key not in index]
        if new:
            self._add_columns(new)
        place = {key: i for i, key in enumerate(row_keys)}
        missing = len(row_keys)
        positions = [place.get(key, missing) for key in self._keys]
        return row_keys, None if positions == list(range(missing)) else positions

    def _add_columns(self, keys: list[Hashable]) -> None:
        # Rare (a device appears): every row is rewritten one value wider per new column.
        width, capacity = len(self._keys), self.capacity
        wider = width + len(keys)
        rows = array("d", [NAN]) * (capacity * wider)
        for i in range(width):
            rows[i::wider] = self._rows[i::width]
        self._rows = rows
        self._keys = self._keys + keys
        self._index = {key: i for i, key in enumerate(self._keys)}
        self._row_plan = None
        # Every held pair of a new column has NaN on both sides: a break each.
        self._breaks = self._breaks + [max(self._count - 1, 0)] * len(keys)

    def _drop_empty_columns(self) -> None:
        # Once per lap: a device that vanished a full window ago no longer costs memory.
        width = len(self._keys)
        kept = [i for i in range(width) if not all(map(math.isnan, self._rows[i::width]))]
        if len(kept) == width:
            return
        narrower = len(kept)
        rows = array("d", [NAN]) * (self.capacity * narrower)
        for j, i in enumerate(kept):
            rows[j::narrower] = self._rows[i::width]
        self._rows = rows
        self._keys = [self._keys[i] for i in kept]
        self._breaks = [self._breaks[i] for i in kept]
        self._index = {key: i for i, key in enumerate(self._keys)}
        self._row_plan = None

    def view(self, since: float | None = None) -> WindowView:
        # Rows older than ``since`` are cut before anything is copied: the rows are copied
        # once, straight from the buffer, in at most two slices.
        count, head, capacity, width = self._count, self._head, self.capacity, len(self._keys)
        first = head if count == capacity else 0  # buffer position of the oldest row
        times = self._chronological(self._times, first, 0).tolist()
        start = 0
        if since is not None:
            start = next((i for i, t in enumerate(times) if t >= since), len(times))
            if start:
                times = times[start:]
        size = (count - start) * width
        rows = self._view_buffer(size)
        self._copy_rows(rows, first, start, width)
        columns = _Columns(rows, size, self._index, width)
        self._lent = (weakref.ref(columns), rows)
        steady: dict[Hashable, tuple[float, float]] = {}
        if len(times) >= 2 and self._time_breaks == self._cut_breaks(self._times, first, start, 1, 0, operator.lt):
            for key, i in self._index.items():
                breaks = self._breaks[i]
                if breaks and start:
                    breaks -= self._cut_breaks(self._rows, first, start, width, i)
                if not breaks:
                    steady[key] = columns.ends(key)
        for key in self._shapes.keys() - self._index.keys():
            # A scrape's summary may have dropped it too (``WindowView._account``).
            self._shapes.pop(key, None)
        return WindowView(times, columns, steady, self._appended - count + start, self._memo, self._shapes)

    def _view_buffer(self, size: int) -> array:
        """Where a view copies ``size`` values of rows: the last view's buffer once that view
        is gone (an analysis pass lets its views go before the next), else a new one as large
        as the ring. Windows of a few MB made afresh every second, from the analysis thread
        while the sampling threads allocate too, leave the allocator's arenas fragmented: the
        resident memory grew by megabytes a minute."""
        lent = self._lent
        if lent is not None and lent[0]() is None and len(lent[1]) >= size:
            return lent[1]
        return self._rows[:]

    def _copy_rows(self, into: array, first: int, skip: int, width: int) -> None:
        """Rows ``skip`` onwards, oldest first, to the front of ``into``."""
        count = self._count - skip
        begin = (first + skip) % self.capacity
        end = begin + count
        with memoryview(into) as target, memoryview(self._rows) as source:
            if end <= self.capacity:
                target[:count * width] = source[begin * width:end * width]
            else:
                tail = (self.capacity - begin) * width
                target[:tail] = source[begin * width:]
                target[tail:count * width] = source[:(end - self.capacity) * width]

    def _cut_breaks(self, buffer: array, first: int, start: int, width: int, offset: int,
                    forward=operator.le) -> int:
        """Breaks among the pairs of the ``start`` oldest rows and their successors, which a
        view from row ``start`` leaves out, in the column at ``offset`` of rows ``width``
        wide; ``forward`` is a step that is no break (times must increase strictly, a counter
        may stand still)."""
        capacity = self.capacity
        return sum(1 for i in range(start)
                   if not forward(buffer[(first + i) % capacity * width + offset],
                                  buffer[(first + i + 1) % capacity * width + offset]))

    def _chronological(self, buffer: array, first: int, skip: int) -> array:
        """Rows ``skip`` onwards of a column buffer (the times), oldest first."""
        count = self._count - skip
        begin = (first + skip) % self.capacity
        end = begin + count
        if end <= self.capacity:
            return buffer[begin:end]
        return buffer[begin:] + buffer[: end - self.capacity]


def _not_forward(before: Sequence[float], after: Sequence[float]) -> Iterator[int]:
    """The places where ``after`` is not a step forward from ``before``, found in C: most
    rows of most sources have none."""
    return compress(range(len(after)), map(operator.not_, map(operator.le, before, after)))
