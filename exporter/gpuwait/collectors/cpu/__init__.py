"""The cpu collector: per-core CPU time, the run queue and saturation, from /proc/stat (A2, A3)."""

from gpuwait.collectors.cpu import metrics, window
from gpuwait.collectors.cpu.payload import CpuData
from gpuwait.collectors.cpu.source import CpuSource
from gpuwait.core.plugin import CollectorSpec, SourceSpec
from gpuwait.core.source import HostPaths

OPTIONS = (window.SATURATION_THRESHOLD,)

COLLECTOR = CollectorSpec(
    name="cpu",
    help="Per-core CPU time, run queue and saturation (A2, A3).",
    sources=(SourceSpec("cpu", lambda s: CpuSource(HostPaths.from_settings(s)), window.columns, window.summarize, payload=CpuData),),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
