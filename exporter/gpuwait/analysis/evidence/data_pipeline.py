"""Data-pipeline evidence: the GPU's owner needs CPU it does not get, or its CPU work runs
flat out (A2, A3).

Two signs, of different strength:

- The owner's threads are runnable but do not run: more of them in R state than the CPU
  time they receive accounts for. That is CFS bandwidth control throttling the owner's
  cgroup at its quota (Documentation/scheduler/sched-bwc.rst: a throttled group's threads
  stay runnable until the next period) or a host with fewer free cores than runnable
  threads. Each core may look barely busy while the owner's CPU side is the bottleneck:
  direct evidence. Where the owner's cgroup is read (collectors.cgroup), its own count of
  throttled periods says the same first-hand.
- A core is saturated while the owner uses at least that much CPU: an owner using less than a
  saturated core's worth cannot be what saturates it (a thread that rests between requests,
  or spins only while its short kernels run, is another tenant's core or none). A stage that
  is the bottleneck has a queue behind it and runs without pause. A decoder that cannot keep
  up looks like this, but so does a thread spinning in a CUDA synchronisation (the default
  schedule spins when there are more cores than contexts, CUDA Runtime API
  cudaSetDeviceFlags) or an MPI/NCCL progress thread polling during a collective: it is
  only compatible with a data wait, and yields to direct evidence of another cause at the
  same instant. The owner's threads that spin through the whole instant are known from its
  GPUs: one per GPU-driving process whose GPU ran a kernel, or took in a copy, all instant
  (``spinning_threads``; a synchronous cudaMemcpy holds its thread as a kernel does, and a
  copy from pageable memory is the thread's own memcpy into the staging buffer). Only the
  saturated cores beyond those can be its data work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuwait.analysis.attribution import DIRECT, HOST, INFERRED
from gpuwait.analysis.timeseries import Grid
from gpuwait.collectors.cgroup import window as cgroup_window
from gpuwait.collectors.cpu import window as cpu_window
from gpuwait.core.config import Option, Settings, parse_fraction, parse_positive
from gpuwait.core.plugin import AnalysisInputs

SATURATED_RATIO = Option("verdict.cpu.saturated-ratio", parse_fraction, 0.9,
                         "Busy fraction of a core within one sampling interval at which it counts as saturated.")
OWNER_CORES = Option("verdict.cpu.owner-cores", parse_positive, 0.9,
                     "CPU cores the GPU's owner must use for a saturated core to be blamed on its data pipeline "
                     "(an owner using less than one saturated core's worth cannot be the one saturating it).")
RUNNABLE_EXCESS = Option("verdict.cpu.runnable-excess", parse_positive, 1.5,
                         "Runnable threads of an owner per CPU core it receives above which it counts as refused CPU "
                         "(throttled at its quota or crowded out).")

THROTTLED_PERIODS = Option("verdict.cpu.throttled-periods", parse_fraction, 0.2,
                           "Share of its CPU bandwidth periods in which the owner's cgroup quota held its tasks back, "
                           "at or above which it counts as refused CPU (cpu.stat nr_throttled / nr_periods).")

OPTIONS = (SATURATED_RATIO, OWNER_CORES, RUNNABLE_EXCESS, THROTTLED_PERIODS)

#: Fewer runnable threads than this are within the noise of one snapshot.
MIN_RUNNABLE = 2


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

    def evidence(self, owner_cores: list[float] | None, spinning: Sequence[float] | None = None) -> list[float]:
        """``owner_cores`` is the owner's CPU use at each instant, None when the GPU's owner
        is not known (the saturated cores then count as host-wide evidence only);
        ``spinning`` the owner's threads that spin through each instant (spinning_threads)."""
        if owner_cores is None:
            return [HOST if c == c and c >= 1 else 0.0 for c in self.saturated]
        least = self.settings[OWNER_CORES]
        spin = spinning if spinning is not None else [0.0] * self.n
        return [INFERRED if c == c and c - s >= 1 and o == o and o >= least else 0.0
                for c, o, s in zip(self.saturated, owner_cores, spin)]

    def spinning_threads(self, busy: Sequence[Sequence[float]], threads: int) -> list[float]:
        """How many host threads spin through each whole instant: one per GPU in ``busy`` (each
        GPU's share of the instant it ran a kernel or took in a copy) busy for at least
        verdict.cpu.saturated-ratio of it, at most ``threads`` (the GPU-driving processes)."""
        level = self.settings[SATURATED_RATIO]
        out = []
        for i in range(self.n):
            count = sum(1 for b in busy if b[i] == b[i] and b[i] >= level)
            out.append(float(min(count, threads)))
        return out

    def refused(self, owner_cores: list[float], owner_runnable: list[float]) -> list[float]:
        """Direct evidence when the owner's runnable threads exceed the CPU it receives. Both
        are averaged over the window: a snapshot of threads that serve requests catches a
        few of them runnable at once by chance; a throttled group keeps them runnable."""
        cores = [c for c in owner_cores if c == c]
        runnable = [r for r in owner_runnable if r == r]
        if not cores or not runnable:
            return [0.0] * self.n
        c, r = sum(cores) / len(cores), sum(runnable) / len(runnable)
        refused = r >= MIN_RUNNABLE and r >= self.settings[RUNNABLE_EXCESS] * c + 1
        return [DIRECT if refused else 0.0] * self.n


def throttled(inputs: AnalysisInputs, grid: Grid, owner: str, settings: Settings) -> list[float] | None:
    """Direct evidence at the instants whose sampling interval had the owner's cgroup throttled
    in at least verdict.cpu.throttled-periods of its CFS periods; None when the owner's
    cgroup is not read."""
    view = inputs.views.get("owner_cgroup")
    if view is None or not owner or owner not in cgroup_window.owners(view):
        return None
    intervals = cgroup_window.throttled_ratio(view, owner).intervals
    # Each interval's share holds from its start until the next read (and a little beyond).
    spacing = (view.times[-1] - view.times[0]) / (len(view.times) - 1) if len(view.times) > 1 else grid.step
    held = grid.hold(intervals, 1.5 * max(spacing, grid.step))
    level = settings[THROTTLED_PERIODS]
    return [DIRECT if r == r and r >= level else 0.0 for r in held]
