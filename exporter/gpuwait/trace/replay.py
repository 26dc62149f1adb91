"""Feeding a recorded trace back through the same sampler, analysis and exposition."""

from __future__ import annotations

import logging
import math
import threading
import time

from gpuwait.core.config import ANALYSIS_INTERVAL
from gpuwait.core.errors import SourceError
from gpuwait.core.reading import Reading
from gpuwait.core.sampler import Sampler
from gpuwait.core.source import Source
from gpuwait.trace.file import TraceError, TraceReader

log = logging.getLogger("gpuwait.replay")


class ReplayedSource(Source):
    """Stands in for a live source during a replay; it is never read, readings are pushed."""

    def __init__(self, name: str, tier: str) -> None:
        self.name = name
        self.tier = tier

    def read(self) -> Reading:
        raise SourceError("replay", "replayed sources are fed from the trace")


#: Longest single wait of a slowed-down replay: a wait is re-armed in steps, because one of
#: a trace's far-off "t" divided by a tiny speed overflows the platform's timeout.
_WAIT_STEP = 60.0


class Replayer:
    """Delivers a trace's Readings to the sampler with the recorded timing, scaled by
    ``speed`` (0 = as fast as possible), and runs the window analysis at the trace's own
    analysis times — so the verdicts of a replay do not depend on how fast it runs."""

    def __init__(self, sampler: Sampler, reader: TraceReader, speed: float = 1.0) -> None:
        self.sampler = sampler
        self.reader = reader
        self.speed = speed
        self.finished = threading.Event()
        self.error: str | None = None
        self.readings = 0

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        interval = self.sampler.settings[ANALYSIS_INTERVAL]
        window = self.sampler.settings.analysis_window
        wall_start = time.monotonic()
        first_t = next_analysis = last_t = None
        try:
            for reading in self.reader:
                if stop.is_set():
                    break
                if first_t is None:
                    first_t = last_t = reading.t
                    next_analysis = reading.t + interval
                if self.speed > 0 and self._wait_until(first_t, reading.t, wall_start, stop):
                    break
                # Past the window of the last reading every pass sees the same empty window,
                # so a gap longer than it is crossed in one step rather than a pass per
                # interval (a "t" far ahead would otherwise mean millions of passes).
                empty_from = last_t + window + interval
                if next_analysis < empty_from < reading.t - window:
                    while next_analysis < empty_from:
                        self.sampler.analyse_once(now=next_analysis)
                        next_analysis += interval
                    skipped = math.floor((reading.t - window - next_analysis) / interval)
                    if skipped > 0:
                        next_analysis += skipped * interval
                while next_analysis < reading.t:
                    self.sampler.analyse_once(now=next_analysis)
                    next_analysis += interval
                last_t = max(last_t, reading.t)
                state = self.sampler.states.get(reading.source)
                if state is None:
                    continue  # a collector disabled for this replay
                self.sampler.ingest(state, reading, started=reading.t)
                self.readings += 1
            if next_analysis is not None:
                self.sampler.analyse_once(now=next_analysis)
        except TraceError as e:
            self.error = str(e)
            log.error("replay stopped: %s", e)
        except Exception as e:  # a fault of the analysis must end the replay visibly, not its thread silently
            self.error = f"{self.reader.path}:{self.reader.lineno}: {type(e).__name__}: {e}"
            log.error("replay stopped: %s", self.error, exc_info=True)
        else:
            log.info("replay finished: %d readings", self.readings)
        finally:
            self.finished.set()

    def _wait_until(self, first_t: float, t: float, wall_start: float, stop: threading.Event) -> bool:
        """Sleep until the instant a reading at ``t`` is due; True if stopped meanwhile."""
        due = (t - first_t) / self.speed
        while True:
            delay = due - (time.monotonic() - wall_start)
            if delay <= 0:
                return False
            if stop.wait(min(delay, _WAIT_STEP)):
                return True
