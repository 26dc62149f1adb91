"""Pressure stall information: how much of the time tasks waited for CPU, IO or memory (A2, A6)."""

from __future__ import annotations

import errno
import time

from gpuwait.collectors.pressure.parse import SCOPES, parse_pressure
from gpuwait.collectors.pressure.payload import PressureData
from gpuwait.core import pseudofile
from gpuwait.core.errors import NoData, ParseError, SourceError
from gpuwait.core.reading import Reading
from gpuwait.core.source import HostPaths, Source

RESOURCES = ("cpu", "io", "memory")


def _absent(error: OSError) -> bool:
    """A read failure that means the kernel has no PSI: built without CONFIG_PSI (no
    /proc/pressure), or booted with psi=0 (the files are there and every read fails with
    EOPNOTSUPP: psi_show() in kernel/sched/psi.c returns it while PSI is disabled)."""
    return isinstance(error, FileNotFoundError) or error.errno == errno.EOPNOTSUPP


class PressureSource(Source):
    """Reads /proc/pressure/{cpu,io,memory}.

    A resource that cannot be read is left out on its own; a kernel without PSI at all is no
    data, not a failure. cpu's ``full`` line is left out too: the kernel calls it undefined at
    the system level and prints zeros there (it has a meaning only per cgroup); the first
    kernels that printed it showed a figure without a meaning.
    """

    name = "pressure"
    tier = "fast"

    def __init__(self, paths: HostPaths) -> None:
        super().__init__(paths)
        self.paths_by_resource = {resource: paths.proc("pressure", resource) for resource in RESOURCES}
        self._kept = pseudofile.KeptDescriptors()

    def close(self) -> None:
        self._kept.close()

    def read(self) -> Reading:
        t = time.monotonic()
        stalled: dict[tuple[str, str], float] = {}
        errors: list[str] = []
        absent = 0
        for resource, path in self.paths_by_resource.items():
            try:
                lines = parse_pressure(self._kept.read(path))
            except OSError as e:
                absent += _absent(e)
                errors.append(pseudofile.os_cause(path, e))
                continue
            except ParseError:
                errors.append(f"parse:{path}")
                continue
            for scope, line in lines.items():
                if resource == "cpu" and scope == "full":
                    continue
                stalled[(resource, scope)] = line.total_seconds
            # Every kernel with PSI prints both scopes for io and memory (psi_show()); one
            # missing is a damaged file, counted and logged like any other bad part.
            for scope in SCOPES:
                if resource != "cpu" and scope not in lines:
                    errors.append(f"parse:{path}:{scope}")
        if not stalled:
            if absent == len(self.paths_by_resource):
                raise NoData(f"unavailable:{self.paths.proc('pressure')}", "; ".join(errors))
            raise SourceError(f"unavailable:{self.paths.proc('pressure')}", "; ".join(errors))
        return self.reading(t, PressureData(stalled), tuple(errors))
