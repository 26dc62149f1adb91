"""The self-check's phases, what each one's construction makes true, and the schedule.

Each phase is a workload whose reason for keeping the GPU waiting (or not) follows from how
CUDA, PyTorch and the kernel behave, not from the exporter's rules; docs/selfcheck.md argues
each one. ``expected`` is that truth in the verdict vocabulary, ``accepted`` the verdicts that
agree with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    name: str
    #: What the workload does, in one line.
    title: str
    expected: str
    accepted: tuple[str, ...]
    #: Window statistics (readout.EVIDENCE keys) the table shows for this phase.
    evidence: tuple[str, ...]
    #: The workload's own counters that measure the truth (shares of wall time, or rates).
    truth: tuple[str, ...] = ()
    #: Runs inside a cgroup v2 child limited by cpu.max.
    cpu_quota: bool = False


_GPU = ("idle", "utilization", "sm_active")
PHASES: tuple[Phase, ...] = (
    Phase("compute", "bf16 matrix products on inputs already on the GPU, queued ahead of the GPU",
          # A GPU computing at its power limit is held there by its own clocks: 'throttled' is
          # as true as 'none', and both say it computes rather than waits.
          "none", ("none", "throttled"), _GPU + ("throttled_busy", "owner_cores"), ("matmul_flops",)),
    Phase("few_workers", "DataLoader with one worker decoding and augmenting on the CPU for a faster GPU step",
          "data_pipeline", ("data_pipeline",), _GPU + ("saturated_cores", "owner_cores"),
          ("data_wait_seconds", "batches")),
    Phase("cpu_quota", "the same pipeline with enough workers, in a cgroup whose cpu.max allows one core",
          "data_pipeline", ("data_pipeline",), _GPU + ("saturated_cores", "owner_cores", "cpu_pressure"),
          ("data_wait_seconds", "batches"), cpu_quota=True),
    Phase("pageable_copy", "a large batch copied to the GPU from pageable memory, then a short GPU step",
          "host_transfer", ("host_transfer",), _GPU + ("pcie", "saturated_cores", "owner_cores"),
          ("copy_seconds", "copied_bytes")),
    Phase("random_reads", "reader threads fetching small random records past the page cache",
          "storage", ("storage",), _GPU + ("io_pressure", "disk"), ("data_wait_seconds", "records")),
    Phase("tiny_kernels", "batch-1 chains of tiny kernels from a paced, unsaturated thread",
          "insufficient_work", ("insufficient_work",), _GPU + ("owner_cores", "saturated_cores", "demand"),
          ("launch_seconds", "kernels")),
    Phase("idle_context", "a process that holds a CUDA context and does nothing",
          "none", ("none",), _GPU + ("owner_cores", "demand")),
)
BY_NAME = {p.name: p for p in PHASES}

#: The exporter's own default window is 60 s; docs/selfcheck.md ("Why the window can be 20 s
#: here") argues why the self-check's stationary phases may be judged over a shorter one.
DEFAULT_WINDOW = 20.0
DEFAULT_PHASE_SECONDS = 12.0
#: The exporter's slow tier (process list, owner CPU time): the window must hold several of
#: its reads for the owner's CPU rate to be measured over whole intervals.
SLOW_INTERVAL = 5.0
MIN_WINDOW = 2 * SLOW_INTERVAL
#: What one phase costs besides its recorded part: starting the workload (Python, PyTorch,
#: a CUDA context, calibration, data), the exporter, and stopping both. An estimate for the
#: plan printed at the start, measured on each run (report 'seconds').
SETUP_ESTIMATE = 8.0


def select(names: Sequence[str] | None) -> tuple[Phase, ...]:
    """The phases to run, in the self-check's order whatever the order asked."""
    if not names:
        return PHASES
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown phase {', '.join(unknown)}; phases: {', '.join(BY_NAME)}")
    wanted = set(names)
    return tuple(p for p in PHASES if p.name in wanted)


def verdict_interval(window: float) -> float:
    """How often the exporter recomputes the verdict during the self-check: ten times a
    window, so the settled part holds several independent passes, and at most every second
    (the analysis interval)."""
    return max(1.0, math.floor(window / 10))


@dataclass(frozen=True)
class Schedule:
    window: float
    phase_seconds: float
    verdict_interval: float
    phases: tuple[Phase, ...]

    @property
    def settle(self) -> float:
        """From the exporter's start until its verdicts cover only this phase: a full window,
        plus one verdict pass to compute over it."""
        return self.window + self.verdict_interval

    @property
    def recorded(self) -> float:
        return self.settle + self.phase_seconds

    def estimate(self) -> float:
        return len(self.phases) * (self.recorded + SETUP_ESTIMATE)


def schedule(window: float, phase_seconds: float, phases: Sequence[Phase]) -> Schedule:
    if not window >= MIN_WINDOW or math.isinf(window):
        raise ValueError(f"--window must be at least {MIN_WINDOW:g} s (two reads of the exporter's {SLOW_INTERVAL:g} s slow tier), got {window:g}")
    if not phase_seconds > 0 or math.isinf(phase_seconds):
        raise ValueError(f"--phase-seconds must be a positive number of seconds, got {phase_seconds:g}")
    if not phases:
        raise ValueError("no phase to run")
    return Schedule(float(window), float(phase_seconds), verdict_interval(window), tuple(phases))
