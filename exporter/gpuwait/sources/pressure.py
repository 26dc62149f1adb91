"""Pressure stall information: how much of the time tasks waited for CPU, IO or memory (A2, A6)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from gpuwait.errors import ParseError, SourceError
from gpuwait.parsers.pressure import parse_pressure
from gpuwait.reading import Reading
from gpuwait.sources.base import HostPaths, Source, read_text

RESOURCES = ("cpu", "io", "memory")


@dataclass(frozen=True, slots=True)
class PressureData:
    #: (resource, scope) -> seconds stalled since boot; scope is "some" or "full".
    stalled_seconds: dict[tuple[str, str], float]


class PressureSource(Source):
    """Reads /proc/pressure/{cpu,io,memory}.

    A resource that cannot be read is left out on its own: a kernel built without PSI has no
    /proc/pressure, and one booted with psi=0 has the files but fails every read with
    EOPNOTSUPP. cpu's ``full`` line is left out too: the kernel calls it undefined at the
    system level and prints zeros there (it has a meaning only per cgroup); the first kernels
    that printed it showed a figure without a meaning.
    """

    name = "pressure"
    tier = "fast"

    def __init__(self, paths: HostPaths) -> None:
        super().__init__(paths)
        self.paths_by_resource = {resource: paths.proc("pressure", resource) for resource in RESOURCES}

    def read(self) -> Reading:
        t = time.monotonic()
        stalled: dict[tuple[str, str], float] = {}
        errors: list[str] = []
        for resource, path in self.paths_by_resource.items():
            try:
                lines = parse_pressure(read_text(path))
            except SourceError as e:
                errors.append(e.cause)
                continue
            except ParseError:
                errors.append(f"parse:{path}")
                continue
            for scope, line in lines.items():
                if resource == "cpu" and scope == "full":
                    continue
                stalled[(resource, scope)] = line.total_seconds
        if not stalled:
            raise SourceError(f"unavailable:{self.paths.proc('pressure')}", "; ".join(errors))
        return self.reading(t, PressureData(stalled), tuple(errors))
