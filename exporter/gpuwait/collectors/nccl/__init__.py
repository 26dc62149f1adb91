"""The nccl collector: NCCL's own timing of each rank's collectives, from the files NCCL
Inspector (the profiler plugin of NVIDIA/nccl) dumps into collector.nccl.dump-dir (A9, A10,
A12). Enabled by default and without data until that option names a directory the plugin
writes to; docs/nccl.md tells how to switch the plugin on."""

from gpuwait.collectors.nccl import metrics, window
from gpuwait.collectors.nccl.payload import NcclData
from gpuwait.collectors.nccl.source import DUMP_DIR, INTERVAL, MAX_BYTES_PER_READ, MAX_RANKS, STALE_AFTER, NcclSource
from gpuwait.core.plugin import CollectorSpec, SourceSpec

OPTIONS = (DUMP_DIR, INTERVAL, MAX_BYTES_PER_READ, MAX_RANKS, STALE_AFTER)

COLLECTOR = CollectorSpec(
    name="nccl",
    help="NCCL's own timing of collectives per rank (execution time, message size, bus bandwidth, last "
         "completion) from NCCL Inspector's dump files (A9, A10, A12).",
    sources=(SourceSpec("nccl", NcclSource.from_settings, window.columns, window.summarize, tier="slow",
                        payload=NcclData, interval_option=INTERVAL.name),),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
