"""The verdict as a collector: its metrics, declared once here (the catalog assembles them),
how the analysis result maps to them, and the options of the verdict and its evidence."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.analysis import activity, stall
from gpuwait.analysis import verdict as verdict_module
from gpuwait.analysis.evidence import data_pipeline, host_transfer, network, storage, workload
from gpuwait.analysis.verdict import NodeVerdict, VerdictAnalyser
from gpuwait.core.config import Settings
from gpuwait.core.facts import CAUSES
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import CollectorSpec, Sample, Snapshot

SOURCE = "verdict"
GPU = ("gpu", "uuid")

METRICS = (
    MetricSpec("gpuwait_gpu_wait_ratio", "gauge",
               "Fraction of the window the GPU sat idle, by the cause the concurrent evidence points to; the causes sum to the idle fraction (none: idle without demand).",
               labels=GPU + ("cause",), unit="ratio", source=SOURCE, claims=("A2", "A4", "A6", "A9", "A12", "A14"), window=True),
    MetricSpec("gpuwait_gpu_verdict", "gauge",
               "1 for what the GPU waited for over the window (data_pipeline, storage, host_transfer, network, sync, insufficient_work, throttled or none), 0 for the other causes.",
               labels=GPU + ("cause",), source=SOURCE, claims=("A14",), window=True),
    MetricSpec("gpuwait_gpu_verdict_age_seconds", "gauge",
               "How long the GPU's current verdict has been published: seconds since the verdict last changed (0 at a change).",
               labels=GPU, unit="seconds", source=SOURCE, claims=("A14",), window=True),
    MetricSpec("gpuwait_gpu_demand", "gauge",
               "1 when the GPU has an owner process that is active on the CPU (there is work to wait for), 0 otherwise; low utilization without demand needs no fix.",
               labels=GPU, source=SOURCE, claims=("A1", "A13"), window=True),
    MetricSpec("gpuwait_gpu_throttled_busy_ratio", "gauge",
               "Fraction of the GPU's busy samples during which power or thermal limits held its clocks down.",
               labels=GPU, unit="ratio", source=SOURCE, claims=("A14",), window=True),
    MetricSpec("gpuwait_gpu_verdict_samples", "gauge",
               "Samples of the GPU the verdict was computed from.",
               labels=GPU, source=SOURCE, claims=("A14",), window=True),
    MetricSpec("gpuwait_gpu_dip_period_seconds", "gauge",
               "Period of the GPU's repeating activity dips (autocorrelation of its activity); absent when the dips do not repeat.",
               labels=GPU, unit="seconds", source=SOURCE, claims=("A9", "A10"), window=True),
    MetricSpec("gpuwait_gpu_dip_periodicity_ratio", "gauge",
               "How cleanly the dips repeat at that period: about 1 for a strict rhythm (collectives every step), near 0 for noise.",
               labels=GPU, unit="ratio", source=SOURCE, claims=("A9", "A10"), window=True),
    MetricSpec("gpuwait_gpu_link_correlation", "gauge",
               "Pearson correlation, at the sampling rate, between the GPU's activity and a NIC's or RDMA port's traffic; strongly negative means the link bursts while the GPU dips.",
               labels=GPU + ("link", "link_kind", "link_layer"), source=SOURCE, claims=("A9", "A10", "A11"), window=True),
    MetricSpec("gpuwait_gpu_link_aligned", "gauge",
               "1 when the link's bursts line up with the GPU's dips (correlation at or below -verdict.network.anticorrelation), else 0.",
               labels=GPU + ("link", "link_kind", "link_layer"), source=SOURCE, claims=("A10", "A11"), window=True),
    MetricSpec("gpuwait_gpu_straggler", "gauge",
               "1 for the GPU its owner's other GPUs wait for at the barrier, the last to reach it (it computes longest or waits on something of its own, which its verdict names; where NCCL Inspector's records time its collectives, the rank whose collectives are shortest), else 0.",
               labels=GPU, source=SOURCE, claims=("A12",), window=True),
    MetricSpec("gpuwait_gpu_collective_stalled", "gauge",
               "1 when the GPU sat in a collective that did not end for verdict.collective.stall-after: a kernel resident all along with few SMs active, its memory resting, no bytes over NVLink or PCIe and, where NCCL Inspector's dump is read, no operation completed; 0 otherwise; absent for a GPU without processes or a window too short to tell.",
               labels=GPU, source=SOURCE, claims=("A9", "A12"), window=True),
    MetricSpec("gpuwait_node_verdict", "gauge",
               "1 for what most of the node's GPUs waited for over the window (GPUs waiting at the barrier, sync, count for their peers' own named cause where there is one), 0 for the other causes.",
               labels=("cause",), source=SOURCE, claims=("A14",), window=True),
    MetricSpec("gpuwait_node_idle_gpus", "gauge",
               "GPU-equivalents the node had idle over the window, by cause: the idle fractions of its GPUs summed (4 GPUs idle half the time make 2).",
               labels=("cause",), source=SOURCE, claims=("A14",), window=True),
)


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    result: NodeVerdict | None = snapshots["verdict"].stats
    if result is None:
        return
    for g in result.gpus:
        gpu = (g.index, g.uuid)
        for cause in CAUSES:
            yield Sample("gpuwait_gpu_wait_ratio", gpu + (cause,), g.attribution.wait_ratio.get(cause, 0.0))
            yield Sample("gpuwait_gpu_verdict", gpu + (cause,), 1.0 if g.verdict == cause else 0.0)
        yield Sample("gpuwait_gpu_verdict_age_seconds", gpu, g.verdict_seconds)
        yield Sample("gpuwait_gpu_demand", gpu, 1.0 if g.demand else 0.0)
        yield Sample("gpuwait_gpu_throttled_busy_ratio", gpu, g.attribution.throttled_busy_ratio)
        yield Sample("gpuwait_gpu_verdict_samples", gpu, g.attribution.samples)
        yield Sample("gpuwait_gpu_dip_period_seconds", gpu, g.dip_period_seconds)
        yield Sample("gpuwait_gpu_dip_periodicity_ratio", gpu, g.dip_strength)
        yield Sample("gpuwait_gpu_straggler", gpu, 1.0 if g.straggler else 0.0)
        if g.collective_stalled is not None:
            yield Sample("gpuwait_gpu_collective_stalled", gpu, 1.0 if g.collective_stalled else 0.0)
        for link in g.links:
            labels = gpu + (link.link, link.kind, link.link_layer)
            yield Sample("gpuwait_gpu_link_correlation", labels, link.correlation)
            yield Sample("gpuwait_gpu_link_aligned", labels, 1.0 if link.aligned else 0.0)
    if result.gpus:
        for cause in CAUSES:
            yield Sample("gpuwait_node_verdict", (cause,), 1.0 if result.verdict == cause else 0.0)
            yield Sample("gpuwait_node_idle_gpus", (cause,), result.wait_ratio.get(cause, 0.0))


OPTIONS = (
    *workload.OPTIONS,
    verdict_module.INTERVAL, verdict_module.SHORT_WINDOW, verdict_module.MIN_IDLE_RATIO, verdict_module.MIN_CAUSE_SHARE,
    verdict_module.MIN_THROTTLED_SHARE, *activity.OPTIONS,
    *storage.OPTIONS, *data_pipeline.OPTIONS, *host_transfer.OPTIONS, *network.OPTIONS,
    verdict_module.DEMAND_OWNER_CORES, verdict_module.DEMAND_IDLE_CORES, verdict_module.DIP_MIN_PERIODICITY, *stall.OPTIONS,
)

COLLECTOR = CollectorSpec(
    name="verdict",
    help="What each GPU waits for: idle-time attribution, verdict, dip period, link alignment, straggler (A14).",
    sources=(),
    expose=expose,
    analyse=VerdictAnalyser(),
    analyse_every=verdict_module.INTERVAL,
    reads_summaries=(workload.SOURCE,),
    options=OPTIONS,
    metrics=METRICS,
)
