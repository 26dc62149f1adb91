"""The cgroup collector: CPU use and quota throttling, pressure stalls and block IO of the cgroup
of every owner of a GPU process (A2, A3, A6). The owners are the ones the gpu collector
attributes its processes to (``gpuwait.owners.directory``); without it there is nobody to read."""

from gpuwait.collectors.cgroup import metrics, window
from gpuwait.collectors.cgroup.payload import OwnerCgroupData
from gpuwait.collectors.cgroup.source import INTERVAL, OwnerCgroupSource
from gpuwait.core.plugin import CollectorSpec, SourceSpec

OPTIONS = (INTERVAL,)

COLLECTOR = CollectorSpec(
    name="cgroup",
    help="CPU use and quota throttling, pressure stalls and block IO of the cgroup of each owner of a GPU process (A2, A3, A6).",
    sources=(SourceSpec("owner_cgroup", OwnerCgroupSource.from_settings, window.columns, window.summarize,
                        payload=OwnerCgroupData, interval_option=INTERVAL.name),),
    expose=metrics.expose,
    metrics=metrics.METRICS,
    options=OPTIONS,
)
