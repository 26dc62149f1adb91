"""The workload collector: what instrumented training and inference loops (gpuwait.client)
report through their spool directory (A8, A13)."""

from gpuwait.collectors.workload import metrics, window
from gpuwait.collectors.workload.payload import WorkloadData
from gpuwait.collectors.workload.source import SPOOL_DIR, STALE_AFTER, WorkloadSource
from gpuwait.core.config import Settings
from gpuwait.core.plugin import CollectorSpec, SourceSpec
from gpuwait.core.source import HostPaths

OPTIONS = (SPOOL_DIR, STALE_AFTER, window.RECENT)


def _source(settings: Settings) -> WorkloadSource:
    return WorkloadSource(HostPaths.from_settings(settings), settings[SPOOL_DIR], settings[STALE_AFTER])


COLLECTOR = CollectorSpec(
    name="workload",
    help="Data wait, compute and communication time, step time and throughput reported by instrumented loops (A8, A13).",
    sources=(SourceSpec(WorkloadSource.name, _source, window.columns, window.summarize, tier="slow", payload=WorkloadData),),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
