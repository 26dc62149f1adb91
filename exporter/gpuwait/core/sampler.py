"""The sampler: the sources read on schedules, feeding bounded window rings; and an analysis
thread that summarises the rings on a schedule.

The sources read at the same interval share one thread that reads them in turn (a thread per
source costs each read two thread switches and the GIL handed over four times, more than the
read of most kernel files). A source whose read holds that thread for longer than its tier can
spare (a slow or hung file: an NFS mount, a GPU in a bad state) is moved to a thread of its
own, where a read that never returns is given up at its deadline, so it delays the others of
its tier by at most that once. The scrape path only reads references that the workers swap in
whole, so it never waits for a read.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter, sub
from typing import Any

from gpuwait.core.config import ANALYSIS_INTERVAL, CONFIG_FILE, Settings, format_duration
from gpuwait.core.errors import ConfigError, NoData, SourceError
from gpuwait.core.plugin import AnalysisInputs, CollectorSpec, Snapshot, SourceSpec
from gpuwait.core.reading import Reading
from gpuwait.core.ring import ColumnRing, WindowView
from gpuwait.core.source import Source

log = logging.getLogger("gpuwait.sampler")

#: Bound on remembered partial-failure causes, so a host whose device names churn cannot
#: grow the set without limit (the price is an occasional repeated log line).
MAX_REMEMBERED_CAUSES = 1000

#: A read that has not returned after this long (or after READ_DEADLINE_INTERVALS of its
#: interval, whichever is longer) is given up: the floor leaves room for a first NVML call or
#: a cold sysfs walk on a large node; a hung FIFO, a dead NFS client or a wedged driver never
#: returns at all, so waiting longer would only hide it.
READ_DEADLINE_FLOOR_SECONDS = 10.0
READ_DEADLINE_INTERVALS = 5
#: Cause of a read that outlived its deadline.
TIMEOUT_CAUSE = "timeout"
#: A read that hangs in the kernel cannot be interrupted from Python; the thread it holds is
#: the price. Retries of a source whose reads keep hanging are spaced out (doubling from the
#: deadline up to RETRY_BACKOFF_CEILING_SECONDS) and stop at MAX_HUNG_READS threads, so a file
#: that never answers costs a few threads, not one per interval; a file that is replaced by
#: one that answers (the FIFO removed, the mount back) is picked up on the next retry.
RETRY_BACKOFF_CEILING_SECONDS = 300.0
MAX_HUNG_READS = 16
#: A read that has held its tier's shared thread for SHARED_READ_INTERVALS of the tier's interval
#: (and at least SHARED_READ_FLOOR_SECONDS, so that a loaded machine's scheduling hiccup does not
#: move a source) is moved to a thread of its own: the rest of the tier loses about that much.
SHARED_READ_INTERVALS = 2
SHARED_READ_FLOOR_SECONDS = 0.25


#: Reads a tier's thread holds, per source, before it decodes them itself: analysis passes
#: decode them sooner (each pass first), so this only bounds them when passes are rare.
MAX_UNDECODED_READS = 32


@dataclass
class ReadOutcome:
    reading: Reading | None
    details: dict[str, str]
    no_data: NoData | None
    started: float
    duration: float
    #: What ``Source.capture`` took, still to be decoded into ``reading`` (None once decoded,
    #: or when the read failed).
    captured: Any = None


class _Reader:
    """A thread that performs one source's reads when asked, so the source's worker can stop
    waiting for a read that hangs. An abandoned reader finishes its read, if it ever does,
    throws the outcome away and ends."""

    def __init__(self, sampler: "Sampler", state: "SourceState", thread: bool = True) -> None:
        self._sampler = sampler
        self._state = state
        self._requested = threading.Event()
        self._done = threading.Event()
        self._outcome: ReadOutcome | None = None
        self.abandoned = False
        if thread:
            threading.Thread(target=self._run, name=f"read-{state.spec.name}", daemon=True).start()

    def read(self, deadline: float) -> ReadOutcome | None:
        """The outcome of one read, or None when it has not returned within ``deadline`` s."""
        self._done.clear()
        self._requested.set()
        return self.outcome(deadline)

    def outcome(self, deadline: float) -> ReadOutcome | None:
        """The outcome of the read in flight, or None when it has not returned within ``deadline`` s."""
        if not self._done.wait(deadline):
            return None
        return self._outcome

    def adopt(self, outcome: ReadOutcome) -> None:
        """Called by a tier's thread whose read this reader took over (made with
        ``thread=False``): hands the outcome over, then serves this source's reads."""
        if self.abandoned:
            self._sampler._hung_read_returned(self._state)
            return
        threading.current_thread().name = f"read-{self._state.spec.name}"
        self._outcome = outcome
        self._done.set()
        self._run()

    def release(self) -> None:
        """Ends the thread once it is idle (the sampler stops)."""
        self._requested.set()

    def _run(self) -> None:
        while True:
            self._requested.wait()
            self._requested.clear()
            if self.abandoned or self._sampler._stop.is_set():
                return
            outcome = self._sampler.read_source(self._state)
            if self.abandoned:
                self._sampler._hung_read_returned(self._state)
                return
            self._outcome = outcome
            self._done.set()

def _next_slot(due: float, interval: float) -> tuple[float, int]:
    """The slot after the one due at ``due``, and how many slots were missed: reads that
    outlasted their slot skip the missed ones rather than run back to back."""
    next_due = due + interval
    now = time.monotonic()
    if now <= next_due:
        return next_due, 0
    missed = int((now - next_due) // interval) + 1
    return next_due + missed * interval, missed


class _Tier:
    """Sources read on one schedule, in turn, by one thread. ``in_flight`` is the read under
    way, which the watchdog may hand over to a reader of that source's own (``handover``)."""

    def __init__(self, states: list["SourceState"], interval: float, next_due: float) -> None:
        self.states = states
        self.interval = interval
        self.next_due = next_due
        self.lock = threading.Lock()
        self.in_flight: tuple[SourceState, float] | None = None
        self.handover: _Reader | None = None
        self.thread: threading.Thread | None = None

    @property
    def patience(self) -> float:
        """How long one read may hold the thread before it is moved off it: never past a
        deadline, where the read is given up."""
        return min(min(state.read_deadline for state in self.states),
                   max(SHARED_READ_FLOOR_SECONDS, SHARED_READ_INTERVALS * self.interval))


#: Most window samples all rings may hold together. Each sample costs 8 bytes of timestamp
#: plus 8 per series of its source, so this bounds the rings to a few hundred MiB on a
#: large host; the defaults (60 s at 100 ms) use well under 1% of it.
MAX_RING_SAMPLES = 1_000_000

#: Scrapes whose times tell when the next is expected: a few scrapers' worth.
SCRAPES_REMEMBERED = 6

#: A timing's read duration and its lag behind the schedule.
_DURATION, _LAG = itemgetter(1), itemgetter(2)


@dataclass
class SourceState:
    """Everything the exposition needs to know about one source, updated by its worker."""

    spec: SourceSpec
    source: Source
    interval: float
    ring: ColumnRing | None
    latest: Reading | None = None
    stats: Any = None
    #: The last pass's view of the window, kept until ``Sampler.summarize_due`` makes the
    #: summary a scrape asks for (None: ``stats`` is up to date, or there is nothing to make).
    due_view: WindowView | None = None
    up: bool = False
    #: The source's last read found nothing to report (an absent kernel feature, NoData).
    no_data: bool = False
    reads: int = 0
    read_seconds: float = 0.0
    errors: int = 0
    overruns: int = 0
    window_samples: int = 0
    mean_read_seconds: float = math.nan
    max_lag_seconds: float = math.nan
    #: (monotonic time, read duration, lag) of recent reads, for the window self-stats; in the
    #: order of the reads, so that a pass drops the ones that left the window from the left.
    timings: deque[tuple[float, float, float]] = field(default_factory=deque)
    #: Causes of the current whole-source failure (empty while the source is up).
    active_causes: set[str] = field(default_factory=set)
    #: Partial causes already logged.
    logged_partial: set[str] = field(default_factory=set)
    #: The latest read outlived its deadline: nothing this source holds is served.
    timed_out: bool = False
    #: Reads of the tier's thread not yet decoded and folded in, with their lags, in order
    #: (``Sampler.settle``); held by whichever thread settles them.
    undecoded: deque[tuple[ReadOutcome, float]] = field(default_factory=deque)
    settle_lock: threading.Lock = field(default_factory=threading.Lock)
    #: Reads given up on whose threads are still blocked, and when a retry is allowed.
    hung_reads: int = 0
    retry_after: float = 0.0
    reader: _Reader | None = None
    #: time.monotonic() when the served reading was folded in (the process's own clock,
    #: also during a replay, whose readings carry the trace's clock).
    taken_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def read_deadline(self) -> float:
        return max(READ_DEADLINE_FLOOR_SECONDS, READ_DEADLINE_INTERVALS * self.interval)

    def snapshot(self) -> Snapshot:
        # A source whose read hangs serves nothing rather than its last values: a frozen
        # counter reads as an idle device to rate().
        if self.timed_out:
            return Snapshot(None, None)
        return Snapshot(self.latest, self.stats)


def ring_capacity(window: float, interval: float) -> int:
    return max(2, int(math.ceil(window / interval)) + 1)


def check_ring_samples(settings: Settings, rings: list[tuple[str, float, int]]) -> None:
    """Refuse, before any ring is allocated, a window and intervals whose rings would hold
    more than MAX_RING_SAMPLES samples. ``rings``: (source, interval, capacity; 0 = no ring)."""
    total = sum(capacity for _, _, capacity in rings)
    if total <= MAX_RING_SAMPLES:
        return
    name, interval, capacity = max(rings, key=lambda ring: ring[2])
    where = settings.values.get(CONFIG_FILE) or "flags"
    raise ConfigError(
        f"{where}: analysis.window {format_duration(settings.analysis_window)} needs {total} window samples "
        f"over {sum(1 for ring in rings if ring[2])} sources (the most, {capacity}, for source {name} "
        f"sampled every {format_duration(interval)}), above the limit of {MAX_RING_SAMPLES}; "
        f"shorten analysis.window or lengthen the sampling intervals")


class Sampler:
    def __init__(
        self, collectors: list[CollectorSpec], settings: Settings,
        make_source: Callable[[SourceSpec, Settings], Source] | None = None,
    ) -> None:
        self._settings = settings
        self.collectors = collectors
        self.states: dict[str, SourceState] = {}
        #: Bumped (under its lock) whenever what a scrape would show changes other than by a
        #: fresh reading of a source that stays up: an analysis pass, a source going down, up,
        #: to no data or back, new settings. The exposition renders at most once per value.
        self.generation = 0
        self._generation_lock = threading.Lock()
        self._stop = threading.Event()
        #: The threads that must stay alive (tiers, sources of their own, analysis, watchdog),
        #: and the tiers; both replaced whole, under the lock, when a source leaves its tier.
        self._threads: list[threading.Thread] = []
        self._tiers: list[_Tier] = []
        self._threads_lock = threading.Lock()
        self.analysis_seconds = math.nan
        self.analysis_runs = 0
        #: Results of the collectors' cross-source analyses, by collector name, and when each ran.
        self.analyses: dict[str, Any] = {}
        self._analysed_at: dict[str, float] = {}
        #: Held while the summaries a pass left due are made, while a pass replaces the due
        #: views by its own, and while it brings the rings' running accounts of their counters'
        #: rates up to them: one thread at a time may use those (``WindowView.rate_shape``). A
        #: scrape never waits for the verdict, which reads neither the summaries nor the accounts.
        self._summary_lock = threading.Lock()
        #: When the last scrapes asked for the summaries (``_clock``, the monotonic clock).
        self._scraped_at: deque[float] = deque(maxlen=SCRAPES_REMEMBERED)
        self._clock = time.monotonic
        #: The sources whose summaries an analysis reads, made at every pass (the others only
        #: feed the exposition: made when a scrape asks, ``summarize_due``).
        self._summaries_read = frozenset(name for collector in collectors if collector.analyse is not None
                                         for name in collector.reads_summaries)
        #: Called with every Reading taken (e.g. a trace recorder); must be quick.
        self.observers: list[Callable[[Reading], None]] = []
        window = settings.analysis_window
        planned: list[tuple[SourceSpec, Source, float, int]] = []
        for collector in collectors:
            for spec in collector.sources:
                source = make_source(spec, settings) if make_source else spec.factory(settings)
                tier = spec.tier or source.tier
                if spec.interval_option is not None:
                    interval = settings[spec.interval_option]
                else:
                    interval = settings.slow_interval if tier == "slow" else settings.sample_interval
                capacity = ring_capacity(window, interval) if (spec.columns or spec.rows) else 0
                planned.append((spec, source, interval, capacity))
        try:
            check_ring_samples(settings, [(spec.name, interval, capacity) for spec, _, interval, capacity in planned])
        except ConfigError:
            for _, source, _, _ in planned:
                try:
                    source.close()
                except Exception:  # the refusal is what matters; a source that fails to close adds nothing
                    log.debug("closing source %s failed", source, exc_info=True)
            raise
        for spec, source, interval, capacity in planned:
            self.states[spec.name] = SourceState(spec, source, interval, ColumnRing(capacity) if capacity else None)

    @property
    def settings(self) -> Settings:
        return self._settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        # A reload changes thresholds the collectors' expose functions read.
        self._settings = settings
        self.changed()

    def changed(self) -> None:
        """What the exposition shows has changed: a rendering made before is not served again."""
        with self._generation_lock:
            self.generation += 1

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        by_interval: dict[float, list[SourceState]] = {}
        for state in self.states.values():
            by_interval.setdefault(state.interval, []).append(state)
        now = time.monotonic()
        for interval, states in by_interval.items():
            self._start_tier(_Tier(states, interval, now))
        self._start(threading.Thread(target=self._run_analysis, name="analysis", daemon=True))
        if self._tiers:
            self._start(threading.Thread(target=self._run_watchdog, name="read-watchdog", daemon=True))

    def _start(self, thread: threading.Thread) -> None:
        with self._threads_lock:
            self._threads = [*self._threads, thread]
        thread.start()

    def _start_tier(self, tier: _Tier) -> None:
        tier.thread = threading.Thread(target=self._run_tier, args=(tier,), name=f"sample-every-{tier.interval:g}s", daemon=True)
        with self._threads_lock:
            self._tiers = [*self._tiers, tier]
        self._start(tier.thread)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        for state in self.states.values():
            if state.reader is not None:
                state.reader.release()
        deadline = time.monotonic() + timeout
        with self._threads_lock:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.settle_all()  # what was read is kept (a trace recorder's last readings)
        for state in self.states.values():
            try:
                state.source.close()
            except Exception:  # closing must never stop the shutdown of the others
                log.debug("closing source %s failed", state.spec.name, exc_info=True)

    def alive(self) -> bool:
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def not_ready(self) -> list[str]:
        """Why the exporter is not ready, one reason per source: never read yet, or its read
        hangs. Empty once every source has been read and none hangs."""
        reasons = []
        for name, state in self.states.items():
            if state.timed_out:
                reasons.append(f"source {name} stale: its read has not returned within {state.read_deadline:g}s")
            elif state.reads == 0:
                reasons.append(f"source {name} not read yet")
        return reasons

    # -- shared schedules ------------------------------------------------------------------
    def _run_tier(self, tier: _Tier) -> None:
        interval = tier.interval
        while not self._stop.is_set():
            due = tier.next_due
            # A tier read several times between two analysis passes leaves its reads for the
            # pass to decode and fold in together, when the parsing code is warm: a read alone
            # every 100 ms finds the caches cold, and costs about half as much again. Not while
            # a recorder observes the readings: a trace is written in the order of the reads,
            # which a second's reads of one source folded in at once would not keep.
            defer = interval < self.settings[ANALYSIS_INTERVAL] and not self.observers
            for state in tier.states:
                if self._stop.is_set():
                    return
                started = time.monotonic()
                with tier.lock:
                    tier.in_flight = (state, started)
                outcome = self.read_source(state, capture=defer)
                with tier.lock:
                    tier.in_flight = None
                    handover = tier.handover
                if handover is not None:
                    # The watchdog gave this read to a reader of the source's own, and the
                    # rest of the tier to a new thread: this thread is now that reader's.
                    self.settle(state)
                    handover.adopt(self.decoded(state, outcome))
                    return
                self.take(state, outcome, max(0.0, started - due))
            tier.next_due, missed = _next_slot(due, interval)
            for state in tier.states:
                state.overruns += missed
            self._stop.wait(max(0.0, tier.next_due - time.monotonic()))

    def _run_watchdog(self) -> None:
        """Looks at the tiers when the read in flight will have held its tier for the tier's
        patience, or a patience after this look when none is in flight (a read that starts
        later has not held its tier that long by then). A look at a fixed fraction of the
        patience would wake the process several times as often, at the same cost a wake."""
        while True:
            with self._threads_lock:
                tiers = list(self._tiers)
            now = time.monotonic()
            wake = now + min((tier.patience for tier in tiers), default=1.0)
            for tier in tiers:
                self._move_held_read(tier, now)
                in_flight = tier.in_flight
                if in_flight is not None and tier.handover is None:
                    wake = min(wake, in_flight[1] + tier.patience)
            if self._stop.wait(max(0.0, wake - now)):
                return

    def _move_held_read(self, tier: _Tier, now: float) -> None:
        """A read that has held its tier's thread past the tier's patience leaves the tier with
        its source: the thread becomes the source's reader, a new thread reads the rest."""
        with tier.lock:
            if tier.in_flight is None or tier.handover is not None:
                return
            state, started = tier.in_flight
            if now - started < tier.patience:
                return
            reader = tier.handover = _Reader(self, state, thread=False)
        state.reader = reader
        rest = [other for other in tier.states if other is not state]
        log.info("source %s: a read has taken %.2gs, holding the sources read with it; it is read on a thread of its own",
                 state.spec.name, now - started)
        with self._threads_lock:
            self._tiers = [t for t in self._tiers if t is not tier]
            self._threads = [t for t in self._threads if t is not tier.thread]
        if rest:
            # The rest keep the schedule: the slots the held read cost them count as overruns.
            self._start_tier(_Tier(rest, tier.interval, tier.next_due))
        self._start(threading.Thread(target=self._run_source, args=(state, tier.next_due, started),
                                     name=f"sample-{state.spec.name}", daemon=True))

    # -- a source of its own ---------------------------------------------------------------
    def _run_source(self, state: SourceState, next_due: float | None = None, in_flight_since: float | None = None) -> None:
        """Read one source on its own schedule; ``in_flight_since``: its reader took over a read
        under way since then, whose outcome comes first."""
        interval = state.interval
        if next_due is None:
            next_due = time.monotonic()
        while not self._stop.is_set():
            started = in_flight_since if in_flight_since is not None else time.monotonic()
            lag = max(0.0, started - next_due)
            self._sample_within_deadline(state, lag, in_flight_since)
            in_flight_since = None
            next_due, missed = _next_slot(next_due, interval)
            state.overruns += missed
            self._stop.wait(max(0.0, next_due - time.monotonic()))

    def _sample_within_deadline(self, state: SourceState, lag: float, in_flight_since: float | None = None) -> None:
        if in_flight_since is not None and state.reader is not None:
            outcome = state.reader.outcome(max(0.0, state.read_deadline - (time.monotonic() - in_flight_since)))
        else:
            if state.reader is None:
                if state.hung_reads and (state.hung_reads >= MAX_HUNG_READS or time.monotonic() < state.retry_after):
                    return  # every allowed thread is still blocked, or the next retry is not due
                state.reader = _Reader(self, state)
            outcome = state.reader.read(state.read_deadline)
        if outcome is None:
            state.reader.abandoned = True
            state.reader = None
            self._give_up_read(state, lag)
            return
        self.ingest(state, outcome.reading, outcome.details, outcome.started, outcome.duration, lag, outcome.no_data)

    def _give_up_read(self, state: SourceState, lag: float) -> None:
        now = time.monotonic()
        with state.lock:
            state.hung_reads += 1
            state.retry_after = now + min(RETRY_BACKOFF_CEILING_SECONDS, state.read_deadline * 2 ** (state.hung_reads - 1))
            state.timed_out = True
            state.up = False
            state.latest = None
            state.taken_at = None
            state.stats = state.due_view = None
            state.errors += 1
            state.reads += 1
            state.timings.append((now - state.read_deadline, state.read_deadline, lag))
            hung = state.hung_reads
        self.changed()
        self._log_causes(state, False, {TIMEOUT_CAUSE: f"a read has not returned within {state.read_deadline:g}s "
                                        f"({hung} read thread{'s' if hung > 1 else ''} blocked); its series are withdrawn"})

    def _hung_read_returned(self, state: SourceState) -> None:
        with state.lock:
            state.hung_reads -= 1
            if not state.hung_reads:
                state.retry_after = 0.0

    def sample_once(self, state: SourceState, lag: float = 0.0) -> None:
        """Read one source once, in the calling thread, and fold the result into its state."""
        outcome = self.read_source(state)
        self.ingest(state, outcome.reading, outcome.details, outcome.started, outcome.duration, lag, outcome.no_data)

    def read_source(self, state: SourceState, capture: bool = False) -> ReadOutcome:
        """One read of the source, its failure turned into causes; touches no state. With
        ``capture``, only what the source takes from the kernel (``Source.capture``), which
        ``decoded`` makes the reading of."""
        started = time.monotonic()
        if capture:
            captured, details, no_data = self._attempt(state, state.source.capture)
            return ReadOutcome(None, details, no_data, started, time.monotonic() - started, captured)
        reading, details, no_data = self._attempt(state, state.source.read)
        return ReadOutcome(reading, details, no_data, started, time.monotonic() - started)

    def decoded(self, state: SourceState, outcome: ReadOutcome) -> ReadOutcome:
        """``outcome`` with what it captured decoded into its reading; its duration counts
        the decoding too, as a whole read's does."""
        if outcome.captured is None:
            return outcome
        started = time.monotonic()
        reading, details, no_data = self._attempt(state, state.source.decode, outcome.captured)
        return ReadOutcome(reading, details, no_data, outcome.started,
                           outcome.duration + time.monotonic() - started)

    def _attempt(self, state: SourceState, call: Callable[..., Any], *args: Any
                 ) -> tuple[Any, dict[str, str], NoData | None]:
        details: dict[str, str] = {}
        try:
            return call(*args), details, None
        except NoData as e:
            return None, details, e
        except SourceError as e:
            details[e.cause] = e.detail
        except Exception as e:  # a bug in a source must cost that source only
            cause = f"internal:{type(e).__name__}"
            details[cause] = str(e)
            if cause not in state.active_causes:
                log.error("source %s failed unexpectedly", state.spec.name, exc_info=True)
        return None, details, None

    def take(self, state: SourceState, outcome: ReadOutcome, lag: float) -> None:
        """Fold in a read of the tier's thread, or hold it for ``settle`` if it was only
        captured. A whole read, and one that failed, is folded in at once, after those held
        before it (a source goes down without waiting for the next pass), and so is the
        capture of a source that is not up (its first makes the exporter ready; one coming
        back is served at once) and one that finds MAX_UNDECODED_READS held."""
        state.undecoded.append((outcome, lag))
        if outcome.captured is None or not state.up or len(state.undecoded) >= MAX_UNDECODED_READS:
            self.settle(state)

    def settle(self, state: SourceState) -> None:
        """Decode and fold in, in order, the reads the tier's thread holds for ``state``."""
        with state.settle_lock:
            undecoded = state.undecoded
            while undecoded:
                outcome, lag = undecoded.popleft()
                taken_at = outcome.started + outcome.duration  # read then, folded in now
                outcome = self.decoded(state, outcome)
                self.ingest(state, outcome.reading, outcome.details, outcome.started, outcome.duration, lag,
                            outcome.no_data, taken_at)

    def settle_all(self) -> None:
        for state in self.states.values():
            if state.undecoded:
                self.settle(state)

    def ingest(
        self, state: SourceState, reading: Reading | None, details: dict[str, str] | None = None,
        started: float | None = None, duration: float = 0.0, lag: float = 0.0, no_data: NoData | None = None,
        taken_at: float | None = None,
    ) -> None:
        """Fold one read's outcome into the source's state: the path shared by live sampling
        and by replay, so a replayed trace is analysed exactly like the live run was.

        ``no_data`` is a read that worked and found nothing to report: the source is up, no
        error is counted, and the series of its last reading go (the feature is gone).
        ``taken_at``: when the read ended on the process's clock, if it was not just now (a
        read folded in at the pass after it)."""
        details = dict(details or {})
        if reading is not None:
            for cause in reading.errors:
                details.setdefault(cause, "part of the source could not be read; its series are left out")
        rows: list[tuple[float, Mapping[Hashable, float]]] = []
        if reading is not None:
            try:
                if state.spec.rows is not None:
                    rows = [row for row in state.spec.rows(reading) if row[1]]
                elif state.spec.columns is not None:
                    rows = [(reading.t, state.spec.columns(reading.data))]
            except Exception as e:
                details["internal:columns"] = str(e)
        with state.lock:
            served_before = (state.up, state.no_data, state.timed_out, state.latest is not None)
            state.reads += 1
            state.read_seconds += duration
            state.errors += len(details)
            when = started if started is not None else (reading.t if reading is not None else time.monotonic())
            state.timings.append((when, duration, lag))
            state.timed_out = False
            if reading is not None:
                state.latest = reading
                state.taken_at = taken_at if taken_at is not None else time.monotonic()
                if state.ring is not None:
                    for t, values in rows:
                        state.ring.append(t, values)
            else:
                # Failed or found nothing: the last reading is not served again, since its
                # counters, frozen, would read as an idle device.
                state.latest = None
                state.taken_at = None
            had_no_data, state.no_data = state.no_data, no_data is not None
            state.up = reading is not None or no_data is not None
            transition = served_before != (state.up, state.no_data, state.timed_out, state.latest is not None)
        if transition:
            # A source going down must not keep its series in a rendering made while it was up
            # (nothing frozen is served), nor one coming back wait for the next pass.
            self.changed()
        if reading is not None:
            for observe in self.observers:
                try:
                    observe(reading)
                except Exception:
                    log.error("reading observer failed", exc_info=True)
        self._log_causes(state, state.up, details)
        if no_data is not None and not had_no_data:
            log.info("source %s has no data: %s%s; it is read again every %gs, so the feature is picked up when it appears",
                     state.spec.name, no_data.cause, f" ({no_data.detail})" if no_data.detail else "", state.interval)
        elif had_no_data and reading is not None:
            log.info("source %s has data again", state.spec.name)

    def _log_causes(self, state: SourceState, up: bool, details: dict[str, str]) -> None:
        """Log each cause once, not once per sample. A whole-source failure is logged when it
        starts and when the source recovers; a part that is missing (a counter a driver does
        not provide, one malformed device line) is logged the first time it is seen, since
        most such causes are permanent properties of the host."""
        if not up:
            for cause, detail in details.items():
                if cause not in state.active_causes:
                    log.warning("source %s: %s%s", state.spec.name, cause, f" ({detail})" if detail else "")
            state.active_causes = set(details)
            return
        if state.active_causes:
            log.info("source %s recovered from %s", state.spec.name, ", ".join(sorted(state.active_causes)))
            state.active_causes = set()
        for cause, detail in details.items():
            if cause in state.logged_partial:
                continue
            if len(state.logged_partial) >= MAX_REMEMBERED_CAUSES:
                state.logged_partial.clear()
            state.logged_partial.add(cause)
            log.warning("source %s: %s%s", state.spec.name, cause, f" ({detail})" if detail else "")

    # -- analysis --------------------------------------------------------------------------
    def _run_analysis(self) -> None:
        interval = self.settings[ANALYSIS_INTERVAL]
        while not self._stop.wait(interval):
            self.analyse_once()

    def analyse_once(self, now: float | None = None) -> None:
        """Take every window's view, summarise those an analysis reads, leave the others due
        (``summarize_due``), and run the analyses. ``now`` is the time the window ends at: the
        monotonic clock when live, the trace's clock during a replay."""
        self.settle_all()
        self._analyse(now)
        self.changed()

    def summarize_due(self, sources: Iterable[str] | None = None) -> None:
        """Make the summaries of ``sources`` (default: all) that the last pass left due, from
        that pass's views: what a scrape serves is the pass's window either way. A scrape every
        15 s reads one pass's summaries in fifteen, so the others are never made. The scrapes'
        times tell the passes when the next is expected (``_scrape_expected``)."""
        self._scraped_at.append(self._clock())
        self._make_due(self.states.values() if sources is None else map(self.states.get, sources))

    def _scrape_expected(self, now: float) -> bool:
        """Whether a scrape is likely before the next pass, so that this pass makes the
        summaries and the scrape finds them done, at no cost to its latency. Prometheus scrapes
        a target at a fixed interval; a scraper's next scrape is expected its shortest recent
        gap after the last (with two scrapers, the shorter of their offsets: some passes make
        summaries no scrape reads, as every pass did). Without two scrapes to go by, every pass
        makes them; a scrape that came early, or after a pause of the scrapers, makes them
        itself; scrapes less than a pass apart count as one."""
        # A copy, made at C speed: a scrape may append while the gaps are worked out.
        times, interval = list(self._scraped_at), self.settings[ANALYSIS_INTERVAL]
        # Scrapes within one pass read one rendering: theirs is no scraper's interval.
        gaps = [gap for gap in map(sub, islice(times, 1, None), times) if gap >= interval]
        if not gaps:
            return True
        gap = min(gaps)
        until = times[-1] + gap - now
        return -2 * gap <= until <= interval

    def _make_due(self, states: Iterable[SourceState | None]) -> None:
        # Under the lock, which a pass holds while it replaces a due view by its own: a scrape
        # in between would find neither a view nor the summary.
        with self._summary_lock:
            for state in states:
                if state is None:
                    continue
                view, state.due_view = state.due_view, None
                if view is not None:
                    self._summarize(state, view)

    def _summarize(self, state: SourceState, view: WindowView) -> None:
        try:
            state.stats = state.spec.summarize(view, self.settings)
        except Exception:
            log.error("window analysis of %s failed", state.spec.name, exc_info=True)
            state.stats = None
            with state.lock:
                state.errors += 1

    def _analyse(self, now: float | None) -> None:
        started = time.monotonic()
        end = started if now is None else now
        horizon = end - self.settings.analysis_window
        views: dict[str, WindowView] = {}
        stats: dict[str, Any] = {}
        due: list[WindowView] = []
        with self._summary_lock:
            self._take_views(horizon, views, stats, due)
        if due and now is None and self._scrape_expected(self._clock()):
            self._make_due(self.states.values())
        elif due:
            with self._summary_lock:
                for view in due:
                    view.keep_accounts()
        inputs = AnalysisInputs(
            views=views,
            stats=stats,
            latest={name: state.latest for name, state in self.states.items() if state.latest is not None},
            end=end,
        )
        for collector in self.collectors:
            if collector.analyse is None:
                continue
            if collector.analyse_every is not None and collector.name in self._analysed_at:
                # A small tolerance keeps a schedule of whole analysis passes from slipping by one.
                if end - self._analysed_at[collector.name] < self.settings[collector.analyse_every] - 1e-6:
                    continue
            self._analysed_at[collector.name] = end
            try:
                self.analyses[collector.name] = collector.analyse(inputs, self.settings)
            except Exception:
                log.error("analysis of %s failed", collector.name, exc_info=True)
                self.analyses.pop(collector.name, None)
        self.analysis_seconds = time.monotonic() - started
        self.analysis_runs += 1

    def _take_views(self, horizon: float, views: dict[str, WindowView], stats: dict[str, Any],
                    due: list[WindowView]) -> None:
        """Each window's view from ``horizon`` on, into ``views``; the summaries an analysis
        reads made, into ``stats``; the others' views left due, and listed in ``due``."""
        for state in self.states.values():
            # The view left due by the last pass goes before the ring is viewed again, so that
            # the ring copies into the buffer that view held (``ColumnRing.view``).
            state.due_view = None
            with state.lock:
                timed_out = state.timed_out
                view = state.ring.view(since=horizon) if state.ring is not None and not timed_out else None
                held = state.timings
                while held and held[0][0] < horizon:
                    held.popleft()
                timings = list(held)
            if timings:
                state.mean_read_seconds = math.fsum(map(_DURATION, timings)) / len(timings)
                state.max_lag_seconds = max(map(_LAG, timings))
            state.window_samples = len(view) if view is not None else len(timings)
            if view is not None:
                views[state.spec.name] = view
            if timed_out:
                state.stats = None
            elif view is not None and state.spec.summarize is not None:
                if state.spec.name in self._summaries_read:
                    self._summarize(state, view)
                    if state.stats is not None:
                        stats[state.spec.name] = state.stats
                else:
                    state.stats, state.due_view = None, view
                    due.append(view)
