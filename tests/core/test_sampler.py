"""The sampler, with fake sources and known answers (the ring: test_ring.py, the series
helpers: test_series.py)."""

from __future__ import annotations

import logging
import math
import sys
import threading
import time

import pytest

from gpuwait.core.plugin import CollectorSpec, SourceSpec
from gpuwait.core.registry import resolve
from gpuwait.core.errors import NoData, SourceError
from gpuwait.core.reading import Reading
from gpuwait.core.ring import WindowView
from gpuwait.core.sampler import MAX_UNDECODED_READS, Sampler, SourceState
from gpuwait.core.source import HostPaths, Source
from gpuwait.exposition.prometheus import GpuwaitCollector
from gpuwait.core.series import window_rate

NAN = math.nan


def settings(*flags: str):
    return resolve(list(flags))[0]


class CountingSource(Source):
    """Counts its reads; its one counter grows by ``step`` per read."""

    name = "fast"

    def __init__(self, step: float = 10.0, clock=time.monotonic) -> None:
        super().__init__(HostPaths())
        self.reads = 0
        self.counter = 0.0
        self.step = step
        self.clock = clock
        self.lock = threading.Lock()

    def read(self) -> Reading:
        with self.lock:
            self.reads += 1
            self.counter += self.step
            return self.reading(self.clock(), {"c": self.counter})


class SleepingSource(Source):
    name = "slow"

    def __init__(self, seconds: float) -> None:
        super().__init__(HostPaths())
        self.seconds = seconds
        self.reads = 0

    def read(self) -> Reading:
        self.reads += 1
        time.sleep(self.seconds)
        return self.reading(time.monotonic(), {"c": float(self.reads)})


class ScriptedSource(Source):
    """Does what the test says on the next read: return data, fail, or crash."""

    name = "scripted"

    def __init__(self) -> None:
        super().__init__(HostPaths())
        self.outcome: object = {"c": 1.0}
        self.part_errors: tuple[str, ...] = ()

    def read(self) -> Reading:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.reading(time.monotonic(), dict(self.outcome), self.part_errors)


def keep_counter(data) -> dict:
    return {"c": data["c"]}


def rate_of_c(view: WindowView, _settings) -> float | None:
    return window_rate(view.times, view.column("c"))


def collector_of(*specs: SourceSpec, name: str = "fake") -> CollectorSpec:
    return CollectorSpec(name, "Fake collector for sampler tests.", specs, expose=lambda snapshots, s: iter(()))


def sampler_with(sources: dict[str, Source], *flags: str, columns=keep_counter, summarize=rate_of_c) -> Sampler:
    specs = tuple(SourceSpec(name, lambda s, src=src: src, columns, summarize) for name, src in sources.items())
    return Sampler([collector_of(*specs)], settings(*flags))


# -- scheduling ----------------------------------------------------------------------------


def test_slow_source_does_not_delay_fast_one():
    fast, slow = CountingSource(), SleepingSource(1.0)
    sampler = sampler_with({"fast": fast, "slow": slow}, "--sample.interval=50ms", "--analysis.interval=10s")
    sampler.start()
    try:
        time.sleep(2.0)
    finally:
        sampler.stop(timeout=3.0)
    # 2 s at 50 ms is 40 slots. Sharing one thread with a 1 s read would allow about 2; the
    # bound leaves room for a loaded CI machine without coming near that.
    assert fast.reads >= 15, f"fast source read only {fast.reads} times beside a 1 s source"
    assert 1 <= slow.reads <= 3
    assert sampler.states["fast"].overruns <= 5


def _sampling_threads(*sources: str) -> list[str]:
    names = {f"{kind}-{source}" for kind in ("sample", "read") for source in sources} | {"sample-every-0.05s"}
    return sorted(t.name for t in threading.enumerate() if t.name in names)


def test_sources_of_one_interval_share_a_thread_until_one_holds_it():
    """Reads of kernel files take microseconds: sources read at one interval are read in turn
    by one thread. One whose read holds that thread (a 1 s read against a 50 ms interval)
    leaves it for a thread of its own, and the others keep their schedule."""
    quick, also_quick, held = CountingSource(), CountingSource(), SleepingSource(0.0)
    sampler = sampler_with({"quick": quick, "also_quick": also_quick, "held": held},
                           "--sample.interval=50ms", "--analysis.interval=10s")
    names = ("quick", "also_quick", "held")
    sampler.start()
    try:
        assert wait_for(lambda: min(quick.reads, also_quick.reads, held.reads) >= 5)
        assert _sampling_threads(*names) == ["sample-every-0.05s"], "one thread, no thread per source while none holds"
        held.seconds = 1.0
        assert wait_for(lambda: "sample-held" in _sampling_threads(*names), 5.0), _sampling_threads(*names)
        before = quick.reads
        time.sleep(0.5)
        assert quick.reads >= before + 5, "the sources left behind go on while the slow read is still under way"
        assert also_quick.reads >= before - 2 + 5
        assert sampler.alive()
    finally:
        sampler.stop(timeout=3.0)
    assert not sampler.alive()


class _CountedStop(threading.Event):
    """The sampler's stop event, counting the waits of the read watchdog's thread."""

    def __init__(self) -> None:
        super().__init__()
        self.watchdog_waits = 0

    def wait(self, timeout=None):
        if threading.current_thread().name == "read-watchdog":
            self.watchdog_waits += 1
        return super().wait(timeout)


def test_the_watchdog_wakes_once_a_patience_while_reads_return():
    """Reads of 50 ms tiers that return at once: the watchdog looks once per tier patience
    (0.25 s here), not more often, and still moves a read that holds the tier."""
    quick, held = CountingSource(), SleepingSource(0.0)
    sampler = sampler_with({"quick": quick, "held": held}, "--sample.interval=50ms", "--analysis.interval=10s")
    sampler._stop = stop = _CountedStop()
    sampler.start()
    try:
        time.sleep(2.0)
        assert stop.watchdog_waits <= 2.0 / 0.25 + 2, stop.watchdog_waits
        held.seconds = 1.0
        assert wait_for(lambda: "sample-held" in _sampling_threads("quick", "held"), 5.0)
    finally:
        sampler.stop(timeout=3.0)


def test_overruns_counted_when_a_read_outlasts_its_slot():
    slow = SleepingSource(0.3)
    sampler = sampler_with({"slow": slow}, "--sample.interval=50ms", "--analysis.interval=10s")
    sampler.start()
    try:
        time.sleep(1.0)
    finally:
        sampler.stop(timeout=3.0)
    state = sampler.states["slow"]
    # Each 0.3 s read covers six 50 ms slots; the scheduler skips them instead of running
    # back to back, so reads stay few and the skipped slots are counted.
    assert state.reads <= 5
    assert state.overruns >= 5 * (state.reads - 1)
    assert state.overruns >= 5


def test_stop_ends_threads_and_closes_sources():
    closed = []

    class Closing(CountingSource):
        def close(self) -> None:
            closed.append(True)

    sampler = sampler_with({"a": Closing()}, "--sample.interval=50ms")
    sampler.start()
    assert sampler.alive()
    sampler.stop()
    assert not sampler.alive()
    assert closed == [True]


def test_ready_once_every_source_has_been_tried():
    a, b = ScriptedSource(), ScriptedSource()
    b.outcome = SourceError("missing:/proc/x", "gone")
    sampler = sampler_with({"a": a, "b": b})
    assert sampler.not_ready() == ["source a not read yet", "source b not read yet"]
    sampler.sample_once(sampler.states["a"])
    assert sampler.not_ready() == ["source b not read yet"]
    sampler.sample_once(sampler.states["b"])
    # A failing source still counts as tried: readiness must not wait on an absent device.
    assert sampler.not_ready() == []


# -- failures ------------------------------------------------------------------------------


def test_source_error_marks_source_down_and_counts():
    src = ScriptedSource()
    sampler = sampler_with({"s": src})
    state = sampler.states["s"]
    sampler.sample_once(state)
    assert state.up and state.errors == 0
    src.outcome = SourceError("missing:/proc/stat", "No such file")
    for _ in range(3):
        sampler.sample_once(state)
    assert not state.up
    assert state.errors == 3
    assert state.reads == 4
    assert state.latest is None, "a failed source serves nothing, not its last values"
    src.outcome = {"c": 2.0}
    sampler.sample_once(state)
    assert state.up and state.latest.data == {"c": 2.0}


def test_unexpected_exception_costs_only_that_source():
    bad, good = ScriptedSource(), ScriptedSource()
    bad.outcome = ZeroDivisionError("bug")
    sampler = sampler_with({"bad": bad, "good": good})
    sampler.sample_once(sampler.states["bad"])
    sampler.sample_once(sampler.states["good"])
    assert not sampler.states["bad"].up and sampler.states["bad"].errors == 1
    assert sampler.states["good"].up and sampler.states["good"].errors == 0


def test_partial_errors_counted_per_part_and_data_kept():
    src = ScriptedSource()
    src.part_errors = ("missing:/sys/block/sdb/stat", "parse:/sys/block/sdc/stat")
    sampler = sampler_with({"s": src})
    state = sampler.states["s"]
    sampler.sample_once(state)
    sampler.sample_once(state)
    assert state.up
    assert state.errors == 4
    assert len(state.ring) == 2


def test_each_cause_logged_once_then_recovery_once(caplog):
    src = ScriptedSource()
    sampler = sampler_with({"s": src})
    state = sampler.states["s"]
    caplog.set_level(logging.INFO, logger="gpuwait.sampler")

    src.outcome = SourceError("missing:/proc/pressure/io", "gone")
    for _ in range(10):
        sampler.sample_once(state)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "missing:/proc/pressure/io" in warnings[0].getMessage()

    src.outcome = {"c": 2.0}
    for _ in range(5):
        sampler.sample_once(state)
    recovered = [r for r in caplog.records if "recovered" in r.getMessage()]
    assert len(recovered) == 1

    # A new episode of the same fault is news again.
    src.outcome = SourceError("missing:/proc/pressure/io", "gone")
    sampler.sample_once(state)
    sampler.sample_once(state)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_no_data_keeps_the_source_up_uncounted_and_logged_once(caplog):
    src = ScriptedSource()
    sampler = sampler_with({"s": src})
    state = sampler.states["s"]
    caplog.set_level(logging.DEBUG, logger="gpuwait.sampler")
    src.outcome = NoData("unavailable:/proc/pressure", "no PSI in this kernel")
    for _ in range(10):
        sampler.sample_once(state)
    assert state.up and state.no_data
    assert state.errors == 0 and state.reads == 10
    assert state.latest is None and len(state.ring) == 0
    notes = [r for r in caplog.records if "no data" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO
    assert "unavailable:/proc/pressure" in notes[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_feature_that_appears_later_is_picked_up_and_one_that_goes_takes_its_series(caplog):
    src = ScriptedSource()
    sampler = sampler_with({"s": src})
    state = sampler.states["s"]
    caplog.set_level(logging.INFO, logger="gpuwait.sampler")
    src.outcome = NoData("unavailable:/sys/class/infiniband")
    sampler.sample_once(state)
    src.outcome = {"c": 5.0}  # the module was loaded
    sampler.sample_once(state)
    assert state.up and not state.no_data and state.latest.data == {"c": 5.0}
    assert [r.getMessage() for r in caplog.records if "data again" in r.getMessage()] == ["source s has data again"]
    src.outcome = NoData("unavailable:/sys/class/infiniband")  # and unloaded again
    sampler.sample_once(state)
    assert state.up and state.no_data and state.latest is None
    assert len([r for r in caplog.records if "has no data" in r.getMessage()]) == 2
    assert state.errors == 0


def test_failure_after_no_data_is_a_failure():
    src = ScriptedSource()
    sampler = sampler_with({"s": src})
    state = sampler.states["s"]
    src.outcome = NoData("unavailable:/proc/pressure")
    sampler.sample_once(state)
    src.outcome = SourceError("permission:/proc/pressure/io", "denied")
    sampler.sample_once(state)
    assert not state.up and not state.no_data and state.errors == 1


def test_distinct_causes_logged_separately(caplog):
    src = ScriptedSource()
    sampler = sampler_with({"s": src})
    state = sampler.states["s"]
    caplog.set_level(logging.INFO, logger="gpuwait.sampler")
    src.part_errors = ("missing:/sys/a",)
    sampler.sample_once(state)
    sampler.sample_once(state)
    src.part_errors = ("missing:/sys/a", "missing:/sys/b")
    sampler.sample_once(state)
    sampler.sample_once(state)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 2
    assert "missing:/sys/a" in messages[0] and "missing:/sys/b" in messages[1]


def test_unexpected_exception_logged_once_with_traceback(caplog):
    src = ScriptedSource()
    src.outcome = KeyError("x")
    sampler = sampler_with({"s": src})
    caplog.set_level(logging.INFO, logger="gpuwait.sampler")
    for _ in range(5):
        sampler.sample_once(sampler.states["s"])
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None


def test_failing_columns_counted_and_reading_kept():
    def broken_columns(data):
        raise ValueError("columns bug")

    src = ScriptedSource()
    sampler = sampler_with({"s": src}, columns=broken_columns)
    state = sampler.states["s"]
    sampler.sample_once(state)
    assert state.errors == 1
    assert state.latest is not None
    assert len(state.ring) == 0


# -- window and analysis -------------------------------------------------------------------


def test_ring_bounded_by_window():
    sampler = sampler_with({"s": CountingSource()}, "--sample.interval=100ms", "--analysis.window=1s")
    state = sampler.states["s"]
    for _ in range(100):
        sampler.sample_once(state)
    # 1 s of 100 ms samples needs 11 rows to cover 10 whole intervals.
    assert state.ring.capacity == 11
    assert len(state.ring) == 11


def test_slow_tier_ring_sized_by_slow_interval():
    spec = SourceSpec("slowtier", lambda s: CountingSource(), keep_counter, rate_of_c, tier="slow")
    sampler = Sampler([collector_of(spec)], settings("--sample.slow-interval=5s", "--analysis.window=60s"))
    state = sampler.states["slowtier"]
    assert state.interval == 5.0
    assert state.ring.capacity == 13


def test_source_with_its_own_interval_option_is_read_and_sized_by_it():
    spec = SourceSpec("ownpace", lambda s: CountingSource(), keep_counter, rate_of_c, interval_option="analysis.interval")
    sampler = Sampler([collector_of(spec)], settings("--analysis.interval=2s", "--analysis.window=60s"))
    state = sampler.states["ownpace"]
    assert state.interval == 2.0
    assert state.ring.capacity == 31


def test_analysis_computes_window_stats_from_samples():
    t0 = time.monotonic() - 5.0
    ticks = iter(range(10_000))
    src = CountingSource(step=10.0, clock=lambda: t0 + 0.1 * next(ticks))
    sampler = sampler_with({"s": src}, "--analysis.window=60s")
    state = sampler.states["s"]
    for _ in range(21):
        sampler.sample_once(state)
    sampler.analyse_once()
    sampler.summarize_due()  # a scrape's turn: the summaries no analysis reads
    # 10 per 0.1 s of the source's own clock, whatever the wall time the test took.
    assert state.stats == pytest.approx(100.0)
    assert state.window_samples == 21
    assert sampler.analysis_runs == 1
    assert sampler.analysis_seconds >= 0


def test_analysis_ignores_samples_older_than_window():
    now = time.monotonic()
    times = iter([now - 30, now - 20, now - 3, now - 2, now - 1])
    src = CountingSource(step=1.0, clock=lambda: next(times))
    sampler = sampler_with({"s": src}, "--analysis.window=10s", "--sample.interval=1s")
    state = sampler.states["s"]
    for _ in range(5):
        sampler.sample_once(state)
    sampler.analyse_once()
    sampler.summarize_due()
    assert state.window_samples == 3
    assert state.stats == pytest.approx(1.0)


def test_failing_summary_counted_and_stats_cleared(caplog):
    def broken(view, s):
        raise RuntimeError("summary bug")

    sampler = sampler_with({"s": CountingSource()}, summarize=broken)
    state = sampler.states["s"]
    state.stats = "stale"
    sampler.sample_once(state)
    with caplog.at_level(logging.ERROR, logger="gpuwait.sampler"):
        sampler.analyse_once()
        sampler.summarize_due()
    assert state.stats is None
    assert state.errors == 1
    assert any("window analysis" in r.getMessage() for r in caplog.records)


def _counting_summary(calls: list[int]):
    def summarize(view, settings):
        calls.append(len(view))
        return rate_of_c(view, settings)
    return summarize


def _scraped_every_15_s(sampler: Sampler, clock: list[float]) -> None:
    """Two scrapes 15 s apart on the sampler's clock, the last at ``clock[0]``."""
    sampler._clock = lambda: clock[0]
    now = clock[0]
    clock[0] = now - 15.0
    sampler.summarize_due()
    clock[0] = now
    sampler.summarize_due()


def _no_scrape_expected(sampler: Sampler) -> None:
    """The sampler's clock 2.5 s after the second of two scrapes 15 s apart: no scrape is
    expected before its next pass, which leaves the summaries due."""
    clock = [1000.0]
    _scraped_every_15_s(sampler, clock)
    clock[0] += 2.5


def _counted(rows: int) -> tuple[Sampler, SourceState, list[int]]:
    """A sampler of one source, read ``rows`` times, whose summary lists the rows it saw."""
    made: list[int] = []
    sampler = sampler_with({"s": CountingSource()}, summarize=_counting_summary(made))
    state = sampler.states["s"]
    for _ in range(rows):
        sampler.sample_once(state)
    return sampler, state, made


def test_a_summary_no_analysis_reads_is_made_once_a_pass_when_a_scrape_asks():
    sampler, state, made = _counted(5)
    _no_scrape_expected(sampler)
    sampler.analyse_once()
    sampler.analyse_once()
    assert made == [] and state.stats is None
    exposition = GpuwaitCollector(sampler, sampler.collectors)
    exposition.current()
    exposition.render(sampler.generation)  # a second rendering of the same pass
    assert made == [5]
    assert state.stats is not None
    for _ in range(3):
        sampler.sample_once(state)
    sampler.analyse_once()
    sampler.summarize_due(["s"])
    # The pass's own window: the rows read after it wait for the next pass.
    sampler.sample_once(state)
    sampler.summarize_due()
    assert made == [5, 8]


def test_a_pass_brings_the_rate_accounts_of_a_summary_left_due_up_to_its_view():
    # Their steps are taken a pass at a time, not a scrape interval's at once inside a scrape.
    sampler = sampler_with({"s": CountingSource()}, summarize=lambda view, s: view.rate_shape("c"))
    state = sampler.states["s"]
    _no_scrape_expected(sampler)
    for _ in range(5):
        sampler.sample_once(state)
    sampler.analyse_once()
    sampler.summarize_due()
    account = state.ring._shapes["c"]
    for _ in range(7):
        sampler.sample_once(state)
    sampler.analyse_once()
    assert account._next == 11  # the 11 intervals of the 12 rows, before any scrape
    assert state.due_view is not None


def test_the_pass_before_an_expected_scrape_makes_the_summaries_and_no_other_pass_does():
    sampler, state, made = _counted(2)
    clock = [0.0]
    sampler._clock = lambda: clock[0]
    made_by_passes, found_due = [], []
    for second in range(75):
        clock[0] = second + 0.5  # a pass every second, half a second off the scrapes
        before = len(made)
        sampler.analyse_once()
        made_by_passes.append(len(made) - before)
        if second % 15 == 14:
            clock[0] = second + 1.0  # Prometheus, every 15 s
            found_due.append(state.due_view is not None)
            sampler.summarize_due()
    # Without two scrapes to go by, every pass made them; then only the pass before each scrape.
    assert made_by_passes[:15] == [1] * 15
    assert made_by_passes[30:] == ([0] * 14 + [1]) * 3
    assert found_due == [False] * 5


def test_a_scrape_that_comes_while_a_pass_works_out_the_next_one_costs_the_pass_nothing():
    # The scrapes' times are appended by the scraping thread while a pass reads them.
    sampler = sampler_with({"s": CountingSource()})
    stop = threading.Event()

    def scraping():
        t = 0.0
        while not stop.is_set():
            t += 2.0
            sampler._scraped_at.append(t)

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch inside the pass's reading, as often as can be
    scraper = threading.Thread(target=scraping)
    scraper.start()
    try:
        for i in range(30_000):
            sampler._scrape_expected(float(i))
    finally:
        stop.set()
        scraper.join()
        sys.setswitchinterval(switching)


def test_without_scrapes_for_two_of_their_intervals_the_passes_stop_making_summaries():
    sampler, state, made = _counted(2)
    clock = [100.0]
    _scraped_every_15_s(sampler, clock)
    made_at = []
    for second in range(1, 50):
        clock[0] = 100.0 + second - 0.5
        before = len(made)
        sampler.analyse_once()
        if len(made) > before:
            made_at.append(second)
    # Expected at 115, overdue until 145: the pass before it and those overdue made them.
    assert made_at == list(range(15, 46))
    clock[0] = 150.0
    sampler.summarize_due()  # the scrapers are back: this scrape makes them itself
    assert made[-1] == 2 and len(made) == 32


def test_the_summaries_an_analysis_reads_are_made_at_its_pass_and_only_those_handed_to_it():
    seen: list[dict] = []
    made: list[int] = []
    read = SourceSpec("read", lambda s: CountingSource(), keep_counter, _counting_summary(made))
    shown = SourceSpec("shown", lambda s: CountingSource(), keep_counter, _counting_summary(made))
    analysing = CollectorSpec("analysing", "Reads one summary.", (read, shown), expose=lambda snapshots, s: iter(()),
                              analyse=lambda inputs, s: seen.append(dict(inputs.stats)), reads_summaries=("read",))
    sampler = Sampler([analysing], settings())
    _no_scrape_expected(sampler)
    for state in sampler.states.values():
        sampler.sample_once(state)
        sampler.sample_once(state)
    sampler.analyse_once()
    assert made == [2]
    assert list(seen[0]) == ["read"] and seen[0]["read"] == sampler.states["read"].stats
    sampler.summarize_due()
    assert made == [2, 2]


def test_a_scrape_makes_its_summaries_while_the_verdict_of_a_pass_is_under_way():
    # The summaries share nothing the verdict uses: a scrape does not wait for its 100 ms.
    entered, release = threading.Event(), threading.Event()

    def slow_analysis(inputs, s):
        entered.set()
        release.wait(10)

    made: list[int] = []
    spec = SourceSpec("s", lambda s: CountingSource(), keep_counter, _counting_summary(made))
    sampler = Sampler([CollectorSpec("slow", "Holds the pass.", (spec,), expose=lambda snapshots, s: iter(()),
                                     analyse=slow_analysis)], settings())
    state = sampler.states["s"]
    _no_scrape_expected(sampler)
    for _ in range(3):
        sampler.sample_once(state)
    passing = threading.Thread(target=sampler.analyse_once)
    passing.start()
    try:
        assert entered.wait(10)
        sampler.summarize_due()
        assert made == [3] and passing.is_alive()
    finally:
        release.set()
        passing.join(10)


def test_a_scrape_while_a_pass_replaces_the_views_left_due_waits_for_the_new_one():
    # Between the old view's going and the new one's coming, there is neither a view to make
    # the summary from nor a summary: a scrape then would serve none.
    sampler, state, made = _counted(2)
    _no_scrape_expected(sampler)
    sampler.analyse_once()  # leaves it due, no scrape expected
    sampler.sample_once(state)
    entered, release = threading.Event(), threading.Event()
    ring_view = state.ring.view

    def slow_view(*args, **kwargs):
        entered.set()
        release.wait(10)
        return ring_view(*args, **kwargs)

    state.ring.view = slow_view
    passing = threading.Thread(target=sampler.analyse_once)
    passing.start()
    scrape = threading.Thread(target=sampler.summarize_due)
    try:
        assert entered.wait(10)
        scrape.start()
        scrape.join(0.3)
        assert scrape.is_alive() and made == []
    finally:
        release.set()
        passing.join(10)
        if scrape.ident is not None:
            scrape.join(10)
    assert made == [3] and state.stats is not None


def test_the_summaries_of_two_scrapes_are_made_one_scrape_at_a_time():
    # A ring's running account of its counters' rates is brought up to one view at a time.
    entered, release = threading.Event(), threading.Event()
    made: list[str] = []

    def held(view, s):
        made.append("held")
        entered.set()
        release.wait(10)

    def quick(view, s):
        made.append("quick")

    sources = (SourceSpec("held", lambda s: CountingSource(), keep_counter, held),
               SourceSpec("quick", lambda s: CountingSource(), keep_counter, quick))
    sampler = Sampler([collector_of(*sources)], settings())
    _no_scrape_expected(sampler)
    for state in sampler.states.values():
        sampler.sample_once(state)
        sampler.sample_once(state)
    sampler.analyse_once()
    first = threading.Thread(target=sampler.summarize_due, args=(["held"],))
    first.start()
    second = threading.Thread(target=sampler.summarize_due, args=(["quick"],))
    try:
        assert entered.wait(10)
        second.start()
        second.join(0.3)
        assert second.is_alive() and made == ["held"]
    finally:
        release.set()
        first.join(10)
        if second.is_alive() or second.ident is not None:
            second.join(10)
    assert made == ["held", "quick"]


def test_rows_append_several_timed_samples_per_reading():
    def rows(reading: Reading):
        base = reading.t
        return [(base - 0.3, {"u": 10.0}), (base - 0.2, {}), (base - 0.1, {"u": 30.0})]

    spec = SourceSpec("rows", lambda s: ScriptedSource(), None, None, rows=rows)
    sampler = Sampler([collector_of(spec)], settings())
    state = sampler.states["rows"]
    sampler.sample_once(state)
    view = state.ring.view()
    # The empty row carries nothing and is dropped rather than stored as a NaN row.
    assert view.column("u") == [10.0, 30.0]


def test_source_without_columns_keeps_no_ring():
    spec = SourceSpec("plain", lambda s: ScriptedSource())
    sampler = Sampler([collector_of(spec)], settings())
    state = sampler.states["plain"]
    sampler.sample_once(state)
    sampler.analyse_once()
    assert state.ring is None
    assert state.window_samples == 1


def test_timing_self_stats():
    sampler = sampler_with({"s": SleepingSource(0.02)})
    state = sampler.states["s"]
    sampler.sample_once(state, lag=0.5)
    sampler.sample_once(state, lag=0.1)
    sampler.analyse_once()
    assert state.read_seconds >= 0.04
    assert 0.02 <= state.mean_read_seconds < 1.0
    assert state.max_lag_seconds == 0.5


def test_timing_self_stats_cover_the_reads_of_the_window_pass_after_pass():
    sampler = sampler_with({"s": SleepingSource(0.0)}, "--analysis.window=10s")
    state = sampler.states["s"]
    now = time.monotonic()
    for started, duration, lag in ((now - 30, 5.0, 9.0), (now - 3, 1.0, 0.5), (now - 2, 2.0, 0.1)):
        sampler.ingest(state, None, {"test:failed": "a read"}, started=started, duration=duration, lag=lag)
    sampler.analyse_once(now=now)
    assert (state.mean_read_seconds, state.max_lag_seconds) == (1.5, 0.5)
    sampler.ingest(state, None, {"test:failed": "a read"}, started=now + 4, duration=6.0, lag=0.2)
    sampler.analyse_once(now=now + 7.5)  # the read at now - 3 leaves the window
    assert (state.mean_read_seconds, state.max_lag_seconds) == (4.0, 0.2)


# -- reads decoded at the next pass --------------------------------------------------------


class CapturingSource(Source):
    """Captures a counter that grows by one a read and decodes it into ``{"c": counter}``; a
    capture the test marks (``bad``) does not decode, and ``fail`` makes captures fail."""

    name = "capturing"

    def __init__(self, decode_seconds: float = 0.0) -> None:
        super().__init__(HostPaths())
        self.captures = 0
        self.bad: set[int] = set()
        self.fail = False
        self.decode_seconds = decode_seconds
        self.decoded_in: list[str] = []

    def read(self) -> Reading:
        return self.decode(self.capture())

    def capture(self) -> tuple[float, int]:
        if self.fail:
            raise SourceError("unavailable:/capturing", "gone")
        self.captures += 1
        return time.monotonic(), self.captures

    def decode(self, captured: tuple[float, int]) -> Reading:
        t, n = captured
        self.decoded_in.append(threading.current_thread().name)
        time.sleep(self.decode_seconds)
        if n in self.bad:
            raise SourceError("parse:/capturing", f"capture {n}")
        return self.reading(t, {"c": float(n)})


def _taken(sampler: Sampler, state: SourceState, times: int = 1) -> None:
    """``times`` reads as a tier's thread takes them when passes come less often."""
    for _ in range(times):
        sampler.take(state, sampler.read_source(state, capture=True), 0.0)


def test_a_tier_read_between_passes_is_decoded_and_folded_in_by_the_next_pass():
    source = CapturingSource()
    sampler = sampler_with({"c": source}, "--sample.interval=50ms", "--analysis.interval=1h")
    state = sampler.states["c"]
    sampler.start()
    try:
        assert wait_for(lambda: source.captures >= 6)
        # The first read makes the exporter ready at once; the next wait for the pass.
        assert state.reads == 1 and sampler.not_ready() == []
        captured = source.captures
        sampler.analyse_once()
        assert state.reads >= captured
        assert source.decoded_in[0] == "sample-every-0.05s"
        assert set(source.decoded_in[1:captured]) == {"MainThread"}, "decoded by the pass's thread, not the tier's"
        assert state.ring.view().column("c")[:captured] == [float(n) for n in range(1, captured + 1)]
    finally:
        sampler.stop(timeout=3.0)
    assert state.reads == source.captures, "stopping folds in what was read"


def test_a_tier_read_as_often_as_the_passes_is_folded_in_by_its_thread():
    source = CapturingSource()
    sampler = sampler_with({"c": source}, "--sample.interval=50ms", "--analysis.interval=50ms")
    sampler.start()
    try:
        assert wait_for(lambda: source.captures >= 4)
    finally:
        sampler.stop(timeout=3.0)
    assert set(source.decoded_in) == {"sample-every-0.05s"}


def test_a_tier_whose_readings_are_recorded_folds_them_in_as_it_reads():
    """A trace is written in the order of the reads: a recorder sees each as it is taken."""
    source = CapturingSource()
    sampler = sampler_with({"c": source}, "--sample.interval=50ms", "--analysis.interval=1h")
    recorded: list[float] = []
    sampler.observers.append(lambda reading: recorded.append(reading.data["c"]))
    sampler.start()
    try:
        assert wait_for(lambda: len(recorded) >= 4)
    finally:
        sampler.stop(timeout=3.0)
    assert set(source.decoded_in) == {"sample-every-0.05s"}
    assert recorded == [float(n) for n in range(1, len(recorded) + 1)]


def test_held_reads_are_folded_in_in_order_before_a_failed_one():
    source = CapturingSource()
    sampler = sampler_with({"c": source}, "--sample.interval=50ms", "--analysis.interval=1h")
    state = sampler.states["c"]
    _taken(sampler, state, 3)
    assert (state.reads, len(state.undecoded)) == (1, 2)
    source.fail = True
    _taken(sampler, state)
    assert (state.reads, state.errors, state.up, len(state.undecoded)) == (4, 1, False, 0)
    assert state.ring.view().column("c") == [1.0, 2.0, 3.0]
    source.fail = False
    _taken(sampler, state)
    assert state.up and state.reads == 5, "a source coming back is folded in at once"


def test_a_capture_that_does_not_decode_costs_its_own_read_only():
    source = CapturingSource()
    source.bad = {3}
    sampler = sampler_with({"c": source}, "--sample.interval=50ms", "--analysis.interval=1h")
    state = sampler.states["c"]
    _taken(sampler, state, 4)
    sampler.analyse_once()
    assert (state.reads, state.errors, state.up) == (4, 1, True)
    assert state.ring.view().column("c") == [1.0, 2.0, 4.0]


def test_a_tier_holds_at_most_a_bounded_number_of_reads():
    sampler = sampler_with({"c": CapturingSource()}, "--sample.interval=50ms", "--analysis.interval=1h")
    state = sampler.states["c"]
    _taken(sampler, state, 1 + MAX_UNDECODED_READS - 1)
    assert len(state.undecoded) == MAX_UNDECODED_READS - 1
    _taken(sampler, state)
    assert len(state.undecoded) == 0 and state.reads == 1 + MAX_UNDECODED_READS


def test_a_held_read_is_served_as_taken_when_it_was_read_not_when_it_was_folded_in():
    sampler = sampler_with({"c": CapturingSource()}, "--sample.interval=50ms", "--analysis.interval=1h")
    state = sampler.states["c"]
    _taken(sampler, state)
    read_by = time.monotonic()
    _taken(sampler, state)
    assert state.reads == 1
    time.sleep(0.3)
    sampler.analyse_once()
    assert state.reads == 2 and state.taken_at <= read_by + 0.1 < time.monotonic() - 0.2


def test_a_held_read_counts_its_decoding_in_its_duration():
    sampler = sampler_with({"c": CapturingSource(decode_seconds=0.02)}, "--sample.interval=50ms",
                           "--analysis.interval=1h")
    state = sampler.states["c"]
    _taken(sampler, state, 3)
    sampler.analyse_once()
    assert state.reads == 3 and state.read_seconds >= 3 * 0.02


# -- reads that hang -----------------------------------------------------------------------


class HangingSource(Source):
    """Blocks in read() while ``hang`` is set, as a read of a FIFO nobody writes or of a dead
    NFS client's file does; ``release`` lets the blocked reads return."""

    name = "hanging"

    def __init__(self) -> None:
        super().__init__(HostPaths())
        self.hang = threading.Event()
        self.release = threading.Event()
        self.counter = 0.0
        self.blocked = 0

    def read(self) -> Reading:
        if self.hang.is_set():
            self.blocked += 1
            self.release.wait(30.0)
            self.blocked -= 1
        self.counter += 1.0
        return self.reading(time.monotonic(), {"c": self.counter})


def wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_hung_read_takes_the_source_down_withdraws_its_series_and_recovers(monkeypatch, caplog):
    import gpuwait.core.sampler as sampler_module
    monkeypatch.setattr(sampler_module, "READ_DEADLINE_FLOOR_SECONDS", 0.3)
    caplog.set_level(logging.INFO, logger="gpuwait.sampler")
    hanging, healthy = HangingSource(), CountingSource()
    sampler = sampler_with({"hanging": hanging, "healthy": healthy}, "--sample.interval=50ms", "--analysis.interval=10s")
    state = sampler.states["hanging"]
    sampler.start()
    try:
        assert wait_for(lambda: state.up and state.latest is not None)
        hanging.hang.set()
        assert wait_for(lambda: state.timed_out), "a read that never returns must be noticed"
        assert not state.up and state.snapshot().reading is None and state.snapshot().stats is None
        assert state.errors >= 1
        assert any("stale" in r for r in sampler.not_ready())
        assert wait_for(lambda: any("timeout" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING), 5.0)
        reads_before = healthy.reads
        assert wait_for(lambda: healthy.reads > reads_before + 5), "the other sources go on"
        # Retries are spaced out: a file that never answers holds a few threads, not one per slot.
        time.sleep(1.0)
        assert 1 <= state.hung_reads <= 4 and state.hung_reads <= hanging.blocked <= state.hung_reads + 1
        # The file answers again (the FIFO replaced by a regular file): the next retry, on a
        # fresh thread, brings the source back while the old reads are still blocked.
        hanging.hang.clear()
        assert wait_for(lambda: state.up and not state.timed_out, 15.0), "the source must recover on a retry"
        assert state.latest is not None and not sampler.not_ready()
        # Logged just after the state that brings the source back is published.
        assert wait_for(lambda: any("recovered from timeout" in r.getMessage() for r in caplog.records), 5.0)
    finally:
        hanging.release.set()
        sampler.stop(timeout=3.0)
    assert wait_for(lambda: state.hung_reads == 0), "a blocked read that returns late is thrown away and its thread ends"
    assert state.latest is None or state.latest.data["c"] >= 1.0
