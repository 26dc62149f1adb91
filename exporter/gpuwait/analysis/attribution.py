"""Idle-time attribution: for each instant, the share of it a GPU had no work on, and which
concurrent evidence explains that wait — and from the shares, the verdict (A14's order:
computing or waiting, then waiting on what).

Idle time is fractional: an instant the GPU was idle for 40 % of adds 0.4 of an instant to
one cause, so the causes' shares add up to the window's idle fraction and a dashboard can
stack them under the utilization curve.

Which cause an instant goes to is decided by the strength of its evidence, not by a fixed
order: evidence that shows the mechanism itself on this GPU or its owner (the link at its
capacity, the owner's threads stalled on reads in flight, its CPU demand refused by the
quota, a peer still computing at the barrier) outranks evidence that is only compatible
with a cause (a saturated core, which is as often a thread spinning in a CUDA sync or an
MPI progress loop as a decoder), which outranks host-wide evidence not scoped to the owner.
Equal strengths fall back on the method's order (core.facts.EVIDENCE_ORDER).

Part of an instant's idle time may have had a kernel resident (kernels too small to keep the
SMs busy, or a collective waiting inside its kernel). Only evidence of a collective's wait
(RESIDENT_CAUSES) explains that part: a GPU starved by its input has no kernel to run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress

from gpuwait.core.facts import CAUSES, EVIDENCE_ORDER

#: Evidence of a pause that is the job's own (writing a checkpoint, an inference server with no
#: request to serve): idle time it explains is ``none``, not ``insufficient_work``; nothing
#: upstream starved the GPU.
PAUSE = "checkpoint"

#: Evidence strengths: the mechanism itself, seen on this GPU or its owner.
DIRECT = 3.0
#: Compatible with the cause, but also what other causes look like from the host.
INFERRED = 2.0
#: Host-wide, not scoped to the GPU's owner: it names a cause only when nothing else does.
HOST = 1.0

#: The causes whose wait happens inside a resident kernel: NCCL's kernels stay on the GPU
#: while they wait for the network or for a peer (NVIDIA/nccl#1432).
RESIDENT_CAUSES = ("sync", "network")


@dataclass(frozen=True, slots=True)
class Attribution:
    samples: int
    idle_ratio: float
    #: cause -> fraction of the window's time idle for that cause (sums to idle_ratio)
    wait_ratio: dict[str, float]
    #: fraction of the busy time during which clocks were held down by power/thermal limits
    throttled_busy_ratio: float


def attribute(
    idle: Sequence[float],
    evidence: Mapping[str, Sequence[float]],
    demand: Sequence[bool],
    throttled: Sequence[bool],
    order: Sequence[str] = (PAUSE, *EVIDENCE_ORDER),
    start: int = 0,
    resident: Sequence[float] | None = None,
    copying: Sequence[float] | None = None,
) -> Attribution:
    """``idle`` is the share of each grid instant the GPU had no work on (0..1, NaN where
    unknown); ``evidence`` maps a cause to its strength at each instant (0 or False: absent).
    Idle time no evidence explains is ``insufficient_work`` when the GPU's owner is there
    and active (demand), else ``none`` (A1: no demand, nothing to fix). ``resident`` is the
    part of each instant's idle share a kernel was resident for; only RESIDENT_CAUSES explain
    it, else it is ``insufficient_work`` (the GPU had a kernel to run, whatever its owner's
    demand). ``copying`` is the share of each instant a copy into the GPU surely ran: the
    kernel-free idle time it covers waited for that copy (``host_transfer``; ``none`` where the
    instant is the job's own pause), since the data being copied was ready, whatever else
    the host shows. Instants before ``start`` are left out (the long and the short window
    share one set of sequences)."""
    totals = dict.fromkeys(CAUSES, 0.0)
    causes = [(c, evidence[c]) for c in order if evidence.get(c) is not None]
    in_kernel = [(c, v) for c, v in causes if c in RESIDENT_CAUSES]
    pause = evidence.get(PAUSE)
    strongest = _strongest(causes, start, len(idle))
    strongest_in_kernel = _strongest(in_kernel, start, len(idle))
    samples = 0
    busy = busy_throttled = 0.0
    for i in range(start, len(idle)):
        x = idle[i]
        if x != x:
            continue
        samples += 1
        if x < 1.0:
            busy += 1.0 - x
            if throttled[i]:
                busy_throttled += 1.0 - x
        if x <= 0.0:
            continue
        r = min(x, resident[i]) if resident is not None and resident[i] == resident[i] else 0.0
        free = x - r
        if copying is not None and free > 0.0:
            c = copying[i]
            c = min(free, c) if c == c and c > 0.0 else 0.0
            if c > 0.0:
                totals["none" if pause is not None and pause[i] else "host_transfer"] += c
                free -= c
        if free > 0.0:
            totals[strongest[i] or ("insufficient_work" if demand[i] else "none")] += free
        if r > 0.0:
            # A kernel was resident: the GPU had work, too little to keep its SMs busy (A4),
            # whatever the owner's CPU says about demand.
            totals[strongest_in_kernel[i] or "insufficient_work"] += r
    if samples == 0:
        return Attribution(0, 0.0, dict.fromkeys(CAUSES, 0.0), 0.0)
    ratios = {cause: totals[cause] / samples for cause in CAUSES}
    return Attribution(samples, sum(totals.values()) / samples, ratios, busy_throttled / busy if busy else 0.0)


def _strongest(causes: Sequence[tuple[str, Sequence[float]]], start: int, n: int) -> list[str | None]:
    """Per instant (from ``start``; None before it), the cause with the strongest evidence, the
    first of ``causes`` among equals, ``none`` for a pause; None where no evidence is there.
    Worked out a cause at a time over the instants where it has evidence, which are few
    beside the instants where the GPU waits and every cause would be asked."""
    best: list[str | None] = [None] * n
    strength = [0.0] * n
    for cause, values in causes:
        name = "none" if cause == PAUSE else cause
        # Absent evidence is 0 or False; NaN passes the selector and fails the comparison.
        for k in compress(range(start, n), values[start:n]):
            v = float(values[k])
            if v > strength[k]:
                strength[k] = v
                best[k] = name
    return best


@dataclass(frozen=True)
class VerdictRules:
    #: Below this idle fraction the GPU counts as computing, whatever waits remain.
    min_idle_ratio: float = 0.15
    #: A cause must explain at least this share of the idle time to be named.
    min_cause_share: float = 0.3
    #: Busy samples under power/thermal clock limits, as a share, that make it "throttled".
    min_throttled_share: float = 0.3


def verdict(attribution: Attribution, rules: VerdictRules = VerdictRules()) -> str:
    """The primary cause for one GPU over the window."""
    if attribution.samples == 0:
        return "none"
    if attribution.idle_ratio < rules.min_idle_ratio:
        return "throttled" if attribution.throttled_busy_ratio >= rules.min_throttled_share else "none"
    waits = {c: r for c, r in attribution.wait_ratio.items() if c not in ("none", "throttled")}
    cause, share = max(waits.items(), key=lambda kv: kv[1])
    if share < rules.min_cause_share * attribution.idle_ratio:
        return "none"
    return cause
