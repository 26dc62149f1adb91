"""The nfs collector: NFS client statistics per mount, from mountstats (A6, A7)."""

from gpuwait.collectors.nfs import metrics, window
from gpuwait.collectors.nfs.payload import NfsData
from gpuwait.collectors.nfs.source import MOUNTSTATS_PATH, OPS, NfsSource
from gpuwait.core.plugin import CollectorSpec, SourceSpec

OPTIONS = (MOUNTSTATS_PATH, OPS)

COLLECTOR = CollectorSpec(
    name="nfs",
    help="NFS client statistics per mount: operation latency, retransmissions, bytes, metadata share (A6, A7).",
    sources=(SourceSpec("nfs", NfsSource.from_settings, window.columns, window.summarize, tier="slow", payload=NfsData),),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
