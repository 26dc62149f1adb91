"""Metrics of the verdict: what each GPU waited for (A14)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.analysis.attribution import CAUSES
from gpuwait.analysis.verdict import NodeVerdict, VerdictAnalyser
from gpuwait.collectors import CollectorSpec, Sample, Snapshot
from gpuwait.config import Settings


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    result: NodeVerdict | None = snapshots["verdict"].stats
    if result is None:
        return
    for g in result.gpus:
        gpu = (g.index, g.uuid)
        for cause in CAUSES:
            yield Sample("gpuwait_gpu_wait_ratio", gpu + (cause,), g.attribution.wait_ratio.get(cause, 0.0))
            yield Sample("gpuwait_gpu_verdict", gpu + (cause,), 1.0 if g.verdict == cause else 0.0)
        yield Sample("gpuwait_gpu_demand", gpu, 1.0 if g.demand else 0.0)
        yield Sample("gpuwait_gpu_throttled_busy_ratio", gpu, g.attribution.throttled_busy_ratio)
        yield Sample("gpuwait_gpu_verdict_samples", gpu, g.attribution.samples)
        yield Sample("gpuwait_gpu_dip_period_seconds", gpu, g.dip_period_seconds)
        yield Sample("gpuwait_gpu_dip_periodicity_ratio", gpu, g.dip_strength)
        yield Sample("gpuwait_gpu_straggler", gpu, 1.0 if g.straggler else 0.0)
        for link in g.links:
            labels = gpu + (link.link, link.kind, link.link_layer)
            yield Sample("gpuwait_gpu_link_correlation", labels, link.correlation)
            yield Sample("gpuwait_gpu_link_aligned", labels, 1.0 if link.aligned else 0.0)
    if result.gpus:
        for cause in CAUSES:
            yield Sample("gpuwait_node_verdict", (cause,), 1.0 if result.verdict == cause else 0.0)
            yield Sample("gpuwait_node_idle_gpus", (cause,), result.wait_ratio.get(cause, 0.0))


COLLECTOR = CollectorSpec(
    name="verdict",
    help="What each GPU waits for: idle-time attribution, verdict, dip period, link alignment, straggler (A14).",
    sources=(),
    expose=expose,
    analyse=VerdictAnalyser(),
    analyse_every="verdict.interval",
)
