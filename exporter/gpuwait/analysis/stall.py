"""Collectives that do not end (A9, A12): a job whose ranks wait in a collective that a peer
never joins (a rank that died, hangs in its own code or took another branch) keeps every
other rank's GPU busy doing nothing until PyTorch's NCCL watchdog aborts it (10 minutes by
default, ``torch.distributed.init_process_group(timeout=...)``) or for ever.

The signs, each from how NCCL runs a collective:

- **A kernel stays resident.** NCCL's kernel polls for its peers' data on the device; it
  does not return while it waits, so the driver's utilization (the share of time a kernel
  ran) reads 100 % (NVIDIA/nccl#1432, #403).
- **Few SMs and no memory traffic.** It runs one thread block per channel (at most
  MAXCHANNELS, 64, in src/include/device.h, fewer in practice), so GPM SM activity stays
  at the share of SMs its channels hold, under half on the GPUs NCCL targets; the blocks
  spin on flags in L2, so the memory controller rests. A compute phase without any
  communication (the look-alike) keeps SM activity or memory traffic up.
- **No bytes move.** A collective that progresses moves its data over NVLink or over the
  GPU's PCIe link (to a NIC with GPUDirect RDMA, or staged through host memory); a stalled
  one moves none.
- **No operation completes**, where NCCL Inspector's dump is read (collectors.nccl): a
  completion in the span is proof of progress, and a GPU whose ranks completed nothing for
  the span is stalled on that count too.

The signs must hold over the whole of the last ``verdict.collective.stall-after``: one
long collective (a large all-reduce over a slow network) moves bytes, and a short quiet
spell is a step boundary.
"""

from __future__ import annotations

import math

from gpuwait.analysis.activity import MAX_SAMPLE_PERIOD, PINNED
from gpuwait.analysis.collectives import GpuCollectives
from gpuwait.analysis.evidence.host_transfer import both_directions, pcie_rate
from gpuwait.analysis.evidence.host_transfer import QUIET_LINK_SHARE, link_capacity
from gpuwait.analysis.timeseries import Grid
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.collectors.gpu.payload import GpuDevice
from gpuwait.core.config import Option, Settings, parse_duration
from gpuwait.core.facts import pcie_link_capacity
from gpuwait.core.ring import WindowView
from gpuwait.core.series import mean

STALL_AFTER = Option("verdict.collective.stall-after", parse_duration, 30.0,
                     "How long a GPU's kernel must stay resident with few SMs active, its memory resting and "
                     "no bytes moving over NVLink or PCIe (and, with NCCL Inspector, no operation completed) "
                     "before its collective counts as stalled (gpuwait_gpu_collective_stalled); at most the "
                     "analysis window.")

OPTIONS = (STALL_AFTER,)

#: GPM SM activity above this is more than NCCL's channels can hold (one block per channel).
MAX_COLLECTIVE_SM_ACTIVE = 0.5
#: Memory-controller (or GPM DRAM) activity at or below this is resting: flags polled in L2.
RESTING_MEMORY = 0.05
#: The link judged against where NVML does not tell the trained one: PCIe Gen3 x16, the
#: slowest that GPU servers run NCCL over.
FALLBACK_LINK = (3, 16)
#: Share of the span's instants that must have a utilization sample.
MIN_COVERAGE = 0.8


def stall_start(grid: Grid, settings: Settings) -> int:
    """The first instant of the span a stall is judged over (the last stall-after)."""
    end = grid.times[-1]
    span = min(settings[STALL_AFTER], settings.analysis_window)
    return next(i for i, t in enumerate(grid.times) if t >= end - span)


def collective_stalled(view: WindowView, grid: Grid, gpu: tuple[str, str], device: GpuDevice | None,
                       collectives: GpuCollectives | None, settings: Settings) -> bool | None:
    """Whether the GPU sat in a collective that did not end for the last
    ``verdict.collective.stall-after``; None when the window cannot tell (too short, too
    few samples) or the GPU runs no process (where NVML cannot list them, the signs alone
    decide)."""
    if device is None or device.processes == ():
        return None
    span = min(settings[STALL_AFTER], settings.analysis_window)
    end = grid.times[-1]
    # The window starts at its first GPU sample at or after its nominal start.
    if grid.times[0] > end - span + MAX_SAMPLE_PERIOD:
        return None
    first = stall_start(grid, settings)
    util = grid.hold(gpu_window.utilization(view, gpu))[first:]
    known = [u for u in util if u == u]
    if len(known) < MIN_COVERAGE * len(util):
        return None
    if collectives is not None and collectives.last_operation_age_seconds is not None:
        if collectives.last_operation_age_seconds < span:
            return False
    if min(known) < PINNED:
        return False
    sm = [v for v in grid.hold(gpu_window.sm_active(view, gpu))[first:] if v == v]
    if sm and max(sm) > MAX_COLLECTIVE_SM_ACTIVE:
        return False
    memory_column = gpu_window.dram_active(view, gpu) if sm else gpu_window.memory_busy(view, gpu)
    memory = [v for v in grid.hold(memory_column)[first:] if v == v]
    if not memory or max(memory) > RESTING_MEMORY:
        return False
    capacity = link_capacity(device) or pcie_link_capacity(*FALLBACK_LINK)
    rx, tx = gpu_window.gpm_nvlink_rates(view, gpu)
    traffic = [_mean(pcie_rate(view, grid, gpu)[first:]),
               _mean(both_directions(grid.hold(rx), grid.hold(tx))[first:])]
    return all(t != t or t < QUIET_LINK_SHARE * capacity for t in traffic)


def _mean(values: list[float]) -> float:
    m = mean([v for v in values if v == v])
    return math.nan if m is None else m
