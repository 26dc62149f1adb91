"""Throttled evidence: a busy GPU whose clocks are held down by power or thermal limits
(A14), from the clock-event reasons NVML reports at each tick."""

from __future__ import annotations

from gpuwait.analysis.timeseries import Grid
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.core.facts import CLOCK_LIMIT_BITS
from gpuwait.core.ring import WindowView


def throttled(view: WindowView, grid: Grid, gpu: tuple[str, str]) -> list[bool]:
    reasons = grid.hold(gpu_window.clock_event_reasons(view, gpu))
    return [r == r and (int(r) & CLOCK_LIMIT_BITS) != 0 for r in reasons]
