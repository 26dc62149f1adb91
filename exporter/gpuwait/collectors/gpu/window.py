"""Window statistics of the GPUs, and how their samples enter the window ring.

Two kinds of values reach the ring from the fast ``gpu`` source: the driver's own
utilization samples (several per read, stamped by the driver, arriving with some delay) and
values read at the tick itself (PCIe counters, clock-event reasons, GPM). ``SlotRows`` puts
both on one grid of --sample.interval slots so that the ring keeps one row per interval
whatever the number of GPUs, rows stay in time order, and a late driver sample still lands
in the slot it was taken in.

Ring keys are (signal, gpu index, uuid) tuples; the slow ``gpu_device`` source keeps
(signal, owner) per owner of the GPUs' processes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from itertools import repeat
from operator import lt
from typing import NamedTuple

from gpuwait.collectors.gpu.payload import GpuDeviceData
from gpuwait.core.config import Option, Settings, parse_fraction
from gpuwait.core.facts import CLOCK_EVENT_REASONS
from gpuwait.core.ring import Column, WindowView
from gpuwait.core.series import added, interval_rates, mean, quantiles, valid

IDLE_THRESHOLD = Option("collector.gpu.idle-threshold", parse_fraction, 0.05,
                        "Utilization below which a GPU sample counts as idle in the window's idle fraction.",
                        "RATIO")

#: Signals of the fast source: the driver's utilization samples (GPU and memory controller),
#: the PCIe byte counters and the clock-event reason bitmask read at the tick.
UTIL, MEM, PCIE_TX, PCIE_RX, REASONS = "util", "mem", "pcie_tx", "pcie_rx", "reasons"
#: GPM metric (as the gateway names it) -> its signal.
GPM_SIGNALS = (
    ("sm_active", "sm"), ("sm_occupancy", "occ"), ("tensor_active", "tensor"), ("dram_active", "dram"),
    ("pcie_tx_bytes_per_second", "gpm_pcie_tx"), ("pcie_rx_bytes_per_second", "gpm_pcie_rx"),
    ("nvlink_tx_bytes_per_second", "gpm_nvl_tx"), ("nvlink_rx_bytes_per_second", "gpm_nvl_rx"),
)
_SM, _GPM_PCIE_TX, _GPM_PCIE_RX = "sm", "gpm_pcie_tx", "gpm_pcie_rx"
#: Ring signals holding a 0..1 ratio per sample, and the window mean each feeds.
RATIO_SIGNALS = (MEM, "sm", "occ", "tensor", "dram")
#: GPM rates (bytes per second over the tick), averaged over the window.
GPM_RATE_SIGNALS = ("gpm_pcie_tx", "gpm_pcie_rx", "gpm_nvl_tx", "gpm_nvl_rx")
#: Signals of the slow source, per owner.
_OWNER_CPU, _OWNER_RUNNING, _OWNER_BLOCKED = "owner_cpu", "owner_running", "owner_blocked"
_OWNER_READ_BYTES = "owner_read_bytes"


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


def gpus(view: WindowView) -> list[tuple[str, str]]:
    """(index, uuid) of every GPU in the fast source's window, in index order."""
    return sorted({(k[1], k[2]) for k in view.columns if isinstance(k, tuple) and len(k) == 3},
                  key=lambda g: (int(g[0]) if str(g[0]).isdigit() else 1 << 30, g[1]))


def summarize(view: WindowView, settings: Settings) -> GpuWindowStats:
    threshold = settings[IDLE_THRESHOLD]
    return GpuWindowStats(tuple(_summarize_gpu(view, index, uuid, threshold) for index, uuid in gpus(view)))


def _summarize_gpu(view: WindowView, index: str, uuid: str, threshold: float) -> GpuWindow:
    def column(signal: str) -> list[float]:
        return view.column((signal, index, uuid))

    util = valid(column(UTIL))
    p10, p50, p90 = quantiles(util, (0.10, 0.50, 0.90))
    means = {signal: mean(column(signal)) for signal in RATIO_SIGNALS}
    pcie = {}
    for direction, counter, gpm in (("tx", PCIE_TX, _GPM_PCIE_TX), ("rx", PCIE_RX, _GPM_PCIE_RX)):
        rate = view.rate((counter, index, uuid))
        if rate is None:
            rate = mean(column(gpm))
        if rate is not None:
            pcie[direction] = rate
    nvlink = {d: r for d in ("tx", "rx") if (r := mean(column(f"gpm_nvl_{d}"))) is not None}
    return GpuWindow(
        index=index, uuid=uuid,
        utilization_mean=mean(util),
        utilization_p10=p10,
        utilization_p50=p50,
        utilization_p90=p90,
        idle_ratio=(sum(map(lt, util, repeat(threshold))) / len(util)) if util else None,
        utilization_samples=len(util),
        memory_busy_mean=means[MEM],
        sm_active_mean=means["sm"],
        sm_occupancy_mean=means["occ"],
        tensor_active_mean=means["tensor"],
        dram_active_mean=means["dram"],
        pcie_rate=pcie,
        nvlink_rate=nvlink,
        clocks_event_ratio=reason_ratios(column(REASONS)),
    )


def reason_ratios(bitmasks: Iterable[float]) -> dict[str, float]:
    masks = list(map(int, valid(list(bitmasks))))
    if not masks:
        return {}
    # A GPU's window holds a handful of distinct masks: each reason's count is summed over
    # those, not over every tick (the same whole count, so the same ratio).
    seen = Counter(masks).items()
    return {name: sum(n for m, n in seen if m & bit) / len(masks) for bit, name in CLOCK_EVENT_REASONS}


def device_columns(data: GpuDeviceData) -> dict[Hashable, float]:
    """What the slow GPU source keeps per sample: each owner's CPU time and running threads,
    so the verdict can tell an owner that is working (demand, A1) from one that sleeps."""
    cols: dict[Hashable, float] = {}
    for owner, state in getattr(data, "owners", {}).items():
        cols[(_OWNER_CPU, owner)] = state.cpu_seconds_total
        cols[(_OWNER_RUNNING, owner)] = float(state.running)
        cols[(_OWNER_BLOCKED, owner)] = float(state.blocked)
        if state.read_bytes is not None:
            cols[(_OWNER_READ_BYTES, owner)] = state.read_bytes
    return cols


# -- what the verdict reads ------------------------------------------------------------------


def sm_active(view: WindowView, gpu: tuple[str, str]) -> Column:
    """GPM SM activity (0..1) per row; NaN throughout on GPUs without GPM."""
    return view.series((_SM, *gpu))


def utilization(view: WindowView, gpu: tuple[str, str]) -> Column:
    """The driver's utilization (fraction of time a kernel ran) per row."""
    return view.series((UTIL, *gpu))


def memory_busy(view: WindowView, gpu: tuple[str, str]) -> Column:
    """The driver's memory-controller utilization (fraction of time memory was read or
    written) per row, from the same samples as ``utilization``."""
    return view.series((MEM, *gpu))


def dram_active(view: WindowView, gpu: tuple[str, str]) -> Column:
    """GPM DRAM activity (0..1 of peak bandwidth) per row; NaN throughout without GPM."""
    return view.series(("dram", *gpu))


def clock_event_reasons(view: WindowView, gpu: tuple[str, str]) -> Column:
    """The clock-event reason bitmask (core.facts.CLOCK_EVENT_REASONS) per row."""
    return view.series((REASONS, *gpu))


def pcie_bytes(view: WindowView, gpu: tuple[str, str]) -> Column:
    """Bytes the GPU received and sent over PCIe, summed (the driver's byte counters)."""
    return Column(view.times, added(view.column((PCIE_RX, *gpu)), view.column((PCIE_TX, *gpu))))


def pcie_rx_bytes(view: WindowView, gpu: tuple[str, str]) -> Column:
    """Bytes the GPU received over PCIe (the driver's counter): host-to-device copies, and
    what a NIC writes into its memory (GPUDirect RDMA)."""
    return view.series((PCIE_RX, *gpu))


def gpm_pcie_rates(view: WindowView, gpu: tuple[str, str]) -> tuple[Column, Column]:
    """(receive, transmit) PCIe bytes per second from GPM, for GPUs without byte counters."""
    return view.series((_GPM_PCIE_RX, *gpu)), view.series((_GPM_PCIE_TX, *gpu))


def gpm_nvlink_rates(view: WindowView, gpu: tuple[str, str]) -> tuple[Column, Column]:
    """(receive, transmit) NVLink bytes per second from GPM; NaN throughout without GPM."""
    return view.series(("gpm_nvl_rx", *gpu)), view.series(("gpm_nvl_tx", *gpu))


class OwnerActivity(NamedTuple):
    #: CPU cores the owner used over its latest slow-tier interval
    cores: float
    #: its threads in uninterruptible sleep (D state) at the latest read
    blocked: float


class OwnerSeries(NamedTuple):
    """One owner's host side over the window, one value per slow-tier read."""

    #: CPU seconds used by its processes and their descendants (a counter)
    cpu_seconds: Column
    #: its threads in R state (running or runnable) at each read
    running: Column
    #: its threads in D state (uninterruptible sleep, e.g. waiting for a read) at each read
    blocked: Column
    #: bytes its processes read from block devices (a counter that drops when one exits)
    read_bytes: Column


def owner_series(view: WindowView, owner: str) -> OwnerSeries:
    return OwnerSeries(view.series((_OWNER_CPU, owner)), view.series((_OWNER_RUNNING, owner)),
                       view.series((_OWNER_BLOCKED, owner)), view.series((_OWNER_READ_BYTES, owner)))


def owner_activity(view: WindowView) -> dict[str, OwnerActivity]:
    """Per owner (its GPU processes and their descendants, e.g. DataLoader workers), from the
    ``gpu_device`` source's window: the CPU cores it used over its latest interval, and its
    threads in D state."""
    activity = {}
    for key in view.columns:
        if isinstance(key, tuple) and key[0] == _OWNER_CPU:
            owner = key[1]
            rates = interval_rates(view.times, view.columns[key])
            running = valid(view.columns.get((_OWNER_RUNNING, owner), []))
            blocked = valid(view.columns.get((_OWNER_BLOCKED, owner), []))
            # With one sample yet, a running thread is taken to use a core.
            cores = rates[-1] if rates else (running[-1] if running else 0.0)
            activity[owner] = OwnerActivity(cores, blocked[-1] if blocked else 0.0)
    return activity
