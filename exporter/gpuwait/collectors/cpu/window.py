"""Window statistics of CPU time: per-core busy fractions and how many cores are saturated.

The all-core mean hides a data loader pinned to one core (A3), so the maximum and the count
of saturated cores are computed beside it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from functools import reduce
from itertools import chain, repeat
from operator import add

from gpuwait.collectors.cpu.payload import CoreTable, CpuData
from gpuwait.core.config import Option, Settings, parse_fraction
from gpuwait.core.ring import Column, ColumnRow, RowKeys, WindowView
from gpuwait.core.series import maximum, mean

#: Time a core is not available to new work. iowait is idle time with IO outstanding, so not busy;
#: steal is time the hypervisor gave away, which a data loader cannot use either.
BUSY_MODES = ("user", "nice", "system", "irq", "softirq", "steal")
_BUSY_SET = frozenset(BUSY_MODES)

SATURATION_THRESHOLD = Option(
    "collector.cpu.saturation-threshold", parse_fraction, 0.95,
    "Busy fraction over the window at or above which a core counts as saturated.", "RATIO",
)

# Column keys: ("busy", core) and ("total", core) seconds, and the run-queue gauges.
_BUSY, _TOTAL = "busy", "total"
_RUNNING, _BLOCKED = "procs_running", "procs_blocked"


def columns(data: CpuData) -> Mapping[Hashable, float]:
    cores = data.cores
    if type(cores) is CoreTable:
        return _table_row(cores, data.procs_running, data.procs_blocked)
    cols: dict[Hashable, float] = {}
    zeros = repeat(0.0)
    for cpu, modes in cores.items():
        # Added one at a time, busy time first, as _table_row adds a table's columns: a reading
        # and its trace give the same floats on every Python (sum() compensates from 3.12 on).
        busy = cols[(_BUSY, cpu)] = reduce(add, map(modes.get, BUSY_MODES, zeros), 0.0)
        cols[(_TOTAL, cpu)] = reduce(add, [s for mode, s in modes.items() if mode not in _BUSY_SET], busy)
    if data.procs_running is not None:
        cols[_RUNNING] = float(data.procs_running)
    if data.procs_blocked is not None:
        cols[_BLOCKED] = float(data.procs_blocked)
    return cols


_TABLE_ROW_KEYS = RowKeys((_BUSY, _TOTAL))


def _table_row(table: CoreTable, running: int | None, blocked: int | None) -> ColumnRow:
    extra = ((_RUNNING,) if running is not None else ()) + ((_BLOCKED,) if blocked is not None else ())
    keys = _TABLE_ROW_KEYS(table.names, extra)
    busy = table.sums(BUSY_MODES)
    total = table.sums([mode for mode in table.modes if mode not in _BUSY_SET], busy)
    values = list(chain.from_iterable(zip(busy, total)))
    if running is not None:
        values.append(float(running))
    if blocked is not None:
        values.append(float(blocked))
    return ColumnRow(keys, values)


@dataclass(frozen=True, slots=True)
class CpuWindowStats:
    busy_ratio: dict[str, float]
    saturated_cores: int | None
    busy_mean_ratio: float | None
    busy_max_ratio: float | None
    procs_running_mean: float | None
    procs_running_max: float | None
    procs_blocked_mean: float | None
    procs_blocked_max: float | None


def cores(view: WindowView) -> list[str]:
    return sorted({key[1] for key in view.columns if isinstance(key, tuple) and key[0] == _BUSY}, key=_core_order)


def busy_ratio(view: WindowView, cpu: str) -> float | None:
    busy = view.increase((_BUSY, cpu))
    total = view.increase((_TOTAL, cpu))
    if busy is None or total is None or total[0] <= 0:
        return None
    return min(1.0, max(0.0, busy[0] / total[0]))


def summarize(view: WindowView, settings: Settings) -> CpuWindowStats:
    threshold = settings[SATURATION_THRESHOLD]
    ratios = {cpu: r for cpu in cores(view) if (r := busy_ratio(view, cpu)) is not None}
    values = list(ratios.values())
    running = view.column(_RUNNING)
    blocked = view.column(_BLOCKED)
    return CpuWindowStats(
        busy_ratio=ratios,
        saturated_cores=sum(1 for r in values if r >= threshold) if values else None,
        busy_mean_ratio=mean(values),
        busy_max_ratio=maximum(values),
        procs_running_mean=mean(running),
        procs_running_max=maximum(running),
        procs_blocked_mean=mean(blocked),
        procs_blocked_max=maximum(blocked),
    )


def _core_order(cpu: str) -> tuple[int, str]:
    return (int(cpu), cpu) if cpu.isdigit() else (1 << 30, cpu)


# -- what the verdict reads ------------------------------------------------------------------


def saturated_cores(view: WindowView, level: float) -> Column:
    """How many cores were busy at least ``level`` of each sampling interval; each count is
    stamped with the time its interval starts."""
    keys = [k[1] for k in view.columns if isinstance(k, tuple) and k[0] == _BUSY]
    # An interval's count depends on its two rows alone: each pass counts only the new ones,
    # reading only the rows they span.
    memo = view.interval_memo(("saturated_cores", level))
    first = view.first_row
    intervals = len(view.times) - 1
    new = [j for j in range(intervals) if first + j not in memo] if memo is not None else list(range(intervals))
    if new:
        start = new[0]
        pairs = [(view.tail((_BUSY, c), start), view.tail((_TOTAL, c), start))
                 for c in keys if (_TOTAL, c) in view.columns]
        for j in new:
            i = j - start
            count = 0.0
            for b, t in pairs:
                dt = t[i + 1] - t[i]
                if dt > 0 and (b[i + 1] - b[i]) >= level * dt:
                    count += 1
            if memo is None:
                memo = {}
            memo[first + j] = count
    counts = [memo[first + j] for j in range(intervals)] if intervals > 0 else []
    return Column(view.times[:-1], counts)


def procs_blocked(view: WindowView) -> Column:
    """Tasks in uninterruptible sleep (usually IO) at each sample."""
    return view.series(_BLOCKED)
