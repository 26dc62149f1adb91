"""Idle-time attribution: for each sample where a GPU was idle, which concurrent evidence
explains the wait — and from the shares, the verdict (A14's order: computing or waiting,
then waiting on what).

Every idle sample is given to exactly one cause, so the causes' shares add up to the idle
fraction: a dashboard can stack them under the utilization curve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuwait.core.facts import CAUSES, EVIDENCE_ORDER
#: Evidence of a pause the job takes on purpose (writing a checkpoint): idle time it explains
#: is ``none``, not ``insufficient_work``; nothing upstream starved the GPU.
PAUSE = "checkpoint"


@dataclass(frozen=True, slots=True)
class Attribution:
    samples: int
    idle_ratio: float
    #: cause -> fraction of the window's samples idle for that cause (sums to idle_ratio)
    wait_ratio: dict[str, float]
    #: fraction of the busy samples during which clocks were held down by power/thermal limits
    throttled_busy_ratio: float


def attribute(
    utilization: Sequence[float],
    evidence: Mapping[str, Sequence[bool]],
    demand: Sequence[bool],
    throttled: Sequence[bool],
    idle_threshold: float,
    order: Sequence[str] = EVIDENCE_ORDER,
) -> Attribution:
    """``utilization`` is 0..1 per grid point (NaN where unknown); the other sequences are
    aligned with it. Idle with no evidence is ``insufficient_work`` when the GPU's owner
    is there and active (demand), else ``none`` (A1: no demand, nothing to fix)."""
    counts = dict.fromkeys(CAUSES, 0)
    samples = busy = busy_throttled = 0
    for i, u in enumerate(utilization):
        if u != u:
            continue
        samples += 1
        if u >= idle_threshold:
            busy += 1
            busy_throttled += bool(throttled[i])
            continue
        cause = next((c for c in order if evidence.get(c) is not None and evidence[c][i]), None)
        if cause is None:
            paused = evidence.get(PAUSE) is not None and evidence[PAUSE][i]
            cause = "insufficient_work" if demand[i] and not paused else "none"
        counts[cause] += 1
    if samples == 0:
        return Attribution(0, 0.0, dict.fromkeys(CAUSES, 0.0), 0.0)
    ratios = {cause: counts[cause] / samples for cause in CAUSES}
    idle = sum(counts.values()) / samples
    return Attribution(samples, idle, ratios, busy_throttled / busy if busy else 0.0)


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
