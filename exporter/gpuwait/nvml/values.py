"""Plain values the NVML gateway hands out: no ctypes, no pynvml, base units.

Every query answers with a value or with ``NA``. ``NA`` means "not available from this GPU
right now" for any reason (unsupported, lost, hung); the reason is the gateway's business,
counted and logged there, and the series is simply absent. NA lives inside ``nvml/`` and the
jobs that query a session: the gateway hands results back with NA turned into None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


class _NotAvailable:
    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NA"

    def __reduce__(self):
        return "NA"


NA = _NotAvailable()


@dataclass(frozen=True, slots=True)
class BackendStatus:
    up: bool
    #: Why the backend is down ("" when up): a stable, human-readable phrase.
    reason: str = ""
    driver_version: str = ""
    cuda_version: str = ""
    nvml_version: str = ""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What changes only with a driver reload, a reset or an admin command."""

    name: str = ""
    pci_bus_id: str = ""
    numa_node: int | None = None
    mig_mode: bool | None = None
    persistence_mode: bool | None = None
    gpm_supported: bool = False
    nvlink_links: tuple[int, ...] = ()
    architecture: str = ""


@dataclass(frozen=True, slots=True)
class Memory:
    total: float
    used: float
    free: float
    #: Memory the driver and firmware set aside (nvmlDeviceGetMemoryInfo_v2 only).
    reserved: float | None = None


@dataclass(frozen=True, slots=True)
class PcieLink:
    generation: int | None = None
    width: int | None = None
    max_generation: int | None = None
    max_width: int | None = None
    #: What the GPU itself supports, before the slot or the riser limits it.
    gpu_max_generation: int | None = None


@dataclass(frozen=True, slots=True)
class NvLink:
    link: int
    up: bool | None
    tx_bytes: float | None = None
    rx_bytes: float | None = None
    #: counter name -> count
    errors: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_memory_bytes: float | None
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class MigInstance:
    gpu_instance: int
    compute_instance: int
    uuid: str
    memory: Memory | None


# -- driver timestamps ---------------------------------------------------------------------
#: How far a driver timestamp may lie from a clock and still be taken as that clock's.
_PLAUSIBLE_PAST = 3600.0
_PLAUSIBLE_FUTURE = 60.0


class DriverClock:
    """Maps the driver's microsecond timestamps (utilization sample buffers) onto
    ``time.monotonic()``, the time base of every Reading.

    The NVML documentation calls them CPU timestamps; drivers have been seen stamping wall
    clock microseconds and microseconds since boot. The domain is decided per batch from
    the values themselves; a batch that fits neither is anchored so that its newest sample
    is "now", keeping the spacing between samples, and that anchor is kept for later
    batches so that consecutive batches stay in order.
    """

    __slots__ = ("_anchor",)

    def __init__(self) -> None:
        self._anchor: float | None = None

    def to_monotonic(self, stamps_us: list[int], now_mono: float, now_wall: float, now_boot: float | None) -> list[float]:
        if not stamps_us:
            return []
        newest = max(stamps_us) / 1e6
        offset = None
        for now_other in (now_wall, now_boot):
            if now_other is not None and now_other - _PLAUSIBLE_PAST <= newest <= now_other + _PLAUSIBLE_FUTURE:
                offset = now_other - now_mono
                break
        if offset is None:
            mapped = None if self._anchor is None else newest - self._anchor
            if mapped is None or not now_mono - _PLAUSIBLE_PAST <= mapped <= now_mono + _PLAUSIBLE_FUTURE:
                self._anchor = newest - now_mono
            offset = self._anchor
        # A sample cannot postdate the read that returned it.
        return [min(s / 1e6 - offset, now_mono) for s in stamps_us]


def finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))
