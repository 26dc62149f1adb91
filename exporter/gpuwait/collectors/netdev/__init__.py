"""The netdev collector: network interface traffic from /proc/net/dev (A9, A10)."""

from gpuwait.collectors.netdev import metrics, window
from gpuwait.collectors.netdev.payload import NetDev
from gpuwait.collectors.netdev.source import DEVICE_EXCLUDE, NetdevSource
from gpuwait.core.plugin import CollectorSpec, SourceSpec
from gpuwait.core.source import HostPaths

OPTIONS = (DEVICE_EXCLUDE,)

COLLECTOR = CollectorSpec(
    name="netdev",
    help="Network interface throughput, peaks and burstiness at the sample rate (A9, A10).",
    sources=(SourceSpec("netdev", lambda s: NetdevSource(HostPaths.from_settings(s), s[DEVICE_EXCLUDE]),
                        window.columns, window.summarize, payload=NetDev),),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
