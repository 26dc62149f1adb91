"""The unit of data that flows from a source to the sampler, the analysis and the exposition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Reading:
    """What one source saw at one instant.

    ``t`` is ``time.monotonic()`` when the read started: window statistics need a clock that
    never steps, whatever the wall clock does. ``data`` is the source's own typed payload
    (raw counters in base units, never Prometheus objects; ``None`` where a value could not
    be read). ``errors`` names the causes of any parts that could not be read: the series
    they would feed are absent from ``data`` and the sampler counts each cause in
    ``gpuwait_source_errors_total``.
    """

    source: str
    t: float
    data: Any
    errors: tuple[str, ...] = field(default=())
