"""Checkpoint evidence: a write burst that dwarfs the reads. The job is saving, not starving:
idle time it explains is a pause the job takes on purpose (``none``), not a wait."""

from __future__ import annotations

from itertools import repeat
from operator import and_, ge, gt, or_

from gpuwait.analysis.evidence.storage import MIN_READ_IOPS, disk_marks
from gpuwait.analysis.timeseries import Grid
from gpuwait.collectors.diskstats import window as disk_window
from gpuwait.core.config import Settings
from gpuwait.core.plugin import AnalysisInputs

#: Written bytes per read byte above which a write burst is a checkpoint, not traffic that
#: comes with reading (logs, caches).
WRITE_TO_READ = 4


def checkpoint(inputs: AnalysisInputs, grid: Grid, settings: Settings, gap: float) -> list[bool]:
    n = len(grid)
    saving = [False] * n
    disks = inputs.views.get("diskstats")
    if disks is None:
        return saving
    min_iops = settings[MIN_READ_IOPS]

    def saves(rates: list[float]) -> int:
        writes, write_bytes, read_bytes = rates
        return writes >= min_iops and write_bytes > WRITE_TO_READ * read_bytes

    marks, others = disk_marks(disks, grid, ("writes", "write_bytes", "read_bytes"), ("checkpoint", min_iops), saves, gap)
    if marks is not None:
        saving = list(map(bool, marks))
    for device in others:
        counters = disk_window.device_counters(disks, device)
        # A comparison with NaN is false: an instant without a rate is not writing.
        writing = list(map(ge, grid.rates(counters.writes, gap), repeat(min_iops)))
        if not any(writing):
            continue
        # Reads without a rate weigh nothing against the writes.
        read_bytes = [WRITE_TO_READ * r if r == r else 0.0 for r in grid.rates(counters.read_bytes, gap)]
        heavier = map(gt, grid.rates(counters.write_bytes, gap), read_bytes)
        saving = list(map(or_, saving, map(and_, writing, heavier)))
    return saving
