"""How a collector is assembled: its sources, what each keeps in the window, how the window
is summarised, and how the result maps to metrics. The registry at the bottom lists them."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from gpuwait.config import COLLECTOR_DEFAULTS, Settings
from gpuwait.reading import Reading
from gpuwait.ring import WindowView
from gpuwait.sources.base import Source


class Sample(NamedTuple):
    """One value for the exposition: a catalog name, label values in the catalog's order."""

    name: str
    labels: tuple[str, ...]
    value: float


class Snapshot(NamedTuple):
    """What the exposition sees of one source: the latest Reading and the latest window stats."""

    reading: Reading | None
    stats: Any


@dataclass(frozen=True)
class SourceSpec:
    name: str
    factory: Callable[[Settings], Source]
    #: Values of one Reading kept per sample in the window ring (None: no history kept).
    columns: Callable[[Any], Mapping[Hashable, float]] | None = None
    #: Window statistics from the ring (None: the source has none).
    summarize: Callable[[WindowView, Settings], Any] | None = None
    #: "fast" or "slow"; overrides the source class's own tier when set.
    tier: str | None = None
    #: For sources whose one Reading carries many timed samples (e.g. the GPU driver's
    #: utilization buffer): (monotonic time, values) rows to append instead of ``columns``.
    rows: Callable[[Reading], Iterable[tuple[float, Mapping[Hashable, float]]]] | None = None
    #: The class of ``Reading.data``, so a recorded trace can be decoded back into it.
    payload: type | None = None
    #: Name of a duration option giving this source its own sampling interval, for sources
    #: whose counters need neither the fast tier's rate nor the slow tier's patience (owner
    #: cgroups, NCCL dump files: once a second). Overrides the tier's interval when set.
    interval_option: str | None = None


@dataclass(frozen=True)
class CollectorSpec:
    name: str
    help: str
    sources: tuple[SourceSpec, ...]
    expose: Callable[[Mapping[str, Snapshot], Settings], Iterable[Sample]]
    default_enabled: bool = True
    #: Cross-source analysis run after every source's window is summarised (see
    #: AnalysisInputs). Its result reaches ``expose`` as ``snapshots[<collector name>].stats``.
    analyse: Callable[["AnalysisInputs", Settings], Any] | None = None
    #: Name of the option holding how often ``analyse`` runs (None: every analysis pass). A
    #: verdict over a 60 s window changes little in a second; rerunning it less often is the
    #: cheapest way to keep its cost small on a big node.
    analyse_every: str | None = None


@dataclass(frozen=True)
class AnalysisInputs:
    """Everything the sampler holds, as of one analysis pass; absent sources are missing."""

    views: Mapping[str, WindowView]
    stats: Mapping[str, Any]
    latest: Mapping[str, Reading]
    #: The time the window ends at (monotonic when live, the trace's clock in a replay).
    end: float


def registry() -> tuple[CollectorSpec, ...]:
    """Every collector, in exposition order. Imported lazily so that config can register
    each collector's flags before argument parsing."""
    from gpuwait.exposition import cpu
    from gpuwait.exposition import pressure
    from gpuwait.exposition import diskstats
    from gpuwait.exposition import netdev
    from gpuwait.exposition import nfs
    from gpuwait.exposition import rdma
    from gpuwait.exposition import gpu
    from gpuwait.exposition import workload
    from gpuwait.exposition import verdict
    from gpuwait.collectors import cgroup

    collectors = (cpu.COLLECTOR, pressure.COLLECTOR, diskstats.COLLECTOR, netdev.COLLECTOR, nfs.COLLECTOR, rdma.COLLECTOR, gpu.COLLECTOR, cgroup.COLLECTOR, workload.COLLECTOR, verdict.COLLECTOR)
    for collector in collectors:
        COLLECTOR_DEFAULTS.setdefault(collector.name, collector.default_enabled)
    return collectors
