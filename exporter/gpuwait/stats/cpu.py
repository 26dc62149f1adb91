"""Window statistics of CPU time: per-core busy fractions and how many cores are saturated.

The all-core mean hides a data loader pinned to one core (A3), so the maximum and the count
of saturated cores are computed beside it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from gpuwait.config import Settings
from gpuwait.ring import WindowView
from gpuwait.sources.cpu import BUSY_MODES, CpuData
from gpuwait.stats.series import maximum, mean, total_increase


def columns(data: CpuData) -> dict[Hashable, float]:
    cols: dict[Hashable, float] = {}
    for cpu, modes in data.cores.items():
        total = sum(modes.values())
        cols[("busy", cpu)] = sum(modes.get(m, 0.0) for m in BUSY_MODES)
        cols[("total", cpu)] = total
    if data.procs_running is not None:
        cols["procs_running"] = float(data.procs_running)
    if data.procs_blocked is not None:
        cols["procs_blocked"] = float(data.procs_blocked)
    return cols


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


def busy_ratio(view: WindowView, cpu: str) -> float | None:
    busy = total_increase(view.times, view.column(("busy", cpu)))
    total = total_increase(view.times, view.column(("total", cpu)))
    if busy is None or total is None or total[0] <= 0:
        return None
    return min(1.0, max(0.0, busy[0] / total[0]))


def summarize(view: WindowView, settings: Settings) -> CpuWindowStats:
    threshold = settings["collector.cpu.saturation-threshold"]
    cpus = sorted({key[1] for key in view.columns if isinstance(key, tuple) and key[0] == "busy"}, key=_core_order)
    ratios = {cpu: r for cpu in cpus if (r := busy_ratio(view, cpu)) is not None}
    values = list(ratios.values())
    running = view.column("procs_running")
    blocked = view.column("procs_blocked")
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
