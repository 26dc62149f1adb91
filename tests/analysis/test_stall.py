"""A collective that does not end, against its look-alikes: a long compute phase without any
communication (SM activity or memory traffic stays up), a long collective that progresses
over a slow network (bytes move), tiny collectives that complete (NCCL Inspector sees them),
a job that went quiet (its kernel returned) and windows that cannot tell."""

import pytest

from gpuwait.analysis.collectives import GpuCollectives
from gpuwait.analysis.stall import STALL_AFTER, collective_stalled
from gpuwait.analysis.timeseries import Grid
from gpuwait.collectors.gpu.payload import GpuDevice
from gpuwait.core.config import Settings
from gpuwait.core.registry import registry, resolve
from gpuwait.core.ring import WindowView
from gpuwait.nvml.values import GpuProcess, PcieLink

GPU = ("0", "GPU-0")
STEP = 0.1
#: H100 SXM: PCIe Gen5 x16.
DEVICE = GpuDevice(0, "GPU-0", True, pcie=PcieLink(5, 16, 5, 16, 5), processes=(GpuProcess(4242, 6.0e10),))
#: 132 SMs, 16 NCCL channels spinning: one block each.
SPINNING_SM = 16 / 132


@pytest.fixture(scope="module")
def settings():
    registry()
    return resolve([])[0]


def window(seconds=40.0, util=1.0, sm=None, dram=None, mem=0.0, pcie_bytes_per_second=5e6, nvlink=None):
    n = int(seconds / STEP)
    times = [i * STEP for i in range(n)]
    pcie = [i * STEP * pcie_bytes_per_second / 2 for i in range(n)]
    columns = {
        ("util", *GPU): [util] * n, ("mem", *GPU): [mem] * n,
        ("pcie_tx", *GPU): pcie, ("pcie_rx", *GPU): list(pcie),
    }
    if sm is not None:
        columns[("sm", *GPU)] = [sm] * n
        columns[("dram", *GPU)] = [dram if dram is not None else 0.01] * n
    if nvlink is not None:
        columns[("gpm_nvl_tx", *GPU)] = [nvlink / 2] * n
        columns[("gpm_nvl_rx", *GPU)] = [nvlink / 2] * n
    return WindowView(times, columns), Grid(times, STEP)


def inspector(age):
    return GpuCollectives("GPU-0", 0, "", 1, "pid", None, None, None, "", None, age)


def stalled(settings, view_grid, device=DEVICE, collectives=None):
    view, grid = view_grid
    return collective_stalled(view, grid, GPU, device, collectives, settings)


def test_a_resident_collective_moving_nothing_is_stalled(settings):
    assert stalled(settings, window(sm=SPINNING_SM, dram=0.01)) is True


def test_without_gpm_a_pinned_gpu_with_resting_memory_and_quiet_links_is_stalled(settings):
    assert stalled(settings, window(mem=0.0)) is True


def test_a_long_compute_phase_without_communication_is_not(settings):
    # A GEMM-bound phase: most SMs busy, HBM streaming, nothing on the links.
    assert stalled(settings, window(sm=0.85, dram=0.45)) is False
    # The same seen without GPM: the memory controller is busy.
    assert stalled(settings, window(mem=0.35)) is False


def test_low_sm_compute_that_streams_memory_is_not(settings):
    # A memory-bound kernel (an embedding lookup, an optimizer step) keeps few SMs busy but
    # moves HBM: compute, not a spinning collective.
    assert stalled(settings, window(sm=0.2, dram=0.7)) is False


def test_a_long_collective_progressing_over_a_slow_link_is_not(settings):
    # An inter-node all-reduce at 100 Gb/s through GPUDirect RDMA: the NIC reads the GPU's
    # memory over its PCIe link at ~12 GB/s, far above 1 % of Gen5 x16.
    assert stalled(settings, window(sm=SPINNING_SM, dram=0.03, pcie_bytes_per_second=12e9)) is False
    # Within the node over NVLink.
    assert stalled(settings, window(sm=SPINNING_SM, dram=0.03, nvlink=200e9)) is False


def test_a_completed_operation_in_the_span_is_progress(settings):
    # Tiny all-reduces (latency-bound, a few bytes each) look quiet on every counter.
    assert stalled(settings, window(sm=SPINNING_SM), collectives=inspector(age=2.0)) is False
    assert stalled(settings, window(sm=SPINNING_SM), collectives=inspector(age=45.0)) is True


def test_a_kernel_that_returned_is_no_stall(settings):
    # The process waits on the host (a data loader, a rank blocked in its own code): no kernel.
    assert stalled(settings, window(util=0.0, sm=0.0)) is False
    assert stalled(settings, window(util=0.6, sm=SPINNING_SM)) is False


def test_what_cannot_be_told(settings):
    assert stalled(settings, window(seconds=20.0, sm=SPINNING_SM)) is None
    idle = GpuDevice(0, "GPU-0", True, pcie=DEVICE.pcie, processes=())
    assert stalled(settings, window(sm=SPINNING_SM), device=idle) is None
    assert stalled(settings, window(sm=SPINNING_SM), device=None) is None


def test_the_span_is_the_option(settings):
    longer = Settings({**settings.values, STALL_AFTER.name: 60.0})
    view, grid = window(seconds=65.0, sm=SPINNING_SM)
    assert collective_stalled(view, grid, GPU, DEVICE, None, longer) is True
    view, grid = window(seconds=40.0, sm=SPINNING_SM)
    assert collective_stalled(view, grid, GPU, DEVICE, None, longer) is None
