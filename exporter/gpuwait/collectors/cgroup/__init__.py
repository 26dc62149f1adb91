"""Owner cgroups: CPU use and quota throttling, pressure stalls and block IO of the cgroup of
every owner of a GPU process (A2, A3, A6)."""

from __future__ import annotations

# The catalog gathers every collector's METRICS when it is first imported (catalog/cgroup.py
# takes this collector's from .metrics); initialising it before .metrics keeps that import
# from finding .metrics half-done, whichever of the two is imported first.
import gpuwait.catalog  # noqa: F401
from gpuwait.collectors import CollectorSpec, SourceSpec
from gpuwait.collectors.cgroup import metrics, window
from gpuwait.collectors.cgroup.payload import OwnerCgroupData
from gpuwait.collectors.cgroup.source import OwnerCgroupSource
from gpuwait.config import Option, Settings, parse_duration, register_option
from gpuwait.owners import acquire_directory, release_directory
from gpuwait.sources.base import HostPaths

OPTIONS = (
    Option("collector.cgroup.interval", parse_duration, 1.0,
           "Interval of reading the cgroup of each owner of a GPU process (CPU, quota throttling, pressure, IO).",
           "DURATION"),
)
# Options are known to the flag parser once their collector is imported.
for _option in OPTIONS:
    register_option(_option)

#: The GPU collector names the owners on every read of its slow tier; an owner it has not
#: named for this many of them no longer holds a GPU.
OWNER_READS_KEPT = 3


def make_source(settings: Settings) -> OwnerCgroupSource:
    paths = HostPaths.from_settings(settings)
    return OwnerCgroupSource(paths, acquire_directory(paths), OWNER_READS_KEPT * settings.slow_interval,
                             on_close=lambda: release_directory(paths))


COLLECTOR = CollectorSpec(
    name="cgroup",
    help="CPU use and quota throttling, pressure stalls and block IO of the cgroup of each owner of a GPU process (A2, A3, A6).",
    sources=(SourceSpec("owner_cgroup", make_source, window.columns, window.summarize, payload=OwnerCgroupData,
                        interval_option="collector.cgroup.interval"),),
    expose=metrics.expose,
)
