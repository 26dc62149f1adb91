"""CPU time per core and the run queue, from /proc/stat (A2, A3)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from gpuwait.errors import ParseError, SourceError
from gpuwait.parsers.procstat import parse_proc_stat
from gpuwait.reading import Reading
from gpuwait.sources.base import HostPaths, Source, read_text

#: Modes exported as counters, as node_exporter does: guest time is already inside user/nice.
EXPORTED_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
#: Time a core is not available to new work. iowait is idle time with IO outstanding, so not busy;
#: steal is time the hypervisor gave away, which a data loader cannot use either.
BUSY_MODES = ("user", "nice", "system", "irq", "softirq", "steal")


@dataclass(frozen=True, slots=True)
class CpuData:
    #: core id ("0", "1", ...) -> mode -> seconds since boot
    cores: dict[str, dict[str, float]]
    procs_running: int | None
    procs_blocked: int | None


def _user_hz() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


class CpuSource(Source):
    name = "cpu"
    tier = "fast"

    def __init__(self, paths: HostPaths, ticks_per_second: int | None = None) -> None:
        super().__init__(paths)
        self.path = paths.proc("stat")
        self.ticks_per_second = ticks_per_second or _user_hz()

    def read(self) -> Reading:
        t = time.monotonic()
        text = read_text(self.path)
        try:
            stat = parse_proc_stat(text)
        except ParseError as e:
            raise SourceError(f"parse:{self.path}", str(e)) from None
        hz = float(self.ticks_per_second)
        cores = {
            cpu: {mode: ticks[mode] / hz for mode in EXPORTED_MODES if mode in ticks}
            for cpu, ticks in stat.cpus.items()
            if cpu != "cpu"
        }
        return self.reading(t, CpuData(cores, stat.procs_running, stat.procs_blocked))
