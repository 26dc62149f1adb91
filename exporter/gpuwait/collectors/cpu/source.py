"""CPU time per core and the run queue, from /proc/stat (A2, A3)."""

from __future__ import annotations

from itertools import repeat
from operator import truediv

from gpuwait.collectors.cpu.parse import core_seconds, parse_proc_stat
from gpuwait.collectors.cpu.payload import CpuData
from gpuwait.core.errors import ParseError, SourceError
from gpuwait.core.reading import Reading
from gpuwait.core.source import HostPaths, KernelFileSource, user_hz

#: Modes exported as counters, as node_exporter does: guest time is already inside user/nice.
EXPORTED_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


class CpuSource(KernelFileSource):
    name = "cpu"
    tier = "fast"

    def __init__(self, paths: HostPaths, ticks_per_second: int | None = None) -> None:
        super().__init__(paths, paths.proc("stat"))
        self.ticks_per_second = ticks_per_second or user_hz()

    def parse_reading(self, t: float, text: str) -> Reading:
        usual = core_seconds(text, EXPORTED_MODES, self.ticks_per_second)
        if usual is not None:
            return self.reading(t, CpuData(*usual), ())
        try:
            stat = parse_proc_stat(text)
        except ParseError as e:
            raise SourceError(f"parse:{self.path}", str(e)) from None
        per_tick = repeat(float(self.ticks_per_second))
        # A core's modes are a prefix of CPU_MODES, of which EXPORTED_MODES is a prefix too.
        cores = {
            cpu: dict(zip(EXPORTED_MODES, map(truediv, ticks.values(), per_tick)))
            for cpu, ticks in stat.cpus.items()
            if cpu != "cpu"
        }
        errors = tuple(f"parse:{self.path}:{key}" for key, _ in stat.bad_lines)
        return self.reading(t, CpuData(cores, stat.procs_running, stat.procs_blocked), errors)
