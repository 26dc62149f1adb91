"""The exposition: turns what the sampler holds into metric families, and those into the
bytes a scrape is sent.

It does no file I/O for sampled sources and never raises: a collector whose mapping fails
is left out of that scrape and counted in ``gpuwait_scrape_errors_total``.

What a scrape shows changes on the sampler's schedule, not the scraper's: the families are
built at most once per ``Sampler.generation`` (bumped by every analysis pass, a source going
down or coming back, a reload), by the first scrape that finds the last rendering out of date,
while concurrent scrapes wait for that one rendering instead of building their own. Each
format asked for is encoded once per rendering (by ``encoding`` for the formats Prometheus
asks for), and compressed once on the first gzip request. Only what has to be computed per scrape is: the reading ages, which grow with the
clock, and the scrape error counters, which count scrapes.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuwait import __version__
from gpuwait.catalog import CATALOG
from gpuwait.core.plugin import CollectorSpec, Sample, Snapshot
from gpuwait.core.sampler import Sampler
from gpuwait.exposition.encoding import encoder_for
from gpuwait.exposition.family import Family, FamilyBuilder

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from prometheus_client.registry import Collector

log = logging.getLogger("gpuwait.exposition")


#: Families whose values are computed at each scrape; every other family is rendered once.
READING_AGE = "gpuwait_source_reading_age_seconds"
SCRAPE_ERRORS = "gpuwait_scrape_errors_total"
PER_SCRAPE = (READING_AGE, SCRAPE_ERRORS)
_PER_SCRAPE_FAMILIES = {CATALOG[name].family_name: name for name in PER_SCRAPE}
#: Formats (content types, which name the encoder with its version and escaping) kept encoded
#: per rendering; one beyond them is encoded for its request alone, so Accept headers that
#: vary (a version per request) cannot grow the cache.
MAX_CACHED_FORMATS = 4
#: The lowest level: a scrape's body compresses about tenfold at it, and a higher one costs
#: more CPU than it saves in bytes.
GZIP_LEVEL = 1


class _Families:
    """A fixed list of families, in the shape the prometheus-client encoders read."""

    __slots__ = ("families",)

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _encode(encoder: Callable[[Collector], bytes], families: list[Family], eof: bytes, content_type: str = "") -> bytes:
    """One block of families; the OpenMetrics end marker is left to the end of the whole body.
    Written by ``encoding`` where it writes ``content_type``, by prometheus-client's
    ``encoder`` otherwise."""
    if not families:
        return b""
    fast = encoder_for(content_type)
    if fast is not None:
        return fast(families)
    out = encoder(_Families([family.metric() for family in families]))
    if eof and out.endswith(eof):
        out = out[: -len(eof)]
    return out


@dataclass
class _Encoded:
    """One rendering in one format: the bytes of its static blocks, and, made on the first gzip
    request, the compressed bytes of everything before the first per-scrape block with the
    compressor's state at that point, from which each gzip scrape finishes its own stream."""

    encoder: Callable[[Collector], bytes]
    content_type: str
    #: bytes for a static block, None where a per-scrape block goes (the blocks' order).
    parts: list[bytes | None]
    eof: bytes
    gzip_prefix: bytes | None = None
    gzip_state: "zlib._Compress | None" = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def body(self, dynamic: list[bytes]) -> bytes:
        fill = iter(dynamic)
        return b"".join([p if p is not None else next(fill) for p in self.parts] + [self.eof])

    def gzip_body(self, dynamic: list[bytes]) -> bytes:
        first = self.parts.index(None) if None in self.parts else len(self.parts)
        with self.lock:
            if self.gzip_state is None:
                compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip member
                self.gzip_prefix = compressor.compress(b"".join(self.parts[:first])) + compressor.flush(zlib.Z_SYNC_FLUSH)
                self.gzip_state = compressor
            compressor = self.gzip_state.copy()
        fill = iter(dynamic)
        rest = b"".join([p if p is not None else next(fill) for p in self.parts[first:]] + [self.eof])
        return self.gzip_prefix + compressor.compress(rest) + compressor.flush()


class Rendering:
    """The exposition as of one generation of the sampler's data.

    ``blocks`` are, in exposition order, lists of families rendered once and the names of the
    per-scrape families (PER_SCRAPE) where they go. ``failed`` are the collectors left out
    of it, ``taken_at`` when the reading behind each source's series (for those serving one)
    was taken, so that its age can be given at each scrape."""

    def __init__(self, generation: int, blocks: list[list[Family] | str], failed: tuple[str, ...],
                 taken_at: list[tuple[str, float]]) -> None:
        self.generation = generation
        self.blocks = blocks
        self.failed = failed
        self.taken_at = taken_at
        self._encoded: dict[str, _Encoded] = {}
        self._lock = threading.Lock()

    def encoded(self, encoder: Callable[[Collector], bytes], content_type: str) -> _Encoded:
        got = self._encoded.get(content_type)
        if got is not None:
            return got
        with self._lock:
            got = self._encoded.get(content_type)
            if got is None:
                eof = b"# EOF\n" if content_type.startswith("application/openmetrics-text") else b""
                parts = [None if isinstance(b, str) else _encode(encoder, b, eof, content_type) for b in self.blocks]
                got = _Encoded(encoder, content_type, parts, eof)
                if len(self._encoded) < MAX_CACHED_FORMATS:
                    self._encoded[content_type] = got
            return got


class GpuwaitCollector:
    """The exporter's series: served pre-rendered (``serve``), and, for prometheus-client's
    registries and encoders, a collector of theirs by shape (``collect``), without importing
    the library (see ``encoding``)."""

    def __init__(self, sampler: Sampler, collectors: list[CollectorSpec]) -> None:
        self.sampler = sampler
        self.collectors = collectors
        self.scrape_errors: dict[str, int] = {c.name: 0 for c in collectors}
        self._logged_failures: set[str] = set()
        self._scrape_lock = threading.Lock()
        self._render_lock = threading.Lock()
        self._rendering: Rendering | None = None

    # -- a scrape ----------------------------------------------------------------------------
    def serve(self, encoder: Callable[[Collector], bytes], content_type: str, gzipped: bool) -> tuple[bytes, dict[str, str]]:
        """One scrape in the format ``encoding.negotiate`` picked (its content type, and the
        encoder of prometheus-client's that writes it where ``encoding`` does not):
        (body, extra headers), the body made from the current rendering."""
        rendering = self.current()
        encoded = rendering.encoded(encoder, content_type)
        dynamic = [_encode(encoded.encoder, families, encoded.eof, content_type) for families in self._scraped(rendering)]
        if gzipped:
            return encoded.gzip_body(dynamic), {"Content-Encoding": "gzip"}
        return encoded.body(dynamic), {}

    def collect(self) -> Iterator[Metric]:
        """Every family, as one scrape made now would show them (rendered afresh, not cached)."""
        rendering = self.render(self.sampler.generation)
        dynamic = iter(self._scraped(rendering))
        for block in rendering.blocks:
            yield from (family.metric() for family in (next(dynamic) if isinstance(block, str) else block))

    def current(self) -> Rendering:
        """The rendering of the sampler's current generation, made now if there is none yet."""
        rendering = self._rendering
        if rendering is not None and rendering.generation == self.sampler.generation:
            return rendering
        with self._render_lock:
            # Read before the data it stands for: a change made while rendering bumps it past.
            generation = self.sampler.generation
            rendering = self._rendering
            if rendering is None or rendering.generation != generation:
                # The old rendering let go first, so that its families and bytes are not held
                # beside the new ones while those are built (a scrape still serving it keeps it).
                self._rendering = rendering = None
                rendering = self._rendering = self.render(generation)
            return rendering

    def _scraped(self, rendering: Rendering) -> list[list[Family]]:
        """The per-scrape families of one scrape served from ``rendering``, in block order: a
        collector left out of it is left out of this scrape, and counted for it."""
        with self._scrape_lock:
            for name in rendering.failed:
                self.scrape_errors[name] += 1
            errors = list(self.scrape_errors.items())
        now = time.monotonic()
        samples = {
            READING_AGE: [Sample(READING_AGE, (name,), max(0.0, now - taken_at)) for name, taken_at in rendering.taken_at],
            SCRAPE_ERRORS: [Sample(SCRAPE_ERRORS, (name,), count) for name, count in errors],
        }
        out = []
        for block in rendering.blocks:
            if isinstance(block, str):
                builder = FamilyBuilder()
                builder.extend(samples[block])
                out.append(builder.families())
        return out

    # -- a rendering -------------------------------------------------------------------------
    def render(self, generation: int) -> Rendering:
        """Build every family from what the sampler holds now."""
        self.sampler.summarize_due(spec.name for collector in self.collectors for spec in collector.sources)
        snapshots: dict[str, Snapshot] = {}
        taken_at: list[tuple[str, float]] = []
        for name, state in self.sampler.states.items():
            # Under the source's lock, so that the age a scrape gives is that of the reading
            # it serves, not of one folded in between the two reads.
            with state.lock:
                snapshots[name] = state.snapshot()
                taken = state.taken_at
            if taken is not None and snapshots[name].reading is not None:
                taken_at.append((name, taken))
        failed = []
        collected: list[Family] = []
        for collector in self.collectors:
            builder = FamilyBuilder()
            try:
                given = {s.name: snapshots[s.name] for s in collector.sources}
                if collector.analyse is not None:
                    given[collector.name] = Snapshot(None, self.sampler.analyses.get(collector.name))
                builder.extend(collector.expose(given, self.sampler.settings))
            except Exception:
                failed.append(collector.name)
                if collector.name not in self._logged_failures:
                    self._logged_failures.add(collector.name)
                    log.error("collector %s failed to map its data; left out of the scrape", collector.name, exc_info=True)
                continue
            collected.extend(builder.families())
        blocks: list[list[Family] | str] = [collected]
        builder = FamilyBuilder()
        builder.extend(self._self_samples(dict(taken_at)))
        static: list[Family] = []
        for family in builder.families():
            per_scrape = _PER_SCRAPE_FAMILIES.get(family.name)
            if per_scrape is None:
                static.append(family)
            else:
                blocks += [static, per_scrape]
                static = []
        blocks.append(static)
        return Rendering(generation, blocks, tuple(failed), taken_at)

    def _self_samples(self, taken_at: dict[str, float]) -> Iterator[Sample]:
        """The exporter's own families; those given per scrape (a reading age for each source
        in ``taken_at``, the scrape error counters) are placeholders, for their place."""
        yield Sample("gpuwait_build_info", (__version__, platform.python_version()), 1.0)
        for name, state in self.sampler.states.items():
            label = (name,)
            yield Sample("gpuwait_source_up", label, 1.0 if state.up else 0.0)
            yield Sample("gpuwait_source_no_data", label, 1.0 if state.no_data else 0.0)
            if name in taken_at:
                yield Sample(READING_AGE, label, 0.0)
            yield Sample("gpuwait_source_errors_total", label, state.errors)
            yield Sample("gpuwait_source_reads_total", label, state.reads)
            yield Sample("gpuwait_source_read_seconds_total", label, state.read_seconds)
            yield Sample("gpuwait_source_read_duration_seconds", label, state.mean_read_seconds)
            yield Sample("gpuwait_source_interval_seconds", label, state.interval)
            yield Sample("gpuwait_sampler_lag_seconds", label, state.max_lag_seconds)
            yield Sample("gpuwait_sampler_overruns_total", label, state.overruns)
            yield Sample("gpuwait_window_samples", label, state.window_samples)
        yield Sample("gpuwait_analysis_duration_seconds", (), self.sampler.analysis_seconds)
        yield Sample("gpuwait_analysis_runs_total", (), self.sampler.analysis_runs)
        for name in self.scrape_errors:
            yield Sample(SCRAPE_ERRORS, (name,), 0)
