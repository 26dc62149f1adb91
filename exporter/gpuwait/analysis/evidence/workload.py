"""What instrumented loops (gpuwait.client) add to the verdict.

A loop's measured data-wait share is direct evidence (A8): while the loop sat in ``next()``
its GPU had nothing to run. The loop reports totals, not instants, so the share is turned
into a number of the GPU's idle samples — the share times the window's samples, at most the
idle ones — and those samples are counted as a data wait: first where the host already shows
storage or CPU evidence, then where nothing else explains the idleness, and only then where
a weaker, inferred cause (PCIe, a peer, a link) was present. They count as ``storage`` when
the host's storage evidence over the GPU's idle instants outweighs its CPU evidence (each
instant counted at its evidence's strength), else as ``data_pipeline``.

A loop that reports its progress also settles demand (A1, A13): a training loop that steps
or waits for data has work; an inference server below verdict.workload.min-request-rate has
too little load for its idle GPU to be a problem. An inference server above it still spends
the time between requests outside its loop, and its GPU idles then because no request is
queued: that much of the GPU's idle time is the load's, not a wait (A13), and only the rest,
idle while the server was busy, can be one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuwait.analysis.attribution import DIRECT
from gpuwait.collectors.workload.source import WorkloadSource
from gpuwait.collectors.workload.window import OwnerWorkload
from gpuwait.core.config import Option, Settings, parse_fraction


def _rate(value) -> float:
    f = float(value)
    if not f >= 0:
        raise ValueError(f"must be a number >= 0: {value!r}")
    return f


MIN_DATA_WAIT = Option("verdict.workload.min-data-wait", parse_fraction, 0.05,
                       "Data-wait share an instrumented loop must report for it to count as evidence of a data wait.", "FRACTION")
MIN_REQUEST_RATE = Option("verdict.workload.min-request-rate", _rate, 1.0,
                          "Requests per second below which an instrumented inference server counts as having no demand (A13).", "RATE")

OPTIONS = (MIN_DATA_WAIT, MIN_REQUEST_RATE)


#: The source whose window summary (its owners' loops) the verdict reads.
SOURCE = WorkloadSource.name


def reported(inputs_stats: Mapping[str, object], owner: str) -> OwnerWorkload | None:
    """The owner's OwnerWorkload, or None when no loop of that owner reports."""
    if not owner:
        return None
    stats = inputs_stats.get(SOURCE)
    return getattr(stats, "owners", {}).get(owner) if stats is not None else None


def demand(report: OwnerWorkload, settings: Settings) -> bool:
    if report.kind == "inference":
        return report.requests_per_second >= settings[MIN_REQUEST_RATE]
    return report.demand


#: The causes a wait for the next batch is one of: what the loop's data-wait account speaks to.
INPUT_SIDE = ("storage", "data_pipeline")


def _without_inferred_input_wait(evidence: Mapping[str, Sequence[float]]) -> dict[str, Sequence[float]]:
    """The loop timed its wait for the next batch and found none (A8): what the host only
    suggests about the input side (a saturated core, which a thread spinning in a CUDA
    synchronisation or a launch-bound server shows as well; host-wide reads) is contradicted
    by the measurement and dropped. Direct evidence stands: a quota that throttles the owner
    starves the thread that launches the kernels too, outside ``next()``, and reads its own
    threads block on are seen first-hand."""
    return {cause: [v if v >= DIRECT else 0.0 for v in values] if cause in INPUT_SIDE else values
            for cause, values in evidence.items()}


def with_data_wait(
    evidence: Mapping[str, Sequence[float]], idle: Sequence[float], report: OwnerWorkload, settings: Settings,
) -> dict[str, Sequence[float]]:
    """``evidence`` with the idle instants the reported data wait explains added to storage or
    data_pipeline as direct evidence. A loop that reports less data wait than
    verdict.workload.min-data-wait leaves only the direct input-side evidence standing."""
    share = report.data_wait_ratio
    if share is not None and share < settings[MIN_DATA_WAIT]:
        return _without_inferred_input_wait(evidence)
    out = dict(evidence)
    if share is None:
        return out
    n = len(idle)
    idle_at = [i for i, x in enumerate(idle) if x == x and x >= 0.5]
    samples = sum(1 for x in idle if x == x)
    budget = min(len(idle_at), round(share * samples))
    if budget <= 0:
        return out
    storage = evidence.get("storage") or [0.0] * n
    cpu = evidence.get("data_pipeline") or [0.0] * n
    inferred = [evidence[c] for c in ("host_transfer", "sync", "network") if evidence.get(c) is not None]
    host_side = [i for i in idle_at if storage[i] or cpu[i]]
    unexplained = [i for i in idle_at if not (storage[i] or cpu[i]) and not any(e[i] for e in inferred)]
    weaker = [i for i in idle_at if not (storage[i] or cpu[i]) and any(e[i] for e in inferred)]
    chosen = (host_side + unexplained + weaker)[:budget]
    # Where the host shows storage or CPU evidence at the same instant, it says which side the
    # loop waited on, as it would without the loop's report: the stronger of the two there
    # (ties to storage, the method's order). Elsewhere, the side the host names at more of
    # the GPU's idle instants, so the report adds to the host's reading and never turns it.
    side_at = {i: "storage" if storage[i] >= cpu[i] else "data_pipeline" for i in idle_at if storage[i] or cpu[i]}
    stored = sum(1 for side in side_at.values() if side == "storage")
    elsewhere = "storage" if stored > len(side_at) - stored else "data_pipeline"
    marked = {c: list(out.get(c) or [0.0] * n) for c in INPUT_SIDE}
    for i in chosen:
        side = side_at.get(i, elsewhere)
        # The loop's own measurement is the most direct evidence there is (A8): it outranks
        # whatever the host suggests at the same instant.
        marked[side][i] = DIRECT + 1.0
    out.update(marked)
    return out


def between_requests(idle: Sequence[float], report: OwnerWorkload) -> list[float] | None:
    """Evidence, at the loop's own strength, that the GPU idled because its inference server
    had no request to serve: the time its processes spent outside their loop, given to the
    GPU's most idle instants (with no request in the queue nothing is launched, so those are
    the instants the GPU was idle for whole). None for a training loop or without loop time."""
    if report.kind != "inference" or report.loop_ratio is None:
        return None
    valid = [(x, i) for i, x in enumerate(idle) if x == x and x > 0.0]
    budget = (1.0 - report.loop_ratio) * sum(1 for x in idle if x == x)
    out = [0.0] * len(idle)
    for x, i in sorted(valid, key=lambda p: -p[0]):
        if budget <= 1e-9:
            break
        out[i] = DIRECT + 1.0
        budget -= x
    return out
