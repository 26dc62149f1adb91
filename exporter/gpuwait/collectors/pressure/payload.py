"""What the pressure source's Reading holds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PressureData:
    #: (resource, scope) -> seconds stalled since boot; scope is "some" or "full".
    stalled_seconds: dict[tuple[str, str], float]
