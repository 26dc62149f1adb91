"""Host-transfer evidence (A9), of two kinds:

- The GPU's PCIe link carrying host-device copies near its capacity. Capacity is the link as
  trained now (generation and width): a downtrained link is exactly when copies start to be
  the wait.
- The GPU idle while its link brings data in (``input_copy_share``): for the share of the
  instant the copy surely ran, the GPU waits for it and not for what produced the data (the
  batch being copied was ready), whatever else the host shows.
- The GPU idle through an instant while its link carries bytes in it and in the instants
  either side, and no NIC or RDMA port of the host moves a tenth as many: a copy in flight
  across the whole instant (or copies back to back), and nothing else. A kernel that reads a
  copy's data cannot start before the copy completes, so the GPU waits for it, however far
  under the link's capacity it runs: a copy from pageable memory runs at the rate the host's
  memcpy fills the driver's pinned staging buffer (CUDA C++ Programming Guide, page-locked
  host memory). A short copy at the end of a wait for the loader does not span an instant;
  the wait is the loader's. Bytes a NIC moves into or out of the GPU (GPUDirect RDMA) cross
  its link too; with the NICs quiet the bytes are not theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwait.analysis.activity import centred
from gpuwait.analysis.timeseries import HOLD_INTERVALS, Grid
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.collectors.gpu.payload import GpuDevice
from gpuwait.core.config import Option, Settings, parse_fraction
from gpuwait.core.facts import pcie_link_capacity
from gpuwait.core.ring import WindowView

PCIE_SHARE = Option("verdict.pcie.share", parse_fraction, 0.5,
                    "Share of the PCIe link's capacity at which host-device copies count as the wait.")

OPTIONS = (PCIE_SHARE,)


def link_capacity(device: GpuDevice | None) -> float | None:
    """Bytes per second the GPU's PCIe link carries as trained now; None when not known."""
    link = getattr(device, "pcie", None)
    return pcie_link_capacity(getattr(link, "generation", None), getattr(link, "width", None))


def host_transfer(view: WindowView, grid: Grid, gpu: tuple[str, str], device: GpuDevice | None,
                  settings: Settings) -> list[bool]:
    capacity = link_capacity(device)
    if capacity is None:
        return [False] * len(grid)
    rate = pcie_rate(view, grid, gpu)
    limit = settings[PCIE_SHARE] * capacity
    return [r == r and r >= limit for r in rate]


#: Traffic below this share of the GPU's PCIe link (as trained) is no copy.
QUIET_LINK_SHARE = 0.01
#: Bytes the host's NICs and RDMA ports move at an instant, as a share of what the GPU's link
#: moves, under which the link's bytes cannot be theirs.
NIC_SHARE = 0.1


def copy_share(view: WindowView, grid: Grid, gpu: tuple[str, str], device: GpuDevice | None,
               host_links: Sequence[float]) -> list[float]:
    """Per instant, the share of it a copy surely ran over the GPU's link: all of it where the
    link carried bytes in it and in the instants either side, with the NICs quiet (_spanning);
    elsewhere the bytes it moved at the link's capacity, which no copy outruns. 0 where the
    capacity is not known."""
    capacity = link_capacity(device)
    n = len(grid)
    if capacity is None:
        return [0.0] * n
    rate = pcie_rate(view, grid, gpu)
    spanning = _spanning(rate, capacity, host_links)
    return [1.0 if s else (min(1.0, r / capacity) if r == r else 0.0) for r, s in zip(rate, spanning)]


def _spanning(rate: Sequence[float], capacity: float, host_links: Sequence[float]) -> list[bool]:
    """Instants a copy (or copies back to back) spans: the link carried bytes in them and in
    the instants either side, while the host's NICs and RDMA ports moved under NIC_SHARE of
    them (GPUDirect RDMA bytes cross the link too)."""
    n = len(rate)
    moving = _host_copying(rate, capacity, host_links)
    return [0 < i < n - 1 and moving[i - 1] and moving[i] and moving[i + 1] for i in range(n)]


def _host_copying(rate: Sequence[float], capacity: float, host_links: Sequence[float]) -> list[bool]:
    """Instants the link carried more than a trickle while the host's NICs and RDMA ports moved
    under NIC_SHARE of its bytes: a copy between the GPU and host memory."""
    floor = QUIET_LINK_SHARE * capacity
    return [r == r and r >= floor and h == h and h < NIC_SHARE * r for r, h in zip(rate, host_links)]


#: Share of an instant a GPU must idle for a copy spanning it to be what it waits for.
COPY_COVERS = 0.9


def host_copies(view: WindowView, grid: Grid, gpu: tuple[str, str], device: GpuDevice | None,
                idle: Sequence[float], host_links: Sequence[float]) -> list[bool]:
    """Instants a copy spans (_spanning) that the GPU idled (``idle``: its kernel-free share)
    for COPY_COVERS of; ``host_links``: the bytes per second the host's NICs and RDMA ports
    move together."""
    capacity = link_capacity(device)
    if capacity is None:
        return [False] * len(grid)
    spanning = _spanning(pcie_rate(view, grid, gpu), capacity, host_links)
    return [s and x == x and x >= COPY_COVERS for s, x in zip(spanning, idle)]


def input_copy_share(view: WindowView, grid: Grid, gpu: tuple[str, str], device: GpuDevice | None,
                     host_links: Sequence[float]) -> list[float]:
    """Per instant, the least share of it a copy into the GPU ran: the bytes its link received
    at the link's capacity, which no copy outruns. A GPU idle while its input is copied in
    waits for the copy, and for nothing upstream of it: the batch being copied was ready. 0
    where the host's NICs and RDMA ports moved NIC_SHARE of those bytes or more (GPUDirect
    RDMA writes into the GPU's memory cross its link too), and where the capacity is not known."""
    capacity = link_capacity(device)
    n = len(grid)
    if capacity is None:
        return [0.0] * n
    rate = grid.rates(gpu_window.pcie_rx_bytes(view, gpu), HOLD_INTERVALS * grid.step)
    if not any(v == v for v in rate):
        rx, _ = gpu_window.gpm_pcie_rates(view, gpu)
        rate = centred(grid, rx)
    copying = _host_copying(rate, capacity, host_links)
    return [min(1.0, r / capacity) if c else 0.0 for r, c in zip(rate, copying)]


def pcie_rate(view: WindowView, grid: Grid, gpu: tuple[str, str]) -> list[float]:
    """Bytes per second over the GPU's PCIe link, both directions, at each instant: from the
    driver's byte counters, or from GPM where the GPU has no counters. Several evidences of a
    pass read it: it is worked out once per grid (and not to be changed)."""
    return grid.shared(("pcie_rate", gpu), view, lambda: _pcie_rate(view, grid, gpu))


def _pcie_rate(view: WindowView, grid: Grid, gpu: tuple[str, str]) -> list[float]:
    rate = grid.rates(gpu_window.pcie_bytes(view, gpu), HOLD_INTERVALS * grid.step)
    if not any(v == v for v in rate):
        rx, tx = gpu_window.gpm_pcie_rates(view, gpu)
        # GPM describes the interval that ends at its sample, as utilization does.
        rate = both_directions(centred(grid, rx), centred(grid, tx))
    return rate


def both_directions(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """The sum where both are known, else whichever is (one direction of GPM may be absent)."""
    return [x + y if x == x and y == y else (x if x == x else y) for x, y in zip(a, b)]
