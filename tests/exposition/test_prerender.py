"""Scrapes served from a rendering made once per sampler generation: what is cached, what is
still computed per scrape, and that every format a client may ask for carries the same samples."""

from __future__ import annotations

import gzip
import threading
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from gpuwait.core.errors import SourceError
from gpuwait.core.plugin import CollectorSpec, Sample, SourceSpec
from gpuwait.core.reading import Reading
from gpuwait.core.registry import resolve
from gpuwait.core.sampler import Sampler
from gpuwait.core.source import HostPaths, Source
from gpuwait.exposition.prometheus import READING_AGE, GpuwaitCollector
from gpuwait.exposition.server import make_server, serve_in_thread

TEXT = choose_encoder(None)
OPENMETRICS = choose_encoder("application/openmetrics-text; version=1.0.0")


class ScriptedSource(Source):
    """Returns ``outcome`` (its data) on each read, or raises it."""

    name = "scripted"

    def __init__(self) -> None:
        super().__init__(HostPaths())
        self.outcome: object = {"c": 1.0}

    def read(self) -> Reading:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.reading(time.monotonic(), dict(self.outcome))


class Exposed:
    """A sampler over two scripted sources, ``a`` and ``b``, each exposing its one value, and
    the exposition over it, counting how often the families are built."""

    def __init__(self, fail: bool = False, build_seconds: float = 0.0) -> None:
        self.sources = {"a": ScriptedSource(), "b": ScriptedSource()}
        self.builds = 0
        self.lock = threading.Lock()

        def expose(snapshots, _settings):
            with self.lock:
                self.builds += 1
            time.sleep(build_seconds)
            if fail:
                raise RuntimeError("mapping bug")
            reading = snapshots["a"].reading
            if reading is not None:
                yield Sample("gpuwait_procs_running", (), reading.data["c"])
            reading = snapshots["b"].reading
            if reading is not None:
                yield Sample("gpuwait_procs_blocked", (), reading.data["c"])

        specs = tuple(SourceSpec(name, lambda s, src=src: src) for name, src in self.sources.items())
        self.collectors = [CollectorSpec("fake", "Fake collector for exposition tests.", specs, expose=expose)]
        self.sampler = Sampler(self.collectors, resolve([])[0])
        self.exposition = GpuwaitCollector(self.sampler, self.collectors)

    def read(self, *names: str) -> None:
        for name in names or self.sources:
            self.sampler.sample_once(self.sampler.states[name])

    def scrape(self, fmt=TEXT, gzipped: bool = False) -> bytes:
        body, headers = self.exposition.serve(*fmt, gzipped)
        assert ("Content-Encoding" in headers) == gzipped
        return gzip.decompress(body) if gzipped else body


def samples(body: bytes, openmetrics: bool = False) -> dict[tuple[str, tuple], float]:
    parse = openmetrics_families if openmetrics else text_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse(body.decode()) for s in f.samples}


def ages(body: bytes, openmetrics: bool = False) -> dict[str, float]:
    return {dict(labels)["source"]: v for (name, labels), v in samples(body, openmetrics).items() if name == READING_AGE}


def test_scrapes_without_a_generation_change_build_the_families_once():
    exp = Exposed()
    exp.read()
    first = exp.scrape()
    assert exp.builds == 1
    exp.scrape()
    exp.scrape(OPENMETRICS)
    exp.scrape(gzipped=True)
    exp.scrape(OPENMETRICS, gzipped=True)
    assert exp.builds == 1
    # A fresh reading of a source that stays up is the next analysis pass's to show.
    exp.read("a")
    exp.scrape()
    assert exp.builds == 1
    exp.sampler.analyse_once()
    again = exp.scrape()
    assert exp.builds == 2
    assert {k for k in samples(again) if k[0] != READING_AGE} >= {k for k in samples(first) if k[0] != READING_AGE}


def test_a_reload_renders_again():
    exp = Exposed()
    exp.read()
    exp.scrape()
    exp.sampler.settings = resolve([])[0]
    exp.scrape()
    assert exp.builds == 2


def test_concurrent_scrapes_of_a_new_generation_wait_for_one_rendering():
    exp = Exposed(build_seconds=0.2)
    exp.read()
    start = threading.Barrier(8)
    bodies = []

    def scrape() -> None:
        start.wait(10)
        bodies.append(exp.scrape())

    threads = [threading.Thread(target=scrape) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(bodies) == 8 and exp.builds == 1


@pytest.mark.parametrize("down", ["error", "hung"])
def test_a_source_going_down_between_scrapes_withdraws_its_series_in_the_next(down):
    exp = Exposed()
    exp.read()
    before = samples(exp.scrape())
    assert ("gpuwait_procs_running", ()) in before and ("gpuwait_procs_blocked", ()) in before
    assert set(ages(exp.scrape())) == {"a", "b"}
    state = exp.sampler.states["a"]
    if down == "error":
        exp.sources["a"].outcome = SourceError("missing:/proc/stat", "No such file")
        exp.sampler.sample_once(state)
    else:
        exp.sampler._give_up_read(state, 0.0)
    # No analysis pass in between: the transition alone must keep the frozen values out.
    after = samples(exp.scrape())
    assert ("gpuwait_procs_running", ()) not in after
    assert after[("gpuwait_procs_blocked", ())] == 1.0
    assert after[("gpuwait_source_up", (("source", "a"),))] == 0.0
    assert set(ages(exp.scrape())) == {"b"}
    # And coming back shows at once too.
    exp.sources["a"].outcome = {"c": 7.0}
    exp.sampler.sample_once(state)
    assert samples(exp.scrape())[("gpuwait_procs_running", ())] == 7.0


def test_reading_ages_grow_between_scrapes_of_one_rendering():
    exp = Exposed()
    exp.read()
    first = ages(exp.scrape())
    time.sleep(0.05)
    second = ages(exp.scrape(OPENMETRICS), openmetrics=True)
    third = ages(exp.scrape(gzipped=True))
    assert exp.builds == 1
    for name in ("a", "b"):
        assert second[name] >= first[name] + 0.04
        assert third[name] >= second[name]


def test_a_failing_collector_is_counted_at_every_scrape_not_every_rendering():
    exp = Exposed(fail=True)
    exp.read()
    counts = [samples(exp.scrape())[("gpuwait_scrape_errors_total", (("source", "fake"),))] for _ in range(3)]
    assert counts == [1.0, 2.0, 3.0]
    assert exp.builds == 1


def without_ages(found: dict) -> dict:
    return {k: v for k, v in found.items() if k[0] != READING_AGE}


def test_every_format_decodes_to_the_samples_of_a_fresh_rendering():
    exp = Exposed()
    exp.read()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exp.exposition)  # collect(): rendered afresh, as every scrape once was
    fresh = samples(generate_latest(registry))
    plain = samples(exp.scrape())
    assert without_ages(plain) == without_ages(fresh) and set(ages(exp.scrape())) == {"a", "b"}
    for fmt, openmetrics in ((TEXT, False), (OPENMETRICS, True)):
        for gzipped in (False, True):
            body = exp.scrape(fmt, gzipped)
            assert without_ages(samples(body, openmetrics)) == without_ages(plain), (fmt[1], gzipped)
            assert set(ages(body, openmetrics)) == {"a", "b"}
            if openmetrics:
                assert body.endswith(b"# EOF\n") and body.count(b"# EOF") == 1


@pytest.fixture
def served():
    exp = Exposed()
    exp.read()
    server = make_server("127.0.0.1:0", "/metrics", exp.exposition, healthy=lambda: True, ready=lambda: [])
    serve_in_thread(server)
    try:
        yield exp, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def http_scrape(port: int, accept: str | None, encoding: str | None) -> tuple[str, str | None, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept:
        request.add_header("Accept", accept)
    if encoding:
        request.add_header("Accept-Encoding", encoding)
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.headers["Content-Type"], r.headers.get("Content-Encoding"), r.read()


def test_the_server_negotiates_format_and_compression_over_one_rendering(served):
    exp, port = served
    content_type, encoding, plain = http_scrape(port, None, None)
    assert content_type.startswith("text/plain; version=0.0.4") and encoding is None
    for accept, openmetrics in ((None, False), ("application/openmetrics-text; version=1.0.0", True),
                                ("application/openmetrics-text;q=0.9,text/plain;q=0.5", True)):
        for gzipped in (False, True):
            content_type, encoding, body = http_scrape(port, accept, "gzip, deflate" if gzipped else None)
            assert content_type.startswith("application/openmetrics-text" if openmetrics else "text/plain")
            assert encoding == ("gzip" if gzipped else None)
            if gzipped:
                body = gzip.decompress(body)
            assert without_ages(samples(body, openmetrics)) == without_ages(samples(plain)), (accept, gzipped)
    assert exp.builds == 1


def test_formats_beyond_the_cache_are_still_served(served):
    exp, port = served
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exp.exposition)

    def steady(body: bytes) -> list[bytes]:
        return [line for line in body.splitlines() if line.startswith(b"#") or b"reading" not in line]

    # Each escaping names a format of its own; past the cached ones each is encoded per request.
    for escaping in ("underscores", "dots", "values", "allow-utf-8", "underscores", "dots"):
        accept = f"application/openmetrics-text; version=1.0.0; escaping={escaping}"
        content_type, _, body = http_scrape(port, accept, None)
        assert f"escaping={escaping}" in content_type
        assert steady(body) == steady(choose_encoder(accept)[0](registry)), escaping
    assert exp.builds == 1 + 6  # one for the scrapes, one per fresh rendering compared with
