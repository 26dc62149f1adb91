"""The rdma collector: InfiniBand and RoCE ports from /sys/class/infiniband (A9, A10, A11)."""

from gpuwait.collectors.rdma import metrics, window
from gpuwait.collectors.rdma.payload import RdmaData, RdmaTrafficData
from gpuwait.collectors.rdma.source import RdmaSource, RdmaTrafficSource
from gpuwait.core.plugin import CollectorSpec, SourceSpec
from gpuwait.core.source import HostPaths

OPTIONS = ()

COLLECTOR = CollectorSpec(
    name="rdma",
    help="InfiniBand and RoCE ports: data counters sampled with the GPUs, packets, state, rate, error, congestion and retransmit counters, PCI function and NUMA node (A9, A10, A11).",
    sources=(
        SourceSpec("rdma_traffic", lambda s: RdmaTrafficSource(HostPaths.from_settings(s)),
                   window.columns, window.summarize, tier="fast", payload=RdmaTrafficData),
        SourceSpec("rdma", lambda s: RdmaSource(HostPaths.from_settings(s)),
                   window.packet_columns, window.summarize, tier="slow", payload=RdmaData),
    ),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
