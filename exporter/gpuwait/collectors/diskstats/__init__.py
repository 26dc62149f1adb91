"""The diskstats collector: block device IO from /proc/diskstats (A6, A7)."""

from gpuwait.collectors.diskstats import metrics, window
from gpuwait.collectors.diskstats.payload import Diskstats
from gpuwait.collectors.diskstats.source import DEVICE_EXCLUDE, DiskstatsSource
from gpuwait.core.plugin import CollectorSpec, SourceSpec
from gpuwait.core.source import HostPaths

OPTIONS = (DEVICE_EXCLUDE,)

COLLECTOR = CollectorSpec(
    name="diskstats",
    help="Block device IO: throughput, IOPS, latency, queue depth and request size (A6, A7).",
    sources=(SourceSpec("diskstats", lambda s: DiskstatsSource(HostPaths.from_settings(s), s[DEVICE_EXCLUDE]),
                        window.columns, window.summarize, payload=Diskstats),),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
