"""How a collector is assembled: its sources, what each keeps in the window, how the window
is summarised, how the result maps to metrics, and the options it reads. ``registry`` lists
the collectors."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from gpuwait.core.config import Option, Settings
from gpuwait.core.metric import MetricSpec
from gpuwait.core.reading import Reading
from gpuwait.core.ring import WindowView
from gpuwait.core.source import Source


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
    #: The option holding how often ``analyse`` runs (None: every analysis pass). A verdict
    #: over a 60 s window changes little in a second; rerunning it less often is the cheapest
    #: way to keep its cost small on a big node.
    analyse_every: Option[float] | None = None
    #: The sources whose window summaries ``analyse`` reads (``AnalysisInputs.stats``). Those
    #: are summarised at every analysis pass; every other summary only feeds the exposition,
    #: and is made for the scrapes alone: at the pass before the one expected, or by one that
    #: comes unexpected (``Sampler.summarize_due``).
    reads_summaries: tuple[str, ...] = ()
    #: The options this collector reads, each a flag and a config key of its own.
    options: tuple[Option, ...] = ()
    #: The metrics ``expose`` may yield, each declared once (the catalog assembles them).
    metrics: tuple[MetricSpec, ...] = ()


@dataclass(frozen=True)
class AnalysisInputs:
    """Everything the sampler holds, as of one analysis pass; absent sources are missing."""

    views: Mapping[str, WindowView]
    #: The window summaries some collector's ``reads_summaries`` names, and only those.
    stats: Mapping[str, Any]
    latest: Mapping[str, Reading]
    #: The time the window ends at (monotonic when live, the trace's clock in a replay).
    end: float
