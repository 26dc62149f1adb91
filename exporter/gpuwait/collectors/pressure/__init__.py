"""The pressure collector: pressure stall information, the time tasks waited for CPU, IO and
memory, from /proc/pressure (A2, A6)."""

from gpuwait.collectors.pressure import metrics, window
from gpuwait.collectors.pressure.payload import PressureData
from gpuwait.collectors.pressure.source import PressureSource
from gpuwait.core.plugin import CollectorSpec, SourceSpec
from gpuwait.core.source import HostPaths

OPTIONS = ()

COLLECTOR = CollectorSpec(
    name="pressure",
    help="Pressure stall information: time tasks waited for CPU, IO and memory (A2, A6).",
    sources=(SourceSpec("pressure", lambda s: PressureSource(HostPaths.from_settings(s)),
                        window.columns, window.summarize, payload=PressureData),),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
