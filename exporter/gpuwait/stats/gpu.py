"""Window statistics of the GPUs, and how their samples enter the window ring.

Two kinds of values reach the ring from the fast ``gpu`` source: the driver's own
utilization samples (several per read, stamped by the driver, arriving with some delay) and
values read at the tick itself (PCIe counters, clock-event reasons, GPM). ``SlotRows`` puts
both on one grid of --sample.interval slots so that the ring keeps one row per interval
whatever the number of GPUs, rows stay in time order, and a late driver sample still lands
in the slot it was taken in.

Ring keys are (signal, gpu index, uuid) tuples.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from gpuwait.config import Settings
from gpuwait.nvml.values import CLOCK_EVENT_REASONS
from gpuwait.ring import WindowView
from gpuwait.stats.series import mean, quantile, valid, window_rate

#: Ring signals holding a 0..1 ratio per sample, and the window mean each feeds.
RATIO_SIGNALS = ("mem", "sm", "occ", "tensor", "dram")
#: GPM rates (bytes per second over the tick), averaged over the window.
GPM_RATE_SIGNALS = ("gpm_pcie_tx", "gpm_pcie_rx", "gpm_nvl_tx", "gpm_nvl_rx")


class SlotRows:
    """Merges timed values into at most one ring row per ``step`` of time.

    ``add`` files a value under the slot its time falls in (averaging several values of one
    key in one slot, or keeping the last for ``last=True``). ``flush(until)`` hands out, in
    time order, the slots that end at or before ``until``; a value that arrives for a slot
    already handed out goes to the next open slot instead, so rows never go back in time.
    """

    __slots__ = ("step", "_pending", "_emitted")

    def __init__(self, step: float) -> None:
        if step <= 0:
            raise ValueError("step must be positive")
        self.step = step
        self._pending: dict[int, dict[Hashable, list[float]]] = {}
        self._emitted: int | None = None

    def _slot(self, t: float) -> int:
        slot = math.floor(t / self.step)
        if self._emitted is not None and slot <= self._emitted:
            slot = self._emitted + 1
        return slot

    def add(self, t: float, key: Hashable, value: float, last: bool = False) -> None:
        if value != value:
            return
        cell = self._pending.setdefault(self._slot(t), {})
        acc = cell.get(key)
        if acc is None or last:
            cell[key] = [value, 1.0]
        else:
            acc[0] += value
            acc[1] += 1.0

    def flush(self, until: float) -> list[tuple[float, dict[Hashable, float]]]:
        ready = sorted(s for s in self._pending if (s + 1) * self.step <= until)
        rows = []
        for slot in ready:
            cell = self._pending.pop(slot)
            rows.append(((slot + 0.5) * self.step, {k: acc[0] / acc[1] for k, acc in cell.items()}))
            self._emitted = slot
        return rows

    def __len__(self) -> int:
        return len(self._pending)


@dataclass(frozen=True, slots=True)
class GpuWindow:
    index: str
    uuid: str
    utilization_mean: float | None = None
    utilization_p10: float | None = None
    utilization_p50: float | None = None
    utilization_p90: float | None = None
    #: Fraction of utilization samples below collector.gpu.idle-threshold.
    idle_ratio: float | None = None
    utilization_samples: int = 0
    memory_busy_mean: float | None = None
    sm_active_mean: float | None = None
    sm_occupancy_mean: float | None = None
    tensor_active_mean: float | None = None
    dram_active_mean: float | None = None
    #: direction ("tx"/"rx") -> bytes per second over the window
    pcie_rate: dict[str, float] = field(default_factory=dict)
    nvlink_rate: dict[str, float] = field(default_factory=dict)
    #: reason -> fraction of the window's ticks with that clock-event reason active
    clocks_event_ratio: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GpuWindowStats:
    gpus: tuple[GpuWindow, ...]


def summarize(view: WindowView, settings: Settings) -> GpuWindowStats:
    threshold = settings["collector.gpu.idle-threshold"]
    gpus = sorted({(k[1], k[2]) for k in view.columns if isinstance(k, tuple) and len(k) == 3},
                  key=lambda g: (int(g[0]) if g[0].isdigit() else 1 << 30, g[1]))
    return GpuWindowStats(tuple(_summarize_gpu(view, index, uuid, threshold) for index, uuid in gpus))


def _summarize_gpu(view: WindowView, index: str, uuid: str, threshold: float) -> GpuWindow:
    def column(signal: str) -> list[float]:
        return view.column((signal, index, uuid))

    util = valid(column("util"))
    means = {signal: mean(column(signal)) for signal in RATIO_SIGNALS}
    pcie = {}
    for direction in ("tx", "rx"):
        rate = window_rate(view.times, column(f"pcie_{direction}"))
        if rate is None:
            rate = mean(column(f"gpm_pcie_{direction}"))
        if rate is not None:
            pcie[direction] = rate
    nvlink = {d: r for d in ("tx", "rx") if (r := mean(column(f"gpm_nvl_{d}"))) is not None}
    return GpuWindow(
        index=index, uuid=uuid,
        utilization_mean=mean(util),
        utilization_p10=quantile(util, 0.10),
        utilization_p50=quantile(util, 0.50),
        utilization_p90=quantile(util, 0.90),
        idle_ratio=(sum(1 for u in util if u < threshold) / len(util)) if util else None,
        utilization_samples=len(util),
        memory_busy_mean=means["mem"],
        sm_active_mean=means["sm"],
        sm_occupancy_mean=means["occ"],
        tensor_active_mean=means["tensor"],
        dram_active_mean=means["dram"],
        pcie_rate=pcie,
        nvlink_rate=nvlink,
        clocks_event_ratio=reason_ratios(column("reasons")),
    )


def reason_ratios(bitmasks: Iterable[float]) -> dict[str, float]:
    masks = [int(m) for m in valid(list(bitmasks))]
    if not masks:
        return {}
    return {name: sum(1 for m in masks if m & bit) / len(masks) for bit, name in CLOCK_EVENT_REASONS}


def device_columns(data) -> dict[Hashable, float]:
    """What the slow GPU source keeps per sample: each owner's CPU time and running threads,
    so the verdict can tell an owner that is working (demand, A1) from one that sleeps."""
    cols: dict[Hashable, float] = {}
    for owner, state in getattr(data, "owners", {}).items():
        cols[("owner_cpu", owner)] = state.cpu_seconds_total
        cols[("owner_running", owner)] = float(state.running)
        cols[("owner_blocked", owner)] = float(state.blocked)
    return cols
