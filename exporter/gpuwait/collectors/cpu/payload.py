"""What the cpu source's Reading holds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CpuData:
    #: core id ("0", "1", ...) -> mode -> seconds since boot
    cores: dict[str, dict[str, float]]
    procs_running: int | None
    procs_blocked: int | None
