"""Checkpoint evidence: a write burst that dwarfs the reads. The job is saving, not starving:
idle time it explains is a pause the job takes on purpose (``none``), not a wait."""

from __future__ import annotations

from gpuwait.analysis.evidence.storage import MIN_READ_IOPS
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
    for device in disk_window.devices(disks):
        counters = disk_window.device_counters(disks, device)
        read_bytes = grid.rates(counters.read_bytes, gap)
        write_bytes = grid.rates(counters.write_bytes, gap)
        writes = grid.rates(counters.writes, gap)
        for i in range(n):
            if (writes[i] == writes[i] and writes[i] >= min_iops and write_bytes[i] == write_bytes[i]
                    and write_bytes[i] > WRITE_TO_READ * (read_bytes[i] if read_bytes[i] == read_bytes[i] else 0.0)):
                saving[i] = True
    return saving
