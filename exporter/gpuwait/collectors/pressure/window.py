"""Window statistics of pressure stall information: the stalled fraction of the window, and of
its worst sample interval (A2, A6).

The kernel's own avg10 is an exponential average sampled every 2 s; the fraction over each
sample interval shows the short stalls that starve a GPU between batches and that avg10
smooths away. Kernels 4.20 to 5.1 refresh the totals only every 2 s, so there the maximum
reads as a full stall in the interval that caught the refresh; the window mean stays right.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from gpuwait.collectors.pressure.payload import PressureData
from gpuwait.core.config import Settings
from gpuwait.core.ring import Column, WindowView
from gpuwait.core.series import clamp_ratio


def columns(data: PressureData) -> dict[Hashable, float]:
    # Keyed (resource, scope): stalled seconds since boot.
    return data.stalled_seconds


@dataclass(frozen=True, slots=True)
class PressureWindowStats:
    #: (resource, scope) -> stalled seconds per second over the window
    stalled_ratio: dict[tuple[str, str], float]
    #: (resource, scope) -> the largest stalled fraction of any one sample interval
    stalled_max_ratio: dict[tuple[str, str], float]


def summarize(view: WindowView, settings: Settings) -> PressureWindowStats:
    ratio: dict[tuple[str, str], float] = {}
    max_ratio: dict[tuple[str, str], float] = {}
    for key in sorted(view.columns):
        mean = clamp_ratio(view.rate(key))
        if mean is None:
            continue
        ratio[key] = mean
        max_ratio[key] = clamp_ratio(view.rate_peak(key))
    return PressureWindowStats(ratio, max_ratio)


# -- what the verdict reads ------------------------------------------------------------------


def stalled_seconds(view: WindowView, resource: str, scope: str) -> Column | None:
    """The counter of seconds tasks were stalled on ``resource`` (its rate is the stalled
    fraction); None when the window has no such series (no PSI, or no such line)."""
    key = (resource, scope)
    return view.series(key) if key in view.columns else None
