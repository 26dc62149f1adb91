"""Data-pipeline evidence: a core saturated while the GPU's owner uses the CPU (A2, A3).

A data loader that cannot keep up shows as a core (or a few) busy for the whole of a
sampling interval, the mean over all cores hiding it. It is blamed on the GPU's owner only
when that owner uses enough CPU for the saturated core to be plausibly its own.
"""

from __future__ import annotations

import math

from gpuwait.analysis.timeseries import Grid
from gpuwait.collectors.cpu import window as cpu_window
from gpuwait.core.config import Option, Settings, parse_fraction, parse_positive
from gpuwait.core.plugin import AnalysisInputs

SATURATED_RATIO = Option("verdict.cpu.saturated-ratio", parse_fraction, 0.9,
                         "Busy fraction of a core within one sampling interval at which it counts as saturated.")
OWNER_CORES = Option("verdict.cpu.owner-cores", parse_positive, 0.5,
                     "CPU cores the GPU's owner must use for a saturated core to be blamed on its data pipeline.")

OPTIONS = (SATURATED_RATIO, OWNER_CORES)


class DataPipeline:
    """The host's saturated cores on the grid, computed once per pass for all GPUs."""

    def __init__(self, inputs: AnalysisInputs, grid: Grid, settings: Settings, gap: float) -> None:
        self.settings = settings
        self.n = len(grid)
        view = inputs.views.get("cpu")
        if view is None:
            self.saturated = [math.nan] * self.n
        else:
            # Each count covers the interval that starts at its sample; hold it across the interval.
            self.saturated = grid.hold(cpu_window.saturated_cores(view, settings[SATURATED_RATIO]), gap)

    def evidence(self, owner_cores: float | None, owner_known: bool) -> list[bool]:
        if owner_known and (owner_cores is None or owner_cores < self.settings[OWNER_CORES]):
            return [False] * self.n
        return [c == c and c >= 1 for c in self.saturated]
