"""Evidence from NCCL's own timing of the GPU's collectives (NCCL Inspector, collectors.nccl;
A10, A12): what the host can only infer from a resident kernel's footprint, the job's own
records split into the wait for a late rank and the transfer.

A GPU in a collective keeps NCCL's kernel resident whether it moves data or waits for a peer
(analysis.activity): the host sees the same footprint either way. NCCL Inspector times each
collective by its kernels on the GPU (coll_timing_source kernel_gpu), waits included, per
rank of each communicator. Set against the other ranks of the communicator on this node
(analysis.collectives.peer_waits), the time splits in two:

- **The wait for a later rank** (sync). Every rank leaves a collective at about the same
  time, so a rank's extra time over the rank that arrived last is its wait for it
  (NVIDIA/nccl#460). Where that wait is most of the GPU's collective time, the instants it
  sits in a resident collective are the barrier itself: direct sync evidence, and the rank
  that arrived last is the straggler. Where it is not, NCCL's timing contradicts the host's
  inference that those instants wait for a local peer (a peer still computing while this GPU
  is in its kernel): they are mostly transfer, and the host's sync evidence is dropped. A
  collective that is long because its message is large has no spread at all: it is never
  sync on this count.
- **The transfer** (network). NCCL's bus bandwidth is normalised so that it can be set
  against the speed of the links the collective crosses (nccl-tests doc/PERFORMANCE.md). A
  communicator that spans nodes is bound by the GPU's nearest NICs. Its transfer (the
  collective time less the wait for later ranks) running at less than half of the GPU's
  share of their rate, while those NICs' ports carry bytes through most of the GPU's time in
  the collective, is a network that delivers less than its links' speed (congestion, a
  degraded port): direct network evidence at the instants the ports carry it. The ports must
  be busy: a collective slow because a rank on another node is late leaves them quiet while
  it waits (each step of a ring or a tree needs its peer's data, so the exchange stalls at
  the missing rank until it arrives), and small messages leave them at noise. Ports that
  also carry another job's traffic count as busy; the collective's own slowness is still
  what the rule asks for. A large message at full bus bandwidth is not slow on this count: the rule stays
  silent and the link evidence (analysis.evidence.network) judges it. Collectives within a
  node (NVLink, whose rate NVML does not report) are not judged on bandwidth.

The split is a mean over the period it is computed on, so a lateness that began a few
seconds ago is diluted over the whole window: the recent instants (verdict.short-window) are
judged on the timing of the recent reads, the earlier ones on the window's (``over``), as the
links are (analysis.evidence.network).

"Most" is the half: of two parts of one time, the larger. Without Inspector records nothing
here applies and the host's evidence stands alone. Prometheus-mode files give no counts, so
no spread: the sync rule does not apply, and their bus bandwidth gauge (waits included, so
the busy ports decide) stands in for the transfer's; nor does it for a GPU whose
communicator has no other rank on this node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuwait.analysis.activity import GpuActivity
from gpuwait.analysis.attribution import DIRECT
from gpuwait.analysis.collectives import GpuCollectives

#: Of two parts of one collective time, the larger: most of it.
MOST = 0.5


def in_collective(act: GpuActivity) -> list[bool]:
    """Instants the GPU looks like it sits in a resident collective: NCCL's footprint, or a
    kernel resident on almost no SMs."""
    return [f > 0.0 or (r == r and r > 0.0) for f, r in zip(act.footprint, act.resident)]


def sync(timing: GpuCollectives | None, act: GpuActivity) -> list[float] | None:
    """Per instant, the sync evidence NCCL's timing gives; None where it says nothing (the
    host's evidence stands)."""
    if timing is None or timing.peer_wait_ratio is None:
        return None
    if timing.peer_wait_ratio < MOST:
        return [0.0] * len(act.footprint)
    return [DIRECT if c else 0.0 for c in in_collective(act)]


def straggler(timing: GpuCollectives | None) -> bool | None:
    """Whether NCCL's timing names this GPU the rank the others wait for (it arrived last in
    a communicator whose other ranks spent most of their collective time waiting); None
    where its timing says nothing about its peers."""
    if timing is None or timing.peer_wait_ratio is None:
        return None
    return timing.waited_for_ratio is not None and timing.waited_for_ratio >= MOST


def network(timing: GpuCollectives | None, act: GpuActivity, ports: Sequence[Sequence[float]],
            min_rate: float, start: int = 0) -> list[float] | None:
    """Per instant, the network evidence NCCL's timing gives; ``ports`` are the rates on the
    grid of the GPU's nearest NICs' ports, ``min_rate`` the rate below which a port carries
    noise, not traffic (verdict.network.min-peak). Only the instants from ``start`` on are
    judged (the period ``timing`` covers). None where it says nothing."""
    if timing is None or timing.capacity != "nic" or not ports:
        return None
    ratio = timing.transfer_capacity_ratio
    if ratio is None:
        ratio = timing.bus_capacity_ratio
    if ratio is None or ratio >= MOST:
        return None
    inside = [c and i >= start for i, c in enumerate(in_collective(act))]
    busy = [any(p[i] == p[i] and p[i] >= min_rate for p in ports) for i in range(len(inside))]
    collective = sum(inside)
    if collective == 0 or sum(c and b for c, b in zip(inside, busy)) < MOST * collective:
        return None
    return [DIRECT if c and b else 0.0 for c, b in zip(inside, busy)]


def over(window: Sequence[float] | None, recent: Sequence[float] | None, start: int,
         otherwise: Sequence[float]) -> list[float] | None:
    """The evidence of the window's timing before ``start`` and of the recent timing from
    it, ``otherwise`` where either says nothing; None where neither says anything."""
    if window is None and recent is None:
        return None
    before = window if window is not None else otherwise
    after = recent if recent is not None else otherwise
    return list(before[:start]) + list(after[start:])


@dataclass(frozen=True, slots=True)
class Timed:
    """What NCCL's timing says about one GPU over a pass: its sync evidence (the host's where
    the timing says nothing), its network evidence and whether it is the straggler (None
    where the timing does not cover its peers)."""

    sync: list[float]
    network: list[float] | None
    straggler: bool | None


def timed(window: GpuCollectives | None, recent: GpuCollectives | None, act: GpuActivity,
          ports: Sequence[Sequence[float]], start: int, host_sync: Sequence[float], min_rate: float) -> Timed:
    """The evidence of the window's timing (``window``) before ``start``, of the recent
    reads' (``recent``) from it."""
    told = over(sync(window, act), sync(recent, act), start, host_sync)
    links = over(network(window, act, ports, min_rate), network(recent, act, ports, min_rate, start=start),
                 start, [0.0] * len(host_sync))
    return Timed(list(host_sync) if told is None else told, links, straggler(window))
