"""Feeding a recorded trace back through the same sampler, analysis and exposition."""

from __future__ import annotations

import logging
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
        wall_start = time.monotonic()
        first_t = next_analysis = None
        try:
            for reading in self.reader:
                if stop.is_set():
                    break
                if first_t is None:
                    first_t = reading.t
                    next_analysis = reading.t + interval
                if self.speed > 0:
                    delay = (reading.t - first_t) / self.speed - (time.monotonic() - wall_start)
                    if delay > 0 and stop.wait(delay):
                        break
                while next_analysis < reading.t:
                    self.sampler.analyse_once(now=next_analysis)
                    next_analysis += interval
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
        else:
            log.info("replay finished: %d readings", self.readings)
        finally:
            self.finished.set()
