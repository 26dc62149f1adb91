"""What each GPU did at every instant of the window: how much of the instant no kernel ran, and
whether a kernel that did run looked like a collective waiting rather than compute.

Three facts of the hardware shape this:

- A driver utilization sample is the fraction of its sampling period (1/6 s to 1 s, by
  product) during which at least one kernel ran (NVML ``nvmlDeviceGetSamples``,
  ``NVML_GPU_UTILIZATION_SAMPLES``). Gaps shorter than the period never read 0: a loop that
  idles 0.1 s of every 0.2 s reads about 50 %. So the idle share of an instant is
  ``1 - u``, not "u below a threshold".
- The driver stamps a sample at the end of the period it describes. A grid instant t stands
  for the sampling step that starts at t: a counter's rate at t is its increase from the
  read at t to the next one (the sources are read before the GPU in each pass). So the
  instant takes the sample whose period covers the middle of that step, the first stamped
  at or after t + step/2; taking the one stamped at t would put utilization a period behind
  the link rates it is correlated with (the article's "dips aligned with NIC bursts").
- A collective's kernels stay resident while they wait for data or for a peer: utilization
  reads 100 % and GPM SM activity falls to the collective's footprint, the few SMs its
  channels occupy (NVIDIA/nccl#1432, #403; cupy#3557). Memory traffic falls with it: data
  moving at link speed is a small share of HBM bandwidth. Such an instant is a *candidate*
  wait; it counts as one only where the network or a peer explains it (analysis.verdict),
  because a phase of light kernels looks the same on its own. Without GPM the same sign is
  weaker (utilization pinned while the memory controller rests) and is used only against a
  peer that has no kernel at all (sync).
- An instant idle because its kernels keep almost no SMs busy (GPM below
  verdict.sm-idle-threshold, and below that share of the time a kernel ran: SM activity
  averages over the period, so a period that is half wide kernels and half wait reads low
  too) had a kernel resident for as much of it as utilization says.
  A GPU waiting for its input has no kernel to run (a kernel cannot launch before the copy or
  the batch it reads is issued), so that resident part is no wait on the CPU side, storage or a
  copy: only a collective waiting inside its kernel explains it, or the kernels are too small
  for the GPU (A4).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from gpuwait.analysis.timeseries import Grid
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.core.config import Option, Settings, parse_fraction
from gpuwait.core.ring import Column, WindowView
from gpuwait.core.series import quantile

SM_IDLE_THRESHOLD = Option("verdict.sm-idle-threshold", parse_fraction, 0.1,
                           "SM activity (GPM) below which an instant counts as idle whatever utilization says: "
                           "kernels that keep so few SMs busy leave the GPU's capacity unused.")
FOOTPRINT_SHARE = Option("verdict.collective.footprint-share", parse_fraction, 0.5,
                         "An instant whose SM activity (GPM; without GPM, memory-controller activity) is at most "
                         "this share of the GPU's own working level over the window, with utilization pinned, "
                         "looks like a resident collective waiting rather than compute.")

OPTIONS = (SM_IDLE_THRESHOLD, FOOTPRINT_SHARE)

#: The GPU's working level is this quantile of its activity over the window: the level it
#: reaches when it computes, robust to the dips being judged.
LEVEL_QUANTILE = 0.9
#: Below this working level a GPU never computes at full width (tiny kernels, a small model):
#: there is no compute level for a collective's footprint to fall from.
MIN_WORKING_LEVEL = 0.3
#: Without GPM: a memory controller that never rises above this share of its time does not
#: separate compute from a resting collective.
MIN_MEMORY_LEVEL = 0.15
#: Utilization at or above which a kernel ran for (almost) all of the sample: the pinned
#: utilization of a resident collective.
PINNED = 0.9
#: Longest driver sampling period (seconds) NVML documents; spacing beyond it is a gap.
MAX_SAMPLE_PERIOD = 1.0


@dataclass(frozen=True, slots=True)
class GpuActivity:
    #: "sm_active" (GPM) or "utilization": the signal ``activity`` is
    signal: str
    #: 0..1 per grid instant, centred on what it measured: the series correlated with links
    activity: list[float]
    #: 0..1 per instant: the share of the instant no kernel ran (or no SM did); NaN unknown
    idle: list[float]
    #: 0..1 per instant: the share a resident collective would be waiting, where the instant
    #: looks like one (0 elsewhere)
    footprint: list[float]
    #: the GPU's working level (its activity when computing), None when it has none
    level: float | None
    #: 0..1 per instant: the part of ``idle`` during which a kernel was resident (SM activity
    #: below verdict.sm-idle-threshold while utilization says a kernel ran)
    resident: list[float]

    def computing(self, i: int) -> bool:
        """A kernel ran for most of the instant and it was not a collective's footprint."""
        idle = self.idle[i]
        return idle == idle and idle < 0.5 and self.footprint[i] == 0.0


def sample_period(column: Column) -> float | None:
    """The driver's sampling period: the mean spacing of the valid samples in the window."""
    return _period([t for t, v in zip(column.times, column.values) if v == v])


def _period(times: list[float]) -> float | None:
    """``sample_period`` of the valid samples' ``times``."""
    if len(times) < 2:
        return None
    period = (times[-1] - times[0]) / (len(times) - 1)
    return period if 0 < period <= MAX_SAMPLE_PERIOD else None


def centred(grid: Grid, column: Column) -> list[float]:
    """A driver sample series on the grid: each instant takes the sample whose period covers
    the middle of the instant's step, the first one stamped at or after it (the driver stamps
    a sample at the end of its period), for at most one period."""
    times, values = column.times, column.values
    if sum(values) == sum(values):  # no NaN (a NaN anywhere makes the sum NaN)
        # Which sample each instant takes depends on the sample times alone, which the GPM
        # columns of every GPU share with the grid's own source: worked out once a pass.
        taken = grid.shared(_CENTRED, times, lambda: _centred_samples(grid, times))
        if taken is None:
            return grid.hold(column)
        return list(map([*values, math.nan].__getitem__, taken))
    kept = [(t, v) for t, v in zip(times, values) if v == v]
    taken = _centred_samples(grid, [t for t, _ in kept])
    if taken is None:
        return grid.hold(column)
    return list(map([*(v for _, v in kept), math.nan].__getitem__, taken))


#: ``Grid.shared``'s key for the samples ``centred`` takes.
_CENTRED = "centred samples"


def _centred_samples(grid: Grid, times: list[float]) -> list[int] | None:
    """Per grid instant, the index in ``times`` (the valid samples' times) of the sample
    ``centred`` takes, ``len(times)`` for none; None where the spacing is no driver period
    (``sample_period``)."""
    period = _period(times)
    if period is None:
        return None
    n = len(times)
    half, limit = grid.step / 2, period * 1.5
    out = []
    for t in grid.times:
        middle = t + half
        # The first sample stamped at or after the middle (the grid's times ascend).
        k = bisect_left(times, middle - 1e-9)
        out.append(k if k < n and times[k] - middle <= limit else n)
    return out


def gpu_activity(view: WindowView, grid: Grid, gpu: tuple[str, str], settings: Settings) -> GpuActivity:
    util = centred(grid, gpu_window.utilization(view, gpu))
    # GPM metrics likewise describe the interval that ends at their sample.
    sm = centred(grid, gpu_window.sm_active(view, gpu))
    n = len(grid)
    share = settings[FOOTPRINT_SHARE]
    if any(v == v for v in sm):
        dram = centred(grid, gpu_window.dram_active(view, gpu))
        level = quantile(sm, LEVEL_QUANTILE)
        dram_level = quantile(dram, LEVEL_QUANTILE)
        floor = settings[SM_IDLE_THRESHOLD]
        idle, resident = [], []
        footprint: list[float | None] = []
        for i in range(n):
            s, u = sm[i], util[i]
            if s != s:
                idle.append(_idle_of(u))
                footprint.append(None)
                resident.append(0.0)
                continue
            # SM activity is averaged over the sample's period and utilization is the share of
            # it a kernel ran: their quotient is how many SMs the kernels that ran kept busy.
            # Narrow kernels leave the GPU idle however long they run; a period that is part
            # wide kernels, part nothing (a wait that begins or ends in it) is idle for the
            # rest only.
            narrow = s < floor and (u != u or s < floor * u)
            idle.append(1.0 if narrow else (_idle_of(u) if u == u else 0.0))
            resident.append(1.0 - _idle_of(u) if narrow and u == u else 0.0)
            quiet_memory = dram[i] != dram[i] or dram_level is None or dram[i] <= share * dram_level
            if (level is not None and level >= MIN_WORKING_LEVEL and s >= floor and s <= share * level
                    and (u != u or u >= PINNED) and quiet_memory):
                footprint.append(s)
            else:
                footprint.append(None)
        return GpuActivity("sm_active", sm, idle, _unmixed(footprint, level), level, resident)
    memory = centred(grid, gpu_window.memory_busy(view, gpu))
    level = quantile(memory, LEVEL_QUANTILE)
    idle = [_idle_of(u) for u in util]
    footprint = [0.0] * n
    if level is not None and level >= MIN_MEMORY_LEVEL:
        at: list[float | None] = [None] * n
        for i in range(n):
            u, m = util[i], memory[i]
            if u == u and u >= PINNED and m == m and m <= share * level:
                at[i] = m
        footprint = _unmixed(at, level)
    # Without GPM no instant is idle while utilization says a kernel ran.
    return GpuActivity("utilization", util, idle, footprint, level, [0.0] * n)


#: The collective's own level is this quantile of the GPU's activity at its footprint instants.
FOOTPRINT_LEVEL_QUANTILE = 0.1


def _unmixed(at_footprint: list[float | None], level: float | None) -> list[float]:
    """The share of each instant spent at the collective's footprint, from its activity there
    (None: not a footprint instant). An instant's activity is the mix of the working level and
    the footprint's own level over its period, so the share is how far it lies from the first
    towards the second; a collective's whole wait is a wait, not just the SMs it leaves
    unused. The footprint's level is the GPU's own: the low quantile of its footprint
    instants."""
    lows = [a for a in at_footprint if a is not None]
    if level is None or level <= 0.0 or not lows:
        return [0.0] * len(at_footprint)
    own = quantile(lows, FOOTPRINT_LEVEL_QUANTILE)
    span = level - own if own is not None else 0.0
    if span <= 0.0:
        return [1.0 - a / level if a is not None else 0.0 for a in at_footprint]
    return [min(1.0, (level - a) / span) if a is not None else 0.0 for a in at_footprint]


def _idle_of(u: float) -> float:
    return math.nan if u != u else min(1.0, max(0.0, 1.0 - u))


def mean_idle(activities: Sequence[float]) -> float:
    vals = [v for v in activities if v == v]
    return sum(vals) / len(vals) if vals else 0.0
