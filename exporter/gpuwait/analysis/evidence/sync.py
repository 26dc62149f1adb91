"""Sync evidence: a peer GPU of the same owner that has not reached the collective while this
one waits in it or for it (A12). The GPUs of one job meet at each collective; the one that
arrives first waits for the last.

With NCCL a GPU waiting at the barrier keeps its collective kernel resident (utilization
100 %, SM activity at the collective's footprint): a resident wait while a peer still
computes is the barrier itself, direct evidence. A resident wait while a peer has no kernel
at all is a peer that has not arrived either, starved upstream: the wait is inferred. A GPU
with no kernel at all while a peer computes is not evidence of a barrier: with NCCL a GPU at
the barrier is never kernel-free, and GPUs of one owner that are not in lockstep idle that
way too. (A host-staged collective's wait for a straggler, MPI or Gloo, is not told apart
from too little work; once the exchange starts its link traffic shows it.)

Where NCCL Inspector's records time the GPU's collectives against its communicator's other
ranks on the node, that timing replaces this inference (analysis.evidence.collectives): it
tells the wait for a late rank from the transfer, which a resident kernel's footprint cannot.
"""

from __future__ import annotations

from collections.abc import Mapping

from collections.abc import Sequence

from gpuwait.analysis.activity import GpuActivity, centred
from gpuwait.analysis.attribution import DIRECT, INFERRED
from gpuwait.analysis.evidence.host_transfer import QUIET_LINK_SHARE, both_directions, link_capacity, pcie_rate
from gpuwait.analysis.timeseries import Grid
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.collectors.gpu.payload import GpuDevice
from gpuwait.core.ring import WindowView



def sync(gpu: tuple[str, str], owner: str, activity: Mapping[tuple[str, str], GpuActivity],
         owner_of: Mapping[tuple[str, str], str]) -> list[float]:
    """Per instant, the strength of the evidence that this GPU waits for a peer."""
    mine = activity[gpu]
    n = len(mine.idle)
    if not owner:
        return [0.0] * n
    peers = [activity[p] for p in activity if p != gpu and owner_of.get(p) == owner]
    out = [0.0] * n
    if not peers:
        return out
    for i in range(n):
        if mine.footprint[i] <= 0.0:
            continue
        if any(p.computing(i) for p in peers):
            out[i] = DIRECT
        elif any(p.idle[i] == p.idle[i] and p.idle[i] >= 0.5 for p in peers):
            out[i] = INFERRED
    return out


def quiet_wait(view: WindowView, grid: Grid, gpu: tuple[str, str], device: GpuDevice | None,
               mine: GpuActivity, host_links_quiet: Sequence[bool]) -> list[float]:
    """Per instant, inferred evidence that a resident collective waits for a peer that has not
    arrived: the GPU at NCCL's footprint while nothing moves, on its PCIe link (GPUDirect RDMA
    or host staging), its NVLinks (GPM) or any NIC or RDMA port of the host. A collective
    held back by the network moves its data slowly; one whose peer has not arrived moves
    none (NCCL's kernel spins on the peer's flags, NVIDIA/nccl#1432). The peer may be on
    another node, or hung (analysis.stall says so once it lasts). Where a rate is not known
    the instant says nothing."""
    n = len(mine.idle)
    if not any(f > 0.0 for f in mine.footprint):
        return [0.0] * n
    capacity = link_capacity(device)
    if capacity is None:
        return [0.0] * n
    floor = QUIET_LINK_SHARE * capacity
    pcie = pcie_rate(view, grid, gpu)
    rx, tx = gpu_window.gpm_nvlink_rates(view, gpu)
    nvlink = both_directions(centred(grid, rx), centred(grid, tx))
    return [INFERRED if (f > 0.0 and quiet and p == p and p < floor and not (v == v and v >= floor)) else 0.0
            for f, quiet, p, v in zip(mine.footprint, host_links_quiet, pcie, nvlink)]
