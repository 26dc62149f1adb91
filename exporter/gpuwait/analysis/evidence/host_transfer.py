"""Host-transfer evidence: the GPU's PCIe link carrying host-device copies near its capacity
(A9). Capacity is the link as trained now (generation and width): a downtrained link is
exactly when copies start to be the wait."""

from __future__ import annotations

from collections.abc import Sequence

from gpuwait.analysis.timeseries import HOLD_INTERVALS, Grid
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.collectors.gpu.payload import GpuDevice
from gpuwait.core.config import Option, Settings, parse_fraction
from gpuwait.core.facts import pcie_link_capacity
from gpuwait.core.ring import WindowView

PCIE_SHARE = Option("verdict.pcie.share", parse_fraction, 0.5,
                    "Share of the PCIe link's capacity at which host-device copies count as the wait.")

OPTIONS = (PCIE_SHARE,)


def host_transfer(view: WindowView, grid: Grid, gpu: tuple[str, str], device: GpuDevice | None,
                  settings: Settings) -> list[bool]:
    link = getattr(device, "pcie", None)
    capacity = pcie_link_capacity(getattr(link, "generation", None), getattr(link, "width", None))
    if capacity is None:
        return [False] * len(grid)
    rate = pcie_rate(view, grid, gpu)
    limit = settings[PCIE_SHARE] * capacity
    return [r == r and r >= limit for r in rate]


def pcie_rate(view: WindowView, grid: Grid, gpu: tuple[str, str]) -> list[float]:
    """Bytes per second over the GPU's PCIe link, both directions, at each instant: from the
    driver's byte counters, or from GPM where the GPU has no counters."""
    rate = grid.rates(gpu_window.pcie_bytes(view, gpu), HOLD_INTERVALS * grid.step)
    if not any(v == v for v in rate):
        rx, tx = gpu_window.gpm_pcie_rates(view, gpu)
        rate = both_directions(grid.hold(rx), grid.hold(tx))
    return rate


def both_directions(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """The sum where both are known, else whichever is (one direction of GPM may be absent)."""
    return [x + y if x == x and y == y else (x if x == x else y) for x, y in zip(a, b)]
